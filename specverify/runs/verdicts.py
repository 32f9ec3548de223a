"""The verdict of a run, by level, and the record every report is rendered from.

A target's checks are read as levels: the `contract` (the valid tier: byte identity with the oracle),
`robustness` (the hazard tier: invariants and untouched bytes on pathological input) and `arguments`
(the invalid tier: a clear refusal). Corpus cases count at the level of the tier they were drawn from.
Checks that are not tiers (GPU properties, when registered) are levels of their own name. Each level is
in one state: "passes", "FAILS", "failed as expected" (an expect-fail waiver), "not launched" (a skip
waiver), "not asked" (the check does not apply, with why), "not run" (not selected), "incomplete" (the
target's time ran out before the planned examples were drawn; every one that ran passed), "broke" (the
suite itself failed). A target with an incomplete level and no failure is "incomplete (N of M examples, all
passed)", never "does not conform".

Exit status: 1 when a failure or an error no waiver covers remains, or a waiver is no longer needed
("passed"); 3 when nothing was checked; 4 when every check that ran passed but some target's time ran
out (incomplete); 0 otherwise.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from specverify.records import dialects, randomness, registry
from specverify.records.backends import BACKENDS, Target
from specverify.runs import beyond_domain
from specverify.runs.catalogue import CHECKS
from specverify.runs.protocol import Outcome, short
from specverify.usage import FAILED, INCOMPLETE, NOTHING_CHECKED, PASSED

LEVELS = {"valid": "contract", "hazard": "robustness", "invalid": "arguments"}
FAILING = ("FAILS", "broke")


@dataclass
class Level:
    name: str                      # "contract", "robustness", "arguments", or a check's name
    check: str                     # the check (tier) behind it
    state: str
    examples: int = 0              # drawn by the search
    cases: int = 0                 # corpus cases of this tier replayed
    headline: str = ""             # the first failure (or why not asked / not run / incomplete)
    case_ids: list[str] = field(default_factory=list)
    waivers: list[str] = field(default_factory=list)
    planned: int = 0               # examples the search was to draw

    def text(self) -> str:
        """One phrase: the state, what ran, and the first failure (why a level was not asked is
        `headline`, left out here: it is the same for many targets)."""
        if self.state == "incomplete":
            return f"{self.name}: incomplete ({incomplete_counts(self.examples, self.planned)})"
        ran = [f"{self.cases} corpus case{'s' * (self.cases != 1)}"] if self.cases else []
        ran += [f"{self.examples} example{'s' * (self.examples != 1)}"] if self.examples else []
        detail = f" ({', '.join(ran)})" if ran and self.state in ("passes", "FAILS") else ""
        waived = f" [{'; '.join(self.waivers)}]" if self.waivers else ""
        why = self.headline.removeprefix(f"{self.state}: ")      # "not run: not run: ..." says it once
        why = f": {why}" if why and self.state not in ("passes", "not asked") else ""
        return f"{self.name}: {self.state}{detail}{waived}{why}"


@dataclass
class Verdict:
    stage: str
    backend: str
    device: str
    source: str
    levels: list[Level]
    dialect: str = ""              # the rule dialect the verdict is for ("": the record's rule)
    rule: str = ""                 # how reports name that dialect ("dialect strict (ties reject)")
    domain: list[str] = field(default_factory=list)   # declared restrictions with their reasons ([]: whole contract)
    domain_summary: str = ""
    outside: list[dict] = field(default_factory=list)  # per restriction: its information draws (beyond_domain)
    rules: list[dict] = field(default_factory=list)    # per dialect: a failing kernel's draws under it
    randomness: str = ""           # a sampling stage: which tier judged its random numbers (records.randomness)

    @property
    def follows(self) -> list[str]:
        """Dialects under which the failing case and every draw passed where the record's rule failed."""
        return [r["dialect"] for r in self.rules if beyond_domain.follows(r)]

    @property
    def unneeded(self) -> list[str]:
        """Restrictions whose excluded draws, as many as the valid tier's examples, passed every check they
        matter to."""
        return [r["restriction"] for r in self.outside if beyond_domain.unneeded(r)]

    @property
    def incomplete(self) -> str:
        """"" when every level that ran finished, else "incomplete (N of M examples, all passed)": the
        examples run and planned over every level that draws."""
        if not any(lv.state == "incomplete" for lv in self.levels):
            return ""
        drawn = [lv for lv in self.levels if lv.state in ("passes", "incomplete") and lv.planned]
        ran, planned = sum(lv.examples for lv in drawn), sum(lv.planned for lv in drawn)
        return f"incomplete ({ran} of {planned} examples, all passed)"

    @property
    def summary(self) -> str:
        states = {lv.name: lv.state for lv in self.levels}
        contract = states.get("contract")
        if contract in FAILING or any(lv.state == "broke" for lv in self.levels):
            return "does not conform"
        if contract in ("not launched", "not run", "not asked", None):
            return "not checked"
        failing = [lv.name for lv in self.levels if lv.state == "FAILS"]
        if failing and contract == "incomplete":
            return f"fails {', '.join(failing)}; the contract is incomplete"
        if failing:
            return f"conforms to the contract; fails {', '.join(failing)}" + \
                (f"; {self.incomplete}" if self.incomplete else "")
        waived = [lv.name for lv in self.levels if lv.state in ("failed as expected", "not launched")]
        if contract == "failed as expected":
            return "does not conform (waived)"
        if self.incomplete:
            return self.incomplete
        if waived:
            return f"conforms (waived: {', '.join(waived)})"
        return f"conforms within its declared domain: {self.domain_summary}" if self.domain_summary else "conforms"

    def line(self) -> str:
        under = f" under {self.rule}" if self.rule else ""
        within = f" Checked within its declared domain: {self.domain_summary}." \
            if self.domain_summary and "declared domain" not in self.summary else ""
        unneeded = f" Not needed, its excluded draws pass: {'; '.join(self.unneeded)}." if self.unneeded else ""
        follows = f" Its failing case and draws pass under dialect {', '.join(self.follows)}: it may follow " \
            "that rule." if self.follows else ""
        own = " Its random numbers are its own (declared): the contract is judged by bytes only where no draw " \
            "decides, its outputs by the distribution tier." if randomness.OWN_WORDS in self.randomness else ""
        levels = "; ".join(lv.text() for lv in self.levels if lv.state != "not asked")
        said = f"{self.summary}.{within}{unneeded}{follows}{own}"
        return f"{self.stage} ({self.source} on {self.device}){under}: {said} {levels}"


def not_asked(found: list[Verdict]) -> list[str]:
    """Why levels were not asked, once per reason: "not asked (robustness): the stage has no hazard tier"; on
    the CPU, the device properties in one line."""
    reasons: dict[str, set[str]] = {}
    on_cpu: set[str] = set()
    for verdict in found:
        for lv in verdict.levels:
            if lv.state != "not asked":
                continue
            if verdict.device == "cpu" and lv.check not in LEVELS:
                on_cpu.add(lv.check)
            else:
                reasons.setdefault(lv.headline, set()).add(lv.name)
    lines = [f"not asked ({', '.join(sorted(names))}): {why}" for why, names in reasons.items()]
    if on_cpu:
        ordered = [c for c in CHECKS if c in on_cpu]
        lines.append(f"on the CPU: the device properties ({', '.join(ordered)}) are checked on CUDA devices only "
                     f"(--device cuda on a machine with a GPU)")
    return lines


def incomplete_counts(examples: int, planned: int) -> str:
    """What an incomplete check ran: "44 of 100 examples, all passed" ("0 of 25 examples: not started")."""
    return f"{examples} of {planned} example{'s' * (planned != 1)}" + \
        (", all passed" if examples else ": not started")


def level_of(outcomes: list[Outcome], check: str, target: Target) -> Level:
    """The level behind `check` from the target's outcomes (the search and the corpus cases of that tier)."""
    level = Level(LEVELS.get(check, check), check, "not run")
    search = next((o for o in outcomes if o.check == check), None)
    corpus = next((o for o in outcomes if o.check == "corpus"), None)
    replays = [r for r in corpus.replays if r.tier == check] if corpus is not None else []
    level.cases = sum(r.status != "waived" for r in replays)
    level.examples = search.examples if search is not None else 0
    level.planned = search.planned if search is not None else 0
    failing = [(r.headline, r.case_id) for r in replays if r.status == "failed"]
    expected = [(r.headline, r.case_id, r.waiver) for r in replays if r.status == "xfailed"]
    if search is not None and search.status == "failed":
        failing.insert(0, (search.headline, search.case.stem if search.case else ""))
    if search is not None and search.status == "xfailed":
        expected.insert(0, (search.headline, search.case.stem if search.case else "", search.waiver))
    fmt = lambda h: short(h, target.stage.name, target.backend.name, target.device)  # noqa: E731
    if search is not None and search.status == "error":
        level.state, level.headline = "broke", search.headline
    elif failing:
        level.state, level.headline = "FAILS", fmt(failing[0][0])
        level.case_ids = [c for _, c in failing if c]
    elif expected:
        level.state, level.headline = "failed as expected", fmt(expected[0][0])
        level.case_ids = [c for _, c, _ in expected if c]
        level.waivers = sorted({w for _, _, w in expected if w})
    elif search is not None and search.status == "waived":
        level.state, level.waivers = "not launched", [search.waiver]
    elif search is not None and search.status == "skipped":
        level.headline = search.headline
    elif search is not None and search.status == "incomplete":
        level.state, level.headline = "incomplete", fmt(search.headline)
    elif search is not None or level.cases:
        level.state = "passes"
    else:
        why = CHECKS[check].applies(target) if check in CHECKS else None
        level.state, level.headline = ("not asked", why) if why else ("not run", "not selected")
    return level


def verdicts(outcomes: list[Outcome]) -> list[Verdict]:
    """One verdict per target that has outcomes, levels in check order (the corpus folded into them)."""
    stages = registry.all_stages() if outcomes else {}
    by_target: dict[tuple, list[Outcome]] = {}
    for o in outcomes:
        if o.stage in stages and o.check != "-":
            by_target.setdefault((o.stage, o.backend, o.device, o.source, o.dialect), []).append(o)
    found = []
    for (stage, backend, device, source, dialect), group in by_target.items():
        record = dialects.judged(stages[stage], dialect)
        target = Target(record, BACKENDS[backend], device, source, dialect=dialect)
        names = [c for c in CHECKS if c != "corpus"]
        valid = next((o for o in group if o.check == "valid"), group[0])
        found.append(Verdict(stage, backend, device, source, [level_of(group, c, target) for c in names],
                             dialect, dialects.words(record, dialect), group[0].domain, group[0].domain_summary,
                             valid.outside, valid.rules, group[0].randomness))
    return found


@dataclass
class Run:
    """Everything a report says about one run."""
    outcomes: list[Outcome]
    profile: str
    seed: int
    device: str
    vendor: object = None                      # vendors.Vendor or None
    waivers: object = None                     # waivers.WaiverSet (finished) or None
    not_implemented: list[str] = field(default_factory=list)
    cases_dir: str | None = None
    exit_status: int = 0
    interrupted: str | None = None             # "SIGTERM" when the run was stopped before it finished
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def stale(self) -> list:
        return self.waivers.by_state("stale") if self.waivers is not None else []

    def unneeded(self) -> list:
        return self.waivers.by_state("passed") if self.waivers is not None else []


def exit_status(outcomes: list[Outcome], waivers=None) -> int:
    """FAILED wins over everything; then NOTHING_CHECKED, then INCOMPLETE (see the module's docstring)."""
    if any(o.status in ("failed", "error") for o in outcomes):
        return FAILED
    if waivers is not None and waivers.by_state("passed"):
        return FAILED
    if not any(o.status in ("passed", "xfailed") or o.status == "incomplete" and o.examples for o in outcomes):
        return NOTHING_CHECKED
    if any(o.status == "incomplete" for o in outcomes):
        return INCOMPLETE
    return PASSED

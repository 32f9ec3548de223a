"""Checks: the questions asked of a target. A run is a list of (target, check) pairs, each one Outcome.

`corpus` replays the regression corpus (the suite's and the vendor's case files); `valid`, `hazard` and
`invalid` search the three input tiers (byte identity; invariants and untouched bytes; a clear refusal).
Checks run in ascending `order`, so a known failure from the corpus shows before any new draw. Later
checks (GPU properties: no host sync, launches per call, CUDA-graph replay) register here with `register`
and need no change to the harness or the session.
"""
from __future__ import annotations

import importlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from specverify.backends import Target
from specverify.profiles import Profile

# Outcome.status: "passed"; "failed"; "error" (the suite itself broke); "skipped" (not run, with the
# reason); "xfailed" (failed, and every failure is covered by an expect-fail waiver); "waived" (never
# launched: a skip waiver); "incomplete" (the target's time ran out before the planned examples were drawn,
# and every one that ran passed).
STATUSES = ("passed", "failed", "error", "skipped", "xfailed", "waived", "incomplete")


@dataclass
class Replay:
    """One corpus case replayed by the `corpus` check."""
    case_id: str                       # the file name without .npz (its content hash)
    path: Path
    tier: str                          # the tier the case was drawn from
    origin: str                        # "suite" (our corpus) or "local" (the --cases folder)
    status: str = "passed"             # "passed", "failed", "xfailed", "waived" (not launched)
    headline: str = ""
    report: str = ""
    kind: str = ""
    waiver: str = ""                   # the waiver that covered it


@dataclass
class Outcome:
    """The answer to one check of one target."""
    stage: str
    backend: str
    device: str
    check: str
    status: str = "passed"             # one of STATUSES
    examples: int = 0                  # calls made, shrinking included
    planned: int = 0                   # examples the profile asked for (corpus: case files found)
    seconds: float = 0.0
    found_after: int | None = None     # examples drawn until the first failure (before shrinking)
    headline: str = ""                 # one line: what failed, or why skipped
    report: str = ""                   # the full failure report
    kind: str = ""                     # failure kind: "wrong", "raised", "exit", "signal", "timeout", ...
    case: Path | None = None
    measures: dict = field(default_factory=dict)   # property checks: the largest value measured, by name
    timing: dict = field(default_factory=dict)     # searches: seconds in the oracle, call, judge, guard, other
    worker: str = ""                   # a sharded run: where it ran ("gpu 1", "cpu worker 2", "driver")
    coverage: Counter = field(default_factory=Counter)
    source: str = ""                   # "module:function" of the implementation
    dialect: str = ""                  # the rule dialect it was judged by ("": the record's rule)
    fingerprint: dict = field(default_factory=dict)        # its module: {"module", "file", "sha256"}
    replays: list[Replay] = field(default_factory=list)    # corpus check: every case it found
    notes: list[str] = field(default_factory=list)         # one line each: damaged corpus files, ...
    waiver: str = ""                   # the waiver that covered this outcome ("xfailed" or "waived")
    domain: list[str] = field(default_factory=list)   # the target's declared restrictions, each with its reason
    domain_summary: str = ""           # the same without reasons, on one line ("" for the whole contract)
    outside: list[dict] = field(default_factory=list)  # valid check: information draws outside each restriction
    rules: list[dict] = field(default_factory=list)    # valid check: a failing outside kernel under each dialect
    failing: object = field(default=None, repr=False, compare=False)  # a search's shrunk failing Example (no report)

    @property
    def case_ids(self) -> list[str]:
        """Ids of the cases this outcome failed on (a search: its shrunk case; corpus: failing replays)."""
        if self.replays:
            return [r.case_id for r in self.replays if r.status in ("failed", "xfailed")]
        return [self.case.stem] if self.case is not None else []


@dataclass
class Context:
    """What a check needs besides its target."""
    profile: Profile
    run_seed: int
    examples: int | None               # --examples: the valid tier's count (the others scale)
    cases_dir: Path | None             # a folder of cases the corpus check replays after the suite's (read only)
    caller: object                     # calls.InProcess or worker.Isolated
    guard_check: bool                  # run twice with two guard patterns on every example
    deadline: float | None             # time.monotonic() when the target's time is up
    progress: Callable[[int], None] | None = None
    waivers: object = None             # waivers.WaiverSet or None: the corpus check skips waived cases
    findings_dir: Path | None = None   # where a search saves the case it found (None: not saved)


@dataclass(frozen=True)
class Check:
    name: str
    doc: str                                            # one line, for listings
    order: int                                          # checks of a target run in ascending order
    applies: Callable[[Target], str | None]             # None when it applies, else why not
    run: Callable[[Target, Context], Outcome]
    planned: Callable[[Target, Profile, int | None], int] = lambda t, p, n: 0   # examples it will draw
    by_default: Callable[[Target], bool] = lambda t: True   # asked unless checks are named explicitly
    spans_devices: bool = False                         # calls on every device: a sharded run keeps it in the driver


CHECKS: dict[str, Check] = {}


def register(check: Check) -> Check:
    if check.name in CHECKS:
        raise RuntimeError(f"check {check.name!r} is registered twice")
    CHECKS[check.name] = check
    return check


def ordered(names=None) -> list[Check]:
    """The named checks (all when None), in running order."""
    chosen = [CHECKS[n] for n in names] if names is not None else list(CHECKS.values())
    return sorted(chosen, key=lambda c: (c.order, c.name))


def default_checks(target: Target) -> list[Check]:
    """The checks a target gets when none are named: those that apply and are asked by default."""
    return [c for c in ordered() if c.applies(target) is None and c.by_default(target)]


def tier_check(tier: str, doc: str, order: int, applies: Callable[[Target], str | None]) -> Check:
    def run(target: Target, ctx: Context) -> Outcome:
        """The tier's search; after the valid tier's, the information draws (`specverify.outside`), which
        keep a share of the target's time: outside each declared restriction, and under each dialect of
        the record where an outside implementation that declared none fails."""
        from specverify import outside
        from specverify.search import search, verify_tier

        restricted = tier == "valid" and target.domain is not None and bool(target.domain.restrictions)
        rules = tier == "valid" and not target.backend.trusted and not target.dialect and bool(target.stage.dialects)
        searched = outside.reserving(ctx) if restricted or rules else ctx
        outcome = search(target, tier, tier, ctx.profile.count(tier, ctx.examples), verify_tier, searched)
        failing, outcome.failing = outcome.failing, None
        if target.interpreted and tier == "valid":
            outcome.notes.append(f"drawn at the Triton interpreter's sizes, as our Triton kernels on the CPU are: "
                                 f"{target.interpreted}")
        rules = rules and outcome.status == "failed"
        if restricted:
            outcome.outside = outside.explore(target, ctx, later=int(rules))
            outcome.notes += outside.notes(outcome.outside)
        if rules:
            outcome.rules = outside.other_rules(target, ctx, failing)
            outcome.notes += outside.rule_notes(outcome.rules)
        return outcome

    return Check(tier, doc, order, applies, run, lambda target, profile, examples: profile.count(tier, examples))


def _has(tier: str) -> Callable[[Target], str | None]:
    def applies(target: Target) -> str | None:
        return None if target.stage.strategy(tier) is not None else f"the stage has no {tier} tier"
    return applies


def validates(target: Target) -> bool:
    """Whether the target refuses invalid arguments: our backends, and outside implementations whose
    declaration says `validates`."""
    return target.backend.validates or bool(getattr(target.domain, "validates", False))


def _validates(target: Target) -> str | None:
    if not validates(target):
        return "outside implementations need not validate their arguments (unless they declare `validates`)"
    return None


def _replay(target: Target, ctx: Context) -> Outcome:
    from specverify.corpus import replay

    return replay(target, ctx)


CORPUS = register(Check("corpus", "every case file of the stage in the corpus (ours and --cases) replayed first",
                        0, lambda target: None, _replay,
                        by_default=lambda target: not target.backend.trusted))
VALID = register(tier_check("valid", "byte identity with the oracle on the contract's domain", 10, _has("valid")))
HAZARD = register(tier_check("hazard", "invariants and untouched bytes on pathological inputs", 20, _has("hazard")))
INVALID = register(tier_check("invalid", "a clear ValueError/TypeError naming the field", 30, _validates))

importlib.import_module("specverify.properties")   # the GPU property checks register themselves

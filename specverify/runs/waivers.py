"""Waivers: the expected failures a vendor keeps in their own repository (TOML, `--waivers PATH`).

    [[waiver]]
    stage = "rejection.recovered"   # required: the stage
    check = "hazard"                # optional: a check; a tier name also covers the corpus cases of that tier
    device = "cuda"                 # optional: cpu or cuda
    case = "6db40641f0df819c"       # optional: a case id (the case file's name without .npz)
    mode = "expect-fail"            # required: "expect-fail" (runs; its failure is expected) or "skip"
    issue = "https://tracker/123"   # an issue, a reason, or both: one is required
    reason = "NaN scores are masked upstream"

"expect-fail": the check runs, and a failure it covers is reported as failed as expected ("xfailed").
"skip": what it names is never launched (no worker starts for a check it covers, no corpus case it
names is replayed): for crash classes that take a process or a device down.

After a run every entry has one state: "expected" (it covered a failure), "skipped" (it kept something
from launching), "passed" (expect-fail, and everything it covered passed: the waiver is no longer needed,
which makes the exit status 1), "stale" (its stage and device were checked and it matched nothing, or it
names a stage the suite or the vendor does not have), or "not in this run" (its stage, device or check
was not part of this run). A malformed file is a WaiverError: one line, exit status 2; so is a path
that is not a regular file (a folder, /dev/zero), a file over MAX_BYTES, or one nested deeper than
`bounded.MAX_NESTING` (refused before the TOML parser sees it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from specverify import bounded
from specverify.records.backends import DEVICES, Target
from specverify.runs.catalogue import CHECKS
from specverify.runs.protocol import Outcome, Replay

MODES = ("expect-fail", "skip")
KEYS = ("stage", "check", "device", "case", "mode", "issue", "reason")
CASE_ID = re.compile(r"^[0-9A-Za-z_.-]{1,64}$")
MAX_BYTES = 1 << 20               # a waiver file


class WaiverError(ValueError):
    """A waiver file that cannot be used (bad usage: one line, exit status 2)."""


# how the reports word each state of a waiver after a run
STATE_WORDS = {"expected": "used: failed as expected", "skipped": "used: kept a check from launching",
               "passed": "NO LONGER NEEDED: what it covers passed", "stale": "STALE: matches nothing",
               "not in this run": "not in this run"}

@dataclass
class Waiver:
    index: int                      # 1-based position in the file
    stage: str
    mode: str
    check: str | None = None
    device: str | None = None
    case: str | None = None
    issue: str = ""
    reason: str = ""
    covered: int = 0                # failures it covered (expect-fail) or launches it prevented (skip)
    passed: int = 0                 # checks and cases it covered that passed (expect-fail)
    state: str = ""                 # set by WaiverSet.finish

    @property
    def label(self) -> str:
        return f"waiver #{self.index} ({self.issue or self.reason})"

    @property
    def scope(self) -> str:
        parts = [self.stage] + [f"{k}={v}" for k, v in (("check", self.check), ("device", self.device),
                                                          ("case", self.case)) if v]
        return " ".join(parts)

    def covers(self, target: Target, check: str, tier: str | None = None, case_id: str | None = None) -> bool:
        """Does this entry name (target, check)? A corpus case also matches by its tier and id."""
        if self.stage != target.stage.name or self.device not in (None, target.device):
            return False
        if self.check not in (None, check) and not (check == "corpus" and self.check == tier):
            return False
        return self.case is None or self.case == case_id


@dataclass
class WaiverSet:
    path: Path
    entries: list[Waiver]
    seen: dict[tuple[str, str], Target] = field(default_factory=dict)    # (stage, device) -> target run
    ran: set[tuple[str, str, str]] = field(default_factory=set)           # (stage, device, check) run

    def skip_check(self, target: Target, check: str) -> Waiver | None:
        """The skip waiver that keeps this whole check from launching, if any (one that names a case, or
        a tier for the corpus check, skips single corpus cases instead: `skip_case`)."""
        for w in self.entries:
            if w.mode == "skip" and w.case is None and w.covers(target, check):
                w.covered += 1
                return w
        return None

    def skip_case(self, target: Target, case: Replay) -> Waiver | None:
        for w in self.entries:
            if w.mode == "skip" and w.covers(target, "corpus", case.tier, case.case_id):
                w.covered += 1
                return w
        return None

    def settle(self, target: Target, outcome: Outcome) -> None:
        """Record that `outcome` ran, and mark the failures an expect-fail entry covers as expected."""
        self.seen[(target.stage.name, target.device)] = target
        self.ran.add((target.stage.name, target.device, outcome.check))
        if outcome.check == "corpus" and outcome.replays:
            from specverify.runs.corpus_check import summarize

            for case in outcome.replays:
                if case.status in ("passed", "failed"):
                    waiver = self.expected(target, "corpus", case.tier, [case.case_id], case.status == "failed")
                    if waiver is not None:
                        case.status, case.waiver = "xfailed", waiver.label
            summarize(outcome, target.label)
        elif outcome.status in ("passed", "failed"):
            waiver = self.expected(target, outcome.check, None, outcome.case_ids or [None], outcome.status == "failed")
            if waiver is not None:
                outcome.status, outcome.waiver = "xfailed", waiver.label

    def expected(self, target: Target, check: str, tier: str | None, case_ids: list, failed: bool) -> Waiver | None:
        """The expect-fail entry that covers a failure (counted), or None; a pass counts for every entry
        that would have covered it."""
        matched = [w for w in self.entries
                   if w.mode == "expect-fail" and any(w.covers(target, check, tier, i) for i in case_ids)]
        if failed and matched:
            matched[0].covered += 1
            return matched[0]
        for w in matched if not failed else ():
            w.passed += 1
        return None

    def finish(self, known: set[str], implemented: set[str] | None = None) -> list[Waiver]:
        """Give every entry its state (see the module docstring); `implemented`: a vendor's stages."""
        for w in self.entries:
            if w.covered:
                w.state = "expected" if w.mode == "expect-fail" else "skipped"
            elif w.passed:
                w.state = "passed"
            elif w.stage not in known or (implemented is not None and w.stage not in implemented):
                w.state = "stale"
            else:
                targets = [t for (s, d), t in self.seen.items() if s == w.stage and w.device in (None, d)]
                checks = {c for (s, d, c) in self.ran if s == w.stage and w.device in (None, d)}
                never = bool(targets) and w.check is not None and CHECKS[w.check].applies(targets[0]) is not None
                if targets and (w.check is None or w.check in checks or never or
                                (w.case is not None and "corpus" in checks)):
                    w.state = "stale"
                else:
                    w.state = "not in this run"
        return self.entries

    def by_state(self, state: str) -> list[Waiver]:
        return [w for w in self.entries if w.state == state]


def load(path: Path | str) -> WaiverSet:
    """Read and validate a waiver file; WaiverError with one line naming the entry and the rule."""
    path = Path(path)
    data = bounded.read_data(path, MAX_BYTES, "toml", f"--waivers {path}", WaiverError)
    unknown = sorted(set(data) - {"waiver"})
    if unknown:
        raise WaiverError(f"--waivers {path}: unknown top-level key {unknown[0]!r} (entries are [[waiver]] tables)")
    raw = data.get("waiver", [])
    if not isinstance(raw, list):
        raise WaiverError(f"--waivers {path}: 'waiver' must be an array of tables ([[waiver]])")
    return WaiverSet(path, [entry(path, i, d) for i, d in enumerate(raw, 1)])


def entry(path: Path, index: int, d: object) -> Waiver:
    where = f"--waivers {path}: waiver #{index}"
    if not isinstance(d, dict):
        raise WaiverError(f"{where}: must be a table")
    for key in d:
        if key not in KEYS:
            raise WaiverError(f"{where}: unknown key {key!r} (known: {', '.join(KEYS)})")
        if not isinstance(d[key], str) or not d[key].strip():
            raise WaiverError(f"{where}: {key} must be a non-empty string")
    if "stage" not in d:
        raise WaiverError(f"{where}: names no stage")
    where += f" ({d['stage']})"
    if not (d.get("issue") or d.get("reason")):
        raise WaiverError(f"{where}: cites no issue and gives no reason (add issue = \"...\" or reason = \"...\")")
    if d.get("mode") not in MODES:
        raise WaiverError(f"{where}: mode must be one of {', '.join(MODES)} (got {d.get('mode')!r})")
    if "check" in d and d["check"] not in CHECKS:
        raise WaiverError(f"{where}: unknown check {d['check']!r} (known: {', '.join(CHECKS)})")
    if "device" in d and d["device"] not in DEVICES:
        raise WaiverError(f"{where}: unknown device {d['device']!r} (known: {', '.join(DEVICES)})")
    if "case" in d and not CASE_ID.match(d["case"]):
        raise WaiverError(f"{where}: case must be a case id (a case file's name without .npz)")
    return Waiver(index, d["stage"], d["mode"], d.get("check"), d.get("device"), d.get("case"),
                  d.get("issue", ""), d.get("reason", ""))

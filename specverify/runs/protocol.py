"""The check protocol: what a check is (`Check`: a question asked of a target), what it is given
(`Context`) and what it answers (`Outcome`, with a `Replay` per corpus case). The catalogue of checks is
`specverify.runs.catalogue`.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from specverify.records.backends import Target
from specverify.runs.profiles import Profile

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
    randomness: str = ""               # a sampling stage: which tier judged its random numbers, by which declaration
    # the distribution check, per panel: the expected acceptance sum_v min(p, q) per position and the rate shown
    acceptance: dict = field(default_factory=dict)
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


def validates(target: Target) -> bool:
    """Whether the target refuses invalid arguments: our backends, and outside implementations whose
    declaration says `validates`."""
    return target.backend.validates or bool(getattr(target.domain, "validates", False))


def short(headline: str, stage: str, backend: str, device: str) -> str:
    """A failure headline without its leading target label."""
    label = f"{stage} on {backend}/{device}"
    rest = headline[len(label):] if headline.startswith(label) else headline
    return rest.lstrip(":, ").strip()

"""A session runs (target, check) pairs and returns one Outcome each, for the CLI, pytest and later tools.

Each target gets one caller: in this process (the oracle, our own kernels in the ci and nightly profiles,
functions handed over directly), or a worker process (`isolate`, and always for outside implementations),
with a time limit per call and per target. A target's checks run in their registered order (the corpus
first) and every one runs even when another failed. With waivers, a check a skip waiver names is never
launched (no worker starts when every check of a target is skipped), and failures an expect-fail waiver
covers come back as "xfailed". Every outcome names the implementation's module fingerprint.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from specverify import env
from specverify.backends import Target
from specverify.calls import InProcess, error_text
from specverify.checks import Context, Outcome, default_checks, ordered
from specverify.harness import verify
from specverify.profiles import PROFILES, Profile
from specverify.stage import Example
from specverify.worker import Isolated


class ImplementationNotFound(LookupError):
    """An outside implementation's module or function does not exist (bad usage, not a failure)."""


@dataclass
class Options:
    profile: Profile
    run_seed: int
    examples: int | None = None            # --examples
    cases_dir: Path | None = None
    isolate: bool | None = None            # None: the profile decides
    example_timeout: float | None = None   # None: the profile's
    target_timeout: float | None = None    # None: the profile's
    checks: tuple[str, ...] | None = None  # None: every check that applies and is asked by default
    waivers: object = None                 # waivers.WaiverSet or None
    memory: int | None = None              # bytes a worker may map (None: the profile's)

    @property
    def isolated(self) -> bool:
        return self.profile.isolated if self.isolate is None else self.isolate

    @property
    def per_call(self) -> float | None:
        return self.example_timeout if self.example_timeout is not None else self.profile.example_timeout

    @property
    def worker_memory(self) -> int | None:
        return self.memory if self.memory is not None else self.profile.worker_memory

    @property
    def per_target(self) -> float | None:
        return self.target_timeout if self.target_timeout is not None else self.profile.target_timeout


class Interrupted(BaseException):
    """SIGTERM or Ctrl-C in the judge: the run stops (its workers ended) with the outcomes that finished
    (BaseException: Hypothesis and the checks let it through)."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why
        self.outcomes: list[Outcome] = []


class Listener:
    """What a session tells its front end (the CLI shows progress; pytest ignores it). `lane`: in a
    sharded run, the worker the event comes from ("" in a run in one process)."""

    def check_started(self, target: Target, check: str, planned: int, lane: str = "") -> None: ...
    def progress(self, done: int, lane: str = "") -> None: ...
    def check_done(self, target: Target, outcome: Outcome) -> None: ...


def runs_isolated(target: Target, options: Options) -> bool:
    if target.impl is not None or target.backend.name == "oracle":
        return False      # a function handed over directly, or the reference itself
    return options.isolated or not target.backend.trusted


def caller_for(target: Target, options: Options):
    if runs_isolated(target, options):
        caller = Isolated(target.stage.name, target.source, target.backend.lib, target.device, options.per_call,
                          options.worker_memory)
        problem = caller.start()
        if problem is not None and problem.kind == "missing":
            caller.close()
            raise ImplementationNotFound(f"{target.source}: {problem.text}")
        return caller
    return InProcess(target.load(), target.backend.lib, target.device, options.per_call)


def checks_of(target: Target, options: Options) -> list:
    """The checks a target gets, in running order: the named ones that apply, else the default ones."""
    if options.checks is None:
        return default_checks(target)
    return [c for c in ordered(options.checks) if c.applies(target) is None]


def fingerprint(target: Target, caller) -> dict:
    """The implementation's module and its source hash (an isolated one: as its worker reported it)."""
    from specverify.provenance import module_fingerprint

    if getattr(caller, "isolated", False):
        return caller.fingerprint or {"module": target.source.partition(":")[0], "file": None, "sha256": None}
    return module_fingerprint(getattr(caller.impl, "__module__", "") or target.source.partition(":")[0])


def planned(targets: list[Target], options: Options) -> int:
    """How many (target, check) pairs a run has: the progress total."""
    return sum(len(checks_of(t, options)) for t in targets)


def run(targets: list[Target], options: Options, listener: Listener | None = None) -> list[Outcome]:
    env.prepare()
    listener = listener or Listener()
    outcomes: list[Outcome] = []
    for target in targets:
        try:
            outcomes += run_target(target, options, listener)
        except Interrupted as stop:
            stop.outcomes = outcomes + stop.outcomes
            raise
    return outcomes


def run_target(target: Target, options: Options, listener: Listener, only: set[str] | None = None,
               settle: bool = True) -> list[Outcome]:
    """The checks of one target (`only`: just those named), in order. `settle`: waivers judge each outcome
    here before the listener hears of it (a sharded run's worker leaves that to the driver)."""
    waivers = options.waivers
    plan = [(check, waivers.skip_check(target, check.name) if waivers is not None else None)
            for check in checks_of(target, options) if only is None or check.name in only]
    if not plan:
        return []
    outcomes = []
    caller = caller_for(target, options) if any(waiver is None for _, waiver in plan) else None
    module = fingerprint(target, caller) if caller is not None else {}
    unloadable = getattr(caller, "load_error", None)
    deadline = time.monotonic() + options.per_target if options.per_target else None
    try:
        for check, waiver in plan:
            if waiver is None and unloadable is not None:   # tried once: every check fails with it, no case
                outcome = Outcome(target.stage.name, target.backend.name, target.device, check.name,
                                  status="failed", kind="load", headline=f"{target.label} {unloadable.text}",
                                  report="\n".join(filter(None, (f"{target.label} {unloadable.text}",
                                                                 unloadable.trace))))
            elif waiver is None:
                outcome = run_one(target, check, caller, options, deadline, listener)
            else:
                outcome = Outcome(target.stage.name, target.backend.name, target.device, check.name,
                                  status="waived", waiver=waiver.label, headline=f"not launched: {waiver.label}")
            outcome.source, outcome.fingerprint = target.source, module
            if settle and waivers is not None:
                waivers.settle(target, outcome)
            listener.check_done(target, outcome)
            outcomes.append(outcome)
    except Interrupted as stop:
        stop.outcomes = outcomes
        raise
    finally:
        if caller is not None:
            caller.close()
    return outcomes


def run_one(target: Target, check, caller, options: Options, deadline: float | None, listener: Listener) -> Outcome:
    planned_examples = check.planned(target, options.profile, options.examples)
    if deadline is not None and time.monotonic() > deadline:
        return Outcome(target.stage.name, target.backend.name, target.device, check.name, status="skipped",
                       planned=planned_examples, headline=f"not run: the target's time limit "
                                                          f"({options.per_target:g} s) was spent")
    listener.check_started(target, check.name, planned_examples)
    ctx = Context(options.profile, options.run_seed, options.examples, options.cases_dir, caller,
                  guard_check=options.profile.guard_check, deadline=deadline, progress=listener.progress,
                  waivers=options.waivers)
    started = time.perf_counter()
    try:
        return check.run(target, ctx)
    except Exception as exc:  # the check itself broke: say so, and go on with the next one
        return Outcome(target.stage.name, target.backend.name, target.device, check.name, status="error",
                       planned=planned_examples, seconds=time.perf_counter() - started,
                       headline=f"the {check.name} check of {target.label} broke: {error_text(exc)}")


def verify_example(target: Target, example: Example, timeout: float | None = 120.0,
                   devices: bool = False) -> None:
    """One example on one target (both guard patterns; `devices`: then on every visible device, compared);
    raises harness.Failure. For replay and tests."""
    from specverify.properties import device_callers, verify_devices

    caller = caller_for(target, Options(PROFILES["ci"], 0, example_timeout=timeout))
    try:
        verify(target.stage, example, caller, target.label, guard_check=True)
        if devices:
            callers = device_callers(target, caller)
            try:
                verify_devices(target, example, callers)
            finally:
                for other in callers:
                    other.close()
    finally:
        caller.close()

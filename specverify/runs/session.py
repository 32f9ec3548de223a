"""A session runs (target, check) pairs and returns one Outcome each, for the CLI, pytest and later tools.

Each target gets one caller: in this process (the oracle, our own kernels in the ci and nightly profiles,
functions handed over directly), or a worker process (`isolate`, and always for outside implementations),
with a time limit per call and per target. A target's checks run in their registered order (the corpus
first) and every one runs even when another failed (unless the plan's `first_failure` stops them at the
first that fails). With waivers, a check a skip waiver names is never launched (no worker starts when
every check of a target is skipped), and failures an expect-fail waiver covers come back as "xfailed".
Every outcome names the implementation's module fingerprint. A target whose implementation could not be
loaded, or whose worker answered out of protocol, is asked nothing more: each of its later checks fails
at once with that answer (its verdict comes within one per-call limit of the call that broke protocol).
A worker the judge could not set up is `RunSetupError`, an error of the whole run.

Everything a run does besides choosing its targets is one `RunPlan`, built once (`RunPlan.build`) by each
front end from the profile and its overrides; the cases a search finds go to the plan's findings folder,
never into the suite's corpus.
"""
from __future__ import annotations

import itertools
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

from specverify import env, interrupts
from specverify.judge.calls import InProcess, Interrupted, RunSetupError, error_text
from specverify.judge.device import context_lost
from specverify.judge.harness import verify
from specverify.judge.worker import Isolated
from specverify.records import randomness
from specverify.records.backends import Target
from specverify.records.stage import Example
from specverify.runs.catalogue import default_checks, ordered
from specverify.runs.profiles import PROFILES, Profile
from specverify.runs.protocol import Context, Outcome


class ImplementationNotFound(LookupError):
    """An outside implementation's module or function does not exist (bad usage, not a failure)."""


class PlanError(ValueError):
    """A run plan that cannot be built (bad usage): a findings folder inside the suite's corpus, a
    --cases folder that does not exist."""


REPLAY_TIMEOUT = 120.0     # seconds per call when one example is replayed (`specverify replay`, case tests)
INTERPRETED = "TRITON_INTERPRET is set for its worker and it reaches Triton kernels"   # Target.interpreted


@dataclass(frozen=True)
class RunPlan:
    """What a run does besides choosing its targets, resolved once by `build` from the profile and the
    overrides. The CLI, the pytest plugin, bench and replay build one; sharded runs pickle it to workers."""
    profile: Profile
    run_seed: int
    examples: int | None           # the valid tier's count (None: the profile's); the other tiers scale
    guard_check: bool              # every example twice, with two guard patterns
    isolated: bool                 # our kernels in worker processes (outside ones always are)
    per_call: float | None         # seconds per call (None: no limit)
    per_target: float | None       # seconds per target, all its checks (None: no limit)
    findings: Path | None          # where the cases a search finds are saved (None: not saved)
    cases: Path | None             # a folder the corpus check replays after the suite's (read only)
    checks: tuple[str, ...] | None = None  # None: every check that applies and is asked by default
    waivers: object = None         # waivers.WaiverSet or None
    memory: int | None = None      # bytes of address space a CPU worker may map (None: no limit)
    first_failure: bool = False    # a target's checks stop at its first failing one (mutation runs)

    @classmethod
    def build(cls, profile: Profile | str = "ci", *, seed: int | None = None, examples: int | None = None,
              isolate: bool | None = None, timeout: float | None = None, target_timeout: float | None = None,
              findings: Path | None = None, keep_findings: bool = True, cases: Path | None = None,
              checks=None, waivers=None, memory: int | None = None, first_failure: bool = False,
              option_prefix: str = "--") -> RunPlan:
        """The plan: each override given (not None) wins over the profile's value. `findings`: see
        `cases.findings_dir` (`keep_findings=False`: nothing is saved); it may not lie in the suite's
        corpus, and `cases` must be a folder. `option_prefix` names the options in errors ("--specverify-")."""
        profile = PROFILES[profile] if isinstance(profile, str) else profile
        folder = findings_folder(findings, option_prefix) if keep_findings else None
        if cases is not None and not Path(cases).is_dir():
            raise PlanError(f"{option_prefix}cases {cases}: not a folder (the case folder the corpus check replays)")
        return cls(profile, profile.run_seed(seed), examples, profile.guard_check,
                   profile.isolated if isolate is None else isolate,
                   profile.example_timeout if timeout is None else timeout,
                   profile.target_timeout if target_timeout is None else target_timeout,
                   folder, Path(cases) if cases is not None else None,
                   tuple(checks) if checks else None, waivers,
                   profile.worker_memory if memory is None else memory, first_failure)


def findings_folder(given: Path | None, option_prefix: str = "--") -> Path:
    """The findings folder (`cases.findings_dir`), refused when it is the suite's corpus or inside it:
    a run only reads that corpus."""
    from specverify.files import cases
    from specverify.files.cases import suite_corpus

    folder = cases.findings_dir(given)
    suite = suite_corpus()
    if suite is not None and (folder.resolve() == suite.resolve() or suite.resolve() in folder.resolve().parents):
        named = f"{option_prefix}findings {given}" if given else \
            f"{cases.FINDINGS_ENV}={folder}" if os.environ.get(cases.FINDINGS_ENV) else f"findings folder {folder}"
        raise PlanError(f"{named}: inside the suite's corpus {suite}, which a run only reads "
                        f"(name another folder; `specverify corpus add` grows the corpus)")
    return folder


class Listener:
    """What a session tells its front end (the CLI shows progress; pytest ignores it). `lane`: in a
    sharded run, the worker the event comes from ("" in a run in one process)."""

    def check_started(self, target: Target, check: str, planned: int, lane: str = "") -> None: ...
    def progress(self, done: int, lane: str = "") -> None: ...
    def check_done(self, target: Target, outcome: Outcome) -> None: ...


def runs_isolated(target: Target, plan: RunPlan) -> bool:
    """In a worker: outside implementations, ours when the plan isolates them, and ours on CUDA once this
    process's CUDA context is lost (`device.context_lost`), so a kernel that broke it in an earlier check
    changes no later verdict."""
    if not isolable(target):
        return False
    lost = target.device.startswith("cuda") and context_lost() is not None
    return plan.isolated or lost or not target.backend.trusted


def isolable(target: Target) -> bool:
    """Whether a worker can run the target: not a function handed over directly, nor the reference itself."""
    return target.impl is None and not target.backend.reference


def worker_caller(target: Target, plan: RunPlan, device: str | None = None) -> Isolated:
    return Isolated(target.stage.name, target.source, target.backend.lib, device or target.device, plan.per_call,
                    plan.memory, target.backend.warm_up)


def caller_for(target: Target, plan: RunPlan):
    """The target's caller: in a worker (`runs_isolated`, started here), else in this process with a worker
    as its spare should a call here lose the CUDA context (`calls.InProcess`)."""
    if runs_isolated(target, plan):
        caller = worker_caller(target, plan)
        try:
            problem = caller.start()
        except RunSetupError:
            caller.close()
            raise
        if problem is not None and problem.kind == "missing":
            caller.close()
            raise ImplementationNotFound(f"{target.source}: {problem.text}")
        return caller
    spare = (lambda device: worker_caller(target, plan, device)) if isolable(target) else None
    return InProcess(target.load(), target.backend.lib, target.device, plan.per_call, target.backend.warm_up, spare)


def checks_of(target: Target, plan: RunPlan) -> list:
    """The checks a target gets, in running order: the named ones that apply, else the default ones."""
    if plan.checks is None:
        return default_checks(target)
    return [c for c in ordered(plan.checks) if c.applies(target) is None]


def fingerprint(target: Target, caller) -> dict:
    """The implementation's module and its source hash (an isolated one: as its worker reported it)."""
    from specverify.judge.provenance import module_fingerprint

    if getattr(caller, "isolated", False):
        return caller.fingerprint or {"module": target.source.partition(":")[0], "file": None, "sha256": None}
    return module_fingerprint(getattr(caller.impl, "__module__", "") or target.source.partition(":")[0])


def planned(targets: list[Target], plan: RunPlan) -> int:
    """How many (target, check) pairs a run has: the progress total."""
    return sum(len(checks_of(t, plan)) for t in targets)


def run(targets: list[Target], plan: RunPlan, listener: Listener | None = None) -> list[Outcome]:
    """Every target's checks in this process, in order; a stage's targets in one `stage_scope`."""
    env.prepare()
    listener = listener or Listener()
    outcomes: list[Outcome] = []
    for _, together in itertools.groupby(targets, key=lambda t: t.stage.name):
        with stage_scope():
            for target in together:
                try:
                    outcomes += run_target(target, plan, listener)
                except Interrupted as stop:
                    stop.outcomes = outcomes + stop.outcomes
                    raise
    return outcomes


def stage_scope():
    """Where one stage's targets run one after another: they share the oracle's answers on the examples
    they all draw (`specverify.judge.stage_memo`)."""
    from specverify.judge import stage_memo

    return stage_memo.scope()


def run_target(target: Target, plan: RunPlan, listener: Listener, only: set[str] | None = None,
               settle: bool = True) -> list[Outcome]:
    """The checks of one target (`only`: just those named), in order. `settle`: waivers judge each outcome
    here before the listener hears of it (a sharded run's worker leaves that to the driver)."""
    waivers = plan.waivers
    asked = [(check, waivers.skip_check(target, check.name) if waivers is not None else None)
             for check in checks_of(target, plan) if only is None or check.name in only]
    if not asked:
        return []
    outcomes = []
    caller = caller_for(target, plan) if any(waiver is None for _, waiver in asked) else None
    if getattr(caller, "interpreted", False) and not target.slow:
        target = replace(target, interpreted=INTERPRETED)
    module = fingerprint(target, caller) if caller is not None else {}
    unloadable = getattr(caller, "load_error", None)
    broken_in = None     # the check in which the target's worker answered out of protocol
    deadline = time.monotonic() + plan.per_target if plan.per_target else None
    try:
        for check, waiver in asked:
            interrupts.checkpoint()
            if waiver is None and unloadable is not None:   # tried once: every check fails with it, no case
                outcome = refused(target, check.name, unloadable)
            elif waiver is None and broken_in is not None:   # asked nothing more: every check fails at once
                outcome = refused(target, check.name, caller.broken, f"not run: its worker answered out of "
                                                                     f"protocol in the {broken_in} check")
            elif waiver is None:
                outcome = run_one(target, check, caller, plan, deadline, listener)
            else:
                outcome = Outcome(target.stage.name, target.backend.name, target.device, check.name,
                                  status="waived", waiver=waiver.label, headline=f"not launched: {waiver.label}")
            if broken_in is None and getattr(caller, "broken", None) is not None:
                broken_in = check.name
            outcome.source, outcome.fingerprint, outcome.dialect = target.source, module, target.dialect
            outcome.randomness = randomness.tier_words(target.stage)
            if target.domain is not None:
                outcome.domain, outcome.domain_summary = target.domain.texts(), target.domain.summary()
            if settle and waivers is not None:
                waivers.settle(target, outcome)
            listener.check_done(target, outcome)
            outcomes.append(outcome)
            if plan.first_failure and outcome.status in ("failed", "error"):
                break
    except Interrupted as stop:
        stop.outcomes = outcomes
        raise
    finally:
        if caller is not None:
            caller.close()
    return outcomes


def refused(target: Target, check: str, problem, why: str = "") -> Outcome:
    """A check not run because the target is asked nothing more (`problem`: the CallError that says why):
    failed with that problem, no case."""
    headline = f"{target.label} {problem.text}"
    return Outcome(target.stage.name, target.backend.name, target.device, check, status="failed", kind=problem.kind,
                   headline=headline, report="\n".join(filter(None, (headline, why and f"  {why}", problem.trace))))


def run_one(target: Target, check, caller, plan: RunPlan, deadline: float | None, listener: Listener) -> Outcome:
    planned_examples = check.planned(target, plan.profile, plan.examples)
    if deadline is not None and time.monotonic() > deadline:
        return Outcome(target.stage.name, target.backend.name, target.device, check.name, status="incomplete",
                       kind="timeout", planned=planned_examples,
                       headline=f"{target.label}: incomplete: the target's time limit ({plan.per_target:g} s) was "
                                f"spent before the {check.name} check started")
    listener.check_started(target, check.name, planned_examples)
    ctx = Context(plan.profile, plan.run_seed, plan.examples, plan.cases, caller,
                  guard_check=plan.guard_check, deadline=deadline, progress=listener.progress,
                  waivers=plan.waivers, findings_dir=plan.findings)
    started = time.perf_counter()
    try:
        return check.run(target, ctx)
    except Exception as exc:  # the check itself broke: say so, and go on with the next one
        return Outcome(target.stage.name, target.backend.name, target.device, check.name, status="error",
                       planned=planned_examples, seconds=time.perf_counter() - started,
                       headline=f"the {check.name} check of {target.label} broke: {error_text(exc)}")


def verify_example(target: Target, example: Example, plan: RunPlan | None = None, devices: bool = False) -> None:
    """One example on one target (both guard patterns; `devices`: then on every visible device, compared),
    called as `plan` says (default: the ci profile, REPLAY_TIMEOUT per call); raises harness.Failure.
    For replay, case tests and tests."""
    from specverify.runs.properties import device_callers, verify_devices

    plan = plan or RunPlan.build(timeout=REPLAY_TIMEOUT, keep_findings=False)
    caller = caller_for(target, plan)
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

"""The pytest side of specverify, in this repository and in a vendor's.

Registered as the `pytest11` entry point `specverify.pytest_plugin` (and loaded by this repository's
conftest.py when run from a checkout), so an installed specverify serves any repository:

- `pytest --specverify-vendor NAME` adds one test per check of every stage the vendor implements (see
  `specverify.vendors`; an empty NAME is a usage error), named `<stage>[<check>-<device>]`:
  `-k rejection.expand` picks a stage, and markers pick checks and devices (`-m hazard`, `-m "not corpus"`, `-m cuda`). `--specverify-waivers PATH`
  applies the vendor's waiver file: an expected failure is an xfail, a check a skip waiver names is a skip
  (never launched); a waiver that is no longer needed, and stale waivers, are listed at the end of the
  run, and the former fails it (exit status 1). `--junitxml` writes the usual JUnit file. The waiver
  summary covers the tests of one process (not aggregated across `-n` workers).
- Here: the generated stage tests (`stage_matrix`, marked by backend, device and check), and every case
  file `cases/<stage>/<hash>.npz` collected as one regression test per backend and device that runs here
  (not in vendor runs); a damaged case file is one failing test with its one-line reason.
- Both kinds of test run under one run plan (`run_plan`, `session.RunPlan`), built once from the options
  as `specverify check` builds its own: the cases they find go to `--specverify-findings DIR` (default
  $SPECVERIFY_FINDINGS, else ./specverify-findings, as for the CLI), never into `cases/`;
  `--specverify-cases DIR` is a folder the corpus check replays, read only.

Heavy modules are imported when a hook needs them, so loading the plugin costs an unrelated repository
nothing.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from specverify.profiles import PROFILES

BACKEND_MARKERS = ("oracle", "numpy", "torch", "triton", "vendor")
DEVICE_MARKERS = ("cpu", "cuda")
VENDOR_RUN = pytest.StashKey()
RUN_PLAN = pytest.StashKey()


def pytest_addoption(parser):
    group = parser.getgroup("specverify")
    group.addoption("--specverify-profile", choices=sorted(PROFILES),
                    default=os.environ.get("SPECVERIFY_PROFILE", "ci"), help="Hypothesis profile of stage tests")
    group.addoption("--specverify-seed", type=int, default=None, help="run seed (default: the profile's)")
    group.addoption("--specverify-vendor", metavar="NAME", default=None,
                    help="check every stage this vendor implements (entry point of group specverify.vendors, "
                         "or MODULE[:ATTR])")
    group.addoption("--specverify-waivers", metavar="PATH", type=Path, default=None, help="the vendor's waiver file")
    group.addoption("--specverify-cases", metavar="DIR", type=Path, default=None,
                    help="the vendor's case folder, replayed (read only) by the corpus check after the suite's")
    group.addoption("--specverify-findings", metavar="DIR", type=Path, default=None,
                    help="where the cases the run finds go (default $SPECVERIFY_FINDINGS, else "
                         "./specverify-findings; never the suite's corpus)")
    group.addoption("--specverify-device", choices=DEVICE_MARKERS, default=None,
                    help="where the vendor's kernels run (default: cuda when present)")
    group.addoption("--specverify-examples", metavar="N", type=int, default=None, help="valid-tier examples")


def pytest_configure(config):
    from specverify import env
    from specverify.checks import CHECKS

    vendor = config.getoption("--specverify-vendor")
    if vendor is not None and not vendor.strip():
        raise pytest.UsageError("--specverify-vendor: an empty name names no vendor")
    env.prepare()   # before anything imports Triton (torch itself does, e.g. under a TorchDispatchMode)

    for name in BACKEND_MARKERS:
        config.addinivalue_line("markers", f"{name}: a specverify test of the {name} backend")
    for name in DEVICE_MARKERS:
        config.addinivalue_line("markers", f"{name}: a specverify test on the {name} device")
    for check in CHECKS.values():
        config.addinivalue_line("markers", f"{check.name}: the specverify {check.name} check ({check.doc})")


def run_plan(config):
    """The session's run plan, built once from the options (vendor waivers included): what every stage
    test and vendor test runs under, each with its own check. pytest.UsageError for bad options."""
    plan = config.stash.get(RUN_PLAN, None)
    if plan is None:
        from specverify import session, waivers

        try:
            waiver_file = config.getoption("--specverify-waivers")
            plan = session.RunPlan.build(
                config.getoption("--specverify-profile"), seed=config.getoption("--specverify-seed"),
                examples=config.getoption("--specverify-examples"),
                findings=config.getoption("--specverify-findings"), cases=config.getoption("--specverify-cases"),
                waivers=waivers.load(waiver_file) if waiver_file else None, option_prefix="--specverify-")
        except (session.PlanError, waivers.WaiverError) as exc:
            raise pytest.UsageError(str(exc)) from None
        config.stash[RUN_PLAN] = plan
    return plan


def run_stage_check(config, stage_name: str, backend: str, device: str, check: str) -> None:
    """The body of a generated stage test: one check of one target (`stage_name` may name a dialect:
    "family.stage:dialect"); fails with the full report. Its findings go to the run plan's findings
    folder (never the suite's corpus)."""
    from specverify import backends, dialects, registry, session

    stage = dialects.resolve(stage_name, registry.all_stages())
    why = backends.unavailable(backend, device)
    if why:
        pytest.skip(why)
    try:
        plan = dataclasses.replace(run_plan(config), checks=(check,))
    except pytest.UsageError as exc:     # bad options: the one line, in every stage test
        pytest.fail(str(exc), pytrace=False)
    [outcome] = session.run([backends.target(stage, backend, device)], plan)
    if outcome.status != "passed":
        pytest.fail(outcome.report or outcome.headline, pytrace=False)


def stage_matrix() -> list:
    """pytest params: every stage (and stage judged by a dialect we implement: "family.stage:dialect") x
    backend x device x default check (unavailable devices skip), marked by backend, device and check."""
    from specverify import backends, dialects, registry
    from specverify.checks import default_checks

    params = []
    for stage, backend, device, _ in backends.matrix(list(registry.all_stages().values())):
        name = dialects.qualified(stage)
        for check in default_checks(backends.target(stage, backend, device)):
            marks = [getattr(pytest.mark, backend), getattr(pytest.mark, device), getattr(pytest.mark, check.name)]
            params.append(pytest.param(name, backend, device, check.name, marks=marks,
                                       id=f"{name}-{backend}-{device}-{check.name}"))
    return params


# ------------------------------------------------------------------ a vendor's kernels as tests

@dataclasses.dataclass
class VendorRun:
    vendor: object                 # vendors.Vendor
    plan: object                   # session.RunPlan (waivers included)
    outcomes: list = dataclasses.field(default_factory=list)


@pytest.hookimpl(tryfirst=True)      # before -k and -m deselect
def pytest_collection_modifyitems(session, config, items):
    if config.getoption("--specverify-vendor"):
        items.extend(VendorSuite.from_parent(session, name="specverify", nodeid="specverify").collect())


class VendorSuite(pytest.Collector):
    """The vendor's tests (their node ids read `specverify::<stage>[<check>-<device>]`)."""

    def collect(self) -> list:
        return vendor_items(self, self.config)


def vendor_items(parent, config) -> list:
    """One VendorItem per (stage, check) of the vendor, in stage order and check order."""
    from specverify import backends, env, registry
    from specverify import session as sv
    from specverify import vendors

    plan = run_plan(config)
    try:
        vendor = vendors.resolve(config.getoption("--specverify-vendor"), list(registry.all_stages()))
    except vendors.VendorError as exc:
        raise pytest.UsageError(str(exc)) from None
    device = config.getoption("--specverify-device") or ("cuda" if env.cuda_available() else "cpu")
    why = backends.unavailable("torch", device)
    if why:
        raise pytest.UsageError(f"--specverify-device {device}: {why}")
    run = config.stash[VENDOR_RUN] = VendorRun(vendor, plan)
    found = []
    for name, source in vendor.implementations.items():
        target = backends.target(registry.all_stages()[name], "impl", device, source)
        for check in sv.checks_of(target, plan):
            item = VendorItem.from_parent(parent, name=f"{name}[{check.name}-{device}]", target=target,
                                          check=check.name, run=run)
            for marker in ("vendor", device, check.name):
                item.add_marker(marker)
            found.append(item)
    return found


class VendorItem(pytest.Item):
    """One check of one vendor implementation."""

    def __init__(self, *, target, check: str, run: VendorRun, **kw):
        super().__init__(**kw)
        self.target, self.check, self.run = target, check, run

    def runtest(self):
        from specverify import session as sv
        from specverify.harness import Failure

        [outcome] = sv.run([self.target], dataclasses.replace(self.run.plan, checks=(self.check,)))
        self.run.outcomes.append(outcome)
        if outcome.status in ("waived", "skipped", "incomplete"):   # incomplete: every example that ran passed
            pytest.skip(outcome.headline)
        if outcome.status == "xfailed":
            pytest.xfail(f"{outcome.waiver}: {outcome.headline}")
        if outcome.status in ("failed", "error"):
            raise Failure(outcome.report or outcome.headline)

    def repr_failure(self, excinfo):
        from specverify.harness import Failure

        return str(excinfo.value) if isinstance(excinfo.value, Failure) else super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.target.stage.name} {self.check} of {self.target.source}"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    run = config.stash.get(VENDOR_RUN, None)
    if run is None or not run.outcomes:
        return
    from specverify import registry
    from specverify.conformance import not_asked, verdicts
    from specverify.reports import STATE_WORDS

    write = terminalreporter.write_line
    terminalreporter.section(f"specverify: vendor {run.vendor.name}")
    found = verdicts(run.outcomes)
    for line in [v.line() for v in found] + not_asked(found):
        write(line)
    missing = [s for s in registry.all_stages() if s not in run.vendor.implementations]
    write(f"not implemented ({len(missing)}): {', '.join(missing)}")
    waiver_set = run.plan.waivers
    if waiver_set is not None:
        waiver_set.finish(set(registry.all_stages()), set(run.vendor.implementations))
        for w in waiver_set.entries:
            write(f"{w.label} [{w.mode}] {w.scope}: {STATE_WORDS[w.state]}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """A waiver that is no longer needed fails the run, as in `specverify check`."""
    run = session.config.stash.get(VENDOR_RUN, None)
    waiver_set = run.plan.waivers if run is not None else None
    if waiver_set is None or not run.outcomes:
        return
    from specverify import registry

    waiver_set.finish(set(registry.all_stages()), set(run.vendor.implementations))
    if waiver_set.by_state("passed") and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ------------------------------------------------------------------ case files as regression tests

def pytest_collect_file(file_path: Path, parent):
    if (file_path.suffix == ".npz" and file_path.parent.parent.name == "cases" and "." in file_path.parent.name
            and not parent.config.getoption("--specverify-vendor")):
        return CaseFile.from_parent(parent, path=file_path)
    return None


class CaseFile(pytest.File):
    def collect(self):
        from specverify import backends, cases, registry

        try:
            stage_name, example = cases.load(self.path)
        except cases.CaseError as exc:
            yield CaseItem.from_parent(self, name="unreadable", problem=str(exc))
            return
        stage = registry.all_stages().get(stage_name)
        if stage is None:
            yield CaseItem.from_parent(self, name="unknown-stage", problem=f"unknown stage {stage_name!r}")
            return
        for view, backend, device, why in backends.matrix([stage]):
            under = f"-{view.dialect}" if view.dialect else ""
            yield CaseItem.from_parent(self, name=f"{backend}-{device}{under}", stage=view, example=example,
                                       backend=backend, device=device, skip_reason=why)


class CaseItem(pytest.Item):
    def __init__(self, *, stage=None, example=None, backend=None, device=None, skip_reason=None,
                 problem=None, **kw):
        super().__init__(**kw)
        self.stage, self.example, self.backend, self.device = stage, example, backend, device
        self.skip_reason, self.problem = skip_reason, problem

    def runtest(self):
        from specverify import backends, session
        from specverify.harness import Failure, OracleError
        from specverify.report import failure_report, replay_command

        if self.problem:
            raise Failure(self.problem)
        if self.skip_reason:
            pytest.skip(self.skip_reason)
        target = backends.target(self.stage, self.backend, self.device)
        try:
            session.verify_example(target, self.example)
        except (Failure, OracleError) as exc:
            raise Failure(failure_report(target, self.example, exc, replay_command(self.path, target))) from None

    def repr_failure(self, excinfo):
        return str(excinfo.value)

    def reportinfo(self):
        return self.path, None, f"case {self.path.name} on {self.backend}/{self.device}"

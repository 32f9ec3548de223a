"""The pytest side of specverify, in this repository and in a vendor's.

Registered as the `pytest11` entry point `specverify.pytest_plugin` (and loaded by this repository's
conftest.py when run from a checkout), so an installed specverify serves any repository. Its options are
`specverify check`'s (`--specverify-NAME` for `--NAME`, from the one table in `specverify.cli.options`), and they
are resolved by the same function (`specverify.cli.selection.select`), so a run gives what `specverify check` gives:

- `pytest --specverify-vendor NAME` (or `--specverify-impl MODULE:FUNCTION --specverify-stage NAME`, with
  `--specverify-declare PATH`) adds one test per check of every stage the implementation covers, named
  `<stage>[<check>-<device>]`, each judged within the declared domain and dialect: `-k rejection.expand` picks a
  stage, markers pick checks and devices (`-m hazard`, `-m "not corpus"`, `-m cuda`). `--specverify-waivers PATH`
  applies the vendor's waiver file: an expected failure is an xfail, a check a skip waiver names is a skip (never
  launched). After the tests come the same verdict lines, notes, stages not implemented and waiver states as
  `specverify check` prints; `--specverify-report`, `--specverify-junit` and `--specverify-markdown` write the same
  reports, and a waiver that is no longer needed fails the run (exit status 1). Under pytest-xdist the
  workers' outcomes are gathered by the controller, which alone prints and writes them. A bad option or
  declaration is the same one line as from the command line (a pytest usage error).
- Here: the generated stage tests (`stage_matrix`, marked by backend, device and check), and every case
  file `cases/<stage>/<hash>.npz` collected as one regression test per backend and device that runs here
  (not in outside runs); a damaged case file (unreadable, or with values the oracle refuses) is one failing
  test with its one-line reason.

Heavy modules are imported when a hook needs them, so loading the plugin costs an unrelated repository
nothing.
"""
from __future__ import annotations

import base64
import dataclasses
import pickle
from pathlib import Path

import pytest

from specverify import usage
from specverify.cli import options

OUTSIDE_RUN = pytest.StashKey()
RUN_PLAN = pytest.StashKey()
PREFIX = options.PYTEST_PREFIX
WORKER_OUTCOMES = "specverify_outcomes"


def pytest_addoption(parser):
    options.pytest_options(parser.getgroup("specverify"))


def pytest_configure(config):
    """Registers the markers of the tests it makes: one per backend (its record's `pytest_marker`), device
    and check, read from their records."""
    from specverify import env
    from specverify.records import backends
    from specverify.runs.catalogue import CHECKS

    env.prepare()   # before anything imports Triton (torch itself does, e.g. under a TorchDispatchMode)
    for backend in backends.BACKENDS.values():
        name = backend.pytest_marker
        config.addinivalue_line("markers", f"{name}: a specverify test of the {name} backend")
    for name in backends.DEVICES:
        config.addinivalue_line("markers", f"{name}: a specverify test on the {name} device")
    for check in CHECKS.values():
        config.addinivalue_line("markers", f"{check.name}: the specverify {check.name} check ({check.doc})")


def arguments(config):
    """The options as `specverify check` would hold them."""
    return options.from_pytest(config)


def judges_outside(config) -> bool:
    args = arguments(config)
    return bool(args.vendor is not None or args.impl)


def run_plan(config):
    """The session's run plan, built once from the options as `specverify check` builds its own: what every
    stage test runs under, each with its own check. pytest.UsageError for bad options."""
    plan = config.stash.get(RUN_PLAN, None)
    if plan is None:
        from specverify.cli import selection

        try:
            plan = selection.plan(arguments(config), "check", PREFIX)
        except usage.UsageError as exc:
            raise pytest.UsageError(str(exc)) from None
        config.stash[RUN_PLAN] = plan
    return plan


def run_stage_check(config, stage_name: str, backend: str, device: str, check: str) -> None:
    """The body of a generated stage test: one check of one target (`stage_name` may name a dialect:
    "family.stage:dialect"); fails with the full report. Its findings go to the run plan's findings
    folder (never the suite's corpus)."""
    from specverify.records import backends, dialects, registry
    from specverify.runs import session

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
    from specverify.records import backends, dialects, registry
    from specverify.runs.catalogue import default_checks

    params = []
    for stage, backend, device, _ in backends.matrix(list(registry.all_stages().values())):
        name = dialects.qualified(stage)
        for check in default_checks(backends.target(stage, backend, device)):
            marker = backends.BACKENDS[backend].pytest_marker
            marks = [getattr(pytest.mark, marker), getattr(pytest.mark, device), getattr(pytest.mark, check.name)]
            params.append(pytest.param(name, backend, device, check.name, marks=marks,
                                       id=f"{name}-{backend}-{device}-{check.name}"))
    return params


# ------------------------------------------------------------------ outside implementations as tests

@dataclasses.dataclass
class OutsideRun:
    selection: object              # selection.Selection (its plan holds the waivers)
    outcomes: list = dataclasses.field(default_factory=list)
    finished: object = None        # conformance.Run, once the session is over (in the reporting process)


def outside_run(config) -> OutsideRun:
    """The session's outside run, its selection resolved once per process (pytest.UsageError for bad options)."""
    run = config.stash.get(OUTSIDE_RUN, None)
    if run is None:
        from specverify.cli import selection

        try:
            run = config.stash[OUTSIDE_RUN] = OutsideRun(selection.select(arguments(config), PREFIX))
        except usage.UsageError as exc:
            raise pytest.UsageError(str(exc)) from None
    return run


@pytest.hookimpl(tryfirst=True)      # before -k and -m deselect
def pytest_collection_modifyitems(session, config, items):
    """The outside implementation's tests, collected through pytest's own collection reports (so the
    header counts them)."""
    if not judges_outside(config):
        return
    suite = OutsideSuite.from_parent(session, name="specverify", nodeid="specverify")
    report = session.ihook.pytest_make_collect_report(collector=suite)
    session.ihook.pytest_collectreport(report=report)
    if report.failed:
        raise pytest.UsageError(str(report.longrepr))
    items.extend(report.result)


class OutsideSuite(pytest.Collector):
    """The outside tests (their node ids read `specverify::<stage>[<check>-<device>]`)."""

    def collect(self) -> list:
        return outside_items(self, self.config)


def outside_items(parent, config) -> list:
    """One OutsideItem per (stage, check) of the outside implementation(s), in stage order and check order."""
    from specverify.runs import session as sv

    run = outside_run(config)
    chosen = run.selection
    found = []
    for target in chosen.targets:
        for check in sv.checks_of(target, chosen.plan):
            item = OutsideItem.from_parent(parent, name=f"{target.stage.name}[{check.name}-{target.device}]",
                                           target=target, check=check.name, run=run)
            for marker in (target.backend.pytest_marker, target.device, check.name):
                item.add_marker(marker)
            found.append(item)
    return found


class OutsideItem(pytest.Item):
    """One check of one outside implementation."""

    def __init__(self, *, target, check: str, run: OutsideRun, **kw):
        super().__init__(**kw)
        self.target, self.check, self.run = target, check, run

    def runtest(self):
        from specverify.judge.harness import Failure
        from specverify.runs import session as sv

        plan = self.run.selection.plan
        [outcome] = sv.run([self.target], dataclasses.replace(plan, checks=(self.check,)))
        self.run.outcomes.append(outcome)
        if outcome.status in ("waived", "skipped", "incomplete"):   # incomplete: every example that ran passed
            pytest.skip(outcome.headline)
        if outcome.status == "xfailed":
            pytest.xfail(f"{outcome.waiver}: {outcome.headline}")
        if outcome.status in ("failed", "error"):
            raise Failure(outcome.report or outcome.headline)

    def repr_failure(self, excinfo):
        from specverify.judge.harness import Failure

        return str(excinfo.value) if isinstance(excinfo.value, Failure) else super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.target.stage.name} {self.check} of {self.target.source}"


def pytest_testnodedown(node, error):
    """pytest-xdist's controller (which collects nothing itself): gather a worker's outcomes."""
    found = getattr(node, "workeroutput", {}).get(WORKER_OUTCOMES)
    if found:
        outside_run(node.config).outcomes += pickle.loads(base64.b64decode(found))


def finished_run(config):
    """The run the outcomes of this session make, in the order `specverify check` runs them (in the process
    that reports: not an xdist worker)."""
    run = config.stash.get(OUTSIDE_RUN, None)
    if run is None or hasattr(config, "workerinput") or not run.outcomes:
        return None
    if run.finished is None:
        from specverify.runs.catalogue import CHECKS

        order = {(t.stage.name, t.device): i for i, t in enumerate(run.selection.targets)}
        checks = list(CHECKS)
        run.outcomes.sort(key=lambda o: (order.get((o.stage, o.device), len(order)),
                                         checks.index(o.check) if o.check in checks else len(checks)))
        run.finished = run.selection.finished(run.outcomes)
    return run.finished


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    finished = finished_run(config)
    if finished is None:
        return
    from specverify.pages.terminal import run_lines

    terminalreporter.section("specverify: " + (f"vendor {finished.vendor.name}" if finished.vendor is not None
                                               else "outside implementation"))
    for line in run_lines(finished, True):
        terminalreporter.write_line(line)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """xdist workers hand their outcomes to the controller; the reporting process writes the reports, and a
    waiver that is no longer needed fails the run, as in `specverify check`."""
    config = session.config
    run = config.stash.get(OUTSIDE_RUN, None)
    if run is not None and hasattr(config, "workerinput"):
        config.workeroutput[WORKER_OUTCOMES] = base64.b64encode(pickle.dumps(run.outcomes)).decode()
        return
    finished = finished_run(config)
    if finished is None:
        return
    from specverify.pages import report_files
    from specverify.usage import FAILED

    args = arguments(config)
    for line in report_files.write(finished, args.json, args.junit, args.markdown):
        config.get_terminal_writer().line(f"specverify: error: {line}")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    if finished.exit_status == FAILED and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# ------------------------------------------------------------------ case files as regression tests

def pytest_collect_file(file_path: Path, parent):
    if (file_path.suffix == ".npz" and file_path.parent.parent.name == "cases" and "." in file_path.parent.name
            and not judges_outside(parent.config)):
        return CaseFile.from_parent(parent, path=file_path)
    return None


class CaseFile(pytest.File):
    def collect(self):
        from specverify.files import cases
        from specverify.records import backends, registry

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
        from specverify.files import cases
        from specverify.judge.failure_report import failure_report, replay_command
        from specverify.judge.harness import Failure, OracleError
        from specverify.records import backends
        from specverify.runs import session

        if self.problem:
            raise Failure(self.problem)
        if self.skip_reason:
            pytest.skip(self.skip_reason)
        try:
            cases.check_values(self.path, self.stage, self.example)
        except cases.CaseError as exc:   # a damaged case: its one line
            raise Failure(str(exc)) from None
        target = backends.target(self.stage, self.backend, self.device)
        try:
            session.verify_example(target, self.example)
        except (Failure, OracleError) as exc:
            raise Failure(failure_report(target, self.example, exc, replay_command(self.path, target))) from None

    def repr_failure(self, excinfo):
        return str(excinfo.value)

    def reportinfo(self):
        return self.path, None, f"case {self.path.name} on {self.backend}/{self.device}"

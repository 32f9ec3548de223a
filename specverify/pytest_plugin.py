"""The pytest side: profile options, the (stage, backend, device, check) matrix, and case files as tests.

Loaded by the repository's conftest.py (`pytest_plugins`). Every `cases/<stage>/<hash>.npz` is
collected as one regression test per backend and device that runs here; a damaged case file is one
failing test with its one-line reason, never a collection error.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from specverify import backends, cases, registry, session
from specverify.checks import CHECKS
from specverify.harness import Failure, OracleError
from specverify.profiles import PROFILES
from specverify.report import failure_report, replay_command


def pytest_addoption(parser):
    group = parser.getgroup("specverify")
    group.addoption("--specverify-profile", choices=sorted(PROFILES),
                    default=os.environ.get("SPECVERIFY_PROFILE", "ci"), help="Hypothesis profile of stage tests")
    group.addoption("--specverify-seed", type=int, default=None, help="run seed (default: the profile's)")


def run_stage_check(config, stage_name: str, backend: str, device: str, check: str) -> None:
    """The body of a generated stage test: one check of one target; fails with the full report."""
    stage = registry.all_stages()[stage_name]
    why = backends.unavailable(backend, device)
    if why:
        pytest.skip(why)
    profile = PROFILES[config.getoption("--specverify-profile")]
    options = session.Options(profile, profile.run_seed(config.getoption("--specverify-seed")),
                              cases_dir=config.rootpath / "cases", checks=(check,))
    [outcome] = session.run([backends.target(stage, backend, device)], options)
    if outcome.status != "passed":
        pytest.fail(outcome.report or outcome.headline, pytrace=False)


def stage_matrix() -> list:
    """pytest params: every stage x backend x device x check that applies (unavailable devices skip)."""
    params = []
    for stage, backend, device, _ in backends.matrix(list(registry.all_stages().values())):
        target = backends.target(stage, backend, device)
        for check in CHECKS.values():
            if check.applies(target) is None:
                params.append(pytest.param(stage.name, backend, device, check.name,
                                           id=f"{stage.name}-{backend}-{device}-{check.name}"))
    return params


def pytest_collect_file(file_path: Path, parent):
    if file_path.suffix == ".npz" and "cases" in file_path.parts:
        return CaseFile.from_parent(parent, path=file_path)
    return None


class CaseFile(pytest.File):
    def collect(self):
        try:
            stage_name, example = cases.load(self.path)
        except cases.CaseError as exc:
            yield CaseItem.from_parent(self, name="unreadable", problem=str(exc))
            return
        stage = registry.all_stages().get(stage_name)
        if stage is None:
            yield CaseItem.from_parent(self, name="unknown-stage", problem=f"unknown stage {stage_name!r}")
            return
        for _, backend, device, why in backends.matrix([stage]):
            yield CaseItem.from_parent(self, name=f"{backend}-{device}", stage=stage, example=example,
                                       backend=backend, device=device, skip_reason=why)


class CaseItem(pytest.Item):
    def __init__(self, *, stage=None, example=None, backend=None, device=None, skip_reason=None,
                 problem=None, **kw):
        super().__init__(**kw)
        self.stage, self.example, self.backend, self.device = stage, example, backend, device
        self.skip_reason, self.problem = skip_reason, problem

    def runtest(self):
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

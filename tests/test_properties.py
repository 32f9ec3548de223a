"""GPU property checks (no host sync, launches per call, CUDA-graph replay): they apply to CUDA targets
only, and on a GPU each catches the implementation built to break it (tests/hostile.py)."""
from dataclasses import replace

import pytest
import torch

from specverify import registry, session
from specverify.backends import BACKENDS, Target
from specverify.checks import CHECKS

EXPAND = registry.all_stages()["rejection.expand"]
PROPERTIES = ("no-sync", "launches", "graph-replay")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_properties_apply_to_cuda_production_targets_only():
    for name in PROPERTIES:
        check = CHECKS[name]
        assert check.applies(Target(EXPAND, BACKENDS["torch"], "cpu", "x:y")) is not None
        assert check.applies(Target(EXPAND, BACKENDS["oracle"], "cuda", "x:y")) is not None
        assert check.applies(Target(EXPAND, BACKENDS["triton"], "cuda", "x:y")) is None
        assert check.applies(Target(EXPAND, BACKENDS["impl"], "cuda", "x:y")) is None


def run_property(function: str, check: str, tmp_path, isolate: bool, stage=EXPAND):
    target = Target(stage, BACKENDS["impl"] if isolate else BACKENDS["torch"], "cuda", f"tests.hostile:{function}")
    plan = session.RunPlan.build("ci", examples=30, findings=tmp_path, checks=(check,), isolate=isolate)
    [outcome] = session.run([target], plan)
    return outcome


@needs_cuda
@pytest.mark.parametrize("isolate", [False, True])
@pytest.mark.parametrize("function,check,words", [
    ("syncs_the_host", "no-sync", "synchronized the device with the host"),
    ("host_copy_not_replayed", "graph-replay", "CUDA graph"),
])
def test_a_property_breaker_is_caught(tmp_path, function, check, words, isolate):
    outcome = run_property(function, check, tmp_path, isolate)
    assert outcome.status == "failed" and words in outcome.headline, outcome.headline
    assert outcome.case is not None


@needs_cuda
def test_launches_are_counted_and_bounded(tmp_path):
    """Our own kernels' property checks are the generated tests (tests/test_stages.py) on a GPU."""
    outcome = run_property("launches_many", "launches", tmp_path, False, replace(EXPAND, launches={}))
    assert outcome.status == "passed" and outcome.measures["launches"] >= 40   # no bound declared: reported
    outcome = run_property("launches_many", "launches", tmp_path, False, replace(EXPAND, launches={"torch": 3}))
    assert outcome.status == "failed" and "its record allows 3" in outcome.headline

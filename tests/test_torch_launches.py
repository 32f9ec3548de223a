"""Launches per call of the metadata stages' Torch kernels, counted on the CPU as dispatched aten ops
(tests/dispatch_count.py): each stays within the `torch` bound its record declares, on its worked
example and on drawn valid examples."""
import contextlib
import importlib
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings

from specverify import backends, registry
from specverify.materialize import Bound, plan
from specverify.stage import DrawContext, Example
from tests.dispatch_count import dispatched_ops

FAMILIES = ("eagle", "graph", "stop", "scv", "kv", "output")
REJECTION = ("rejection.greedy", "rejection.random", "rejection.expand", "rejection.greedy_padded")  # no [T, V] sweep
STAGES = [s for name, s in sorted(registry.all_stages().items())
          if (s.family in FAMILIES or name in REJECTION) and not s.host and "torch" in s.impls]
HOST_COPIES = {"output.spec_metadata": 1}   # a host list copied to the device: a launch the CPU does not see


def launches(stage, example: Example) -> tuple[int, list[str]]:
    """Ops of the second call (the first one fills the kernels' cached constants, as a warm-up call
    does before a CUDA-graph capture), value checks off as on CUDA outside checked mode."""
    impl = backends.load(stage.impls["torch"])
    modules = [importlib.import_module(f"specverify.kernels.torch.{family}") for family in (*FAMILIES, "rejection")]
    with contextlib.ExitStack() as patches:   # every Torch module: a kernel may call another family's
        for module in modules:
            patches.enter_context(mock.patch.object(module, "reads_values", lambda _: False))
        for _ in range(2):
            call_plan, arena = plan(stage, example)
            ops = dispatched_ops(impl, **Bound(call_plan, arena, "torch", "cpu").kwargs)
    return len(ops) + HOST_COPIES.get(stage.name, 0), ops


def test_every_metadata_stage_declares_a_torch_bound():
    assert len(STAGES) >= 17 and all("torch" in s.launches for s in STAGES)


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_worked_example_within_bound(stage):
    count, ops = launches(stage, stage.worked())
    assert count <= stage.launches["torch"], ops


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_drawn_examples_within_bound(stage):
    @settings(max_examples=8, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(stage.valid(DrawContext(small=True)))
    def within(example):
        count, ops = launches(stage, example)
        assert count <= stage.launches["torch"], ops

    within()

"""Launches per call of the metadata stages' Torch kernels, counted on the CPU as dispatched aten ops plus
what CUDA adds to some of them (tests/dispatch_count.py): each stays within the `torch` bound its record
declares, on its worked example and on drawn valid examples, and makes no host sync; every bound is at
most `MOST` (issue 20) but those of `ABOVE_MOST`, each named with what its kernel still spends."""
import contextlib
import importlib
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings

from specverify.judge.materialize import Bound, plan
from specverify.records import backends, registry
from specverify.records.stage import DrawContext, Example
from tests.dispatch_count import dispatched_ops, syncs

FAMILIES = ("eagle", "graph", "stop", "scv", "kv", "output")
REJECTION = ("rejection.greedy", "rejection.random", "rejection.expand", "rejection.greedy_padded")  # no [T, V] sweep
STAGES = [s for name, s in sorted(registry.all_stages().items())
          if (s.family in FAMILIES or name in REJECTION) and not s.host and "torch" in s.impls]
HOST_COPIES = {"output.spec_metadata": 1}   # its host-list input copied to the device, by contract: a launch
MOST = 10
ABOVE_MOST = {   # stage: what its Torch kernel still spends past MOST launches
    "rejection.greedy": "an is_greedy mask is one more op on the verified grid (9 without it)",
    "rejection.random": "the acceptance test (8: vocab range 2, two table reads, q > 0 as NaN, ratio, test, and) "
                        "and the verification (10: values, source, grid 3, gather, first, written, greedy, write)",
    "eagle.copy_and_expand_inputs": "six outputs of five span classes: the boundaries (2), the search, the "
                                    "new-token indices, the class codes' take, two masks, the (request, class) "
                                    "table (3) and its gather, position and source (1), the positions (2), the "
                                    "ids (5: gather, where live, the next tokens, parallel and padding ids), "
                                    "the hidden-state mapping (4) when shifting",
    "eagle.verify_and_prepare_padded": "greedy verification (10), the last valid id (8) and the prepared counts (5)",
    "eagle.step_slot_mapping": "room, clamped positions; the block (div, clamp past the table), its read, the "
                               "slot (remainder, add, -1 where); the new length (clamp, addcmul); the padded "
                               "rows' fill",
    "kv.assign_req_to_token": "the running lengths (3), the request search and its base, the element (2), and the "
                              "masked prod-then-add of the table (4); 12 when a stride divides the other",
    "kv.commit_draft": "fp8 quantizing (4 more) and a strided slot index (1 to 5 more); 9 for row slots of the key dtype",
    "stop.spec_stopping": "counting the emitted tokens (ne, sum) when num_rejected_tokens is None (10 with it)",
    "graph.dsa_indexer_metadata": "a copy of strided offsets to search (10 for contiguous ones)",
}


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
def test_bound_is_at_most_ten_or_listed(stage):
    """A listed stage must still need its place on the list: one brought to MOST leaves it."""
    assert (stage.launches["torch"] > MOST) == (stage.name in ABOVE_MOST), stage.launches


def test_listed_stages_exist():
    assert set(ABOVE_MOST) <= {s.name for s in STAGES}


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_worked_example_within_bound(stage):
    count, ops = launches(stage, stage.worked())
    assert count <= stage.launches["torch"], ops
    assert not syncs(ops), ops


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_drawn_examples_within_bound(stage):
    @settings(max_examples=8, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(stage.valid(DrawContext(small=True)))
    def within(example):
        count, ops = launches(stage, example)
        assert count <= stage.launches["torch"], ops
        assert not syncs(ops), ops

    within()


def test_counting_adds_what_cuda_adds():
    """tests/dispatch_count.py's CUDA extras: each rule counts on a small case."""
    import torch
    a, b, flags = torch.arange(4), torch.arange(4, dtype=torch.int32), torch.arange(4) > 1
    assert len(dispatched_ops(lambda: torch.cat((a, a[::2])))) == 1          # one dtype: one batched kernel
    assert len(dispatched_ops(lambda: torch.cat((a, b, a)))) == 3            # mixed: a copy per input
    assert len(dispatched_ops(lambda: torch.stack((a, b)))) == 2
    assert len(dispatched_ops(lambda: flags.sum())) == 2                     # the bool input cast first
    assert len(dispatched_ops(lambda: a.view(2, 2).t().cumsum(1))) == 2      # strided scan input made contiguous
    assert len(dispatched_ops(lambda: a.cumsum(0))) == 2                     # cub's two kernels
    zeros, ones = torch.zeros(4), torch.ones(4)
    assert len(dispatched_ops(lambda: zeros.index_put_((a,), ones, accumulate=True))) == 6   # and its sort
    assert len(dispatched_ops(lambda: a[b])) == 2 and len(dispatched_ops(lambda: a[a])) == 1   # int32 ids cast
    assert len(dispatched_ops(lambda: zeros.index_put_((b,), ones))) == 2
    assert len(dispatched_ops(lambda: torch.searchsorted(b, a))) == 2                        # values cast
    assert len(dispatched_ops(lambda: torch.searchsorted(a, a))) == 1
    assert syncs(dispatched_ops(lambda: a[flags])) and syncs(dispatched_ops(lambda: a.nonzero()))
    assert not syncs(dispatched_ops(lambda: torch.where(flags, a, 0)))

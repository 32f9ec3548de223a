"""The stream-order check: the call made with a fresh non-default stream current, its outputs read back on
that stream alone. An implementation that does its work on a side stream without ordering it before the
caller's fails it (engines shipped such races: SGLang PR 22113, vLLM PR 36013) and still passes the valid
check, whose plain call synchronizes the device; the same work ordered correctly passes both. Our own
kernels are asked it by the generated tests (tests/stages/test_stages.py) on a GPU."""
from dataclasses import replace

import numpy as np
import pytest
import torch

from specverify.judge import materialize
from specverify.judge.calls import InProcess, Result
from specverify.judge.harness import Failure
from specverify.kernels.torch.rejection import expand
from specverify.records import registry, values
from specverify.records.backends import BACKENDS, Target
from specverify.runs import session
from specverify.runs.catalogue import CHECKS
from specverify.runs.profiles import PROFILES
from specverify.runs.properties import verify_stream_order
from specverify.runs.protocol import Context

EXPAND = registry.all_stages()["rejection.expand"]
NOT_READY = "the outputs were not ready on the caller's stream"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_stream_order_runs_after_graph_replay_on_cuda_targets():
    check = CHECKS["stream-order"]
    assert CHECKS["graph-replay"].order < check.order < CHECKS["cross-device"].order
    assert check.applies(Target(EXPAND, BACKENDS["torch"], "cuda", "x:y")) is None
    assert check.applies(Target(EXPAND, BACKENDS["torch"], "cpu", "x:y")) is not None
    assert check.applies(Target(registry.all_stages()["output.parse"], BACKENDS["numpy"], "cuda", "x:y")) is not None


class Unordered:
    """A caller whose call did its work (`late`: none yet on the caller's non-default stream, as if it were
    still queued on another stream; a plain call on the default stream has done it)."""

    isolated = False

    def __init__(self, late: bool):
        self.late, self.inner = late, InProcess(expand, "torch", "cpu")

    def call(self, plan, arena, checked=False, probe="plain"):
        assert probe in ("stream_order", "plain")
        if self.late and probe == "stream_order":
            return Result(arena, dict(plan.values), None, None, {})
        return self.inner.call(plan, arena)


class WrongEverywhere(Unordered):
    """A caller whose call gives a wrong value on any stream: the kernel is wrong, not unordered."""

    def call(self, plan, arena, checked=False, probe="plain"):
        result = self.inner.call(plan, arena)
        slot = plan.slots["expanded"]
        result.arena[slot.offset + values.GUARD_BYTES] ^= 1
        return result


def test_the_judge_says_the_outputs_were_not_ready_on_the_callers_stream():
    target = Target(EXPAND, BACKENDS["impl"], "cuda", "x:y")
    ctx = Context(PROFILES["ci"], 0, None, None, Unordered(late=True), False, None)
    with pytest.raises(Failure) as caught:
        verify_stream_order(target, EXPAND.worked(), ctx)
    assert NOT_READY in caught.value.headline and caught.value.kind == "stream"
    assert verify_stream_order(target, EXPAND.worked(), replace(ctx, caller=Unordered(late=False))) == {}


def test_a_wrong_answer_on_the_default_stream_too_is_not_blamed_on_stream_order():
    """Bytes that differ on the caller's stream are a stream fault only where the same input passes on the
    default stream; vLLM's random kernel was told its outputs were not ready where it was simply wrong."""
    target = Target(EXPAND, BACKENDS["impl"], "cuda", "x:y")
    ctx = Context(PROFILES["ci"], 0, None, None, WrongEverywhere(late=False), False, None)
    with pytest.raises(Failure) as caught:
        verify_stream_order(target, EXPAND.worked(), ctx)
    assert NOT_READY not in caught.value.headline and caught.value.kind == "wrong", caught.value.headline
    assert "expanded[0]: wrong value" in caught.value.headline
    assert "on the default stream too: a wrong answer, not a stream-order fault" in caught.value.headline


def test_a_call_that_raises_is_reported_as_raising():
    class Raising(Unordered):
        def call(self, plan, arena, checked=False, probe="plain"):
            from specverify.judge.calls import CallError

            return Result(np.empty(0, np.uint8), {}, None, CallError("raised", "RuntimeError: boom"), {})

    target = Target(EXPAND, BACKENDS["impl"], "cuda", "x:y")
    ctx = Context(PROFILES["ci"], 0, None, None, Raising(late=True), False, None)
    with pytest.raises(Failure) as caught:
        verify_stream_order(target, EXPAND.worked(), ctx)
    assert "raised RuntimeError: boom" in caught.value.headline and NOT_READY not in caught.value.headline
    assert caught.value.kind == "raised"


def test_kept_readings_are_the_arena_and_nothing_reads_the_device_again():
    plan, arena = materialize.plan(EXPAND, EXPAND.worked())
    bound = materialize.Bound(plan, arena, "torch", "cpu")
    name, slot = next(iter(plan.slots.items()))
    size = slot.end - slot.offset
    bound.device_slots = {name: torch.zeros(size, dtype=torch.uint8)}    # as if on the device, zeroed
    with pytest.raises(ValueError, match="expected every device slot"):
        bound.keep_readings({})
    bound.keep_readings({name: np.full(size, 7, np.uint8)})
    bound.read_back()
    assert (arena[slot.offset:slot.end] == 7).all()


# --- on a GPU ---------------------------------------------------------------------------------------

def outcomes(function: str, tmp_path, isolate: bool) -> dict:
    target = Target(EXPAND, BACKENDS["impl"] if isolate else BACKENDS["torch"], "cuda", f"tests.hostile:{function}")
    plan = session.RunPlan.build("ci", examples=30, findings=tmp_path, checks=("valid", "stream-order"),
                                 isolate=isolate)
    return {o.check: o for o in session.run([target], plan)}


@needs_cuda
@pytest.mark.parametrize("isolate", [False, True])
def test_side_stream_work_not_ordered_before_the_callers_stream_fails(tmp_path, isolate):
    found = outcomes("races_the_callers_stream", tmp_path, isolate)
    assert found["valid"].status == "passed", found["valid"].headline      # the plain call syncs the device
    assert found["stream-order"].status == "failed" and NOT_READY in found["stream-order"].headline, \
        found["stream-order"].headline
    assert found["stream-order"].case is not None


@needs_cuda
@pytest.mark.parametrize("isolate", [False, True])
def test_side_stream_work_ordered_before_the_callers_stream_passes(tmp_path, isolate):
    found = outcomes("orders_its_side_stream", tmp_path, isolate)
    assert [found[c].status for c in ("valid", "stream-order")] == ["passed", "passed"], \
        [found[c].headline for c in ("valid", "stream-order")]


@needs_cuda
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_our_expand_is_ordered_on_the_callers_stream(tmp_path, backend):
    target = Target(EXPAND, BACKENDS[backend], "cuda", EXPAND.impls[backend])
    plan = session.RunPlan.build("ci", examples=30, findings=tmp_path, checks=("stream-order",))
    [outcome] = session.run([target], plan)
    assert outcome.status == "passed", outcome.headline

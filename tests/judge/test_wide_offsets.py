"""The `wide-offsets` check: strided fields spread past 2**31 elements on CUDA. The layout arithmetic, the
choice of calls and the plumbing (a wide storage filled, handed over, copied back and judged) are tested on
the CPU with the wide offset lowered to 2**12 or 2**16; on a GPU, a kernel forming its offsets in 32 bits is
caught and the same kernel in 64 bits passes (tests/planted_wide.py)."""
import itertools

import numpy as np
import pytest
import torch

from specverify.judge import materialize
from specverify.records import backends, registry
from specverify.records.backends import BACKENDS, Target
from specverify.records.domain import Domain, Restriction
from specverify.runs import session, wide_offsets
from specverify.runs.catalogue import CHECKS
from specverify.runs.wide_offsets import strided_fields, wide_calls
from specverify.stages.scv import acceptance_mask_worked

MASK = registry.all_stages()["scv.acceptance_mask"]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("shape,strides,axis", [
    ((3,), (1,), 0), ((1000,), (7,), 0), ((4, 5), (5, 1), 0), ((4, 5), (5, 1), 1), ((5, 4), (1, 5), 0),
    ((3, 2, 7), (14, 7, 1), 0), ((3, 4, 7), (28, 7, 1), 1), ((2, 3, 9), (1, 18, 2), 2),
])
def test_wide_strides_put_the_last_step_past_2_31_without_overlap(shape, strides, axis):
    found, elements = materialize.wide_strides(shape, strides, axis)
    step = found[axis]
    assert step < 2**31 and step % materialize.WIDE_ALIGN == 0
    assert (shape[axis] - 1) * step >= 2**31
    offsets = [sum(i * s for i, s in zip(index, found)) for index in itertools.product(*map(range, shape))]
    assert len(set(offsets)) == len(offsets) and max(offsets) < elements
    inner = [a for a in range(len(shape)) if a != axis]
    first_step = sorted(o for o in offsets if o < step)          # the other axes dense inside a step ...
    assert first_step == list(range(int(np.prod([shape[a] for a in inner]))))
    order = sorted(inner, key=lambda a: strides[a])               # ... in the order of the given strides
    assert [found[a] for a in order] == sorted(found[a] for a in order)


@pytest.mark.parametrize("shape,axis", [((2, 9), 0), ((9, 2), 1), ((0, 5), 1), ((5, 0), 0)])
def test_wide_strides_need_three_steps_and_elements(shape, axis):
    assert materialize.wide_strides(shape, (shape[1] or 1, 1), axis) is None


def test_the_check_asks_cuda_targets_with_strided_fields_only():
    check = CHECKS["wide-offsets"]
    assert "CUDA" in check.applies(Target(MASK, BACKENDS["triton"], "cpu", "x:y"))
    assert check.applies(Target(MASK, BACKENDS["oracle"], "cuda", "x:y")) is not None
    eagle = registry.all_stages()["eagle.prepare_inputs"]       # no field of it may arrive strided
    assert "strided" in check.applies(Target(eagle, BACKENDS["triton"], "cuda", "x:y"))


def calls_under(layout: str | None) -> list[tuple[str, int]]:
    domain = None if layout is None else Domain(MASK.name, (Restriction("layout", "draft_token_ids", layout, "r"),))
    target = Target(MASK, BACKENDS["impl"], "cuda", "x:y", domain=domain)
    plan, _ = materialize.plan(MASK, acceptance_mask_worked())
    return strided_fields(target), wide_calls(target, plan)


def test_wide_calls_follow_the_declared_layouts():
    fields, calls = calls_under(None)
    assert fields == ["draft_token_ids", "target_token_ids"] and [c[:2] for c in calls] == [("draft_token_ids", 0),
                                                                                         ("target_token_ids", 0)]
    fields, calls = calls_under("contiguous")
    assert fields == ["target_token_ids"] and [c[:2] for c in calls] == [("target_token_ids", 0)]
    fields, calls = calls_under("rows")            # a vector of unit step: nothing to widen
    assert fields == ["draft_token_ids", "target_token_ids"] and [c[:2] for c in calls] == [("target_token_ids", 0)]
    (_, _, strides), = calls                       # seven tokens: six steps of 2**31 / 6, rounded up to 16
    assert strides == (-(-(-(-2**31 // 6)) // 16) * 16,)


def run_wide(tmp_path, function: str, device: str = "cuda", stage=MASK, backend: str = "impl",
             checks=("valid", "wide-offsets")):
    target = Target(stage, BACKENDS[backend], device, function)
    plan = session.RunPlan.build("ci", examples=100, findings=tmp_path, checks=checks, isolate=backend == "impl")
    return {o.check: o for o in session.run([target], plan)}


@pytest.fixture
def on_the_cpu(monkeypatch):
    """The check asked of CPU targets, its wide offset lowered to `past` (default 2**12)."""
    def lowered(past: int = 2**12) -> None:
        monkeypatch.setattr(materialize, "WIDE_PAST", past)
        monkeypatch.setattr(wide_offsets, "on_cuda", lambda target: None)
        monkeypatch.setattr(wide_offsets, "device_memory", lambda: wide_offsets.MIN_MEMORY)
    return lowered


STRIDED = [(name, "torch") for name, stage in registry.all_stages().items()
           if not stage.host and "torch" in stage.impls and any(f.strided for f in (*stage.inputs, *stage.outputs))]
# in the interpreter, a few: the strides a wide layout hands over (W, a multiple of 16, on any axis) reach
# Triton's launch whole
INTERPRETED = [("scv.acceptance_mask", "triton"), ("kv.assign_req_to_token", "triton")]


@pytest.mark.parametrize("name,backend", STRIDED + INTERPRETED)
def test_our_kernels_pass_wide_layouts_of_every_strided_field(tmp_path, on_the_cpu, name, backend):
    on_the_cpu()
    stage = registry.all_stages()[name]
    outcomes = run_wide(tmp_path, stage.impls[backend], "cpu", stage, backend, ("wide-offsets",))
    assert outcomes["wide-offsets"].status == "passed", outcomes["wide-offsets"].headline
    assert outcomes["wide-offsets"].measures["wide calls"] >= 1


def test_offsets_formed_too_narrow_are_caught_and_their_wide_twin_passes_on_the_cpu(tmp_path, on_the_cpu):
    on_the_cpu(2**16)
    outcomes = run_wide(tmp_path, "tests.planted_wide:int16_offsets_torch", "cpu")
    assert outcomes["valid"].status == "passed", outcomes["valid"].headline
    wide = outcomes["wide-offsets"]
    assert wide.status == "failed" and "elements apart, the last past 65536" in wide.headline, wide.headline
    assert wide.found_after is not None and wide.case is not None
    outcomes = run_wide(tmp_path, "tests.planted_wide:int64_offsets_torch", "cpu")
    assert {c: o.status for c, o in outcomes.items()} == {"valid": "passed", "wide-offsets": "passed"}


@needs_cuda
def test_a_kernel_with_32_bit_offsets_is_caught_past_2_31_and_its_64_bit_twin_passes(tmp_path):
    if CHECKS["wide-offsets"].applies(Target(MASK, BACKENDS["impl"], "cuda", "x:y")) is not None:
        pytest.skip(CHECKS["wide-offsets"].applies(Target(MASK, BACKENDS["impl"], "cuda", "x:y")))
    outcomes = run_wide(tmp_path, "tests.planted_wide:int32_offsets")
    assert outcomes["valid"].status == "passed", outcomes["valid"].headline
    wide = outcomes["wide-offsets"]
    assert wide.status == "failed" and "past 2147483648" in wide.headline + wide.report, wide.headline
    outcomes = run_wide(tmp_path, "tests.planted_wide:int64_offsets")
    assert {c: o.status for c, o in outcomes.items()} == {"valid": "passed", "wide-offsets": "passed"}, \
        {c: o.headline for c, o in outcomes.items()}
    assert outcomes["wide-offsets"].measures["wide calls"] >= 1


def test_no_room_for_a_wide_storage_breaks_the_check_without_calling(tmp_path, on_the_cpu, monkeypatch):
    """Device memory that other processes hold is the suite's limit: the check breaks, naming it, and the
    implementation is never called with a narrowed argument."""
    on_the_cpu()
    calls = []

    def no_room(self, elements, like):
        self.no_room = f"a wide storage of {elements} elements did not fit on {like.device}"

    monkeypatch.setattr(materialize.Bound, "wide_storage", no_room)
    stage = registry.all_stages()["scv.acceptance_mask"]
    impl = backends.load(stage.impls["torch"])
    target = Target(stage, BACKENDS["torch"], "cpu", "x:y", impl=lambda **kw: calls.append(1) or impl(**kw))
    plan = session.RunPlan.build("ci", examples=20, findings=tmp_path, checks=("wide-offsets",))
    [outcome] = session.run([target], plan)
    assert outcome.status == "error" and "did not fit" in outcome.headline, outcome.headline
    assert "needs that much free device memory" in outcome.headline and not calls

"""Prepared calls (specverify.kernels.triton.prepared): how a recipe finds each launch argument's address
(a keyword argument or a view into one, a scratch tensor, a kept workspace), that it refuses what it
cannot replay, and, on CUDA, that every Triton wrapper's replayed calls leave the bytes its first call
left and the contract requires."""
from __future__ import annotations

import importlib

import pytest
import torch

from specverify import env

env.prepare()
pytest.importorskip("triton")

from specverify.judge.calls import InProcess  # noqa: E402
from specverify.judge.harness import expect, judge  # noqa: E402
from specverify.judge.materialize import plan  # noqa: E402
from specverify.kernels.triton import prepared, workspace  # noqa: E402
from specverify.records.registry import all_stages  # noqa: E402

# Triton wrappers that cannot have a recipe, and why: a host list among their arguments
UNPREPARED = {"output.spec_metadata": "its token ids arrive as a host list (copied to the device per call)"}


class Compiled:
    """A kept CompiledKernel's launcher that notes what it was called with."""

    def __init__(self):
        self.calls = []

    def run(self, *args):
        self.calls.append(args)


class Kernel:
    pre_run_hooks: list = []


def recorded(kwargs, values, made=()):
    """A recipe made from one launch of `values` (a kept kernel) during a call with `kwargs`."""
    recording = prepared.Recording(kwargs)
    recording.scratch.extend(made)
    compiled = Compiled()
    recording.launched(Kernel(), (3,), list(values), (compiled.run, "function", "packed", compiled))
    return recording.recipe(), compiled


def test_a_recipe_fills_each_address_from_its_source_on_every_call():
    a, b = torch.zeros(8, dtype=torch.int64), torch.zeros((4, 6), dtype=torch.int32)
    scratch = torch.empty(5, dtype=torch.int64)
    recipe, compiled = recorded({"a": a, "b": b, "n": 7}, [a, 7, b[1:, 2:], scratch[2:], 16], [scratch])
    a2, b2 = torch.zeros(8, dtype=torch.int64), torch.zeros((4, 6), dtype=torch.int32)
    assert recipe.replay(prepared.tensors_of({"a": a2, "b": b2, "n": 7}), stream=11)
    (call,) = compiled.calls
    assert call[:7] == (3, 1, 1, 11, "function", "packed", None)
    args = call[9:]
    assert args[0] == a2.data_ptr() and args[1] == 7 and args[4] == 16
    assert args[2] == b2.data_ptr() + (6 + 2) * 4                     # the view's offset into b
    assert args[3] not in (scratch.data_ptr() + 16, 0)                  # a fresh scratch tensor, 2 elements in


def test_a_kept_workspace_is_passed_by_its_address():
    keys, counts = workspace.workspace(torch.device("cpu"), 4)
    out = torch.zeros(4, dtype=torch.int64)
    recipe, compiled = recorded({"out": out}, [out, keys, counts])
    assert recipe.replay([out], stream=0)
    assert compiled.calls[0][9:] == (out.data_ptr(), keys.data_ptr(), counts.data_ptr())


def test_a_recipe_launches_nothing_for_an_address_of_another_residue_mod_16():
    arena = torch.zeros(64, dtype=torch.int32)
    recipe, compiled = recorded({"x": arena[:16]}, [arena[:16]])
    assert not recipe.replay([arena[1:17]], stream=0)            # 4 bytes off: Triton specializes it otherwise
    assert recipe.replay([arena[4:20]], stream=0)                # 16 bytes off: the same residue
    assert compiled.calls[0][9] == arena[4:20].data_ptr() and len(compiled.calls) == 1


@pytest.mark.skipif(prepared.TensorGuards is None, reason="this torch has no C++ tensor guard")
def test_a_guard_fits_only_a_call_with_the_recipes_signature():
    x, y = torch.zeros((4, 6), dtype=torch.int32), torch.zeros(8, dtype=torch.int64)
    made = {"x": x, "n": 3, "ratio": 0.0, "y": y, "layout": None}
    entry = prepared.guard(made, 0, recipe=None)

    def fits(device=0, **changed):
        kwargs = {**made, **changed}
        return entry.fits(kwargs, tuple(kwargs.values()), device)

    assert fits() == (x, y)
    assert fits(x=torch.ones((4, 6), dtype=torch.int32)) is not None           # other tensors, same metadata
    for changed in [dict(x=torch.zeros((4, 7), dtype=torch.int32)), dict(x=torch.zeros((4, 6))),
                    dict(x=torch.zeros((6, 4), dtype=torch.int32).t()), dict(y=torch.zeros(16, dtype=torch.int64)[::2]),
                    dict(n=4), dict(n=3.0), dict(n=True), dict(ratio=-0.0), dict(layout=0), dict(y=None)]:
        assert fits(**changed) is None, changed
    assert fits(device=1) is None
    reordered = {"n": 3, "x": x, "ratio": 0.0, "y": y, "layout": None}
    assert entry.fits(reordered, tuple(reordered.values()), 0) is None


def test_a_float_scalar_is_signed_by_its_bits():
    assert prepared.signature({"r": 0.0}) != prepared.signature({"r": -0.0})


@pytest.mark.parametrize("why", ["temporary", "ambiguous", "plain launch"])
def test_a_call_that_cannot_be_replayed_gets_no_recipe(why):
    arena = torch.zeros(64, dtype=torch.int32)
    x, y = arena[:32], arena[16:48]                       # overlapping arguments: a view into both is ambiguous
    if why == "temporary":
        recipe, _ = recorded({"x": x}, [torch.zeros(4)])
    elif why == "ambiguous":
        recipe, _ = recorded({"x": x, "y": y}, [arena[20:24]])
    else:
        recording = prepared.Recording({"x": x})
        recording.launched(Kernel(), (1,), None, None)
        recipe = recording.recipe()
    assert recipe is None


@pytest.mark.skipif(prepared.TensorGuards is None, reason="this torch has no C++ tensor guard")
def test_a_prepared_wrapper_runs_twice_then_replays_found_by_signature_then_by_guard(monkeypatch):
    """The decorator's flow on the CPU (CUDA's queries replaced): the wrapper compiles, then records; the
    third call finds the recipe by its signature, later ones by its guard; another shape goes back to the
    wrapper, and an address of another residue mod 16 to the signature (and a recipe of its own)."""
    compiled, kernel, wrapped = Compiled(), Kernel(), []

    @prepared.prepared
    def stage(*, x, n):
        wrapped.append(n)
        recording = prepared.launching.RECORDER.get()
        if recording is not None:
            recording.launched(kernel, (n,), [x, n], (compiled.run, "function", "packed", compiled))

    signed = []
    on_cpu = lambda kwargs: signed.append(1) or tuple(     # noqa: E731  (prepared.signature without CUDA)
        (k, v.shape, v.stride(), v.dtype, v.device, v.data_ptr() & 15) if isinstance(v, torch.Tensor) else (k, v)
        for k, v in kwargs.items())
    monkeypatch.setattr(prepared, "signature", on_cpu)
    monkeypatch.setattr(prepared, "current_device", lambda: 0)
    monkeypatch.setattr(prepared, "current_stream", lambda device: 5)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    arena = torch.zeros(64, dtype=torch.int32)
    for i in range(5):
        stage(x=arena[16 * (i % 2):][:16], n=3)
    assert wrapped == [3, 3] and len(signed) == 3           # compiled, recorded; by signature, then by guard
    assert [c[9] for c in compiled.calls] == [arena.data_ptr(), arena[16:].data_ptr(), arena.data_ptr()]
    stage(x=arena[:8], n=3)                                 # another shape: no recipe yet, the wrapper runs
    assert wrapped == [3, 3, 3]
    stage(x=arena[1:17], n=3)                               # fits the guard but not the residue
    assert wrapped == [3, 3, 3, 3] and len(compiled.calls) == 3
    stage.forget()
    stage(x=arena[:16], n=3)
    assert wrapped == [3, 3, 3, 3, 3]


def test_only_cuda_tensors_and_scalars_have_a_signature():
    assert prepared.signature({"x": torch.zeros(3), "n": 1}) is None               # a CPU tensor: checked
    assert prepared.signature({"ids": [1, 2]}) is None                               # a host list
    assert prepared.signature({"n": 2, "name": "NHD", "none": None}) is not None
    assert prepared.extent(torch.zeros((3, 4))[:, 1:]) == (2 * 4 + 2 + 1) * 4
    assert prepared.extent(torch.zeros(0)) == 0


def test_a_watched_call_sees_device_work_but_not_views():
    x = torch.zeros(6)
    with prepared.DeviceWork() as quiet:
        x.view(2, 3)[1:].unsqueeze(0)
        torch.empty(3)
    with prepared.DeviceWork() as busy:
        x.add_(1)
    assert not quiet.seen and busy.seen


def triton_targets():
    return [s for s in all_stages().values() if "triton" in s.impls and s.worked is not None]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="prepared calls replay on CUDA only")
@pytest.mark.parametrize("stage", triton_targets(), ids=lambda s: s.name)
def test_replayed_calls_leave_the_bytes_the_contract_requires(stage, monkeypatch):
    module, name = stage.impls["triton"].split(":")
    impl = getattr(importlib.import_module(module), name)
    impl.forget()                            # (an earlier test may have called it with the same signature)
    replays = []
    made = prepared.Recipe.__init__

    def counted(self, *args):                # each recipe's replay (a function written for it), counted
        made(self, *args)
        replay = self.replay
        self.replay = lambda *a: replays.append(1) or replay(*a)

    monkeypatch.setattr(prepared.Recipe, "__init__", counted)
    signed = []
    sign = prepared.signature
    monkeypatch.setattr(prepared, "signature", lambda kwargs: signed.append(1) or sign(kwargs))
    example = stage.worked()
    expected = expect(stage, example)
    caller = InProcess(impl, "torch", "cuda")
    call_plan, arena = plan(stage, example)
    for i in range(5):                       # compiles; makes the recipe; replays it (found by signature, by guard)
        result = caller.call(call_plan, arena.copy())
        failure = judge(stage, example, expected, result, f"{stage.name} call {i + 1}")
        assert failure is None, failure.headline
    assert len(replays) == (0 if stage.name in UNPREPARED else 3), stage.name
    if stage.name not in UNPREPARED and prepared.TensorGuards is not None:
        assert len(signed) == 3, f"{stage.name}: the last two calls should be found by the recipe's guard"

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

from specverify.calls import InProcess  # noqa: E402
from specverify.harness import expect, judge  # noqa: E402
from specverify.kernels.triton import prepared, workspace  # noqa: E402
from specverify.materialize import plan  # noqa: E402
from specverify.registry import all_stages  # noqa: E402

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
    recipe.replay({"a": a2, "b": b2, "n": 7}, stream=11)
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
    recipe.replay({"out": out}, stream=0)
    assert compiled.calls[0][9:] == (out.data_ptr(), keys.data_ptr(), counts.data_ptr())


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
    impl.recipes.clear()                     # (an earlier test may have called it with the same signature)
    replays = []
    replay = prepared.Recipe.replay
    monkeypatch.setattr(prepared.Recipe, "replay", lambda self, *a: replays.append(1) or replay(self, *a))
    example = stage.worked()
    expected = expect(stage, example)
    caller = InProcess(impl, "torch", "cuda")
    call_plan, arena = plan(stage, example)
    for i in range(4):                       # compiles; makes the recipe; replays it twice
        result = caller.call(call_plan, arena.copy())
        failure = judge(stage, example, expected, result, f"{stage.name} call {i + 1}")
        assert failure is None, failure.headline
    assert len(replays) == (0 if stage.name in UNPREPARED else 2), stage.name

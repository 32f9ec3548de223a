"""The Torch backend's cached constants (`kernels/torch/layout.py`): `warm_up(device)` makes every one a
kernel of ours uses, so a call after it adds none (nothing is made inside a measured or captured call);
and a first call with nothing cached makes its constants by device ops only, never from a host list
(a host-to-device copy, a sync on CUDA) nor by reading a device value back (`_local_scalar_dense`).
On the CPU a host list shows as `lift_fresh` of a tensor with dims."""
from __future__ import annotations

import contextlib
import importlib
from unittest import mock

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from torch.utils._python_dispatch import TorchDispatchMode

from specverify.judge.materialize import Bound, plan
from specverify.kernels.torch import layout
from specverify.records import backends, registry
from specverify.records.stage import DrawContext

# every Torch kernel module a record or a dialect names
MODULES = sorted({source.partition(":")[0] for stage in registry.all_stages().values()
                  for source in (*stage.impls.values(), *(s for d in stage.dialects.values() for s in d.impls.values()))
                  if source.startswith("specverify.kernels.torch.")})
STAGES = [s for _, s in sorted(registry.all_stages().items()) if not s.host and "torch" in s.impls]
HOST_OPS = frozenset(("lift_fresh", "lift_fresh_copy", "_local_scalar_dense"))
HOST_INPUT = {"output.spec_metadata"}   # its input is a host list: one copy of what it computes from it, by contract


class _AllOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        out = func(*args, **(kwargs or {}))
        # a 0-dim lift is the host scalar of `x[i] = 3`, which CUDA fills from (no copy); one with dims is a
        # host list made a tensor
        if not (name.startswith("lift_fresh") and out.dim() == 0):
            self.names.append(name)
        return out


def call(stage, example) -> list[str]:
    """Every aten op one call of the stage's Torch kernel dispatches, value checks off (as on CUDA outside
    checked mode: they read values back on purpose)."""
    impl = backends.load(stage.impls["torch"])
    with contextlib.ExitStack() as patches:
        for name in MODULES:
            module = importlib.import_module(name)
            patches.enter_context(mock.patch.object(module, "reads_values", lambda _: False))
        call_plan, arena = plan(stage, example)
        kwargs = Bound(call_plan, arena, "torch", "cpu").kwargs
        with _AllOps() as recorder:
            impl(**kwargs)
    return recorder.names


def cache_state() -> tuple:
    return ({key: value.numel() for key, value in layout._IOTAS.items()}, set(layout._SCALARS),
            set(layout._CONSTANTS), {key: value.numel() for key, value in layout._ZEROS.items()},
            {key: value.shape[0] for key, value in layout._SPAN_CODES.items()})


def examples(stage):
    """The worked example, then a few small drawn valid examples."""
    yield stage.worked()
    drawn = []

    @settings(max_examples=4, derandomize=True, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(stage.valid(DrawContext(small=True)))
    def collect(example):
        drawn.append(example)

    collect()
    yield from drawn


@pytest.fixture
def empty_caches():
    with mock.patch.object(layout, "_IOTAS", {}), mock.patch.object(layout, "_SCALARS", {}), \
            mock.patch.object(layout, "_CONSTANTS", {}), mock.patch.object(layout, "_ZEROS", {}), \
            mock.patch.object(layout, "_SPAN_CODES", {}):
        yield


def test_warm_up_makes_every_listed_constant(empty_caches):
    layout.warm_up(torch.device("cpu"))
    iotas, scalars, constants, zeros, spans = cache_state()
    for runs in (iotas, zeros):
        assert all(n >= layout.WARM_IOTA for n in runs.values()) and len(runs) == len(layout.INDEX_DTYPES)
    assert len(constants) == len(layout.CONSTANTS)
    assert len(scalars) == (len(layout.INDEX_DTYPES) * len(layout.SCALARS["int"])
                            + len(layout.FLOAT_DTYPES) * len(layout.SCALARS["float"]))
    assert list(spans.values()) == [layout.WARM_SPAN]
    layout.warm_up("cpu")
    assert cache_state() == (iotas, scalars, constants, zeros, spans)   # idempotent


def test_scalar_refuses_a_value_outside_the_table():
    like = torch.empty(0)
    with pytest.raises(ValueError, match="scalar: value must be one of"):
        layout.scalar(7, like)
    with pytest.raises(ValueError, match="scalar: value must be one of"):
        layout.scalar(1, like, torch.float32)    # an int where the float table is meant


def test_span_codes_flag_each_class_and_grow(empty_caches):
    like = torch.empty(0)
    flags = (layout.SPAN_LIVE, layout.SPAN_REJECTED, layout.SPAN_PARALLEL)
    for p in (1, 3, layout.WARM_SPAN + 5):   # the last grows the table past what warm_up makes
        codes = layout.span_codes(p, like).clone()
        live, rejected, parallel = (layout.span_flag(codes, flag).tolist() for flag in flags)
        assert live == [False] + [True] * (p + 2)
        assert rejected == [False] * (p + 2) + [True]
        assert parallel == [False] * 3 + [True] * (p - 1) + [False]


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_no_constant_is_made_after_warm_up(stage, empty_caches):
    layout.warm_up("cpu")
    before = cache_state()
    for example in examples(stage):
        call(stage, example)
        assert cache_state() == before, f"{stage.name}: a call made a cached constant warm_up does not make"


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_first_call_copies_nothing_from_the_host(stage, empty_caches):
    for example in examples(stage):
        for cache in (layout._IOTAS, layout._SCALARS, layout._CONSTANTS, layout._ZEROS, layout._SPAN_CODES):
            cache.clear()
        host = sorted(HOST_OPS.difference(("lift_fresh",) if stage.name in HOST_INPUT else ())
                      .intersection(call(stage, example)))
        assert not host, f"{stage.name}: a first call made a host tensor or read a device value: {host}"

"""The lean launch path (specverify.kernels.triton.launch) and the memoized argument checks
(specverify.kernels.checks.validate): the launch key separates every specialization Triton makes, the
launcher falls back to `kernel[grid]` in the interpreter, and memoized checks refuse bad input with the
check's own words on every call."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specverify import env

env.prepare()            # the interpreter flag must be set before any kernel is defined
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from specverify.kernels import checks  # noqa: E402
from specverify.kernels.checks import validate  # noqa: E402
from specverify.kernels.triton import launch  # noqa: E402
from specverify.materialize import Bound, plan  # noqa: E402
from specverify.stages import stop  # noqa: E402


def specialized(x_ptr, n, y_ptr, BLOCK: tl.constexpr):
    pass


def binder():
    """The binder Triton itself builds for `specialized` on an sm_90 target (no GPU needed)."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend
    from triton.runtime.jit import JITFunction, create_function_from_signature

    fn = JITFunction(specialized)
    return create_function_from_signature(fn.signature, fn.params, CUDABackend(GPUTarget("cuda", 90, 32)))


def key(*args, context=(0, (False, None)), **meta):
    return launch.launch_key(binder(), context, *args, **meta)[0]


@pytest.fixture(scope="module")
def tensors():
    base = torch.zeros(64, dtype=torch.int32)
    return {"aligned": base[:32], "aligned2": base[4:36], "misaligned": base[1:33],
            "int64": torch.zeros(8, dtype=torch.int64), "float": torch.zeros(8, dtype=torch.float32)}


def test_key_separates_what_triton_specializes_on(tensors):
    t = tensors
    base = key(t["aligned"], 7, t["aligned"], BLOCK=16)
    differing = {
        "pointer alignment": key(t["misaligned"], 7, t["aligned"], BLOCK=16),
        "dtype": key(t["int64"], 7, t["aligned"], BLOCK=16),
        "float dtype": key(t["float"], 7, t["aligned"], BLOCK=16),
        "int == 1": key(t["aligned"], 1, t["aligned"], BLOCK=16),
        "int divisible by 16": key(t["aligned"], 32, t["aligned"], BLOCK=16),
        "int64 range": key(t["aligned"], 2**31 + 7, t["aligned"], BLOCK=16),
        "None argument": key(t["aligned"], 7, None, BLOCK=16),
        "constexpr": key(t["aligned"], 7, t["aligned"], BLOCK=32),
        "device": key(t["aligned"], 7, t["aligned"], context=(1, (False, None)), BLOCK=16),
        "debug knob": key(t["aligned"], 7, t["aligned"], context=(0, (True, None)), BLOCK=16),
        "extra option": key(t["aligned"], 7, t["aligned"], BLOCK=16, num_warps=8),
    }
    for what, other in differing.items():
        assert other != base, f"the launch key ignores {what}"
    assert len(set(differing.values())) == len(differing), "two different specializations share a key"


def test_key_is_shared_by_calls_triton_compiles_alike(tensors):
    t = tensors
    base = key(t["aligned"], 7, t["aligned"], BLOCK=16)
    assert key(t["aligned2"], 3, t["aligned"], BLOCK=16) == base       # other aligned pointer, other int
    assert hash(base) == hash(key(t["aligned"], 7, t["aligned"], BLOCK=16))


@triton.jit
def ramp_kernel(out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, i * 3, mask=i < n)


@pytest.mark.skipif(not env.triton_interpreted(), reason="the interpreter fallback is a CPU path")
def test_launcher_falls_back_to_kernel_grid_in_the_interpreter():
    lean = launch.Launcher(ramp_kernel)
    out = torch.full((10,), -1, dtype=torch.int32)
    lean[(3,)](out, 10, BLOCK=4)
    assert out.tolist() == [3 * i for i in range(10)]
    assert launch.state(ramp_kernel) is None          # interpreted: always `kernel[grid]`


def test_host_sizes_equal_triton():
    for n in range(-40, 5000):
        assert launch.next_power_of_2(n) == triton.next_power_of_2(n), n
        assert launch.cdiv(n, 7) == triton.cdiv(n, 7), n


def counting(calls: list):
    def check(a, n, values=True):
        calls.append(values)
        if a.dtype != torch.int32:
            raise TypeError(f"a: dtype must be int32, got {str(a.dtype).removeprefix('torch.')}")
        if a.shape != (n,):
            raise ValueError(f"a: shape must be [{n}], got {list(a.shape)}")
        return n * 2
    return check


def test_validate_memoizes_passing_checks_only():
    calls: list = []
    check = counting(calls)
    a = torch.zeros(4, dtype=torch.int32, device="meta")
    assert validate(check, a, 4, values=False) == 8
    assert validate(check, torch.zeros(4, dtype=torch.int32, device="meta"), 4, values=False) == 8
    assert calls == [False]                            # the second call was the memo's
    assert validate(check, a, 4, values=True) == 8 and calls == [False, True]   # value checks always run
    for _ in range(2):                                 # refused every time, in the check's words
        with pytest.raises(TypeError, match="a: dtype must be int32, got int64"):
            validate(check, torch.zeros(4, dtype=torch.int64, device="meta"), 4, values=False)
        with pytest.raises(ValueError, match=r"a: shape must be \[5\], got \[4\]"):
            validate(check, a, 5, values=False)
    assert calls.count(False) == 5


def test_signature_separates_what_checks_read():
    sig = checks.signature
    assert sig(1) != sig(True) != sig(1.0)
    assert sig([1, 2]) != sig([1, True]) != sig((1, 2))
    assert sig({"a": 1}) != sig({"b": 1})
    with pytest.raises(TypeError):
        sig(np.int64(3))                               # unknown kinds are checked, never memoized


def on_meta(kwargs):
    return {k: torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
            if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


def test_wrapper_refuses_bad_input_after_a_memoized_pass(monkeypatch):
    """A Triton wrapper on meta tensors (no value checks, as on CUDA), launches stubbed out: a good call
    is memoized, and bad shapes and dtypes are still refused with the field named, every call."""
    from specverify.kernels.triton import stop as kernels

    monkeypatch.setattr(launch, "launch", lambda *args, **meta: None)
    call_plan, arena = plan(stop.SPEC_STOPPING, stop.SPEC_STOPPING.worked())
    good = on_meta(Bound(call_plan, arena, "torch", "cpu").kwargs)
    kernels.spec_stopping(**good)
    kernels.spec_stopping(**good)
    bad_dtype = dict(good, stop_pos=good["stop_pos"].to(torch.int16))
    bad_shape = dict(good, num_appendable=good["num_appendable"][:-1])
    for _ in range(2):
        with pytest.raises(TypeError, match="stop_pos"):
            kernels.spec_stopping(**bad_dtype)
        with pytest.raises(ValueError, match="num_appendable"):
            kernels.spec_stopping(**bad_shape)

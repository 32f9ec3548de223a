"""The lean launch path (specverify.kernels.triton.launch) and the memoized argument checks
(specverify.kernels.validation.validate): the launch key separates every specialization Triton makes, the
launcher falls back to `kernel[grid]` in the interpreter, and memoized checks refuse bad input with the
check's own words on every call."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

from specverify import env

env.prepare()            # the interpreter flag must be set before any kernel is defined
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from specverify.judge.materialize import Bound, plan  # noqa: E402
from specverify.kernels import validation  # noqa: E402
from specverify.kernels.triton import launch  # noqa: E402
from specverify.kernels.validation import validate  # noqa: E402
from specverify.records.registry import all_stages  # noqa: E402


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


class Compiled:
    """Stands for a CompiledKernel: records the launches made through its `run`."""
    function, packed_metadata = "function handle", "packed metadata"

    def __init__(self):
        self.launches = []

    def run(self, *args):
        self.launches.append(args)

    def launch_metadata(self, grid, stream, *args):
        return ("metadata", grid, stream)


class Jit:
    """Stands for a JITFunction: `[grid](...)` records a plain launch and returns its Compiled."""
    pre_run_hooks: list = []

    def __init__(self):
        self.compiled, self.plain = Compiled(), []

    def __getitem__(self, grid):
        return lambda *args, **meta: self.plain.append((grid, args, meta)) or self.compiled


class State(launch.Kernel):
    """The fast-path state of a Jit on device 0, stream 7 (no driver needed)."""

    def __init__(self, fn):
        self.fn, self.binders, self.launches, self.instrumentation = fn, {0: binder()}, {}, False
        self.device, self.stream = (lambda: 0), (lambda device: 7)

    def triton_key(self, device, *args, **meta):
        return {"triton's key": self.fn.compiled}, "triton's key"


def test_launch_keeps_the_compiled_kernel_and_calls_it_for_the_same_key(tensors, monkeypatch):
    t = tensors
    jit = Jit()
    monkeypatch.setitem(launch._kernels, jit, State(jit))
    launch.launch(jit, (3,), t["aligned"], 5, t["aligned"], BLOCK=16)          # compiles, kept
    launch.launch(jit, (3, 2), t["aligned2"], 9, t["aligned"], BLOCK=16)       # same key: the kept kernel
    assert len(jit.plain) == 1
    assert jit.compiled.launches == [(3, 2, 1, 7, "function handle", "packed metadata", None, None, None,
                                      t["aligned2"], 9, t["aligned"], 16)]
    launch.launch(jit, (3,), t["misaligned"], 9, t["aligned"], BLOCK=16)       # another specialization
    with launch.plain_launch():
        launch.launch(jit, (3,), t["aligned"], 5, t["aligned"], BLOCK=16)
    assert len(jit.plain) == 3 and len(jit.compiled.launches) == 1
    hook = lambda metadata: None  # noqa: E731
    monkeypatch.setattr(triton.knobs.runtime, "launch_enter_hook", hook)
    launch.launch(jit, (4,), t["aligned"], 5, t["aligned"], BLOCK=16)           # a hook: metadata and hooks
    assert jit.compiled.launches[-1][4:9] == ("function handle", "packed metadata", ("metadata", (4,), 7), hook,
                                              triton.knobs.runtime.launch_exit_hook)


def test_launch_goes_plain_for_good_when_triton_keys_the_kernel_otherwise(tensors, monkeypatch):
    t = tensors
    jit = Jit()
    state = State(jit)
    state.triton_key = lambda device, *args, **meta: ({}, "another key")
    monkeypatch.setitem(launch._kernels, jit, state)
    for _ in range(2):
        launch.launch(jit, (1,), t["aligned"], 5, t["aligned"], BLOCK=16)
    assert len(jit.plain) == 2 and not jit.compiled.launches and launch._kernels[jit] is None


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
    sig = validation.signature
    assert sig(1) != sig(True) != sig(1.0)
    assert sig([1, 2]) != sig([1, True]) != sig((1, 2))
    assert sig({"a": 1}) != sig({"b": 1})
    with pytest.raises(TypeError):
        sig(np.int64(3))                               # unknown kinds are checked, never memoized


def on_meta(kwargs):
    return {k: torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
            if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}


OTHER_DTYPE = {torch.int32: torch.int64, torch.int64: torch.int32, torch.float32: torch.float64,
               torch.float64: torch.float32, torch.bool: torch.uint8, torch.uint8: torch.bool}


def mutations(t: torch.Tensor):
    """The tensor with another dtype, and with one row fewer (or one more when it has none)."""
    yield t.to(OTHER_DTYPE.get(t.dtype, torch.int32))
    if t.dim() == 0:
        return
    rows = t.shape[0] - 1 if t.shape[0] else 1
    yield torch.empty((rows, *t.shape[1:]), dtype=t.dtype, device="meta")


def outcome(impl, kwargs):
    try:
        impl(**kwargs)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return None


TRITON_STAGES = [s for s in all_stages().values() if "triton" in s.impls and s.worked is not None]


@pytest.mark.parametrize("stage", TRITON_STAGES, ids=lambda s: s.name)
def test_memoized_checks_refuse_what_full_checks_refuse(stage, monkeypatch):
    """Each Triton wrapper on meta tensors (no value checks, as on CUDA outside checked mode), launches
    stubbed out: after its worked example passed (and was memoized), every one-field dtype or shape
    change of it meets, on two calls, exactly what the unmemoized checks say."""
    module_name, name = stage.impls["triton"].split(":")
    module = importlib.import_module(module_name)
    impl = getattr(module, name)
    monkeypatch.setattr(launch, "launch", lambda *args, **meta: None)
    call_plan, arena = plan(stage, stage.worked())
    good = on_meta(Bound(call_plan, arena, "torch", "cpu").kwargs)
    assert outcome(impl, good) is None
    refused = 0
    for field, value in good.items():
        if not isinstance(value, torch.Tensor):
            continue
        for bad in mutations(value):
            kwargs = dict(good, **{field: bad})
            memoized = [outcome(impl, kwargs), outcome(impl, kwargs)]
            monkeypatch.setattr(module, "validate", lambda check, *args, values: check(*args, values=values))
            full = outcome(impl, kwargs)
            monkeypatch.setattr(module, "validate", validate)
            assert memoized == [full, full], f"{field} as {bad.dtype}{list(bad.shape)}"
            refused += full is not None
    assert refused, "no change of the worked example was refused"

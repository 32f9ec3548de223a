"""Fixed cases of the `kv` family: the fp8 rounding rule (ties to even, saturation, NaN, signed zeros),
every f16 and bf16 bit pattern converted alike on every backend, the worked example by hand, and what
may and may not share a slot."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from specverify import backends
from specverify.backends import BACKENDS, Target
from specverify.harness import Failure, oracle_outputs
from specverify.materialize import POISON_A
from specverify.session import verify_example as verify
from specverify.oracles.kv import FP8, fp8_code, fp8_value
from specverify.stage import Buffer, Example
from specverify.stages import kv
from specverify.strategies.kv import commit_worked

STAGE = kv.COMMIT_DRAFT


def targets():
    return [backends.target(STAGE, b, d) for _, b, d, why in backends.matrix([STAGE]) if why is None]


def cache_bytes(example: Example) -> dict[str, np.ndarray]:
    """Every available backend must match the oracle on `example`; the oracle's caches as bytes."""
    for target in targets():
        verify(target, example)
    return {name: view.view(np.uint8) for name, view in oracle_outputs(STAGE, example).items()}


def commit(key: np.ndarray, cache_dtype: str, scale=1.0, layout="NHD", accepted=None, slots=None) -> Example:
    """All T tokens written to slots 0..T-1 of a cache of blocks of 4 slots (unless told otherwise)."""
    tokens, heads, dim = key.shape
    slots = np.arange(tokens) if slots is None else np.asarray(slots)
    blocks = max(1, -(-int(slots.max(initial=0) + 1) // 4))
    shape = (blocks, 4, heads, dim) if layout == "NHD" else (blocks, heads, 4, dim)
    scale = np.atleast_1d(np.asarray(scale, np.float32)) if cache_dtype in FP8 else None
    return Example("valid", inputs={
        "key": key, "value": key, "slot_mapping": slots.astype(np.int64),
        "accepted_mask": np.ones(tokens, bool) if accepted is None else np.asarray(accepted), "layout": layout,
        "k_scale": scale, "v_scale": scale}, outputs={"key_cache": Buffer(shape, cache_dtype),
                                                     "value_cache": Buffer(shape, cache_dtype)})


@pytest.mark.parametrize("name", sorted(FP8))
def test_decoding_agrees_with_ml_dtypes(name):
    fmt = FP8[name]
    decoded = np.arange(fmt.max_code + 1, dtype=np.uint8).view(getattr(ml_dtypes, name)).astype(np.float64)
    assert [fp8_value(c, fmt) for c in range(fmt.max_code + 1)] == decoded.tolist()


@pytest.mark.parametrize("name", sorted(FP8))
def test_rounding_inside_the_range_agrees_with_ml_dtypes(name):
    # ml_dtypes rounds to nearest even too; it differs only beyond the range (NaN or inf, not saturation)
    xs = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    xs = xs[np.isfinite(xs) & (np.abs(xs) < fp8_value(FP8[name].max_code, FP8[name]))]
    expected = xs.astype(getattr(ml_dtypes, name)).view(np.uint8)
    assert [fp8_code(float(x), name) for x in xs] == expected.tolist()


@pytest.mark.parametrize("x, name, code", [
    (0.53125, "float8_e4m3fn", 0x30),         # halfway between 0.5 (0x30) and 0.5625 (0x31): the even 0x30
    (0.59375, "float8_e4m3fn", 0x32),         # halfway between 0.5625 (0x31) and 0.625 (0x32): the even 0x32
    (464.0, "float8_e4m3fn", 0x7E),           # halfway to 480 (no such value): saturates to 448
    (1e30, "float8_e4m3fn", 0x7E), (-math.inf, "float8_e4m3fn", 0xFE), (math.inf, "float8_e5m2", 0x7B),
    (61440.0, "float8_e5m2", 0x7B),           # where e5m2 would round to infinity: saturates to 57344
    (math.nan, "float8_e4m3fn", 0x7F), (-math.nan, "float8_e5m2", 0x7F),
    (-0.0, "float8_e4m3fn", 0x80), (2.0 ** -10, "float8_e4m3fn", 0x00),   # half the smallest subnormal: to 0
    (3 * 2.0 ** -10, "float8_e4m3fn", 0x02),  # 1.5 subnormal steps: the even 2 steps
    (-(2.0 ** -17), "float8_e5m2", 0x80),     # half of e5m2's smallest subnormal, negative: -0
])
def test_rounding_rule(x, name, code):
    assert fp8_code(x, name) == code


@pytest.mark.parametrize("cache_dtype", sorted(FP8))
@pytest.mark.parametrize("source", ["float16", "bfloat16"])
def test_every_source_bit_pattern_gives_the_same_byte_everywhere(source, cache_dtype):
    """All 65536 patterns, NaNs and infinities included, through each backend's conversion."""
    key = np.arange(1 << 16, dtype=np.uint16).view(source).reshape(256, 4, 64)
    cache_bytes(commit(key, cache_dtype))


@pytest.mark.parametrize("cache_dtype", sorted(FP8))
def test_float32_near_every_rounding_boundary(cache_dtype):
    """Each fp8 midpoint and its float32 neighbours, per-token scales of one."""
    fmt = FP8[cache_dtype]
    mids = np.array([(fp8_value(c, fmt) + fp8_value(c + 1, fmt)) / 2 for c in range(fmt.max_code)], np.float32)
    values = np.concatenate([mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))])
    values = np.concatenate([values, -values])
    key = np.resize(values, 8 * 2 * (-(-len(values) // 16))).astype(np.float32).reshape(-1, 2, 8)
    cache_bytes(commit(key, cache_dtype, scale=np.ones(len(key), np.float32), layout="HND"))


def test_worked_example_by_hand():
    out = cache_bytes(commit_worked())
    key, value = out["key_cache"].reshape(4, 2), out["value_cache"].reshape(4, 2)
    assert key[3].tolist() == [0x30, 0x7E]     # 0.53125 -> 0.5 (a tie, to even); 500 saturates to 448
    assert value[3].tolist() == [0xA8, 0xF8]   # -0.265625 -> -0.25 (a tie, to even); -250 -> -256
    assert (key[:3] == POISON_A).all() and (value[:3] == POISON_A).all()   # slot 0 is a rejected token's


def test_same_dtype_copies_nan_payloads():
    bits = np.array([0x7C01, 0xFE00, 0x8000, 0x3C00], np.uint16)
    key = bits.view(np.float16).reshape(2, 1, 2)
    out = cache_bytes(commit(key, "float16", layout="HND"))
    assert out["key_cache"].view(np.uint16)[0, 0, :2].tolist() == [[0x7C01, 0xFE00], [0x8000, 0x3C00]]


def test_nothing_written_leaves_the_caches_untouched():
    key = np.ones((3, 2, 4), np.float32)
    out = cache_bytes(commit(key, "float8_e5m2", accepted=[False, False, True], slots=[0, 1, -1]))
    assert (out["key_cache"] == POISON_A).all()


def test_rejected_tokens_may_share_a_written_slot():
    key = np.arange(24, dtype=np.float32).reshape(3, 2, 4)
    out = cache_bytes(commit(key, "float32", accepted=[False, True, False], slots=[1, 1, 1]))
    assert out["key_cache"].view(np.float32)[0, 1].tolist() == key[1].tolist()


@pytest.mark.parametrize("target", targets(), ids=lambda t: f"{t.backend}-{t.device}")
def test_two_accepted_tokens_on_one_slot_are_refused(target):
    key = np.ones((2, 1, 1), np.float32)
    ex = commit(key, "float32", slots=[2, 2])
    ex.tier, ex.bad_field, ex.rule = "invalid", "slot_mapping", "no slot written twice"
    verify(target, ex)


def test_a_kernel_writing_rejected_tokens_is_caught():
    """A Torch kernel that ignores accepted_mask: the rejected token's slot gets written."""
    key = np.arange(8, dtype=np.float32).reshape(2, 1, 4)
    ex = commit(key, "float8_e4m3fn", accepted=[True, False], slots=[0, 1])
    torch_target = backends.target(STAGE, "torch", "cpu")

    def ignores_mask(**kw):
        kw["accepted_mask"] = kw["accepted_mask"] | True
        return torch_target.load()(**kw)

    with pytest.raises(Failure, match="stray write"):
        verify(Target(STAGE, BACKENDS["impl"], "cpu", "test", ignores_mask), ex)

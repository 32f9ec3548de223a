"""Oracle of the `kv` family: committing accepted draft keys and values to the paged KV cache.

Loop-level and obviously correct; destination passing; invalid input refused with an error naming the
field. `check_commit_draft` is shared with the production kernels (`values=False` skips the checks
that read array contents). NumPy has no bfloat16 or fp8: those arrays are ml_dtypes arrays, and this
module only ever reads or writes their bits; the fp8 rounding is written out below (`fp8_code`).

Choices where STAGES.md is silent:
- the caches are destination buffers: only the written slots are defined, every other byte (other
  slots, other blocks, the gaps of a strided cache) must keep what the caller had there;
- two tokens that are both written may not name the same slot (the result would depend on which store
  lands last): refused as invalid input. Tokens not written may share any slot;
- fp8 NaN is one pattern, 0x7F, whatever the sign or payload of the NaN it comes from (f32 division
  does not carry a NaN's sign the same way on every device); zeros keep their sign;
- same-dtype caches copy the source bits as they are (NaN payloads included) and never read the
  scales, which may then be None; fp8 caches need both scales, float32, of shape [1] or [T] each.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specverify.oracles.checks import dtype_name, need_at_least, need_dtype, need_ndim

SOURCES = ("float16", "bfloat16", "float32")
LAYOUTS = ("NHD", "HND")
NAN_CODE = 0x7F
BITS = {"float16": "uint16", "bfloat16": "uint16", "float32": "uint32", "float8_e4m3fn": "uint8",
        "float8_e5m2": "uint8"}


def need_sized(name: str, a, shape: tuple[int, ...], source: str) -> None:
    """A shape check that also names where the size comes from, so that of two fields disagreeing on a
    size, the error names both."""
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name}: shape must be {list(shape)} ({source}), got {list(a.shape)}")


@dataclass(frozen=True)
class Fp8Format:
    mantissa: int      # stored mantissa bits
    bias: int          # exponent bias
    max_code: int      # code of the largest finite value (the sign bit clear)


FP8 = {"float8_e4m3fn": Fp8Format(3, 7, 0x7E),    # largest finite 448; 0x7F is NaN, no infinity
       "float8_e5m2": Fp8Format(2, 15, 0x7B)}     # largest finite 57344; 0x7C is infinity


def fp8_value(code: int, fmt: Fp8Format) -> float:
    """The value of a non-negative finite fp8 code (sign bit clear, code <= max_code)."""
    exponent, fraction = code >> fmt.mantissa, code & ((1 << fmt.mantissa) - 1)
    if exponent == 0:
        return math.ldexp(fraction, 1 - fmt.bias - fmt.mantissa)
    return math.ldexp((1 << fmt.mantissa) + fraction, exponent - fmt.bias - fmt.mantissa)


@lru_cache(maxsize=None)
def fp8_codes(name: str) -> dict[float, int]:
    """Every non-negative finite value of the format, to its code."""
    fmt = FP8[name]
    return {fp8_value(code, fmt): code for code in range(fmt.max_code + 1)}


def fp8_code(x: float, name: str) -> int:
    """The fp8 byte of the float32 value x: round to nearest, ties to even, saturating.

    |x| is rounded at the format's spacing in x's binade (the subnormal spacing below the smallest
    normal): x / spacing is exact (a power of two) and Python's round() breaks ties to the even
    integer, which is the even mantissa. A magnitude that rounds beyond the largest finite value, and
    infinity, becomes the largest finite value with x's sign. NaN becomes 0x7F.
    """
    fmt = FP8[name]
    if math.isnan(x):
        return NAN_CODE
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    magnitude = abs(x)
    largest = fp8_value(fmt.max_code, fmt)
    if magnitude >= largest:
        return sign | fmt.max_code
    if magnitude == 0:
        return sign
    exponent = max(math.frexp(magnitude)[1] - 1, 1 - fmt.bias)   # leading bit 2**exponent, or subnormal
    spacing = math.ldexp(1.0, exponent - fmt.mantissa)
    rounded = round(magnitude / spacing) * spacing
    return sign | fp8_codes(name)[min(rounded, largest)]


@lru_cache(maxsize=1 << 16)
def fp8_code_of_bits(bits: int, name: str) -> int:
    """`fp8_code` of the float32 with these bits (cached by bits: 0.0 and -0.0 stay apart)."""
    return fp8_code(float(np.array(bits, np.uint32).view(np.float32)), name)


def check_commit_draft(key, value, slot_mapping, accepted_mask, layout, k_scale, v_scale, key_cache, value_cache,
                       values: bool = True) -> tuple[int, int]:
    """The argument checks of `commit_draft`; returns (num_blocks, block_size)."""
    need_dtype("key", key, *SOURCES)
    need_ndim("key", key, 3)
    tokens, heads, dim = key.shape
    need_dtype("value", value, dtype_name(key))
    need_sized("value", value, tuple(key.shape), "key's shape")
    need_dtype("slot_mapping", slot_mapping, "int32", "int64")
    need_sized("slot_mapping", slot_mapping, (tokens,), "T = len(key)")
    need_dtype("accepted_mask", accepted_mask, "bool")
    need_sized("accepted_mask", accepted_mask, (tokens,), "T = len(key)")
    if layout not in LAYOUTS:
        raise ValueError(f"layout: must be 'NHD' or 'HND', got {layout!r}")
    need_dtype("key_cache", key_cache, dtype_name(key), *FP8)
    need_ndim("key_cache", key_cache, 4)
    num_blocks, block_size = key_cache.shape[0], key_cache.shape[1 if layout == "NHD" else 2]
    expected = (num_blocks, block_size, heads, dim) if layout == "NHD" else (num_blocks, heads, block_size, dim)
    need_sized("key_cache", key_cache, expected, f"H, D of key in layout {layout}")
    need_dtype("value_cache", value_cache, dtype_name(key_cache))
    need_sized("value_cache", value_cache, expected, "key_cache's shape")
    fp8 = dtype_name(key_cache) in FP8
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        if scale is None:
            if fp8:
                raise ValueError(f"{name}: an fp8 cache needs its scale (float32 [1] or [T])")
            continue
        need_dtype(name, scale, "float32")
        if tuple(scale.shape) not in ((1,), (tokens,)):
            raise ValueError(f"{name}: shape must be [1] or [T={tokens}] (T = len(key)), got {list(scale.shape)}")
    if values and tokens:
        need_at_least("slot_mapping", slot_mapping, -1)
        capacity = num_blocks * block_size
        highest = int(slot_mapping.max())
        if highest >= capacity:
            raise ValueError(f"slot_mapping: slot {highest} is beyond the cache's {capacity} slots")
        seen = set()
        for slot, accepted in zip(slot_mapping.tolist(), accepted_mask.tolist()):
            if accepted and slot >= 0:
                if slot in seen:
                    raise ValueError(f"slot_mapping: slot {slot} is written by two accepted tokens")
                seen.add(slot)
    return num_blocks, block_size


def commit_draft(*, key, value, slot_mapping, accepted_mask, layout, k_scale, v_scale, key_cache, value_cache):
    """Write each accepted token that has a slot into both caches; nothing else is written.

    Token t is written when accepted_mask[t] and slot_mapping[t] >= 0; its slot is block
    slot // block_size, offset slot % block_size, and its [H, D] rows go to key_cache[block, offset]
    (NHD) or key_cache[block, :, offset] (HND), and the same for the value. A cache of the source's
    dtype receives the source bits. An fp8 cache receives `fp8_code(source / scale)`, the quotient
    of the float32 source and scale (k_scale for keys, v_scale for values; [1] or the token's entry
    of [T]) computed in float32 with IEEE rounding.
    """
    _, block_size = check_commit_draft(key, value, slot_mapping, accepted_mask, layout, k_scale, v_scale,
                                       key_cache, value_cache)
    cache_dtype = dtype_name(key_cache)
    for source, scale, cache in ((key, k_scale, key_cache), (value, v_scale, value_cache)):
        bits = cache.view(BITS[cache_dtype])
        for t in range(source.shape[0]):
            slot = int(slot_mapping[t])
            if not accepted_mask[t] or slot < 0:
                continue
            block, offset = divmod(slot, block_size)
            for h in range(source.shape[1]):
                row = bits[block, offset, h] if layout == "NHD" else bits[block, h, offset]
                if cache_dtype not in FP8:
                    row[:] = source[t, h].view(BITS[cache_dtype])
                    continue
                divisor = np.float32(scale[t if len(scale) > 1 else 0])
                with np.errstate(all="ignore"):
                    quotient = source[t, h].astype(np.float32) / divisor
                for d, quotient_bits in enumerate(quotient.view(np.uint32).tolist()):
                    row[d] = fp8_code_of_bits(quotient_bits, cache_dtype)

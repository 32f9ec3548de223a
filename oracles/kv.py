"""Oracle of the `kv` family: committing accepted draft keys and values to the paged KV cache, and the
KV bookkeeping of tree verification (the accepted nodes' slots compacted; a request's new slots written
into the pool table).

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
  scales, which may then be None; fp8 caches need both scales, float32, of shape [1] or [T] each;
- `assign_req_to_token`: a slot must lie in [0, 2**31) (a KV index stored in an int32 table); only the
  Σlen slots the ranges take are checked, the rest of out_cache_loc may hold anything; two requests may
  name one table row when their ranges are disjoint (empty ranges overlap nothing).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from specverify.oracles.arguments import dtype_name, need_at_least, need_at_most, need_dtype, need_ndim

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


SLOT_LIMIT = 2**31   # slots are stored into an int32 table


def check_accept_out_cache_loc(accept_index, out_cache_loc, accepted_out_cache_loc, values: bool = True) -> None:
    """The argument checks of `accept_out_cache_loc`."""
    need_dtype("accept_index", accept_index, "int32")
    need_ndim("accept_index", accept_index, 2)
    need_dtype("out_cache_loc", out_cache_loc, "int32", "int64")
    need_ndim("out_cache_loc", out_cache_loc, 1)
    need_dtype("accepted_out_cache_loc", accepted_out_cache_loc, dtype_name(out_cache_loc),
               source="the dtype of out_cache_loc")
    batch, width = accept_index.shape
    need_sized("accepted_out_cache_loc", accepted_out_cache_loc, (batch * width,), "B*S of accept_index")
    if values:
        need_at_least("accept_index", accept_index, -1)
        need_at_most("accept_index", accept_index, len(out_cache_loc) - 1,
                     f"an index into out_cache_loc of L={len(out_cache_loc)}")


def accept_out_cache_loc(*, accept_index, out_cache_loc, accepted_out_cache_loc):
    """Compact the accepted nodes' KV slots: walking accept_index row by row, left to right, the k-th
    entry that is not -1, e, gives accepted_out_cache_loc[k] = out_cache_loc[e]. Entries from the count
    of such entries on are not written."""
    check_accept_out_cache_loc(accept_index, out_cache_loc, accepted_out_cache_loc)
    k = 0
    for b in range(accept_index.shape[0]):
        for s in range(accept_index.shape[1]):
            e = int(accept_index[b, s])
            if e != -1:
                accepted_out_cache_loc[k] = out_cache_loc[e]
                k += 1


def check_assign_req_to_token(req_pool_indices, start_offset, end_offset, out_cache_loc, req_to_token,
                              values: bool = True) -> None:
    """The argument checks of `assign_req_to_token`."""
    need_dtype("req_to_token", req_to_token, "int32")
    need_ndim("req_to_token", req_to_token, 2)
    need_dtype("req_pool_indices", req_pool_indices, "int32", "int64")
    need_ndim("req_pool_indices", req_pool_indices, 1)
    batch = len(req_pool_indices)
    for name, a in (("start_offset", start_offset), ("end_offset", end_offset)):
        need_dtype(name, a, "int64")
        need_sized(name, a, (batch,), "B = len(req_pool_indices)")
    need_dtype("out_cache_loc", out_cache_loc, "int64")
    need_ndim("out_cache_loc", out_cache_loc, 1)
    if not values:
        return
    rows, width = req_to_token.shape
    need_at_least("start_offset", start_offset, 0)
    need_at_most("end_offset", end_offset, width, f"L={width}, the table's row length")
    if batch and bool((end_offset < start_offset).any()):
        b = int((end_offset < start_offset).nonzero()[0][0])
        raise ValueError(f"end_offset: must be >= start_offset, request {b} has [{int(start_offset[b])}, "
                         f"{int(end_offset[b])})")
    need_at_least("req_pool_indices", req_pool_indices, 0)
    need_at_most("req_pool_indices", req_pool_indices, rows - 1, f"a row of the table's P={rows}")
    taken: dict[int, list[tuple[int, int, int]]] = {}
    for b in range(batch):
        row, start, end = int(req_pool_indices[b]), int(start_offset[b]), int(end_offset[b])
        for other, s, e in taken.get(row, []):
            if start < e and s < end:
                raise ValueError(f"req_pool_indices: requests {other} and {b} both write table row {row}, with "
                                 f"overlapping ranges [{s}, {e}) and [{start}, {end})")
        if end > start:
            taken.setdefault(row, []).append((b, start, end))
    total = int((end_offset - start_offset).sum()) if batch else 0
    if len(out_cache_loc) < total:
        raise ValueError(f"out_cache_loc: holds {len(out_cache_loc)} slots, the ranges take {total}")
    need_at_least("out_cache_loc", out_cache_loc[:total], 0)
    need_at_most("out_cache_loc", out_cache_loc[:total], SLOT_LIMIT - 1, "a slot stored in an int32 table")


def assign_req_to_token(*, req_pool_indices, start_offset, end_offset, out_cache_loc, req_to_token):
    """Write each request's new KV slots into its row of the pool table: with len_b = end_b - start_b
    and o_b = len_0 + ... + len_{b-1}, req_to_token[rpi[b], start_b + j] = out_cache_loc[o_b + j] for
    0 <= j < len_b. Nothing else in the table is written; out_cache_loc past Σlen is not read."""
    check_assign_req_to_token(req_pool_indices, start_offset, end_offset, out_cache_loc, req_to_token)
    o = 0
    for b in range(len(req_pool_indices)):
        row, start, end = int(req_pool_indices[b]), int(start_offset[b]), int(end_offset[b])
        for j in range(end - start):
            req_to_token[row, start + j] = out_cache_loc[o + j]
        o += end - start

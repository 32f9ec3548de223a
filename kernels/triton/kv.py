"""Triton kernel of the `kv` family: one launch for both caches, no host sync outside checked mode.

A program takes a tile of tokens by a tile of the flattened [H*D] row; tokens that are not written are
masked off every store. The fp8 byte is computed with integer arithmetic on the float32 bits (round to
nearest even, saturating, NaN 0x7F: see `specverify.oracles.kv.fp8_code`), so it is the same on every
GPU and in the interpreter. Same-dtype caches are copied as bits. The division is done in float64 and
rounded to float32 (see `commit_one`): Triton links libdevice flush-to-zero, so `tl.math.div_rn` would
turn a subnormal scale or source into 0.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from specverify.kernels.validation import reads_values, validate
from specverify.kernels.triton.launch import cdiv, launcher, next_power_of_2
from specverify.kernels.triton.prepared import prepared
from specverify.oracles import kv as oracle

BLOCK_T = 16       # tokens per program
MAX_ROW = 1024     # row elements per program
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
FP8 = {"float8_e4m3fn": oracle.FP8["float8_e4m3fn"], "float8_e5m2": oracle.FP8["float8_e5m2"]}


@triton.jit
def fp8_code(x, MANTISSA: tl.constexpr, BIAS: tl.constexpr, MAX_CODE: tl.constexpr):
    """The fp8 byte (as int32) of float32 x: round to nearest even at the format's spacing, saturate."""
    bits = x.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    magnitude = bits & 0x7FFFFFFF
    exponent = magnitude >> 23
    normal = exponent > 0
    significand = tl.where(normal, (magnitude & 0x7FFFFF) | 0x800000, magnitude & 0x7FFFFF)
    e8 = tl.where(normal, exponent, 1) - 127 + BIAS            # the fp8 exponent field, if normal
    drop = tl.minimum(23 - MANTISSA + tl.maximum(1 - e8, 0), 25)  # 25 bits or more all round to 0
    kept = significand >> drop
    rest = significand & ((1 << drop) - 1)
    half = 1 << (drop - 1)
    up = (rest > half) | ((rest == half) & ((kept & 1) == 1))
    code = tl.where(e8 >= 1, (e8 - 1) << MANTISSA, 0) + kept + up.to(tl.int32)
    code = tl.minimum(code, MAX_CODE) | sign
    return tl.where(magnitude > 0x7F800000, 0x7F, code)


@triton.jit
def exact_f32(x):
    """x as float32, subnormals kept: a bfloat16 widened through its bits (the Triton interpreter's
    conversion flushes bfloat16 subnormals to zero, and a subnormal over a zero scale is +-inf, not NaN)."""
    if x.dtype == tl.bfloat16:
        return (x.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    return x.to(tl.float32)


@triton.jit
def commit_one(src_ptr, s0, s1, s2, scale_ptr, cache_ptr, c0, c1, c2, c3, tok, head, d, block, offset, write,
               store, SCALE_PER_TOKEN: tl.constexpr, IS_FP8: tl.constexpr, MANTISSA: tl.constexpr,
               BIAS: tl.constexpr, MAX_CODE: tl.constexpr):
    src = tl.load(src_ptr + tok[:, None] * s0 + head[None, :] * s1 + d[None, :] * s2, mask=store)
    where = cache_ptr + block[:, None] * c0 + offset[:, None] * c1 + head[None, :] * c2 + d[None, :] * c3
    if IS_FP8:
        if SCALE_PER_TOKEN:
            scale = tl.load(scale_ptr + tok, mask=write, other=1.0)[:, None]
        else:
            scale = tl.load(scale_ptr)
        # the float64 quotient rounded once to float32 is the correctly rounded float32 quotient (53 >= 2*24 + 2
        # bits: double rounding is harmless), subnormals included; tl.math.div_rn is linked flush-to-zero
        quotient = (exact_f32(src).to(tl.float64) / scale.to(tl.float64)).to(tl.float32)
        tl.store(where, fp8_code(quotient, MANTISSA, BIAS, MAX_CODE).to(tl.uint8), mask=store)
    else:
        tl.store(where, src, mask=store)


@launcher
@triton.jit
def commit_kernel(key_ptr, ks0, ks1, ks2, value_ptr, vs0, vs1, vs2, slot_ptr, accepted_ptr, k_scale_ptr,
                  v_scale_ptr, kc_ptr, kc0, kc1, kc2, kc3, vc_ptr, vc0, vc1, vc2, vc3, tokens, dim, row,
                  block_size, K_PER_TOKEN: tl.constexpr, V_PER_TOKEN: tl.constexpr, IS_FP8: tl.constexpr,
                  MANTISSA: tl.constexpr, BIAS: tl.constexpr, MAX_CODE: tl.constexpr, BLOCK_T: tl.constexpr,
                  BLOCK_E: tl.constexpr):
    tok = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T).to(tl.int64)
    element = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E).to(tl.int64)
    live = tok < tokens
    slot = tl.load(slot_ptr + tok, mask=live, other=-1).to(tl.int64)
    accepted = tl.load(accepted_ptr + tok, mask=live, other=0) != 0
    write = live & accepted & (slot >= 0)
    block, offset = slot // block_size, slot % block_size
    head, d = element // dim, element % dim
    store = write[:, None] & (element[None, :] < row)
    commit_one(key_ptr, ks0, ks1, ks2, k_scale_ptr, kc_ptr, kc0, kc1, kc2, kc3, tok, head, d, block, offset, write,
               store, K_PER_TOKEN, IS_FP8, MANTISSA, BIAS, MAX_CODE)
    commit_one(value_ptr, vs0, vs1, vs2, v_scale_ptr, vc_ptr, vc0, vc1, vc2, vc3, tok, head, d, block, offset,
               write, store, V_PER_TOKEN, IS_FP8, MANTISSA, BIAS, MAX_CODE)


def as_slots(cache: torch.Tensor, layout: str, bits: bool) -> torch.Tensor:
    """[num_blocks, block_size, H, D] view of the cache (as bits when copying or writing fp8 bytes)."""
    view = cache.view(BITS[cache.element_size()]) if bits else cache
    return view if layout == "NHD" else view.transpose(1, 2)


@prepared
def commit_draft(*, key, value, slot_mapping, accepted_mask, layout, k_scale, v_scale, key_cache, value_cache):
    """See `specverify.oracles.kv.commit_draft`. Any strides of the sources and the caches."""
    _, block_size = validate(oracle.check_commit_draft, key, value, slot_mapping, accepted_mask, layout, k_scale,
                             v_scale, key_cache, value_cache, values=reads_values(slot_mapping))
    tokens, heads, dim = key.shape
    if tokens == 0 or heads * dim == 0 or key_cache.numel() == 0:
        return
    fmt = FP8.get(str(key_cache.dtype).removeprefix("torch."))
    fp8 = fmt is not None
    kc, vc = as_slots(key_cache, layout, True), as_slots(value_cache, layout, True)
    src_k, src_v = (key, value) if fp8 else (key.view(kc.dtype), value.view(vc.dtype))
    k_scale, v_scale = (k_scale, v_scale) if fp8 else (slot_mapping, slot_mapping)   # never read
    row = heads * dim
    block_e = min(next_power_of_2(row), MAX_ROW)
    commit_kernel[(cdiv(tokens, BLOCK_T), cdiv(row, block_e))](
        src_k, *src_k.stride(), src_v, *src_v.stride(), slot_mapping.contiguous(),
        accepted_mask.contiguous().view(torch.uint8), k_scale.contiguous(), v_scale.contiguous(),
        kc, *kc.stride(), vc, *vc.stride(), tokens, dim, row, block_size,
        K_PER_TOKEN=k_scale.shape[0] > 1, V_PER_TOKEN=v_scale.shape[0] > 1, IS_FP8=fp8,
        MANTISSA=fmt.mantissa if fp8 else 0, BIAS=fmt.bias if fp8 else 0, MAX_CODE=fmt.max_code if fp8 else 0,
        BLOCK_T=BLOCK_T, BLOCK_E=block_e)


# ---------------------------------------------------------------- tree KV bookkeeping

ONE_PROGRAM = 1024     # accept_index entries one program takes whole (accept)
ACCEPT_BLOCK = 256     # entries per program past ONE_PROGRAM (accept)
COUNT_BLOCK = 4096     # entries per step of a program's count of the kept entries before its own
ACCEPT_WARPS = 8
REQUESTS = 4           # requests per program (assign)
ASSIGN_WARPS = 1
PREFIX_BLOCK = 1024    # request lengths per step of a program's prefix sum (assign)
SLOT_BLOCKS = (8, 64)  # slots per request per step of a program's tile (assign): a power of two in this range


@triton.jit
def accept_entries(index_ptr, s_row, s_col, width, k, inside, FLAT: tl.constexpr):
    """accept_index's entries at row-major positions k (-1 outside); FLAT: rows laid end to end."""
    if FLAT:
        where = index_ptr + k * s_col
    else:
        where = index_ptr + (k // width) * s_row + (k % width) * s_col
    return tl.load(where, mask=inside, other=-1)


@launcher
@triton.jit
def accept_kernel(index_ptr, s_row, s_col, width, loc_ptr, out_ptr, total, FLAT: tl.constexpr, BLOCK: tl.constexpr,
                  COUNT: tl.constexpr):
    """A program takes BLOCK entries of accept_index in row-major order: the kept entries before them
    (counted COUNT at a time) plus an in-block running count give each kept entry its position."""
    first = tl.program_id(0).to(tl.int64) * BLOCK
    before = tl.full([], 0, tl.int64)
    for k0 in range(0, first, COUNT):
        k = k0 + tl.arange(0, COUNT)
        earlier = accept_entries(index_ptr, s_row, s_col, width, k, k < first, FLAT)
        before += tl.sum((earlier != -1).to(tl.int64), 0)
    k = first + tl.arange(0, BLOCK)
    inside = k < total
    entry = accept_entries(index_ptr, s_row, s_col, width, k, inside, FLAT)
    keep = inside & (entry != -1)
    position = before + tl.cumsum(keep.to(tl.int64), 0) - 1
    slot = tl.load(loc_ptr + entry.to(tl.int64), mask=keep)
    tl.store(out_ptr + position, slot, mask=keep)


@prepared
def accept_out_cache_loc(*, accept_index, out_cache_loc, accepted_out_cache_loc):
    """See `specverify.oracles.kv.accept_out_cache_loc`. One launch: one program up to ONE_PROGRAM entries,
    else one per ACCEPT_BLOCK entries; any strides of accept_index."""
    validate(oracle.check_accept_out_cache_loc, accept_index, out_cache_loc, accepted_out_cache_loc,
             values=reads_values(accept_index))
    total = accepted_out_cache_loc.shape[0]
    if total == 0 or out_cache_loc.shape[0] == 0:
        return
    block = next_power_of_2(total) if total <= ONE_PROGRAM else ACCEPT_BLOCK
    s_row, s_col = accept_index.stride()
    width = accept_index.shape[1]
    accept_kernel[(cdiv(total, block),)](accept_index, s_row, s_col, width, out_cache_loc.contiguous(),
                                         accepted_out_cache_loc, total, FLAT=s_row == width * s_col, BLOCK=block,
                                         COUNT=COUNT_BLOCK, num_warps=ACCEPT_WARPS)


@triton.jit
def earlier_length(start_ptr, end_ptr, k, first):
    """The summed lengths (int64) of the requests k that come before request `first`."""
    earlier = k < first
    return tl.sum(tl.load(end_ptr + k, mask=earlier, other=0) - tl.load(start_ptr + k, mask=earlier, other=0),
                  0).to(tl.int64)


@launcher
@triton.jit
def assign_kernel(rpi_ptr, start_ptr, end_ptr, loc_ptr, table_ptr, s_row, s_col, batch,
                  BLOCK_R: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK: tl.constexpr, ONE_STEP: tl.constexpr):
    """A program takes BLOCK_R requests: the lengths of every request before them (in one load of BLOCK_B
    when ONE_STEP, BLOCK_B >= batch; else in blocks of BLOCK_B) and an exclusive running sum inside give each
    its o_b; then their ranges as a [BLOCK_R, BLOCK] tile, step by step up to the longest."""
    first = tl.program_id(0) * BLOCK_R
    if ONE_STEP:
        before = earlier_length(start_ptr, end_ptr, tl.arange(0, BLOCK_B), first)
    else:
        before = tl.full([], 0, tl.int64)
        for k0 in range(0, first, BLOCK_B):
            before += earlier_length(start_ptr, end_ptr, k0 + tl.arange(0, BLOCK_B), first)
    r = first + tl.arange(0, BLOCK_R)
    live = r < batch
    start = tl.load(start_ptr + r, mask=live, other=0)
    length = tl.load(end_ptr + r, mask=live, other=0) - start
    offset = before + tl.cumsum(length, 0) - length
    row = tl.load(rpi_ptr + r, mask=live, other=0).to(tl.int64)
    for j0 in range(0, tl.max(length, 0), BLOCK):
        j = j0 + tl.arange(0, BLOCK).to(tl.int64)
        inside = j[None, :] < length[:, None]
        slot = tl.load(loc_ptr + offset[:, None] + j[None, :], mask=inside)
        tl.store(table_ptr + row[:, None] * s_row + (start[:, None] + j[None, :]) * s_col, slot.to(tl.int32),
                 mask=inside)


@prepared
def assign_req_to_token(*, req_pool_indices, start_offset, end_offset, out_cache_loc, req_to_token):
    """See `specverify.oracles.kv.assign_req_to_token`. One launch, one program per REQUESTS requests;
    any strides of the table."""
    validate(oracle.check_assign_req_to_token, req_pool_indices, start_offset, end_offset, out_cache_loc,
             req_to_token, values=reads_values(start_offset))
    batch = req_pool_indices.shape[0]
    if batch == 0 or out_cache_loc.shape[0] == 0 or req_to_token.numel() == 0:   # nothing can be written
        return
    low, high = SLOT_BLOCKS                # the tile's width: about the mean length out_cache_loc holds room for
    width = min(max(next_power_of_2(cdiv(out_cache_loc.shape[0], batch)), low), high)
    assign_kernel[(cdiv(batch, REQUESTS),)](
        req_pool_indices.contiguous(), start_offset.contiguous(), end_offset.contiguous(), out_cache_loc.contiguous(),
        req_to_token, *req_to_token.stride(), batch, BLOCK_R=REQUESTS,
        BLOCK_B=min(next_power_of_2(batch), PREFIX_BLOCK), BLOCK=width, ONE_STEP=batch <= PREFIX_BLOCK,
        num_warps=ASSIGN_WARPS)

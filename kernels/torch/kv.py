"""Torch kernel of the `kv` family: two atomic passes per cache, no per-token loop, no host sync on CUDA
outside checked mode.

How it writes only the selected tokens without learning how many there are (that would sync): every
token takes part in one `index_reduce_` ("prod") and one `index_add_` on the integer bits of one cache
slot. A written token multiplies its slot's bits by 0, then adds its new bits (integer adds of bits: 0 +
new is new, bit for bit); any other token multiplies by 1 and adds 0 at slot max(slot, 0), which changes
nothing, even at a slot a written token clears and fills (written slots are distinct: two would be
invalid input).
"""
from __future__ import annotations

import math
import warnings

import torch

from specverify.kernels.validation import reads_values
from specverify.kernels.torch.layout import as_flags, iota, low_bits, pair_rows, scalar
from specverify.oracles import kv as oracle

# index_reduce_ warns once per process that its API is in beta; the call here is its stable form
warnings.filterwarnings("ignore", message=r"index_reduce\(\) is in beta", category=UserWarning)

BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
FP8 = {"float8_e4m3fn": (torch.float8_e4m3fn, 448.0), "float8_e5m2": (torch.float8_e5m2, 57344.0)}


def quantized(key, value, k_scale, v_scale, cache_dtype: str) -> torch.Tensor:
    """[2, T, H, D] fp8 bytes of key / k_scale and value / v_scale, computed in float32: torch rounds to
    nearest even; clamping first makes it saturate (torch alone gives NaN beyond the range), and every
    NaN becomes the positive NaN, whose code is the one pattern 0x7F."""
    dtype, largest = FP8[cache_dtype]
    quotient = torch.empty((2, *key.shape), device=key.device, dtype=torch.float32)
    torch.div(key, k_scale.view(-1, 1, 1), out=quotient[0])
    torch.div(value, v_scale.view(-1, 1, 1), out=quotient[1])
    quotient.nan_to_num_(nan=float("nan")).clamp_(-largest, largest)
    return quotient.to(dtype).view(torch.uint8)


def slot_rows(cache: torch.Tensor, layout: str) -> torch.Tensor:
    """The cache's bits as [num_blocks, block_size, H, D] (a view: HND is transposed, not copied)."""
    bits = cache.view(BITS[cache.element_size()])
    return bits if layout == "NHD" else bits.transpose(1, 2)


def slot_view(rows: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    """(view, scale, step): `rows` [NB, BS, H, D] as a view [L, H, D] whose row scale * slot + step * block
    is slot (block, offset)'s [H, D] (slot = block * BS + offset). Its row stride g is the gcd of the block
    and offset strides, so rows may overlap (HND, padded blocks): each slot's elements are still its own.
    scale 1 and step 0 when the block and offset axes merge."""
    s_block, s_offset, s_head, s_dim = rows.stride()
    blocks, size, heads, dim = rows.shape
    g = math.gcd(s_block, s_offset)
    scale, step = s_offset // g, s_block // g - size * (s_offset // g)
    length = ((blocks - 1) * s_block + (size - 1) * s_offset) // g + 1
    return rows.as_strided((length, heads, dim), (g, s_head, s_dim)), scale, step


def slot_index(target: torch.Tensor, block: torch.Tensor | None, scale: int, step: int) -> torch.Tensor:
    """scale * target + step * block (`block` = target // BS; unused when step is 0)."""
    scaled = target if scale == 1 else target * scale
    return scaled if step == 0 else torch.add(scaled, block, alpha=step)


def commit_draft(*, key, value, slot_mapping, accepted_mask, layout, k_scale, v_scale, key_cache, value_cache):
    """See `specverify.oracles.kv.commit_draft`. The flag `keep` (1: not written) is the factor of
    each token's slot and masks its new bits; both caches share it and the slot index."""
    _, block_size = oracle.check_commit_draft(key, value, slot_mapping, accepted_mask, layout, k_scale, v_scale,
                                              key_cache, value_cache, values=reads_values(slot_mapping))
    tokens = key.shape[0]
    if tokens == 0 or key_cache.numel() == 0:   # nothing can be written (a slot needs a cache)
        return
    cache_dtype = str(key_cache.dtype).removeprefix("torch.")
    bits = BITS[key_cache.element_size()]
    # not written: no slot, or not accepted; in the caches' bits dtype, the factor of `index_reduce_`
    keep = torch.ge(slot_mapping < 0, accepted_mask, out=torch.empty(tokens, device=key.device, dtype=bits))
    target = torch.maximum(slot_mapping, scalar(0, slot_mapping, slot_mapping.dtype),   # int64, in one launch
                           out=torch.empty(tokens, device=key.device, dtype=torch.long))
    keep_rows = keep[:, None, None]
    if cache_dtype in FP8:
        new = quantized(key, value, k_scale, v_scale, cache_dtype).masked_fill_(as_flags(keep_rows), 0)
    else:
        new = [source.view(bits).masked_fill(as_flags(keep_rows), 0) for source in (key, value)]
    indexes = {}   # (scale, step) -> slot index: caches of one layout share theirs
    for cache, change in zip((key_cache, value_cache), new):
        view, scale, step = slot_view(slot_rows(cache, layout))
        if step and "block" not in indexes:
            indexes["block"] = torch.div(target, block_size, rounding_mode="floor")
        index = indexes.get((scale, step))
        if index is None:
            index = indexes[scale, step] = slot_index(target, indexes.get("block"), scale, step)
        view.index_reduce_(0, index, keep_rows.expand(change.shape), "prod")
        view.index_add_(0, index, change)


def accept_out_cache_loc(*, accept_index, out_cache_loc, accepted_out_cache_loc):
    """See `specverify.oracles.kv.accept_out_cache_loc`. Without learning the count (a sync): output
    position k takes the entry where the running count of kept entries first reaches k + 1 (a search in
    the inclusive running count), and positions from the count on get their own value back. A strided
    accept_index is read in place (`torch.take` indexes its row-major order; no flattening copy). The
    search runs over all but the last count, so a rank past the count lands on the last entry, in range;
    that entry may be -1, which indexes out_cache_loc's last slot (a value the final `where` drops)."""
    oracle.check_accept_out_cache_loc(accept_index, out_cache_loc, accepted_out_cache_loc,
                                      values=reads_values(accept_index))
    total = accepted_out_cache_loc.shape[0]
    if total == 0 or out_cache_loc.shape[0] == 0:   # no entry, or every entry is -1
        return
    kept = pair_rows(total, accept_index)                     # both rows the kept mask: one cumsum launch
    torch.ne(accept_index.expand(2, *accept_index.shape), -1, out=kept.view(2, *accept_index.shape))
    kept = kept.cumsum(1)[0]                                    # inclusive running count, int64
    ranks = iota(total + 1, kept)                               # position k and its rank k + 1
    source = torch.searchsorted(kept[:total - 1], ranks[1:])   # in [0, total - 1]
    found = out_cache_loc[torch.take(accept_index, source)]
    torch.where(ranks[:total] < kept[-1], found, accepted_out_cache_loc, out=accepted_out_cache_loc)


def assign_req_to_token(*, req_pool_indices, start_offset, end_offset, out_cache_loc, req_to_token):
    """See `specverify.oracles.kv.assign_req_to_token`. Over every entry i of out_cache_loc (no host
    sync for the sum of lengths): its request b is the first whose inclusive running length passes i
    (the last request for entries past the sum, which write nothing), and its element, in units of g =
    gcd(row stride, column stride), is base[b] + i * column step, base[b] = row step * row(b) + column step
    * (end(b) - running length to b's end), steps being strides / g. The table's elements are changed as
    `commit_draft` changes slots: one `index_reduce_` ("prod") by 0 at each written element, by 1 at a
    clamped element for the rest, and one `index_add_` of the slot (stored as int32: its low 32 bits) or
    of 0."""
    oracle.check_assign_req_to_token(req_pool_indices, start_offset, end_offset, out_cache_loc, req_to_token,
                                     values=reads_values(start_offset))
    batch, slots = req_pool_indices.shape[0], out_cache_loc.shape[0]
    rows, width = req_to_token.shape
    if batch == 0 or slots == 0 or rows * width == 0:   # nothing can be written
        return
    running = pair_rows(batch, end_offset)                  # both rows the lengths: one cumsum launch
    torch.sub(end_offset.expand(2, batch), start_offset, out=running)
    ends = running.cumsum(1)[0]
    g = math.gcd(*req_to_token.stride())
    s_row, s_col = (stride // g for stride in req_to_token.stride())
    shift = end_offset - ends                               # column of entry i: i + shift[b]
    if s_col == 1 or s_row != 1:
        base = torch.add(shift if s_col == 1 else shift * s_col, req_pool_indices, alpha=s_row)
    else:                                                   # a transposed table: one scaled add too
        base = torch.add(req_pool_indices, shift, alpha=s_col)
    entry = iota(slots, out_cache_loc)
    owner = torch.searchsorted(ends[:-1], entry, right=True)
    span = 1 + (rows - 1) * s_row + (width - 1) * s_col
    table = req_to_token.as_strided((span,), (g,))
    place = torch.add(base[owner], entry, alpha=s_col).clamp_(0, span - 1)
    keep = torch.ge(entry, ends[-1:], out=torch.empty(slots, device=entry.device, dtype=torch.int32))
    table.index_reduce_(0, place, keep, "prod")
    table.index_add_(0, place, torch.where(as_flags(keep), scalar(0, keep, torch.int32),
                                           low_bits(out_cache_loc, torch.int32)))

"""Torch kernel of the `kv` family: one scatter per cache, no per-token loop, no host sync on CUDA
outside checked mode.

How it writes only the selected tokens without learning how many there are (that would sync): every
token takes part in one `index_put_` of bits. A token that is not written is sent to the slot of the
last written token, carrying that token's very bits, so every store into a slot stores the same
bytes. When no token is written at all, every store goes to slot 0 carrying the bits slot 0 already
holds (read before the scatter), which leaves the cache as it was.
"""
from __future__ import annotations

import torch

from specverify.kernels.checks import reads_values
from specverify.oracles import kv as oracle

BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
FP8 = {"float8_e4m3fn": (torch.float8_e4m3fn, 448.0), "float8_e5m2": (torch.float8_e5m2, 57344.0)}


def fp8_bits(x: torch.Tensor, cache_dtype: str) -> torch.Tensor:
    """Float32 to fp8 bytes: torch's conversion rounds to nearest even; clamping first makes it saturate
    (torch alone gives NaN or infinity beyond the range), and NaN gets the one pattern 0x7F."""
    dtype, largest = FP8[cache_dtype]
    code = x.clamp(-largest, largest).to(dtype).view(torch.uint8)
    return torch.where(torch.isnan(x), oracle.NAN_CODE, code).to(torch.uint8)


def slot_rows(cache: torch.Tensor, layout: str) -> torch.Tensor:
    """The cache's bits as [num_blocks, block_size, H, D] (a view: HND is transposed, not copied)."""
    bits = cache.view(BITS[cache.element_size()])
    return bits if layout == "NHD" else bits.transpose(1, 2)


def commit_draft(*, key, value, slot_mapping, accepted_mask, layout, k_scale, v_scale, key_cache, value_cache):
    """See `specverify.oracles.kv.commit_draft`."""
    _, block_size = oracle.check_commit_draft(key, value, slot_mapping, accepted_mask, layout, k_scale, v_scale,
                                              key_cache, value_cache, values=reads_values(slot_mapping))
    tokens = key.shape[0]
    if tokens == 0 or key_cache.numel() == 0:   # nothing can be written (a slot needs a cache)
        return
    cache_dtype = str(key_cache.dtype).removeprefix("torch.")
    index = torch.arange(tokens, device=key.device)
    slots = slot_mapping.long()
    written = accepted_mask & (slots >= 0)
    last = torch.where(written, index, -1).amax()     # the last written token; -1 when none
    none = last < 0
    source = torch.where(written, index, last.clamp(min=0))
    target = torch.where(none, 0, slots[source])
    block, offset = target // block_size, target % block_size
    for data, scale, cache in ((key, k_scale, key_cache), (value, v_scale, value_cache)):
        rows = slot_rows(cache, layout)
        if cache_dtype in FP8:
            divisor = scale.float()[source if scale.shape[0] > 1 else torch.zeros_like(source)]
            new = fp8_bits(data[source].float() / divisor[:, None, None], cache_dtype)
        else:
            new = data[source].view(rows.dtype)
        kept = rows[0, 0].clone()                      # slot 0 as it is: the stores when none is written
        rows[block, offset] = torch.where(none, kept[None], new)

"""An `eagle.step_slot_mapping` implementation with a planted bug (an outside implementation for the tests).

Our Torch kernel with its block clamp broken: a real row whose next position still has room under
max_model_len but lies past the block table must take the table's last block (the contract's
min(p // block_size, NB - 1)).
"""
from __future__ import annotations

import torch

from specverify.kernels.torch import eagle


def block_clamp_off_by_one(**kw):
    """Clamps the block into the table only when max_model_len reaches two or more past the table's
    capacity (`>` read as `>= capacity + 2`): with max_model_len = capacity + 1, the row at position
    capacity - 1 reads one block past its table row."""
    capacity = kw["block_size"] * kw["block_table"].shape[1]
    unclamped(kw, clamp=kw["max_model_len"] > capacity + 1)


def unclamped(kw: dict, clamp: bool) -> None:
    """Our kernel when `clamp`; else its slots recomputed without the clamp, the block table read as one
    flat row-major row (as a pointer-arithmetic kernel reads it): past a row's end the next row's ids,
    past the last row an index error."""
    eagle.step_slot_mapping(**kw)
    if clamp:
        return
    positions, table, batch = kw["positions"], kw["block_table"], kw["batch_size"]
    block_size, max_model_len = kw["block_size"], kw["max_model_len"]
    room = positions[:batch] < max_model_len - 1
    ahead = torch.where(room, positions[:batch].long() + 1, 0)
    flat = table.contiguous().reshape(-1)
    base = flat[torch.arange(batch) * table.shape[1] + ahead // block_size].long()
    kw["slot_mapping"][:batch] = torch.where(room, base * block_size + ahead % block_size, -1)

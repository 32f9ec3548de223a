"""Pieces every family's Torch kernels share: per-device constants that cost no launch once cached (an
arange, 0-dim scalars, small tables) and a buffer for one-launch running sums."""
from __future__ import annotations

import torch


_IOTAS: dict = {}


def iota(n: int, like: torch.Tensor, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """0, 1, ..., n-1 on `like`'s device: a read-only view of a cached arange (no launch once cached).
    The cache grows outside CUDA-graph capture only (a capture after a warm-up call of the same sizes
    finds it big enough; one that does not gets a fresh arange, launched inside the graph). Never write
    into the result."""
    key = (like.device, dtype)
    cached = _IOTAS.get(key)
    if cached is None or cached.numel() < n:
        if like.is_cuda and torch.cuda.is_current_stream_capturing():
            return torch.arange(n, device=like.device, dtype=dtype)
        size = max(n, 2 * (0 if cached is None else cached.numel()), 4096)
        cached = torch.arange(size, device=like.device, dtype=dtype)
        _IOTAS[key] = cached   # a replaced arange stays referenced by the views handed out earlier
    return cached[:n]


def pair_rows(n: int, like: torch.Tensor, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """An uninitialized [2, n] buffer for a running sum taken along its rows. On CUDA a 1-D cumsum is
    two launches (cub's init and scan); the cumsum of a matrix along its rows is one. Callers write the
    same values into both rows in one broadcast op, so nothing uninitialized is ever summed."""
    return torch.empty((2, n), device=like.device, dtype=dtype)


_SCALARS: dict = {}


def scalar(value: int | float, like: torch.Tensor, dtype: torch.dtype = torch.long) -> torch.Tensor:
    """`value` as a cached 0-dim tensor on `like`'s device, for ops whose `out=` form takes tensors only
    (`torch.where`); a 0-dim operand does not promote the other's dtype. Cached like `iota`."""
    key = (like.device, dtype, value)
    cached = _SCALARS.get(key)
    if cached is None:
        cached = torch.full((), value, device=like.device, dtype=dtype)
        if not (like.is_cuda and torch.cuda.is_current_stream_capturing()):
            _SCALARS[key] = cached
    return cached


_CONSTANTS: dict = {}


def constant(name: str, like: torch.Tensor, make) -> torch.Tensor:
    """A small read-only tensor `make(device)` cached per device under `name` (cached like `iota`)."""
    key = (like.device, name)
    cached = _CONSTANTS.get(key)
    if cached is None:
        cached = make(like.device)
        if not (like.is_cuda and torch.cuda.is_current_stream_capturing()):
            _CONSTANTS[key] = cached
    return cached

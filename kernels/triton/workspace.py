"""Self-cleaning scratch slots for kernels that combine partial results with atomics inside one launch.

A workspace is `slots` int64 keys (initially NO_KEY) and `slots` int32 arrival counters (initially 0).
A kernel that uses it must leave every slot it touched as it found it (the program that arrives last
resets its slot), so no launch ever needs a reset. One workspace is kept per (device, stream): the work
of one stream runs in order, so calls sharing a stream share it safely, and calls on different streams
never share one. Calls that share a workspace must not overlap: a CUDA graph captured on a stream that
already has one uses it (replay such graphs in order with that stream's other work).

Allocation (two fills) happens on the first call on a stream, outside capture, and again only if a
call needs more slots (the smaller workspace is kept alive: a graph may hold its address). A call
captured on a stream that has no workspace yet gets a temporary one from the graph's memory pool; its
fills are part of the graph and run at every replay, so nothing outlives a replay.
"""
from __future__ import annotations

import torch

NO_KEY = -(2**63)     # the initial key: below every key a kernel publishes

_HELD: dict[tuple[str, int], tuple[torch.Tensor, torch.Tensor]] = {}
_RETIRED: list[tuple[torch.Tensor, torch.Tensor]] = []


def fresh(device: torch.device, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.full((slots,), NO_KEY, dtype=torch.int64, device=device),
            torch.zeros(slots, dtype=torch.int32, device=device))


def workspace(device: torch.device, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(keys, counters) of at least `slots` each for the current stream of `device` (see the module)."""
    if device.type != "cuda":
        stream = 0
    elif torch.cuda.is_current_stream_capturing():
        held = _HELD.get((str(device), torch.cuda.current_stream(device).cuda_stream))
        return held if held is not None and held[0].numel() >= slots else fresh(device, slots)
    else:
        stream = torch.cuda.current_stream(device).cuda_stream
    held = _HELD.get((str(device), stream))
    if held is None or held[0].numel() < slots:
        if held is not None:
            _RETIRED.append(held)
        held = _HELD[(str(device), stream)] = fresh(device, slots)
    return held

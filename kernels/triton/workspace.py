"""Self-cleaning scratch slots for kernels that combine partial results with atomics inside one launch.

A workspace is `slots` int64 keys (initially NO_KEY) and `slots` int32 arrival counters (initially 0).
A kernel that uses it must leave every slot it touched as it found it (the program that arrives last
resets its slot), so no launch ever needs a reset. One workspace is kept per device, shared by every
stream and by CUDA graphs captured after it exists (an engine captures on a side stream and replays on
another; a workspace per stream would give each captured call fills of its own). So calls on one device
that use it must not overlap in time: issue them from one stream, or order the streams (an engine's step
does; calls on two unordered streams would mix their partial results).

Allocation (two fills) happens on the first call on a device, outside capture, and again only if a
call needs more slots (the smaller workspace is kept alive: a graph may hold its address). A call
captured before a large enough workspace exists gets a temporary one from the graph's memory pool; its
fills are part of the graph and run at every replay, so nothing outlives a replay.
"""
from __future__ import annotations

import torch

NO_KEY = -(2**63)     # the initial key: below every key a kernel publishes

_HELD: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
_RETIRED: list[tuple[torch.Tensor, torch.Tensor]] = []


def fresh(device: torch.device, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.full((slots,), NO_KEY, dtype=torch.int64, device=device),
            torch.zeros(slots, dtype=torch.int32, device=device))


def workspace(device: torch.device, slots: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(keys, counters) of at least `slots` each for `device` (see the module)."""
    held = _HELD.get(str(device))
    if held is not None and held[0].numel() >= slots:
        return held
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return fresh(device, slots)
    if held is not None:
        _RETIRED.append(held)
    held = _HELD[str(device)] = fresh(device, slots)
    return held


def held(t: torch.Tensor) -> bool:
    """Whether `t` is one of the workspaces kept (alive for good: a graph or a recipe may hold its address)."""
    return any(t is kept for pair in (*_HELD.values(), *_RETIRED) for kept in pair)

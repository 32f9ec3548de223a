"""Ways of calling an implementation, each measuring one property of the call (GPU properties).

A probe takes the call (a no-argument function), the bound arguments and the device; it makes the call
and returns (the returned value, measures). It runs where the implementation runs (in this process or
in a worker); the verdict on its measures is the judge's (`specverify.properties`).
"""
from __future__ import annotations

from typing import Any, Callable

from specverify.calls import synchronize
from specverify.materialize import Bound

Call = Callable[[], Any]


def plain(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    returned = call()
    synchronize(device)
    return returned, {}


def no_sync(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    """The call with CUDA's sync debug mode set to error: a device-to-host synchronization raises."""
    import torch

    synchronize(device)
    torch.cuda.set_sync_debug_mode("error")
    try:
        returned = call()
    finally:
        torch.cuda.set_sync_debug_mode(0)
    synchronize(device)
    return returned, {}


def launches(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    """The call under the profiler: how many device activities (kernels, copies, fills) it launched."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    synchronize(device)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        returned = call()
        synchronize(device)
    names = [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]
    return returned, {"launches": len(names), "kernels": sorted(set(names))[:12]}


def graph_replay(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    """The call captured in a CUDA graph and replayed on the arguments' first bytes: the arena then holds
    what the replay wrote (a warm-up call first compiles and caches what it needs)."""
    import torch

    first = {name: raw.clone() for name, raw in bound.device_slots.items()}

    def restore() -> None:
        for name, raw in bound.device_slots.items():
            raw.copy_(first[name])

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    restore()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        returned = call()
    restore()
    graph.replay()
    synchronize(device)
    return returned, {}


def bench(call: Call, bound: Bound, device: str, spec: str = "") -> tuple[Any, dict]:
    """The call timed many times (`specverify.bench.timing`; `spec` its settings). The arena then holds
    what the last call left: a timed call is never judged."""
    from specverify.bench.timing import Settings, measure

    return None, measure(call, bound, device, Settings.parse(spec))


PROBES: dict[str, Callable[..., tuple[Any, dict]]] = {
    "plain": plain, "no_sync": no_sync, "launches": launches, "graph_replay": graph_replay, "bench": bench}


def resolve(probe: str) -> Callable[[Call, Bound, str], tuple[Any, dict]]:
    """The probe a name gives: "NAME", or "NAME:SETTINGS" whose settings string is passed on."""
    name, sep, spec = probe.partition(":")
    found = PROBES[name]
    return (lambda call, bound, device: found(call, bound, device, spec)) if sep else found

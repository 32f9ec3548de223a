"""Ways of calling an implementation, each measuring one property of the call (GPU properties).

A probe takes the call (a no-argument function), the bound arguments and the device; it makes the call
and returns (the returned value, measures). It runs where the implementation runs (in this process or
in a worker), through the table `seal` copied from `PROBES` (once per process, with the device's
instruments, before a worker imports an implementation: what rebinds this module or its table later does
not reach a measurement), and measures with the sealed instruments (`specverify.judge.device`); the
verdict on its measures is the judge's (`specverify.runs.properties`). Every GPU probe but `plain` first makes the same warm-up (`device.warm_up`:
`WARM_UP_CALLS` unmeasured calls on the stream it measures on, the device synchronized), so what ran
earlier in the process does not change what it measures.
"""
from __future__ import annotations

from typing import Any, Callable

from specverify.judge import device
from specverify.judge.device import capture, check_no_sync, count_launches, stream_ordered, synchronize, warm_up
from specverify.judge.materialize import Bound
from specverify.judge.timing import Settings, measure

Call = Callable[[], Any]


def plain(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    returned = call()
    synchronize(device)
    return returned, {}


def no_sync(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    """After the warm-up, the call with CUDA's sync debug mode set to error, behind a witness kernel
    (`device.check_no_sync`)."""
    return check_no_sync(call, device)


def launches(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    """After the warm-up (it compiles and caches what the call needs), the device activities the call
    launched, between marker kernels (`device.count_launches`)."""
    warm_up(call, device)
    return count_launches(call, device)


def restorer(bound: Bound) -> Callable[[], None]:
    """A function that puts every device slot's bytes back as they are now (copies queued on the current
    stream)."""
    first = {name: raw.clone() for name, raw in bound.device_slots.items()}

    def restore() -> None:
        for name, raw in bound.device_slots.items():
            raw.copy_(first[name])

    return restore


def graph_replay(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    """The call captured in a CUDA graph (after the warm-up on the capture stream) and replayed on the
    arguments' first bytes: the arena then holds what the replay wrote."""
    restore = restorer(bound)
    graph, returned = capture(call, between=restore, device=device)
    restore()
    graph.replay()
    synchronize(device)
    return returned, {}


def stream_order(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    """The call made with a fresh non-default stream current, on the arguments' first bytes (after the
    warm-up on that stream), and every device slot copied to pinned host memory on that stream, which
    alone is waited for (`device.stream_ordered`). Those copies are the arena's readings
    (`Bound.keep_readings`): nothing reads the device again before the judge sees them. The pinned
    buffers are allocated first (an allocation may synchronize the device); the device is synchronized
    only once the readings are taken."""
    import torch

    hosts = {name: torch.empty(raw.shape, dtype=raw.dtype, pin_memory=True)
             for name, raw in bound.device_slots.items()}

    def read() -> dict:
        for name, raw in bound.device_slots.items():
            hosts[name].copy_(raw, non_blocking=True)
        return {name: host.numpy() for name, host in hosts.items()}

    returned, readings = stream_ordered(call, restorer(bound), read, device)
    bound.keep_readings(readings)
    synchronize(device)     # the readings are taken: late work of the call lands in no memory freed after it
    return returned, {}


def bench(call: Call, bound: Bound, device: str, spec: str = "") -> tuple[Any, dict]:
    """The call timed many times (`specverify.judge.timing`; `spec` its settings). The arena then holds
    what the last call left: a timed call is never judged."""
    return None, measure(call, bound, device, Settings.parse(spec))


PROBES: dict[str, Callable[..., tuple[Any, dict]]] = {
    "plain": plain, "no_sync": no_sync, "launches": launches, "graph_replay": graph_replay,
    "stream_order": stream_order, "bench": bench}

_sealed: list[dict[str, Callable[..., tuple[Any, dict]]]] = []     # the table copied first in this process


def seal() -> None:
    """Take the device's instruments and a copy of the probe table now (the first call in a process wins)."""
    device.seal()
    if not _sealed:
        _sealed.append(dict(PROBES))


def resolve_probe(probe: str) -> Callable[[Call, Any, str], tuple[Any, dict]]:
    """The sealed probe a name gives: "NAME", or "NAME:SETTINGS" whose settings string is passed on."""
    seal()
    name, sep, spec = probe.partition(":")
    found = _sealed[0][name]
    return (lambda call, bound, device: found(call, bound, device, spec)) if sep else found

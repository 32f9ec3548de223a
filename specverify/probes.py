"""Ways of calling an implementation, each measuring one property of the call (GPU properties).

A probe takes the call (a no-argument function), the bound arguments and the device; it makes the call
and returns (the returned value, measures). It runs where the implementation runs (in this process or
in a worker), through the table `specverify.device.seal` copied from `PROBES`, and measures with the
sealed instruments (`specverify.device`); the verdict on its measures is the judge's
(`specverify.properties`).
"""
from __future__ import annotations

from typing import Any, Callable

from specverify.bench.timing import Settings, measure
from specverify.device import capture, check_no_sync, count_launches, synchronize
from specverify.materialize import Bound

Call = Callable[[], Any]


def plain(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    returned = call()
    synchronize(device)
    return returned, {}


def no_sync(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    """After a warm-up call, the call with CUDA's sync debug mode set to error, behind a witness kernel
    (`device.check_no_sync`)."""
    return check_no_sync(call, device)


def launches(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    """After a warm-up call (it compiles and caches what the call needs), the device activities the call
    launched, between marker kernels (`device.count_launches`)."""
    call()
    return count_launches(call, device)


def graph_replay(call: Call, bound: Bound, device: str) -> tuple[Any, dict]:
    """The call captured in a CUDA graph and replayed on the arguments' first bytes: the arena then holds
    what the replay wrote (a warm-up call first compiles and caches what it needs)."""
    first = {name: raw.clone() for name, raw in bound.device_slots.items()}

    def restore() -> None:
        for name, raw in bound.device_slots.items():
            raw.copy_(first[name])

    graph, returned = capture(call, between=restore)
    restore()
    graph.replay()
    synchronize(device)
    return returned, {}


def bench(call: Call, bound: Bound, device: str, spec: str = "") -> tuple[Any, dict]:
    """The call timed many times (`specverify.bench.timing`; `spec` its settings). The arena then holds
    what the last call left: a timed call is never judged."""
    return None, measure(call, bound, device, Settings.parse(spec))


PROBES: dict[str, Callable[..., tuple[Any, dict]]] = {
    "plain": plain, "no_sync": no_sync, "launches": launches, "graph_replay": graph_replay, "bench": bench}

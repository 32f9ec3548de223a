"""Timing of one implementation's call, made in the process that runs it (the `bench` probe), and the
references every figure is divided by: the launch floor and the device's copy bandwidth.

On CUDA, per call: the host time (eager calls, at least CUDA_LOOP_CALLS of them with no synchronization
inside the timed loop, median over `repeat` loops), the launches (one call under the torch profiler,
between marker kernels: `specverify.judge.device.count_launches`) and the device time (a CUDA graph of `calls`
calls replayed `replays` times, timed with events, median per call; a call that cannot be captured, one
taking host lists for example, is timed with events around eager calls instead and says so). On the CPU
there is no device: the device time is the wall time of synchronous calls, with no graph and no launch
count. A host-timed loop makes `calls` calls, more when a call is short (a loop lasts at least MIN_LOOP_S:
host stages take microseconds) and fewer when it is long (at most about MAX_LOOP_S: the Triton
interpreter on the CPU).
"""
from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Callable

from specverify.judge.device import capture, count_launches, synchronize, warm_up

MIN_LOOP_S = 0.002      # a host-timed loop lasts at least this long (more calls when a call is short) ...
MAX_LOOP_S = 0.5        # ... and at most about this long (fewer calls, at least one, when a call is long)
MAX_LOOP_CALLS = 10000
CUDA_LOOP_CALLS = 200   # on CUDA a host-timed loop makes at least this many calls (then one sync), as the
                        # engines' host times we compare with were measured


@dataclass(frozen=True)
class Settings:
    """How one call is timed; travels as the probe's name ("bench:calls=20,...") to a worker."""
    calls: int = 20        # calls per timed loop and per captured graph
    replays: int = 5       # graph replays (device time)
    repeat: int = 5        # host-timed loops
    graph: bool = True     # try a CUDA graph (False: the stage takes host lists, time eager calls)
    launches: bool = True  # count launches with the profiler (CUDA)

    def probe(self) -> str:
        return "bench:" + ",".join(f"{k}={int(v)}" for k, v in asdict(self).items())

    @staticmethod
    def parse(spec: str) -> "Settings":
        found: dict[str, Any] = {}
        for item in filter(None, spec.split(",")):
            key, _, value = item.partition("=")
            kind = type(getattr(Settings, key))
            found[key] = kind(int(value))
        return Settings(**found)


def loop_calls(call: Callable[[], Any], device: str, calls: int) -> int:
    """How many calls a host-timed loop makes: `calls` (at least CUDA_LOOP_CALLS on CUDA), more when that
    lasts less than MIN_LOOP_S, fewer (at least one) when it lasts more than MAX_LOOP_S (from the wall time
    of one synchronous call)."""
    started = time.perf_counter()
    call()
    synchronize(device)
    one = max(time.perf_counter() - started, 1e-9)
    if device == "cuda":
        calls = max(calls, CUDA_LOOP_CALLS)
    if calls * one > MAX_LOOP_S:
        return max(1, int(MAX_LOOP_S / one))
    return max(calls, min(MAX_LOOP_CALLS, int(MIN_LOOP_S / one)))


def host_us(call: Callable[[], Any], device: str, settings: Settings, sync_each: bool = False) -> float:
    """Median µs per call of the host's loops (`sync_each`: synchronize after every call, the wall time)."""
    count = loop_calls(call, device, settings.calls)
    samples = []
    for _ in range(settings.repeat):
        synchronize(device)
        started = time.perf_counter()
        for _ in range(count):
            call()
            if sync_each:
                synchronize(device)
        samples.append((time.perf_counter() - started) / count * 1e6)
        synchronize(device)
    return statistics.median(samples)


def graph_us(call: Callable[[], Any], settings: Settings) -> float:
    """Median µs per call of a CUDA graph of `calls` calls (`device.capture`), replayed `replays` times."""
    import torch

    graph, _ = capture(call, settings.calls)
    graph.replay()
    samples = []
    for _ in range(settings.replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / settings.calls)
    del graph
    return statistics.median(samples)


def events_us(call: Callable[[], Any], settings: Settings) -> float:
    """Median µs per call between events around `calls` eager calls (launch gaps included)."""
    import torch

    samples = []
    for _ in range(settings.replays):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(settings.calls):
            call()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / settings.calls)
    return statistics.median(samples)


def measure(call: Callable[[], Any], bound, device: str, settings: Settings) -> dict:
    """The measures of one implementation's call (JSON-safe): host_us, device_us, device_method, launches;
    after the warm-up every measurement makes (`device.warm_up`)."""
    warm_up(call, device)
    found: dict[str, Any] = {"host_us": host_us(call, device, settings)}
    if device != "cuda":
        found.update(device_us=host_us(call, device, settings, sync_each=True), device_method="wall")
        return found
    if settings.launches:
        _, counted = count_launches(call, device)
        if "launches" in counted:     # else the profiler's record was incomplete: no count
            found.update(launches=counted["launches"], kernels=counted["kernels"])
    found["device_method"] = "events"
    if settings.graph:
        try:
            found.update(device_us=graph_us(call, settings), device_method="graph")
        except Exception as exc:  # not capturable (a sync, a host copy): eager calls between events
            found["graph_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            synchronize(device)
    if found["device_method"] == "events":
        found["device_us"] = events_us(call, settings)
    return found


# --- the references: launch floor and copy bandwidth (measured in the bench's own process) ----------

@lru_cache(maxsize=1)
def empty_kernel():
    """A Triton kernel that does nothing (defined after the backend environment is prepared)."""
    import triton

    @triton.jit
    def empty():
        pass

    return empty


def floor(device: str, settings: Settings) -> dict:
    """The launch floor: an empty Triton kernel's device time (graph replay; CPU: wall time) and host
    launch cost; None values when Triton does not import."""
    from specverify import env

    env.prepare()
    problem = env.triton_import_error()
    if problem:
        return {"device_us": None, "host_us": None, "note": problem}
    kernel = empty_kernel()

    def launch() -> None:
        kernel[(1,)]()

    launch()
    synchronize(device)
    found = {"host_us": host_us(launch, device, settings), "kernel": "empty Triton kernel, grid (1,)"}
    if device == "cuda":
        found.update(device_us=graph_us(launch, settings), device_method="graph")
    else:
        found.update(device_us=host_us(launch, device, settings, sync_each=True), device_method="wall")
    return found


def copy_bandwidth(device: str, settings: Settings, nbytes: int | None = None) -> dict:
    """GB/s of a large device-to-device copy, counting its read and its write (2 x bytes / time), as a
    stage's bandwidth counts its inputs and outputs."""
    import torch

    nbytes = nbytes or (1 << 30 if device == "cuda" else 64 << 20)
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    synchronize(device)
    samples = []
    for _ in range(max(settings.replays, 3)):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            seconds = start.elapsed_time(end) / 1e3
        else:
            started = time.perf_counter()
            dst.copy_(src)
            seconds = time.perf_counter() - started
        samples.append(seconds)
    del src, dst
    return {"bytes": nbytes, "gbps": 2 * nbytes / statistics.median(samples) / 1e9,
            "method": "torch copy_, CUDA events" if device == "cuda" else "torch copy_, wall time"}

"""Measurements on the device: synchronize, the warm-up, a call captured in a CUDA graph, the launches of
a call (counted between marker kernels), the no-sync check (CUDA's sync debug mode and a witness kernel)
and a call on a fresh non-default stream read back on that stream alone (stream order).

The warm-up. Every measurement of a call (`check_no_sync`, the `launches` probe, `capture`,
`stream_ordered`) first makes the same `WARM_UP_CALLS` unmeasured calls (`warm_up`), on the stream the
measurement then uses, with the device synchronized before and after: whatever ran earlier in the
process, the measured call never sees first-call work (compiling, building cached constants, growing the
allocator's pool). Before that, the caller has run the backend's own warm-up once per device
(`specverify.judge.calls.warm_backend`).

Sealing. `seal()` takes, once per process, the CUDA entry points these measurements use (`Instruments`:
the C functions behind `torch.cuda.set_sync_debug_mode`, `torch.cuda._sleep`, `torch.cuda.synchronize`,
`torch.cuda.current_stream` and `set_stream`, the stream and event classes and the event methods, the
profiler class); `specverify.judge.probes.seal` seals them with a copy of the probe table. The worker
seals before it imports an implementation; in this process the first measurement seals. What is rebound
afterwards in Python (those torch functions) does not reach a measurement. Not sealed: the rest of the
suite's Python code in that process, and native code.

The verdicts on what is measured are the judge's (`specverify.runs.properties`); the decisions are plain
functions here (`witness_verdict`, `launches_between_markers`), and the order of what a measurement does
goes through the instruments, so that both can be tested without a GPU.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, NamedTuple

Call = Callable[[], Any]

SYNC_ERROR = 2                 # CUDA's sync debug mode "error": a synchronizing torch operation raises
CALIBRATION_CYCLES = 1 << 21   # the spin timed once per device: the witness kernel's cycles per second
MIN_WITNESS_S = 1e-3           # the first witness spins 20 x the warm-up call's host time, within these
MAX_FIRST_WITNESS_S = 0.25
LONGER = 20                    # a retried witness: this many times the first one and the call it timed
MARKER_CYCLES = 1000           # a marker kernel's spin
MARKER = "spin_kernel"         # the name torch.cuda._sleep's kernel has in the profiler's record
WARM_UP_CALLS = 1              # unmeasured calls before every measurement (`warm_up`)

# What a measurement reports as tampering (the code travels from the worker, the words are the judge's).
TAMPERING = {
    "sync_debug_mode": "the call changed CUDA's sync debug mode",
    "profiler_record": "the profiler's record of the call is incomplete",
    "no_witness": "the no-sync measurement did not come back",
}


@dataclass(frozen=True)
class Instruments:
    """The callables the measurements use, as they were when the process was sealed (None: a torch
    without CUDA)."""
    synchronize: Callable | None            # torch._C._cuda_synchronize (the current device)
    get_device: Callable | None
    set_device: Callable | None
    set_sync_debug_mode: Callable | None
    get_sync_debug_mode: Callable | None
    sleep: Callable | None                  # torch._C._cuda_sleep(cycles), on the current stream
    current_stream: Callable | None         # torch._C._cuda_getCurrentStream(device index)
    set_stream: Callable | None             # torch._C._cuda_setStream(stream_id=, device_index=, device_type=)
    stream_type: type | None                # torch._C._CudaStreamBase (no arguments: a new non-default stream)
    event_type: type | None                 # torch._C._CudaEventBase
    record: Callable | None                 # its methods
    query: Callable | None
    wait: Callable | None                   # (the event's synchronize)
    stream_waits: Callable | None           # (the event's wait(stream): the stream waits for the event)
    elapsed_ms: Callable | None
    profile: type                           # torch.profiler.profile
    cuda_activity: Any
    cuda_device_type: Any


_sealed: list[Instruments] = []       # the first taken in this process


def take_instruments() -> Instruments:
    from specverify import env

    env.prepare()       # before torch's modules, which may import Triton
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    c = torch._C
    event = getattr(c, "_CudaEventBase", None)
    return Instruments(
        getattr(c, "_cuda_synchronize", None), getattr(c, "_cuda_getDevice", None),
        getattr(c, "_cuda_setDevice", None), getattr(c, "_cuda_set_sync_debug_mode", None),
        getattr(c, "_cuda_get_sync_debug_mode", None), getattr(c, "_cuda_sleep", None),
        getattr(c, "_cuda_getCurrentStream", None), getattr(c, "_cuda_setStream", None),
        getattr(c, "_CudaStreamBase", None), event, getattr(event, "record", None), getattr(event, "query", None),
        getattr(event, "synchronize", None), getattr(event, "wait", None), getattr(event, "elapsed_time", None),
        profile, ProfilerActivity.CUDA, DeviceType.CUDA)


def seal() -> None:
    """Take the instruments now (the first call in a process wins)."""
    if not _sealed:
        _sealed.append(take_instruments())


def instruments() -> Instruments:
    seal()
    return _sealed[0]


def device_index(device: str) -> int | None:
    _, sep, index = device.partition(":")
    return int(index) if sep else None


def synchronize(device: str, tools: Instruments | None = None) -> None:
    """Wait for all work on `device` ("cuda", "cuda:1"; anything else: nothing to wait for)."""
    if not device.startswith("cuda"):
        return
    tools = tools or instruments()
    index, current = device_index(device), tools.get_device()
    if index is None or index == current:
        tools.synchronize()
        return
    tools.set_device(index)
    try:
        tools.synchronize()
    finally:
        tools.set_device(current)


_lost: list[str] = []      # why this process's CUDA context is gone: the first error that showed it


def context_lost() -> str | None:
    """Why this process's CUDA context is lost (every later CUDA call in it would fail), or None."""
    return _lost[0] if _lost else None


def probe_context(device: str) -> str | None:
    """After a call on `device` that failed: whether this process's CUDA context survived it. A sticky error
    (an illegal address, a device-side assert) fails every later synchronize; the first one is kept, and
    returned from then on. None off CUDA and while the context lives."""
    if device.startswith("cuda") and not _lost:
        try:
            synchronize(device)
        except Exception as exc:  # the context is gone: say which error took it
            _lost.append(f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
    return context_lost()


def current_stream(tools: Instruments):
    found = tools.current_stream(tools.get_device())
    return tools.stream_type(stream_id=found[0], device_index=found[1], device_type=found[2])


@contextmanager
def on_stream(stream, tools: Instruments | None = None) -> Iterator[None]:
    """`stream` the current stream of its device inside (None: the current one stays)."""
    if stream is None:
        yield
        return
    tools = tools or instruments()
    before = current_stream(tools)
    tools.set_stream(stream_id=stream.stream_id, device_index=stream.device_index, device_type=stream.device_type)
    try:
        yield
    finally:
        tools.set_stream(stream_id=before.stream_id, device_index=before.device_index,
                         device_type=before.device_type)


def warm_up(call: Call, device: str, stream=None, tools: Instruments | None = None) -> float:
    """The warm-up every measurement makes first: `WARM_UP_CALLS` unmeasured calls on `stream` (None: the
    current stream), the device synchronized before the first and after each. Returns the last call's
    host seconds (the call alone, without the synchronization)."""
    tools = tools or instruments()
    synchronize(device, tools)
    seconds = 0.0
    for _ in range(WARM_UP_CALLS):
        with on_stream(stream, tools):
            started = time.perf_counter()
            call()
            seconds = time.perf_counter() - started
        synchronize(device, tools)
    return seconds


def capture(call: Call, calls: int = 1, between: Callable[[], None] | None = None, device: str = "cuda"):
    """`calls` calls captured in one CUDA graph on a side stream, after the warm-up (`warm_up`) on that
    stream (it compiles and caches what the call needs outside the capture) and `between()` on it (say,
    restoring the arguments). Returns (the graph, what the last captured call returned)."""
    import torch

    stream = torch.cuda.Stream()
    warm_up(call, device, stream)
    if between is not None:
        with on_stream(stream):
            between()
    graph = torch.cuda.CUDAGraph()
    returned = None
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            returned = call()
    return graph, returned


# --- stream order: the call on a fresh non-default stream, read back on that stream alone -----------

def stream_ordered(call: Call, restore: Callable[[], None], read: Callable[[], Any], device: str,
                   tools: Instruments | None = None) -> tuple[Any, Any]:
    """A fresh non-default stream S (it does not wait for the legacy default stream) first waits for the
    work queued so far on the current stream (the arguments' copies to the device); the warm-up runs on S;
    then, with S current, `restore()` puts the arguments' first bytes back, the call is made and `read()`
    queues the copies of what it wrote to (pinned) host memory. Only S is then waited for (an event
    recorded on it), never the device: work the call left on another stream, not ordered before S, is
    not waited for. Returns (what the call returned, what `read()` returned)."""
    tools = tools or instruments()
    stream = tools.stream_type()
    queued = tools.event_type()
    tools.record(queued, current_stream(tools))
    tools.stream_waits(queued, stream)
    warm_up(call, device, stream, tools)
    done = tools.event_type()
    with on_stream(stream, tools):
        restore()
        returned = call()
        readings = read()
        tools.record(done, stream)
    tools.wait(done)
    return returned, readings


# --- launches: the device activities between two marker kernels -------------------------------------

class Activity(NamedTuple):
    name: str
    order: tuple          # launch order: (the launch's correlation id, the start time)


def launches_between_markers(activities: list[Activity]) -> dict:
    """The count and names of the activities launched between the first and the last marker; a record
    without both markers is incomplete (the profiler was switched off, patched or cut short)."""
    ordered = sorted(activities, key=lambda a: a.order)
    marks = [i for i, a in enumerate(ordered) if MARKER in a.name]
    if len(marks) < 2:
        return {"tampered": "profiler_record"}
    inside = [a.name for a in ordered[marks[0] + 1:marks[-1]]]
    return {"launches": len(inside), "kernels": sorted(set(inside))[:12]}


def count_launches(call: Call, device: str, tools: Instruments | None = None) -> tuple[Any, dict]:
    """The call under the profiler, between two marker kernels: how many device activities (kernels,
    copies, fills) it launched (`launches_between_markers`)."""
    tools = tools or instruments()
    synchronize(device, tools)
    with tools.profile(activities=[tools.cuda_activity]) as prof:
        tools.sleep(MARKER_CYCLES)
        returned = call()
        tools.sleep(MARKER_CYCLES)
        synchronize(device, tools)
    activities = [Activity(e.name, (e.id, e.time_range.start)) for e in prof.events()
                  if e.device_type == tools.cuda_device_type]
    return returned, launches_between_markers(activities)


# --- no-sync: CUDA's sync debug mode, and a witness kernel that must outlast the call ----------------

@dataclass(frozen=True)
class WitnessReading:
    """One call made with the sync debug mode set to error, behind a witness kernel."""
    spin_s: float         # how long the witness spins
    call_s: float         # the call's host time
    pending: bool         # the witness had not finished when the call returned
    mode_after: int       # CUDA's sync debug mode read back after the call


def witness_verdict(reading: WitnessReading) -> str:
    """"tampered" (the call changed the debug mode), "finished" (the witness had finished when the call
    returned: the call waited for the device, or outlasted the witness) or "pending"."""
    if reading.mode_after != SYNC_ERROR:
        return "tampered"
    return "pending" if reading.pending else "finished"


def first_witness_s(warm_s: float) -> float:
    """The first witness: 20 x the warm-up call's host time, within MIN_WITNESS_S and MAX_FIRST_WITNESS_S."""
    return min(MAX_FIRST_WITNESS_S, max(MIN_WITNESS_S, 20 * warm_s))


def longer_witness_s(reading: WitnessReading) -> float:
    """The retry after a finished witness: LONGER times the witness and the call."""
    return LONGER * max(reading.spin_s, reading.call_s)


_spin_rates: dict[int, float] = {}


def spin_rate(tools: Instruments) -> float:
    """The witness kernel's cycles per second on the current device, timed once (after a warm-up spin:
    the kernel's first launch loads it)."""
    index = tools.get_device()
    if index not in _spin_rates:
        stream = current_stream(tools)
        tools.sleep(MARKER_CYCLES)
        start, end = tools.event_type(enable_timing=True), tools.event_type(enable_timing=True)
        tools.record(start, stream)
        tools.sleep(CALIBRATION_CYCLES)
        tools.record(end, stream)
        tools.wait(end)
        _spin_rates[index] = CALIBRATION_CYCLES / max(tools.elapsed_ms(start, end) / 1e3, 1e-9)
    return _spin_rates[index]


def witnessed_call(tools: Instruments, call: Call, device: str, spin_s: float,
                   before: int) -> tuple[Any, WitnessReading]:
    """The call with the sync debug mode set to error, behind a witness kernel that spins `spin_s`; the
    mode is set back to `before` (the mode before the measurement began) afterwards."""
    synchronize(device, tools)
    tools.sleep(int(spin_s * spin_rate(tools)))
    witness = tools.event_type()
    tools.record(witness, current_stream(tools))
    tools.set_sync_debug_mode(SYNC_ERROR)
    try:
        started = time.perf_counter()
        returned = call()
        call_s = time.perf_counter() - started
        pending = not tools.query(witness)
        mode_after = tools.get_sync_debug_mode()
    finally:
        tools.set_sync_debug_mode(before)
    synchronize(device, tools)
    return returned, WitnessReading(spin_s, call_s, pending, mode_after)


def check_no_sync(call: Call, device: str, tools: Instruments | None = None) -> tuple[Any, dict]:
    """The warm-up (`warm_up`: unmeasured, it compiles and caches what the call needs), then the call
    behind a witness (retried once, longer, when it had finished), with the sync debug mode set to error.
    Measures: {"witness": "pending" | "finished"}, or {"tampered": "sync_debug_mode"}."""
    tools = tools or instruments()
    before = tools.get_sync_debug_mode()      # a warm-up call that changes the mode does not keep it changed
    try:
        spin_s = first_witness_s(warm_up(call, device, tools=tools))
        for _ in range(2):
            returned, reading = witnessed_call(tools, call, device, spin_s, before)
            verdict = witness_verdict(reading)
            if verdict == "tampered":
                return returned, {"tampered": "sync_debug_mode"}
            if verdict == "pending":
                break
            spin_s = longer_witness_s(reading)
        return returned, {"witness": verdict}
    finally:
        tools.set_sync_debug_mode(before)

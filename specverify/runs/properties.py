"""Properties of a production call beyond its output bytes, checked on CUDA targets (registered checks).

- `no-sync`: the call never synchronizes the device with the host: CUDA's sync debug mode set to error,
  and a witness kernel queued before the call that must still be running when the call returns; a call
  that changes the debug mode has tampered with the measurement;
- `launches`: how many device activities (kernels, copies, fills) one call launches, counted between
  two marker kernels, at most the bound the stage's record gives its backend (`Stage.launches`); the
  largest count seen is reported either way; a record without both markers has been tampered with;
- `graph-replay`: the call captured in a CUDA graph and replayed gives the bytes the contract requires
  (not asked of a stage that takes host lists: their copy to the device cannot be captured);
- `stream-order`: the call made with a fresh non-default stream current, its outputs read back on that
  stream alone (no device synchronization), gives the bytes the contract requires: an implementation that
  does its work on another stream without ordering it before the caller's fails ("the outputs were not
  ready on the caller's stream"), where the same input gives the contract's bytes on the default stream;
  a call wrong there too is a wrong answer, reported as such;
- `cross-device`: the same drawn case called on every visible device leaves identical bytes (the whole
  arena: outputs, poison and guards) and returns the same value; asked where two or more devices are
  visible (`device_count`); a sharded run keeps it in the driver, which sees every device.
Each draws a tenth of the valid tier's examples (at least 3), the same inputs as that tier's start, within
the target's declared domain (the search's `tier_strategy`, as every check draws). An isolated target's
property checks each run in a fresh worker (`fresh_caller`): nothing an earlier call of the target did in
its process carries over. In any process, every measured call comes after the same
warm-up (the backend's warm-up once per device, `calls.warm_backend`; then `device.warm_up` in every probe
of these checks), so a check's verdict does not depend on what ran before it. The measurements are
`specverify.judge.device`'s.
"""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from typing import Iterator

import numpy as np

from specverify.judge import materialize
from specverify.judge.calls import InProcess, Result
from specverify.judge.compare import element_bytes_differ
from specverify.judge.device import TAMPERING
from specverify.judge.harness import Failure, clock, expect, judge
from specverify.judge.materialize import same_value
from specverify.records.backends import Target
from specverify.records.stage import Example
from specverify.records.values import output_value
from specverify.runs.protocol import Check, Context, Outcome
from specverify.runs.search import search

# CPU "devices" the cross-device check compares (tests set 2: each call sees its index in `device_index`).
CPU_DEVICES = 1
device_index: ContextVar[int] = ContextVar("device_index", default=0)


def on_cuda(target: Target) -> str | None:
    if target.device != "cuda":
        return "a device property: checked on CUDA targets"
    if target.stage.host or target.backend.host_only:
        return "host code"
    return None


def capturable(target: Target) -> str | None:
    """Graph replay needs every array argument on the device: a stage that takes host lists cannot be
    captured (its call copies them to the device)."""
    lists = [f.name for f in target.stage.inputs if f.dtype == "int" and f.shape]
    if lists:
        return f"takes host lists ({', '.join(lists)}): a CUDA graph cannot capture their copy to the device"
    return on_cuda(target)


def planned(target: Target, profile, examples: int | None) -> int:
    return max(3, profile.count("valid", examples) // 10)


def call_with(probe: str, target: Target, example: Example, ctx: Context):
    plan, arena = materialize.plan(target.stage, example)
    return ctx.caller.call(plan, arena, probe=probe)


def tampering(target: Target, result: Result, measure: str, missing: str) -> None:
    """Raise when the call's measures report tampering, or lack `measure` (reported as `missing`)."""
    code = result.measures.get("tampered", None if measure in result.measures else missing)
    if code is not None:
        words = TAMPERING.get(str(code), f"an unknown report ({str(code)[:60]!r})")
        raise Failure(f"{target.label} tampered with the measurement: {words}", kind="tampered")


def verify_no_sync(target: Target, example: Example, ctx: Context) -> dict:
    result = call_with("no_sync", target, example, ctx)
    if result.error is not None:
        words = "synchronized the device with the host inside the call" if "synchroniz" in result.error.text \
            else result.error.headline()
        raise Failure(f"{target.label} {words}: {result.error.text}", result.error.trace, "sync")
    tampering(target, result, "witness", "no_witness")
    if result.measures["witness"] != "pending":
        raise Failure(f"{target.label} synchronized the device with the host inside the call (the witness "
                      f"kernel had finished when the call returned)", kind="sync")
    return {}


def verify_launches(target: Target, example: Example, ctx: Context) -> dict:
    result = call_with("launches", target, example, ctx)
    if result.error is not None:
        raise Failure(f"{target.label} {result.error.headline()}", result.error.trace, result.error.kind)
    tampering(target, result, "launches", "profiler_record")
    count = int(result.measures["launches"])
    bound = target.stage.launches.get(target.backend.name)
    if bound is not None and count > bound:
        kernels = ", ".join(map(str, result.measures.get("kernels", [])))
        raise Failure(f"{target.label} launched {count} device activities in one call (its record allows "
                      f"{bound}): {kernels}", kind="launches")
    return {"launches": count}


def verify_graph_replay(target: Target, example: Example, ctx: Context) -> dict:
    expected = expect(target.stage, example)
    result = call_with("graph_replay", target, example, ctx)
    failure = judge(target.stage, example, expected, result, f"{target.label} (captured in a CUDA graph, replayed)")
    if failure is not None:
        raise failure
    return {}


def verify_stream_order(target: Target, example: Example, ctx: Context) -> dict:
    """Bytes that differ on the caller's non-default stream are a stream-order fault only where the same
    input gives the contract's bytes on the default stream; where it does not, the call is wrong whatever
    the stream (a wrong answer, reported as such)."""
    expected = expect(target.stage, example)
    result = call_with("stream_order", target, example, ctx)
    if result.error is not None:
        raise judge(target.stage, example, expected, result, f"{target.label} (called on a non-default stream)")
    failure = judge(target.stage, example, expected, result,
                    f"{target.label}: the outputs were not ready on the caller's stream (called with a non-default "
                    f"stream current, read back on that stream without a device synchronization)")
    if failure is None:
        return {}
    plain = judge(target.stage, example, expected, call_with("plain", target, example, ctx), target.label)
    if plain is not None:
        raise Failure(f"{plain.headline} (on the default stream too: a wrong answer, not a stream-order fault)",
                      plain.detail, plain.kind, plain.at)
    raise Failure(failure.headline, failure.detail, "stream", failure.at)


# The judges of one example by a property check, by check name (the information draws outside a declared
# domain judge a host hint's restriction by no-sync: specverify.runs.beyond_domain).
PROPERTY_JUDGES = {"no-sync": verify_no_sync, "launches": verify_launches, "graph-replay": verify_graph_replay,
                   "stream-order": verify_stream_order}


@contextmanager
def fresh_caller(ctx: Context) -> Iterator[Context]:
    """`ctx` with a caller no earlier call could influence: an isolated caller is replaced by a fresh
    worker of the same implementation (closed afterwards); an in-process one (our kernels) is kept."""
    base = ctx.caller
    if not getattr(base, "isolated", False):
        yield ctx
        return
    caller = base.like()
    try:
        problem = caller.start()
        if problem is not None:
            raise RuntimeError(f"a fresh worker could not start: {problem.text}")
        yield replace(ctx, caller=caller)
    finally:
        caller.close()


def property_check(name: str, doc: str, order: int, verify, applies=on_cuda) -> Check:
    def run(target: Target, ctx: Context) -> Outcome:
        with fresh_caller(ctx) as fresh:
            return search(target, name, "valid", planned(target, ctx.profile, ctx.examples), verify, fresh)

    return Check(name, doc, order, applies, run, planned)


NO_SYNC = (property_check("no-sync", "no device-to-host synchronization inside the call", 40,
                                  verify_no_sync))
LAUNCHES = (property_check("launches", "device launches per call, within the record's bound", 41,
                                   verify_launches))
GRAPH_REPLAY = (property_check("graph-replay", "a CUDA-graph capture replays to the same bytes", 42,
                                       verify_graph_replay, capturable))
STREAM_ORDER = (property_check("stream-order", "outputs ready on the caller's non-default stream, read "
                                       "there without a device sync", 43, verify_stream_order))


def device_count(device: str) -> int:
    if device != "cuda":
        return CPU_DEVICES
    from specverify import env

    if not env.cuda_available():
        return 0
    import torch

    return torch.cuda.device_count()


def on_devices(target: Target) -> str | None:
    if target.stage.host or target.backend.host_only:
        return "host code"
    if target.stage.own_randomness:
        return "its random numbers are its own (declared): no two calls need give the same bytes"
    count = device_count(target.device)
    return None if count >= 2 else f"needs two or more {target.device} devices ({count} visible)"


def device_callers(target: Target, base) -> list:
    """One caller per visible device ("cuda:i"; CPU: "cpu" each time), built like `base`."""
    count = device_count(target.device)
    names = [f"cuda:{i}" for i in range(count)] if target.device == "cuda" else ["cpu"] * count
    if not getattr(base, "isolated", False):
        return [InProcess(base.impl, base.lib, name, base.timeout, base.warm_up, base.spare) for name in names]
    callers = []
    try:
        for name in names:
            callers.append(base.like(name))
            problem = callers[-1].start()
            if problem is not None:
                raise RuntimeError(f"a worker on {name} could not start: {problem.text}")
    except BaseException:  # a worker that could not start (or could not be set up: the run's error)
        for started in callers:
            started.close()
        raise
    return callers


def first_device_difference(plan: materialize.Plan, a: Result, b: Result) -> str | None:
    """Where two calls' arenas (or returned values) first differ, in words."""
    for slot in plan.slots.values():
        _, base_a, _ = slot.split(a.arena)
        _, base_b, _ = slot.split(b.arena)
        differ = element_bytes_differ(base_a, base_b)
        if differ.any():
            where = tuple(int(i) for i in np.argwhere(differ)[0])
            return (f"`{slot.name}` base {list(where)}: {output_value(base_a[where])} on the first device, "
                    f"{output_value(base_b[where])} on this one ({int(differ.sum())} element(s) differ)")
        if a.arena[slot.offset:slot.end].tobytes() != b.arena[slot.offset:slot.end].tobytes():
            return f"the guard bytes around `{slot.name}`"
    if not same_value(a.returned, b.returned):
        return f"the returned value ({a.returned!r} against {b.returned!r})"
    return None


def verify_devices(target: Target, example: Example, callers: list) -> dict:
    results = []
    for index, caller in enumerate(callers):
        with clock("call"):
            plan, arena = materialize.plan(target.stage, example)
            token = device_index.set(index)
            try:
                result = caller.call(plan, arena)
            finally:
                device_index.reset(token)
        if result.error is not None:
            raise Failure(f"{target.label} on device {index} {result.error.headline()}", result.error.trace,
                          result.error.kind)
        results.append(result)
    with clock("judge"):
        for index, result in enumerate(results[1:], 1):
            where = first_device_difference(plan, results[0], result)
            if where is not None:
                raise Failure(f"{target.label} gave different bytes on device {index} than on device 0: {where}",
                              kind="device")
    return {"devices": len(callers)}


def run_cross_device(target: Target, ctx: Context) -> Outcome:
    callers = device_callers(target, ctx.caller)
    try:
        return search(target, "cross-device", "valid", planned(target, ctx.profile, ctx.examples),
                      lambda t, example, c: verify_devices(t, example, callers), ctx)
    finally:
        for caller in callers:
            caller.close()


CROSS_DEVICE = (Check("cross-device", "identical bytes from the same case on every visible device", 44,
                              on_devices, run_cross_device, planned, spans_devices=True))

PROPERTY_CHECKS = (NO_SYNC, LAUNCHES, GRAPH_REPLAY, STREAM_ORDER, CROSS_DEVICE)

"""A bench run: every selected (stage, implementation, B, V) checked once against the oracle, then timed.

The input is the stage's `bench` example, planned into an arena as for any check (`materialize`), so
an outside implementation gets the same buffers as ours; it runs in a worker process as in
`specverify check`. The check is the harness's (`expect`, `judge`) on the first call; only an
implementation that passed is timed, by a second call with the `bench` probe (`timing`), in the process
that runs it. Each result is one row (a dict, JSON-safe); `finish` adds the ratios to the launch floor and
the copy bandwidth measured in the same run.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from specverify.bench.baselines import BASELINES
from specverify.judge.harness import OracleError, expect, judge
from specverify.judge.materialize import Plan
from specverify.judge.timing import Settings
from specverify.records import backends
from specverify.records.backends import Target
from specverify.records.stage import BENCH_SPEC, Stage
from specverify.runs import session

BATCHES = (1, 16, 64, 256, 512, 1024)
VOCABS = (32000, 151936)


@dataclass
class Options:
    device: str
    batches: tuple[int, ...] = BATCHES
    vocabs: tuple[int, ...] = VOCABS
    timing: Settings = field(default_factory=Settings)
    backends: tuple[str, ...] | None = None     # our backends to bench (None: every one the stage has)
    outside: dict[str, str] = field(default_factory=dict)  # stage -> "module:function" benched beside ours
    plan: session.RunPlan = field(default_factory=lambda: session.RunPlan.build(
        isolate=False, timeout=600.0, keep_findings=False))   # the calls: seed (of the inputs), time limit


def reads_vocab(stage: Stage) -> bool:
    """Does the stage read probability tables (a field with V in its shape)? Those are benched at every
    vocabulary; the others at the last one (their vocab_size scalar, where they take one)."""
    return any("V" in re.split(r"[^A-Za-z0-9_]+", f.shape) for f in (*stage.inputs, *stage.outputs))


def sizes(stage: Stage, options: Options) -> list[tuple[int, int]]:
    vocabs = options.vocabs if reads_vocab(stage) else options.vocabs[-1:]
    return [(b, v) for b in options.batches for v in vocabs]


def capturable(stage: Stage) -> bool:
    """A stage that takes host lists copies them to the device in the call: no CUDA graph."""
    return not any(f.dtype == "int" and f.shape for f in stage.inputs)


def targets(stage: Stage, options: Options) -> tuple[list[tuple[str, Target]], list[str]]:
    """(column name, target) of every implementation benched for `stage`, and notes on those left out.
    Host stages run on the CPU whatever the device."""
    device = "cpu" if stage.host else options.device
    found, notes = [], []
    for name in backends.stage_backends(stage):
        if backends.BACKENDS[name].reference or (options.backends and name not in options.backends):
            continue
        why = backends.unavailable(name, device)
        if why:
            notes.append(f"{stage.name} {name}/{device}: not benched: {why}")
        else:
            found.append((name, backends.target(stage, name, device)))
    if stage.name in options.outside:
        found.append(("impl", backends.target(stage, "impl", device, options.outside[stage.name])))
    baseline = BASELINES.get(stage.name)
    if baseline is not None:
        found.append((baseline.name, Target(stage, backends.BACKENDS["numpy"], "cpu", baseline.source,
                                            backends.load(baseline.source))))
    return found, notes


def moved_bytes(plan: Plan) -> int:
    """Bytes of the call's array inputs and outputs (views, not their storage gaps)."""
    total = sum(int(np.prod(s.shape, dtype=np.int64)) * s.itemsize for s in plan.slots.values())
    return total + sum(int(np.asarray(v).nbytes) for _, v in plan.containers.values())


def bench_stage(stage: Stage, options: Options, progress: Callable[[dict], None]) -> tuple[list[dict], list[str]]:
    """Rows of one stage: every target at every size."""
    chosen, notes = targets(stage, options)
    if not chosen:
        return [], notes
    settings = Settings(options.timing.calls, options.timing.replays, options.timing.repeat,
                        graph=capturable(stage), launches=not stage.host)
    callers: dict[str, Any] = {}
    rows = []
    try:
        for batch, vocab in sizes(stage, options):
            example = stage.bench(batch, vocab, np.random.default_rng([options.plan.run_seed, batch, vocab]))
            try:
                expected = expect(stage, example)
                error = None
            except OracleError as exc:
                expected, error = None, str(exc)
            for name, target in chosen:
                row = {"stage": stage.name, "family": stage.family, "backend": name, "source": target.source,
                       "device": target.device, "host_stage": stage.host, "B": batch, "V": vocab,
                       "K": BENCH_SPEC}
                if error is not None:
                    row.update(status="error", message=error)
                else:
                    if name not in callers:
                        callers[name] = session.caller_for(target, options.plan)
                    row.update(checked_and_timed(stage, target, callers[name], example, expected, settings))
                rows.append(row)
                progress(row)
            del expected
    finally:
        for caller in callers.values():
            caller.close()
    return rows, notes


def checked_and_timed(stage: Stage, target: Target, caller, example, expected, settings: Settings) -> dict:
    """The check (first call, judged), then, only when it passed, the timed calls."""
    plan = expected.plan
    found: dict[str, Any] = {"bytes": moved_bytes(plan)}
    result = caller.call(plan, expected.before.copy())
    failure = judge(stage, example, expected, result, target.label)
    if failure is not None:
        return {**found, "status": "wrong" if failure.kind == "wrong" else "error", "kind": failure.kind,
                "message": failure.headline}
    result = caller.call(plan, expected.before.copy(), probe=settings.probe())
    if result.error is not None:
        return {**found, "status": "error", "kind": result.error.kind,
                "message": f"{target.label} (timed calls) {result.error.headline()}"}
    measures = {k: v for k, v in result.measures.items() if k in MEASURES}
    if stage.host:   # host code: no device time
        measures.pop("device_us", None)
        measures.pop("device_method", None)
    return {**found, "status": "ok", **measures}


MEASURES = ("host_us", "device_us", "device_method", "launches", "kernels", "graph_error")


def finish(rows: list[dict], floor: dict, copy: dict) -> None:
    """Add to every timed row: GB/s, whether it is memory-bound, and the ratios to the references.

    Memory-bound: moving its bytes at the copy bandwidth takes at least the launch floor's device time
    (below that, launches and latency set its time, and GB/s says little)."""
    floor_dev, floor_host, copy_gbps = floor.get("device_us"), floor.get("host_us"), copy.get("gbps")
    for row in rows:
        if row.get("status") != "ok":
            continue
        dev, host = row.get("device_us"), row.get("host_us")
        if dev:
            row["gbps"] = row["bytes"] / (dev * 1e3)
            row["device_x_floor"] = dev / floor_dev if floor_dev else None
            row["gbps_x_copy"] = row["gbps"] / copy_gbps if copy_gbps else None
            row["memory_bound"] = bool(copy_gbps and floor_dev and row["bytes"] / (copy_gbps * 1e3) >= floor_dev)
        if host is not None:
            row["host_x_floor"] = host / floor_host if floor_host else None
    by_key = {(r["stage"], r["backend"], r["B"], r["V"]): r for r in rows}
    for name, baseline in BASELINES.items():
        for row in rows:
            base = by_key.get((name, baseline.name, row["B"], row["V"]))
            if row["stage"] == name and row["backend"] != baseline.name and row.get("status") == "ok" \
                    and base is not None and base.get("status") == "ok":
                row["x_baseline"] = row["host_us"] / base["host_us"]


def goals(rows: list[dict]) -> list[dict]:
    """Each baseline's goal, per implementation: met at every B up to its limit?"""
    found = []
    for name, baseline in BASELINES.items():
        by_backend: dict[str, list[dict]] = {}
        for row in rows:
            if row["stage"] == name and "x_baseline" in row and row["B"] <= baseline.max_batch:
                by_backend.setdefault(row["backend"], []).append(row)
        for backend, mine in by_backend.items():
            worst = max(r["x_baseline"] for r in mine)
            found.append({"stage": name, "backend": backend, "baseline": baseline.name, "goal": baseline.goal,
                          "max_batch": baseline.max_batch, "worst": worst, "met": worst <= baseline.goal,
                          "ratios": {str(r["B"]): r["x_baseline"] for r in mine}})
    return found


def settings_json(options: Options) -> dict:
    return {"device": options.device, "batches": list(options.batches), "vocabs": list(options.vocabs),
            "spec": BENCH_SPEC, "seed": options.plan.run_seed, "outside": dict(options.outside),
            "backends": list(options.backends) if options.backends else None, **asdict(options.timing)}


DEVICE_TIME = {
    "cuda": "device time: CUDA-graph replay of {calls} calls, {replays} replays, median per call (events "
            "around eager calls where a call cannot be captured); host time: eager calls, no sync inside",
    "cpu": "no device: 'device time' is the wall time of synchronous calls on the CPU (no graph replay, no "
           "launch counts); host time: the same calls timed without synchronizing",
}


def run(stages: list[Stage], options: Options, progress: Callable[[dict], None] = lambda row: None) -> dict:
    """The whole bench: the references, then every stage; the JSON-safe results."""
    from specverify import env
    from specverify.bench import results
    from specverify.judge import timing

    env.prepare()
    floor = timing.floor(options.device, options.timing)
    copy = timing.copy_bandwidth(options.device, options.timing)
    rows, notes = [], []
    for stage in stages:
        if stage.bench is None:
            notes.append(f"{stage.name}: not benched: its record has no bench input (Stage.bench)")
            continue
        found, left_out = bench_stage(stage, options, progress)
        rows += found
        notes += left_out
    finish(rows, floor, copy)
    return {"specverify_bench": 1, "machine": results.machine(options.device), "settings": settings_json(options),
            "device_time": DEVICE_TIME[options.device].format(**asdict(options.timing)),
            "floor": floor, "copy": copy, "rows": rows, "goals": goals(rows), "notes": notes}

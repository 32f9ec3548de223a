"""Sharded runs: a session's targets spread over worker processes (one per GPU) or over Ray tasks.

The unit of work is one target with all its checks, run by `session.run_target` exactly as in one
process (its time limit, its caller, its skip waivers). A local run uses a standard
`concurrent.futures.ProcessPoolExecutor` (spawn context) whose initializer pins each worker to one GPU by
setting CUDA_VISIBLE_DEVICES before CUDA is touched in it; `cpu:N` starts N unpinned workers (the parallel
path without a GPU). Checks that compare devices (`Check.spans_devices`) run in the driver, which sees
every device. Workers report progress through a queue; the driver settles waivers, feeds the one
listener and returns the outcomes in the order of a run in one process. The draws depend on the run seed,
the stage and the tier only (`profiles.seed_for`), so the examples checked do not depend on the number
of workers.
"""
from __future__ import annotations

import copy
import dataclasses
import multiprocessing
import os
import queue
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from specverify import env, session
from specverify.backends import Target
from specverify.checks import CHECKS, Outcome
from specverify.session import Listener, RunPlan


class DevicesError(ValueError):
    """A --devices value that names no usable device (bad usage)."""


@dataclass(frozen=True)
class Lane:
    """One worker: the CUDA_VISIBLE_DEVICES value it is pinned to (None: not pinned) and its name."""
    pin: str | None
    name: str


def lanes(spec: str) -> list[Lane]:
    """The workers `--devices` asks for: "all" (every visible GPU), "all:K" (K workers on each: more host
    cores for the oracles), "0,1" (indices among the visible GPUs; one may repeat) or "cpu:N" (N workers,
    not pinned)."""
    spec = spec.strip()
    if spec.startswith("cpu:"):
        count = spec[4:]
        if not count.isdigit() or int(count) < 1:
            raise DevicesError(f"--devices {spec}: cpu:N needs a worker count N of at least 1")
        return [Lane(None, f"cpu worker {i}") for i in range(int(count))]
    visible = visible_gpus()
    if not visible:
        raise DevicesError(f"--devices {spec}: no CUDA device is visible here (use cpu:N for N CPU workers)")
    if spec == "all" or spec.startswith("all:"):
        per = spec[4:] or "1"
        if not per.isdigit() or int(per) < 1:
            raise DevicesError(f"--devices {spec}: all:K needs a worker count per GPU K of at least 1")
        chosen = [i for i in range(len(visible)) for _ in range(int(per))]
    else:
        try:
            chosen = [int(part) for part in spec.split(",")]
        except ValueError:
            raise DevicesError(f"--devices {spec}: expected 'all', 'cpu:N' or GPU indices such as 0,1") from None
        wrong = [i for i in chosen if not 0 <= i < len(visible)]
        if wrong:
            raise DevicesError(f"--devices {spec}: GPU {wrong[0]} is not among the {len(visible)} visible here")
    return [Lane(visible[i], f"gpu {i}" + (f".{chosen[:k].count(i)}" if chosen.count(i) > 1 else ""))
            for k, i in enumerate(chosen)]


def visible_gpus() -> list[str]:
    """The CUDA_VISIBLE_DEVICES entry of each GPU this process sees (its own list, or 0..n-1)."""
    if not env.cuda_available():
        return []
    import torch

    count = torch.cuda.device_count()
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return listed[:count] if len(listed) >= count else [str(i) for i in range(count)]


# --- the worker side -----------------------------------------------------------------------------------

_lane: Lane | None = None
_events = None


READY_TIMEOUT = 120.0    # seconds a worker waits for the other lanes before it takes work anyway


def pin(free, events, ready) -> None:
    """Pool initializer: take a lane and pin this process to its GPU (before anything touches CUDA), then
    wait until every lane has started (`ready`, a barrier), so that a lane that starts late still gets work."""
    global _lane, _events
    _lane, _events = free.get(), events
    if _lane.pin is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = _lane.pin
    env.prepare()
    try:
        ready.wait(READY_TIMEOUT)
    except threading.BrokenBarrierError:   # a lane that never started: go on without it
        pass


class Forward(Listener):
    """A worker's listener: progress events go to the driver, tagged with the lane."""

    def __init__(self, index: int):
        self.index = index

    def check_started(self, target, check, planned, lane=""):
        _events.put(("started", _lane.name, self.index, check, planned))

    def progress(self, done, lane=""):
        _events.put(("progress", _lane.name, done))


def describe(target: Target) -> tuple:
    """What a worker rebuilds a target from (a function handed over directly cannot travel)."""
    if target.impl is not None and target.backend.name != "oracle":
        raise DevicesError(f"{target.label}: a function handed over directly cannot run in a worker; "
                           f"name it by import path")
    return (target.stage.name, target.backend.name, target.device, target.source, target.dialect, target.domain,
            target.interpreted)


def rebuild(spec: tuple) -> Target:
    """The target `describe` described (its dialect's record and its declared domain, a picklable Domain)."""
    from specverify import backends, dialects, registry

    stage, backend, device, source, dialect, domain, interpreted = spec
    record = dialects.judged(registry.all_stages()[stage], dialect)
    if backend == "oracle":
        return backends.target(record, backend, device)
    return Target(record, backends.BACKENDS[backend], device, source, dialect=dialect, domain=domain,
                  interpreted=interpreted)


def work(index: int, spec: tuple, plan: RunPlan, only: set[str], lane_name: str | None = None,
         listener: Listener | None = None) -> tuple[int, list[Outcome], list[int]]:
    """Run one target's checks in this worker: (index, outcomes not yet settled, skip waivers' new uses)."""
    target = rebuild(spec)
    entries = plan.waivers.entries if plan.waivers is not None else []
    before = [w.covered for w in entries]
    outcomes = session.run_target(target, plan, listener or Forward(index), only, settle=False)
    for outcome in outcomes:
        outcome.worker = lane_name or _lane.name
    return index, outcomes, [w.covered - b for w, b in zip(entries, before)]


# --- the driver side ------------------------------------------------------------------------------------

def split(targets: list[Target], plan: RunPlan) -> tuple[list[tuple[int, set[str]]], list[tuple[int, set[str]]]]:
    """(work for the workers, work for the driver): per target index, the names of its checks."""
    remote, here = [], []
    for i, target in enumerate(targets):
        names = [c.name for c in session.checks_of(target, plan)]
        spanning = {n for n in names if CHECKS[n].spans_devices}
        if set(names) - spanning:
            remote.append((i, set(names) - spanning))
        if spanning:
            here.append((i, spanning))
    return remote, here


class Gather:
    """The driver's record of a sharded run: outcomes by target, waivers settled once, one listener."""

    def __init__(self, targets: list[Target], plan: RunPlan, listener: Listener):
        self.targets, self.plan, self.listener = targets, plan, listener
        self.by_target: dict[int, list[Outcome]] = {}
        self.lock = threading.Lock()

    def event(self, message: tuple) -> None:
        with self.lock:
            if message[0] == "started":
                _, lane, index, check, planned = message
                self.listener.check_started(self.targets[index], check, planned, lane=lane)
            else:
                self.listener.progress(message[2], lane=message[1])

    def add(self, index: int, outcomes: list[Outcome], uses: list[int]) -> None:
        target = self.targets[index]
        with self.lock:
            waivers = self.plan.waivers
            if waivers is not None:
                for w, n in zip(waivers.entries, uses):
                    w.covered += n
            for outcome in outcomes:
                if waivers is not None:
                    waivers.settle(target, outcome)
                self.listener.check_done(target, outcome)
            self.by_target.setdefault(index, []).extend(outcomes)

    def broke(self, index: int, names: set[str], exc: BaseException) -> None:
        from specverify.calls import error_text

        target = self.targets[index]
        lost = [Outcome(target.stage.name, target.backend.name, target.device, name, status="error",
                        source=target.source, headline=f"the worker running {target.label} broke: {error_text(exc)}")
                for name in names]
        self.add(index, lost, [])

    def outcomes(self) -> list[Outcome]:
        """Every outcome, targets in their order and each target's checks in running order."""
        order = {c: i for i, c in enumerate(CHECKS)}
        found = []
        for index in sorted(self.by_target):
            found += sorted(self.by_target[index], key=lambda o: (CHECKS[o.check].order, order[o.check]))
        return found


def shipping(plan: RunPlan) -> RunPlan:
    """The plan a worker gets: a copy of the waivers taken before the driver settles any outcome
    (the pool pickles tasks while the driver runs)."""
    return dataclasses.replace(plan, waivers=copy.deepcopy(plan.waivers))


def run_local(targets: list[Target], plan: RunPlan, spec: str, listener: Listener | None = None) -> list[Outcome]:
    """The run over a process pool, one worker per lane of `spec` (see `lanes`)."""
    env.prepare()
    chosen = lanes(spec)
    gather = Gather(targets, plan, listener or Listener())
    remote, here = split(targets, plan)
    specs = {i: describe(targets[i]) for i, _ in remote}
    shipped = shipping(plan)
    ctx = multiprocessing.get_context("spawn")
    free, events = ctx.Queue(), ctx.Queue()
    for lane in chosen:
        free.put(lane)
    stop = threading.Event()
    reader = threading.Thread(target=pump, args=(events, gather, stop), daemon=True)
    reader.start()
    try:
        with ProcessPoolExecutor(len(chosen), mp_context=ctx, initializer=pin,
                                 initargs=(free, events, ctx.Barrier(len(chosen)))) as pool:
            futures = {pool.submit(work, i, specs[i], shipped, names): (i, names) for i, names in remote}
            run_here(targets, plan, here, gather)
            for future, (i, names) in futures.items():
                try:
                    gather.add(*future.result())
                except Exception as exc:  # the worker died (a crash in a kernel) or could not start
                    gather.broke(i, names, exc)
    finally:
        stop.set()
        reader.join()
    return gather.outcomes()


def pump(events, gather: Gather, stop: threading.Event) -> None:
    """Feed the workers' progress events to the listener until the run is over."""
    while True:
        try:
            gather.event(events.get(timeout=0.1))
        except queue.Empty:
            if stop.is_set():
                return


def run_here(targets: list[Target], plan: RunPlan, here: list[tuple[int, set[str]]], gather: Gather) -> None:
    """The checks that span devices, in the driver (it sees every device)."""

    class Tagged(Listener):
        def check_started(self, target, check, planned, lane=""):
            with gather.lock:
                gather.listener.check_started(target, check, planned, lane="driver")

        def progress(self, done, lane=""):
            with gather.lock:
                gather.listener.progress(done, lane="driver")

    for i, names in here:
        outcomes = session.run_target(targets[i], plan, Tagged(), names, settle=False)
        for outcome in outcomes:
            outcome.worker = "driver"
        gather.add(i, outcomes, [])

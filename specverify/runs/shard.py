"""Sharded runs: a session's targets spread over workers (one per GPU, or per CPU core) or over Ray tasks.

Every target runs with all its checks by `session.run_target` exactly as in one process (its time limit,
its caller, its skip waivers). A local run's unit of work is one stage: its targets, in order, in one
worker and one `session.stage_scope` (the later targets are handed the earlier ones' draws and the
oracle's answers). `spread` chooses the workers ("lanes"): those --devices names, each pinned to one GPU
by CUDA_VISIBLE_DEVICES set before CUDA is touched in it, or unpinned (`cpu:N`); without --devices, one
per usable core where every target runs on the CPU. An unpinned lane 0 is this process, which takes
stages in order once its own work is done (its imports are); the others, spawned processes, take the
heaviest stage left (`weight`), so that no long stage is left for the end, each asking the driver for the
next stage over a pipe of its own and sending every event (a check started, its progress, its outcome)
back on it. Checks that compare devices (`Check.spans_devices`) run
in the driver, which sees every device. The driver settles waivers and hands the one listener every
outcome in the order of a run in one process, as soon as the outcomes before it have come. A worker
process that dies fails the checks of its stage it had not finished and another takes its place;
SIGTERM or Ctrl-C ends the workers and the run with the outcomes that came. The draws depend on the run
seed, the stage and the tier only (`profiles.seed_for`, `profiles.keep_draws_to_the_seed`), so the
examples checked do not depend on the number of workers.
"""
from __future__ import annotations

import copy
import dataclasses
import multiprocessing
import os
import signal
import threading
import warnings
from dataclasses import dataclass
from typing import Callable

from specverify import env, interrupts
from specverify.judge.calls import Interrupted, error_text
from specverify.records.backends import Target
from specverify.runs import session
from specverify.runs.catalogue import CHECKS
from specverify.runs.protocol import Outcome
from specverify.runs.session import Listener, RunPlan

MOST_WORKERS = 8    # the default spread's cap: workers on the CPU when --devices is not given


class DevicesError(ValueError):
    """A --devices value that names no usable device (bad usage)."""


@dataclass(frozen=True)
class Lane:
    """One worker: the CUDA_VISIBLE_DEVICES value it is pinned to (None: not pinned), its name, and
    whether it is this process (`here`; else a process of its own)."""
    pin: str | None
    name: str
    here: bool = False


def lanes(spec: str) -> list[Lane]:
    """The workers `--devices` asks for: "all" (every visible GPU), "all:K" (K workers on each: more host
    cores for the oracles), "0,1" (indices among the visible GPUs; one may repeat) or "cpu:N" (N workers,
    not pinned: this process and N - 1 others)."""
    spec = spec.strip()
    if spec.startswith("cpu:"):
        count = spec[4:]
        if not count.isdigit() or int(count) < 1:
            raise DevicesError(f"--devices {spec}: cpu:N needs a worker count N of at least 1")
        return [Lane(None, f"cpu worker {i}", here=i == 0) for i in range(int(count))]
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


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity mask where the system has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:    # no affinity masks here (macOS)
        return os.cpu_count() or 1


def spread(spec: str | None, targets: list[Target], plan: RunPlan) -> list[Lane]:
    """The workers a local run uses; none: the run stays in this process. `spec` (--devices) given: its
    lanes, except that one CPU worker ("cpu:1") is this process. Not given: on the CPU, one worker per
    usable core, at most MOST_WORKERS and at most one per stage with work for a worker; none where a
    target runs on CUDA (name the GPUs with --devices) or one worker would do."""
    if spec is not None:
        chosen = lanes(spec)
        return [] if len(chosen) == 1 and chosen[0].here else chosen
    if any(t.device != "cpu" for t in targets):
        return []
    count = min(usable_cores(), MOST_WORKERS, len(units(targets, split(targets, plan)[0])))
    return lanes(f"cpu:{count}") if count > 1 else []


def run(targets: list[Target], plan: RunPlan, spec: str | None = None,
        listener: Listener | None = None) -> list[Outcome]:
    """The run over the workers `spread` chooses, or in this process."""
    chosen = spread(spec, targets, plan)
    if chosen:
        return run_local(targets, plan, chosen, listener)
    return session.run(targets, plan, listener)


# --- the worker side -----------------------------------------------------------------------------------

class Forward(Listener):
    """A worker's listener: every event goes to the driver (`send`), tagged with the lane and the target."""

    def __init__(self, index: int, lane: str, send: Callable[[tuple], None]):
        self.index, self.lane, self.send = index, lane, send

    def check_started(self, target, check, planned, lane=""):
        self.send(("started", self.lane, self.index, check, planned))

    def progress(self, done, lane=""):
        self.send(("progress", self.lane, done))

    def check_done(self, target, outcome):
        outcome.worker = self.lane
        self.send(("done", self.index, outcome))


def describe(target: Target) -> tuple:
    """What a worker rebuilds a target from (a function handed over directly cannot travel)."""
    if target.impl is not None and not target.backend.reference:
        raise DevicesError(f"{target.label}: a function handed over directly cannot run in a worker; "
                           f"name it by import path")
    return (target.stage.name, target.backend.name, target.device, target.source, target.dialect, target.domain,
            target.interpreted)


def rebuild(spec: tuple) -> Target:
    """The target `describe` described (its dialect's record and its declared domain, a picklable Domain)."""
    from specverify.records import backends, dialects, registry

    stage, backend, device, source, dialect, domain, interpreted = spec
    record = dialects.judged(registry.all_stages()[stage], dialect)
    if backends.BACKENDS[backend].reference:
        return backends.target(record, backend, device)
    return Target(record, backends.BACKENDS[backend], device, source, dialect=dialect, domain=domain,
                  interpreted=interpreted)


def work(index: int, spec: tuple, plan: RunPlan, only: set[str], lane: str,
         listener: Listener) -> tuple[int, list[Outcome], list[int]]:
    """Run one target's checks in this worker: (index, outcomes not yet settled, skip waivers' new uses)."""
    target = rebuild(spec)
    entries = plan.waivers.entries if plan.waivers is not None else []
    before = [w.covered for w in entries]
    outcomes = session.run_target(target, plan, listener, only, settle=False)
    for outcome in outcomes:
        outcome.worker = lane
    return index, outcomes, [w.covered - b for w, b in zip(entries, before)]


def run_unit(unit: tuple, lane: str, plan: RunPlan, send: Callable[[tuple], None]) -> None:
    """One stage ((unit number, [(target index, description, check names)])) in one `session.stage_scope`:
    `send` each target's events (`Forward`), then ("finished", index, skip waivers' uses) or ("broke",
    index, why)."""
    with session.stage_scope():
        for index, spec, names in unit[1]:
            try:
                _, _, uses = work(index, spec, plan, names, lane, Forward(index, lane, send))
                send(("finished", index, uses))
            except Exception as exc:  # the target could not run here (a missing module, say)
                send(("broke", index, error_text(exc)))


def lane_main(lane: Lane, link, plan: RunPlan) -> None:
    """A worker process: pinned to its lane's GPU before anything touches CUDA, it asks the driver for a
    stage on `link` (("ready",)), runs it (`run_unit`, every event sent on `link`) and asks again, until
    the answer is None. Ctrl-C is the driver's to handle; SIGTERM (the driver ending the run, once it has
    taken the outcomes it reports) ends the worker processes this one started, then this one, at once.
    Warnings are not the run's output (as in the driver)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])    # blocked while it started (`Workers.start`)
    signal.signal(signal.SIGTERM, stop_now)
    warnings.simplefilter("ignore")
    if lane.pin is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = lane.pin
    env.prepare()
    try:
        while True:
            link.send(("ready",))
            unit = link.recv()
            if unit is None:
                return
            run_unit(unit, lane.name, plan, link.send)
    except (EOFError, OSError):   # the driver is gone
        return


def stop_now(number, frame) -> None:
    """A lane's SIGTERM: its worker processes (outside implementations) ended, then the lane."""
    from specverify.judge.worker import end_all

    end_all()
    os._exit(0)


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


def units(targets: list[Target], remote: list[tuple[int, set[str]]]) -> list[list[tuple[int, set[str]]]]:
    """The workers' work grouped by stage (a stage's targets, dialects included, in their order), in the
    order of a run in one process."""
    grouped: dict[str, list[tuple[int, set[str]]]] = {}
    for i, names in remote:
        grouped.setdefault(targets[i].stage.name, []).append((i, names))
    return list(grouped.values())


def weight(targets: list[Target], unit: list[tuple[int, set[str]]]) -> float:
    """A rough cost of a unit, to hand the heavy stages out first: per check, an interpreted target costs
    six of a compiled one, and each float input with a vocabulary axis (a probability table) adds two."""
    total = 0.0
    for i, names in unit:
        target = targets[i]
        tables = sum("float" in f.dtype and "V" in f.shape.replace(" ", "").split(",") for f in target.stage.inputs)
        total += len(names) * (6 if target.slow else 1) * (1 + 2 * tables)
    return total


class Gather:
    """The driver's record of a sharded run: outcomes by target, each handed to the one listener (waivers
    settled first) in the order of a run in one process, as soon as every outcome before it has come. A
    target's outcomes come in two parts, each in running order: "remote" (its checks in a worker) and
    "here" (the checks that span devices, in the driver); the second follows the first."""

    def __init__(self, targets: list[Target], plan: RunPlan, listener: Listener):
        self.targets, self.plan, self.listener = targets, plan, listener
        remote, here = split(targets, plan)
        self.parts: dict[int, list[str]] = {}
        for part, work_ in (("remote", remote), ("here", here)):
            for i, _ in work_:
                self.parts.setdefault(i, []).append(part)
        self.got: dict[tuple[int, str], list[Outcome]] = {}
        self.finished: set[tuple[int, str]] = set()
        self.handed = 0                    # targets whose every outcome the listener has heard of
        self.sent: dict[tuple[int, str], int] = {}
        self.lock = threading.RLock()
        self.all_done = threading.Event()
        self.check_all_done()

    def event(self, message: tuple) -> None:
        with self.lock:
            if message[0] == "started":
                _, lane, index, check, planned = message
                self.listener.check_started(self.targets[index], check, planned, lane=lane)
            elif message[0] == "progress":
                self.listener.progress(message[2], lane=message[1])
            elif message[0] == "done":
                self.arrived(message[1], message[2])
            elif message[0] == "finished":
                self.finish(message[1], "remote", message[2])
            elif message[0] == "broke":
                self.broke(message[1], "remote", message[2])

    def arrived(self, index: int, outcome: Outcome, part: str = "remote") -> None:
        with self.lock:
            self.got.setdefault((index, part), []).append(outcome)
            self.hand_over()

    def finish(self, index: int, part: str, uses=()) -> None:
        """A part of a target is over; `uses`: its skip waivers' new uses."""
        with self.lock:
            waivers = self.plan.waivers
            if waivers is not None:
                for w, n in zip(waivers.entries, uses):
                    w.covered += n
            self.finished.add((index, part))
            self.hand_over()
            self.check_all_done()

    def add(self, index: int, outcomes: list[Outcome], uses: list[int], part: str = "remote") -> None:
        """A part of a target, every outcome at once (a Ray task, the driver's own checks)."""
        with self.lock:
            for outcome in outcomes:
                self.got.setdefault((index, part), []).append(outcome)
            self.finish(index, part, uses)

    def broke(self, index: int, part: str, why: str) -> None:
        """The part ended without some of its outcomes: each missing check fails with `why`."""
        target = self.targets[index]
        with self.lock:
            if (index, part) in self.finished:
                return
            names = dict(split([target], self.plan)[0 if part == "remote" else 1]).get(0, set())
            have = {o.check for o in self.got.get((index, part), [])}
            lost = [Outcome(target.stage.name, target.backend.name, target.device, name, status="error",
                            source=target.source, dialect=target.dialect,
                            headline=f"the worker running {target.label} broke: {why}")
                    for name in sorted(names - have, key=lambda n: (CHECKS[n].order, n))]
            self.add(index, lost, [], part)

    def hand_over(self) -> None:
        """Settle and hand to the listener every outcome whose predecessors have all been handed over."""
        while self.handed < len(self.targets):
            index = self.handed
            for part in self.parts.get(index, []):
                came = self.got.get((index, part), [])
                for outcome in came[self.sent.get((index, part), 0):]:
                    if self.plan.waivers is not None:
                        self.plan.waivers.settle(self.targets[index], outcome)
                    self.listener.check_done(self.targets[index], outcome)
                self.sent[index, part] = len(came)
                if (index, part) not in self.finished:
                    return
            self.handed += 1

    def check_all_done(self) -> None:
        if all((i, part) in self.finished for i, parts in self.parts.items() for part in parts):
            self.all_done.set()

    def outcomes(self) -> list[Outcome]:
        """Every outcome that came, targets in their order and each target's checks in running order (an
        interrupted run's too: those not handed over yet are settled here)."""
        with self.lock:
            order = {c: i for i, c in enumerate(CHECKS)}
            found = []
            for index in sorted({i for i, _ in self.got}):
                mine = []
                for part in self.parts.get(index, []):
                    came = self.got.get((index, part), [])
                    if index >= self.handed and self.plan.waivers is not None:
                        for outcome in came[self.sent.get((index, part), 0):]:
                            self.plan.waivers.settle(self.targets[index], outcome)
                    mine += came
                found += sorted(mine, key=lambda o: (CHECKS[o.check].order, order[o.check]))
            return found


def shipping(plan: RunPlan) -> RunPlan:
    """The plan a worker gets: a copy of the waivers taken before the driver settles any outcome."""
    return dataclasses.replace(plan, waivers=copy.deepcopy(plan.waivers))


class Workers:
    """The driver's workers, one per lane, each given a stage when it asks: this process's lane the first
    left (so the first result lines come early), the others the heaviest left by `weight` (so no long
    stage is left for the end). A lane `here` is this process (after the driver's own work it takes
    stages like the others, its imports done); the others
    are spawned processes (nothing of this process's CUDA state or threads is inherited), each with a pipe
    of its own, so a process that ends is seen as the end of its pipe, after everything it sent. One that
    ends in the middle of a stage fails that stage's unfinished targets and is replaced while stages are
    left (one that ends before it asked for any is not: it could not start); once no worker is left,
    every unfinished target fails."""

    def __init__(self, chosen: list[Lane], gather: Gather, plan: RunPlan, remote: list[tuple[int, set[str]]]):
        self.ctx = multiprocessing.get_context("spawn")
        self.gather, self.plan, self.remote, self.lanes = gather, shipping(plan), remote, chosen
        self.units = units(gather.targets, remote)
        self.described = {i: describe(gather.targets[i]) for i, _ in remote}    # DevicesError before any start
        self.pending = list(range(len(self.units)))           # this process's lane takes the first
        self.weights = [weight(gather.targets, unit) for unit in self.units]   # the others the heaviest
        self.lock = threading.Lock()
        self.running: dict[int, int] = {}                      # lane slot -> the unit it runs
        self.links: dict[int, tuple[multiprocessing.Process, object]] = {}
        self.local = next((slot for slot, lane in enumerate(chosen) if lane.here), None)
        self.local_done = threading.Event()
        if self.local is None:
            self.local_done.set()
        for slot, lane in enumerate(chosen):
            if not lane.here:
                self.start(slot)

    def start(self, slot: int) -> None:
        mine, theirs = self.ctx.Pipe()
        # not daemonic: it starts worker processes of its own for outside implementations; `stop` ends it
        process = self.ctx.Process(target=lane_main, args=(self.lanes[slot], theirs, self.plan),
                                   name=f"specverify {self.lanes[slot].name}")
        with interrupts.deferred():     # a signal while it starts lands once it is in `links`, for `stop`
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])   # inherited: a Ctrl-C of the
            try:                                                                 # terminal waits for lane_main
                process.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
            theirs.close()           # the worker's end lives in the worker only: its exit ends the pipe
            self.links[slot] = (process, mine)

    def next_unit(self, slot: int) -> tuple | None:
        """The next stage for lane `slot` ((number, [(index, description, names)])), or None: none left."""
        with self.lock:
            if not self.pending:
                self.running.pop(slot, None)
                return None
            at = 0 if slot == self.local else max(range(len(self.pending)), key=lambda k: self.weights[self.pending[k]])
            number = self.running[slot] = self.pending.pop(at)
        return number, [(i, self.described[i], names) for i, names in self.units[number]]

    def drive(self) -> None:
        """This process's lane: stages until none is left (nothing when it has no lane)."""
        try:
            while self.local is not None and (unit := self.next_unit(self.local)) is not None:
                run_unit(unit, self.lanes[self.local].name, self.plan, self.gather.event)
        finally:
            self.local_done.set()

    def pump(self, stop: threading.Event) -> None:
        """Answer the worker processes and feed their events to the gather, until `stop`."""
        from multiprocessing.connection import wait

        while not stop.is_set():
            by_link = {id(link): slot for slot, (_, link) in self.links.items()}
            for link in wait([link for _, link in self.links.values()], timeout=0.1):
                slot = by_link[id(link)]
                try:
                    message = link.recv()
                    if message[0] == "ready":
                        link.send(self.next_unit(slot))
                    else:
                        self.gather.event(message)
                except (EOFError, OSError):
                    self.ended(slot)
            if not self.links and self.local_done.is_set():
                for i, _ in self.remote:       # nothing left to run them (no worker could start)
                    self.gather.broke(i, "remote", "no worker was left to run it")

    def ended(self, slot: int) -> None:
        """Lane `slot`'s process is gone: the stage it was running fails where unfinished, and a replacement
        starts while stages are left."""
        process, link = self.links.pop(slot)
        link.close()
        process.join(5)
        with self.lock:
            unit, left = self.running.pop(slot, None), bool(self.pending)
        if unit is None:
            return
        name = self.lanes[slot].name
        for i, _ in self.units[unit]:
            self.gather.broke(i, "remote", f"{name} ended ({exit_words(process.exitcode)})")
        if left:
            self.start(slot)

    def stop(self) -> None:
        """End every worker process (SIGTERM: each closes what its running target started; then SIGKILL)."""
        for process, _ in self.links.values():
            if process.is_alive():
                process.terminate()
        for process, link in self.links.values():
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join()
            link.close()
        self.links.clear()


def exit_words(code: int | None) -> str:
    if code is not None and code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exit status {code}"


def run_local(targets: list[Target], plan: RunPlan, spec: str | list[Lane],
              listener: Listener | None = None) -> list[Outcome]:
    """The run over worker processes, one per lane of `spec` (see `lanes`; or the lanes themselves)."""
    env.prepare()
    chosen = lanes(spec) if isinstance(spec, str) else spec
    gather = Gather(targets, plan, listener or Listener())
    remote, here = split(targets, plan)
    stop, workers, reader = threading.Event(), None, None
    try:
        workers = Workers(chosen, gather, plan, remote)
        reader = threading.Thread(target=workers.pump, args=(stop,), daemon=True)
        reader.start()
        run_here(targets, plan, here, gather)
        workers.drive()
        while not gather.all_done.wait(0.2):
            interrupts.checkpoint()
    except Interrupted as stopped:
        stopped.outcomes = gather.outcomes()
        raise
    finally:
        stop.set()
        try:
            if reader is not None:
                reader.join()
        finally:
            if workers is not None:
                workers.stop()
    return gather.outcomes()


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
        gather.add(i, outcomes, [], "here")

"""Isolated calls: an implementation runs in a worker process, the verdict stays here.

One worker per target, forked from a multiprocessing forkserver that has the heavy imports done, and
contained (`specverify.judge.sandbox`): its own session and process group, and where the kernel allows it a PID
namespace, so nothing the implementation starts outlives the target and no signal it sends reaches the
judge. The judge sends the plan and the arena (pickled: judge to worker only); the worker calls the
implementation and answers with a JSON header and the arena's raw bytes, never a pickle, so nothing a
hostile implementation does in its process can run code in the judge. Every read of an answer is bounded
by the call's deadline and by sizes taken from the plan (header bytes, nesting depth, the arena's exact
size); anything else is "answered out of protocol". A worker that dies (any exit, any signal) or runs past
its time is ended with everything it started, its failure is reported in words with the last lines it
printed, and the next call starts a fresh worker; so does a call that lost the worker's CUDA context
(`device.probe_context`: the worker answers, then ends). A worker that answered out of protocol is ended and its
implementation is asked nothing more: every later call of its caller gets that answer at once (`broken`).
Loading the implementation is bounded by the same per-call limit and tried once.

A worker has three phases, each answered on its socket: its setup (`set_up`: the judge's own part, before
any outside code is imported), the import of the implementation, and calls. A setup that fails, and a
worker process that cannot be started, are errors of the run (`calls.RunSetupError`), never a failure of
the implementation. The socket is the worker's only way to the judge: the pipes it inherits from
multiprocessing are closed in its setup, every wait of the judge on the forkserver (which a worker
could stall) is bounded (`start_within`), and the log of what it prints is a file with no name, handed
over as a descriptor (`Handed`) and read through the judge's own (a name could be replaced by a FIFO).

A mutation run (`specverify.mutation.mutation_run`) names a mutant in the environment (MUTANT_ENV: a JSON file holding
the module's name and the mutated file): the worker, and only the worker, loads that module from it.
"""
from __future__ import annotations

import errno
import fcntl
import json
import multiprocessing
import os
import pickle
import select
import signal
import struct
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

from specverify import env
from specverify.judge import sandbox
from specverify.judge.calls import TEXT, CallError, Result, RunSetupError, error_text, invoke
from specverify.judge.materialize import Plan
from specverify.judge.probes import seal

LOAD_ANSWER = 1 << 20       # bytes: the answer to setup, and to loading (ready, the module's fingerprint)
SETUP_SECONDS = 60.0        # a worker's setup may take this long (or the per-call limit, where that is longer)
START_SECONDS = 120.0       # a forkserver that has not started a worker in this time (its preload included) is killed
LOG_TAIL = 4096             # bytes of a worker's output kept for a report
LOG_LINE = 240              # characters of one output line kept
MUTANT_ENV = "SPECVERIFY_MUTANT"   # names a mutant's JSON file: {"module", "path"} (specverify.mutation.mutation_run)
PRELOAD = ["numpy", "torch", "hypothesis", "specverify.records.registry", "specverify.judge.materialize",
           "specverify.judge.calls", "specverify.judge.sandbox"]


def context():
    """The multiprocessing context workers start from (forkserver: no CUDA state is ever forked); a server
    that is gone is started again.

    The server is started from the folder that holds this package: it imports PRELOAD with the current
    folder first on its path, and a folder named `specverify` in the user's current folder (the clone's
    parent) must not shadow the package. Each worker then gets the parent's folder and path back."""
    from multiprocessing import forkserver

    import specverify

    env.prepare()     # the Triton interpreter flag must be in the environment the server inherits
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    here = os.getcwd()
    os.chdir(os.path.dirname(os.path.dirname(os.path.abspath(specverify.__file__))))
    try:
        forkserver.ensure_running()
    finally:
        os.chdir(here)
    return ctx


def answer_limits(plan: Plan) -> tuple[int, int]:
    """(most bytes a call's JSON header may take, most elements a returned value may have before the
    worker stops describing it): both scale with the plan's data."""
    values = sum(len(pickle.dumps(v)) for v in plan.values.values())
    data = plan.size + values + sum(a.nbytes for _, a in plan.containers.values())
    return (1 << 20) + 64 * data, 4096 + 4 * data


# --- values crossing the process boundary: JSON-safe, types kept ------------------------------------

class Budget:
    """How many more elements `encode` may describe."""

    def __init__(self, items: int):
        self.items = items

    def take(self, n: int) -> bool:
        self.items -= n
        return self.items >= 0


def encode(value: Any, budget: Budget, depth: int = 0) -> Any:
    """A JSON-safe description of a host value that `decode` turns back into the same types; values nested
    too deep or larger than the budget are described as such (they equal nothing)."""
    if depth > 32:
        return {"t": "other", "type": "nested too deep"}
    if not budget.take(1):
        return {"t": "other", "type": "too large to return"}
    if value is None or isinstance(value, (bool, str)):
        if isinstance(value, str) and not budget.take(len(value) // 64):
            return {"t": "other", "type": "too large to return"}
        return {"t": type(value).__name__, "v": value}
    if type(value) is int:
        return {"t": "int", "v": str(value)} if value.bit_length() < 4096 else {"t": "other", "type": "huge int"}
    if type(value) is float:
        return {"t": "float", "v": np.float64(value).tobytes().hex()}
    if type(value) in (list, tuple, dict) and not budget.take(len(value)):
        return {"t": "other", "type": "too large to return"}
    if type(value) in (list, tuple):
        return {"t": type(value).__name__, "v": [encode(v, budget, depth + 1) for v in value]}
    if type(value) is dict:
        return {"t": "dict", "v": [[encode(k, budget, depth + 1), encode(v, budget, depth + 1)]
                                   for k, v in value.items()]}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        if not budget.take(value.size):
            return {"t": "other", "type": "too large to return"}
        return {"t": "ndarray", "dtype": value.dtype.str, "shape": list(value.shape),
                "v": np.ascontiguousarray(value).tobytes().hex()}
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return {"t": "npscalar", "dtype": value.dtype.str, "v": value.tobytes().hex()}
    if type(value).__module__ == "torch" and type(value).__name__ == "Tensor":
        if not budget.take(value.numel()):
            return {"t": "other", "type": "too large to return"}
        array = value.detach().cpu().contiguous()
        name = str(array.dtype).removeprefix("torch.")
        if name in ("bool", "int8", "uint8", "int16", "int32", "int64", "float16", "float32", "float64"):
            return {"t": "tensor", "dtype": name, "shape": list(array.shape), "v": array.numpy().tobytes().hex()}
    return {"t": "other", "type": f"{type(value).__module__}.{type(value).__qualname__}"}


class Opaque:
    """A returned value of a type that does not cross the boundary: equal to nothing."""

    def __init__(self, type_name: str):
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


def decode(d: Any, depth: int = 0) -> Any:
    """The value `encode` described; a malformed description raises ValueError."""
    if depth > 40 or not isinstance(d, dict) or "t" not in d:
        raise ValueError("malformed value")
    t, v = d["t"], d.get("v")
    if t in ("NoneType", "bool", "str"):
        return v
    if t == "int":
        return int(v)
    if t == "float":
        return float(np.frombuffer(bytes.fromhex(v), np.float64)[0])
    if t in ("list", "tuple"):
        items = [decode(x, depth + 1) for x in v]
        return items if t == "list" else tuple(items)
    if t == "dict":
        return {decode(k, depth + 1): decode(x, depth + 1) for k, x in v}
    if t in ("ndarray", "npscalar", "tensor"):
        dtype = np.dtype(d["dtype"])
        if dtype.kind not in "biuf" or (t != "npscalar" and (not isinstance(d["shape"], list) or len(d["shape"]) > 8)):
            raise ValueError("malformed dtype or shape")
        raw = np.frombuffer(bytes.fromhex(v), dtype)
        if t == "npscalar":
            return raw[0]
        array = raw.reshape(d["shape"]).copy()
        if t == "tensor":
            import torch

            return torch.from_numpy(array)
        return array
    if t == "other":
        return Opaque(str(d.get("type"))[:200])
    raise ValueError("malformed value")


def parse_header(data: bytes) -> dict:
    """A JSON object from a worker; ValueError for anything else (nesting too deep included)."""
    try:
        found = json.loads(data)
    except RecursionError:
        raise ValueError("nested too deep") from None
    if not isinstance(found, dict):
        raise ValueError("not a JSON object")
    return found


# --- the worker process --------------------------------------------------------------------------------

class MutantFinder:
    """Finds one module (`name`) at a mutated file (`path`) instead of its own, so that the module's
    `__file__`, `inspect.getsource` and Triton's source reading all see the mutated text. `package`: the
    original package folder, when the mutated module is a package's `__init__` (its submodules stay)."""

    def __init__(self, name: str, path: str, package: str | None):
        self.name, self.path, self.package = name, path, package

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name:
            return None
        from importlib.util import spec_from_file_location

        return spec_from_file_location(fullname, self.path,
                                       submodule_search_locations=[self.package] if self.package else None)


def apply_mutant(source: str) -> None:
    """When MUTANT_ENV names a mutant, load its module from the mutated file from now on: the module, its
    submodules and the implementation's own module (`source`'s) are dropped from sys.modules first (a
    forkserver's preload may hold them), and a MutantFinder goes first on sys.meta_path."""
    named = os.environ.get(MUTANT_ENV)
    if not named:
        return
    with open(named) as f:
        found = json.load(f)
    module, path, package = str(found["module"]), str(found["path"]), found.get("package")
    entry = source.partition(":")[0]
    for name in list(sys.modules):
        if name in (module, entry) or name.startswith(module + "."):
            del sys.modules[name]
    sys.meta_path.insert(0, MutantFinder(module, path, str(package) if package else None))


def forget_inherited() -> None:
    """Close the pipes this worker inherited from multiprocessing besides its socket: the forkserver's (a
    byte written there ends the server) and the resource tracker's (a line written there is a command).
    An implementation that uses either starts its own."""
    from multiprocessing import forkserver, resource_tracker

    server, tracker = forkserver._forkserver, resource_tracker._resource_tracker
    for fd in (server._forkserver_alive_fd, tracker._fd):
        if fd is not None:
            os.close(fd)
    server._forkserver_alive_fd = server._forkserver_address = server._forkserver_pid = None
    tracker._fd = tracker._pid = None


def set_up(conn, log: int, memory: int | None, device: str, source: str) -> None:
    """The judge's part of a worker, before any outside code is imported: contain it and limit it
    (`sandbox.contain`; only the runner returns), send what it prints to the log line by line (a worker
    that dies still shows what it printed), close what it inherited from multiprocessing
    (`forget_inherited`), take the measurements' instruments and probe table (`seal`), and install a
    mutation run's mutant finder."""
    sandbox.contain([conn.fileno()], memory, device)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(line_buffering=True)
    forget_inherited()
    seal()
    apply_mutant(source)


def worker_main(conn, stage_name: str, source: str, lib: str, device: str, log: int,
                memory: int | None, warm_up: str = "") -> None:
    """Set this worker up and answer {"setup": None} (or the setup's error), load the implementation and
    answer whether it is ready, then answer calls until told to stop (the backend's `warm_up` runs before
    the first call on CUDA: `calls.warm_backend`)."""
    try:
        set_up(conn, log, memory, device, source)
    except BaseException as exc:  # the judge's own part failed, before any outside code ran: the run's error
        conn.send_bytes(json.dumps({"setup": error_text(exc)}).encode())
        return
    conn.send_bytes(json.dumps({"setup": None}).encode())
    from specverify.records import backends

    try:
        impl = backends.load(source)
    except BaseException as exc:  # a module that fails to import, exits or raises: the target's failure
        missing = isinstance(exc, (ModuleNotFoundError, backends.NotLoadable))
        conn.send_bytes(json.dumps({"ready": False, "missing": missing, "error": error_text(exc)}).encode())
        return
    from specverify.judge.provenance import module_fingerprint

    interpreted = env.triton_interpreted() and env.reaches_triton(impl)   # the draws' sizes follow (Target.slow)
    conn.send_bytes(json.dumps({"ready": True, "module": module_fingerprint(source.partition(":")[0]),
                                "interpreted": interpreted}).encode())
    while True:
        message = conn.recv()
        if message is None:
            return
        plan, data, checked, probe, items = message
        arena = np.frombuffer(bytearray(data), np.uint8)
        returned, error, bound, measures = invoke(impl, plan, arena, lib, device, checked, None, probe, warm_up)
        values = Budget(items)
        header = {"returned": encode(returned, Budget(items)),
                  "values": {k: encode(v, values) for k, v in bound.values_after().items()},
                  "error": None if error is None else [error.kind, error.text, list(error.types), error.trace,
                                                        error.context_lost],
                  "measures": measures}
        conn.send_bytes(json.dumps(header).encode())
        conn.send_bytes(arena.tobytes())
        if error is not None and error.context_lost:
            return      # every later CUDA call here would fail: the judge starts a fresh worker


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def new_log() -> int:
    """A file for a worker's output with no name (only descriptors reach it, the judge's and the worker's),
    every write appended."""
    fd, path = tempfile.mkstemp(prefix="specverify-worker-", suffix=".log")
    os.unlink(path)
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_APPEND)
    return fd


class Handed:
    """A file descriptor handed to a worker process as it starts (multiprocessing sends it over the
    forkserver's socket, as it does the worker's connection); the worker receives its own number for it."""

    def __init__(self, fd: int):
        self.fd = fd

    def __reduce__(self):
        from multiprocessing import reduction

        return received, (reduction.DupFd(self.fd),)


def received(dup) -> int:
    return dup.detach()


def tail(fd: int) -> str:
    """The last lines a worker printed (its log, read through `fd`), at most LOG_TAIL bytes, each line cut
    to LOG_LINE characters."""
    try:
        size = os.fstat(fd).st_size
        text = os.pread(fd, LOG_TAIL, max(0, size - LOG_TAIL)).decode(errors="replace")
    except OSError:
        return ""
    lines = text.rstrip().splitlines()[-8:]
    return "\n".join(line if len(line) <= LOG_LINE else line[:LOG_LINE] + f"... ({len(line)} characters)"
                     for line in lines)


class Incomplete(Exception):
    """A frame that did not arrive whole: the worker ended (`ended`) or the deadline came (`late`)."""

    def __init__(self, ended: bool, started: bool):
        self.ended, self.started = ended, started


class Channel:
    """The judge's end of a worker's socket: framed reads and writes, each bounded by a deadline (and reads
    by a size), watching the worker's end as well as the socket."""

    def __init__(self, conn, sentinel: int):
        self.conn, self.fd, self.sentinel = conn, conn.fileno(), sentinel
        os.set_blocking(self.fd, False)

    def wait(self, events: int, deadline: float | None) -> str:
        """Until the socket is ready for `events` ("ready"), the worker ends ("ended") or the deadline
        passes ("late")."""
        poller = select.poll()
        poller.register(self.fd, events)
        poller.register(self.sentinel, select.POLLIN)
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready = dict(poller.poll(None if left is None else left * 1000))
            if self.fd in ready:
                return "ready"
            if self.sentinel in ready:
                return "ended"
            if left == 0:
                return "late"

    def read_exact(self, n: int, deadline: float | None, started: bool) -> bytes:
        chunks, got = [], 0
        while got < n:
            why = self.wait(select.POLLIN, deadline)
            if why != "ready":
                raise Incomplete(ended=why == "ended", started=started or got > 0)
            try:
                chunk = os.read(self.fd, min(n - got, 1 << 20))
            except BlockingIOError:
                continue
            except OSError:
                raise Incomplete(ended=True, started=started or got > 0) from None
            if not chunk:
                raise Incomplete(ended=True, started=started or got > 0)
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def read_frame(self, deadline: float | None, limit: int, exact: bool = False) -> bytes:
        """One frame (multiprocessing's framing: a 4-byte length, -1 then 8 bytes for long frames) of at most
        `limit` bytes (`exact`: of exactly `limit`); ValueError for a frame of another size."""
        size = struct.unpack("!i", self.read_exact(4, deadline, False))[0]
        if size == -1:
            size = struct.unpack("!Q", self.read_exact(8, deadline, True))[0]
        if size < 0 or size > limit or (exact and size != limit):
            raise ValueError(f"an answer of {size} bytes (expected {'exactly' if exact else 'at most'} {limit})")
        return self.read_exact(size, deadline, True)

    def send(self, message: Any, deadline: float | None) -> bool:
        """Pickle and send one message; False when the worker does not take it before the deadline."""
        data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        head = struct.pack("!i", len(data)) if len(data) <= 0x7FFFFFFF else struct.pack("!iQ", -1, len(data))
        view = memoryview(head + data)
        while view:
            if self.wait(select.POLLOUT, deadline) != "ready":
                return False
            try:
                view = view[os.write(self.fd, view[:1 << 20]):]
            except BlockingIOError:
                continue
            except OSError as exc:
                if exc.errno in (errno.EPIPE, errno.ECONNRESET):
                    return False
                raise
        return True


class Isolated:
    """Calls one implementation (by import path) in a worker process, with a time limit per call (loading
    included) and a memory limit. A worker that answers out of protocol breaks the caller (`broken`): every
    later call returns that answer at once, and no worker is started again."""

    isolated = True

    def __init__(self, stage_name: str, source: str, lib: str, device: str, timeout: float | None,
                 memory: int | None = None, warm_up: str = ""):
        self.stage_name, self.source, self.lib, self.device = stage_name, source, lib, device
        self.timeout, self.memory, self.warm_up = timeout, memory, warm_up
        self.process = None
        self.channel: Channel | None = None
        self.log = new_log()      # what its workers print, read through this descriptor
        self.load_error: CallError | None = None     # loading failed once: every later call says so
        self.broken: CallError | None = None     # a worker answered out of protocol: every later call says so
        self.fingerprint: dict | None = None      # the implementation's module, as the worker found it
        self.interpreted = False                  # the worker found Triton kernels run in Triton's interpreter

    def like(self, device: str | None = None) -> "Isolated":
        """A new, unstarted caller of the same implementation with the same limits (on `device`, or this one's)."""
        return Isolated(self.stage_name, self.source, self.lib, device or self.device, self.timeout, self.memory,
                        self.warm_up)

    def output_tail(self) -> str:
        return tail(self.log)

    def start(self) -> CallError | None:
        """Start the worker, see its setup through (`await_setup`: RunSetupError when the judge's own part
        fails) and load the implementation (once: a failure to load is kept for every later call)."""
        if self.load_error is not None:
            return self.load_error
        os.ftruncate(self.log, 0)
        try:
            self.process, self.channel = spawn(worker_main, (self.stage_name, self.source, self.lib, self.device,
                                                             Handed(self.log), self.memory, self.warm_up))
        except (EOFError, OSError, ConnectionError) as exc:
            raise RunSetupError(f"could not start a worker process for {self.stage_name} ({self.source} on "
                                f"{self.device}): {error_text(exc)}") from None
        self.await_setup()
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        try:
            answer = parse_header(self.channel.read_frame(deadline, LOAD_ANSWER))
        except Incomplete as exc:
            if exc.ended:
                problem = self.died()
                self.load_error = CallError("load", f"could not be loaded: {problem.text} while importing it",
                                            trace=problem.trace)
            else:
                self.stop()
                self.load_error = CallError("load", f"could not be loaded: the import did not finish in "
                                                    f"{self.timeout:g} s", trace=self.output_tail())
            return self.load_error
        except ValueError as exc:
            self.stop()
            self.load_error = CallError("load", f"could not be loaded: answered out of protocol ({exc})")
            return self.load_error
        if not answer.get("ready"):
            self.stop()
            text = str(answer.get("error"))[:300]
            self.load_error = CallError("missing" if answer.get("missing") is True else "load",
                                        text if answer.get("missing") is True else f"could not be loaded: {text}")
            return self.load_error
        self.interpreted = answer.get("interpreted") is True
        if self.fingerprint is None:
            from specverify.judge.provenance import checked_fingerprint

            self.fingerprint = checked_fingerprint(answer.get("module"), self.source.partition(":")[0])
        return None

    def await_setup(self) -> None:
        """Read the worker's first answer, its setup's, sent before any outside code is imported; a setup
        that failed, a worker that ended first or did not answer in SETUP_SECONDS (or the per-call limit,
        if longer) is RunSetupError, with the last line the worker printed."""
        seconds = None if self.timeout is None else max(self.timeout, SETUP_SECONDS)
        try:
            answer = parse_header(self.channel.read_frame(None if seconds is None else time.monotonic() + seconds,
                                                          LOAD_ANSWER))
            problem = answer.get("setup", "it answered without a word on its setup")
        except Incomplete as exc:
            if exc.ended:
                self.process.join(5)
                code = self.process.exitcode
                how = f"killed by {signal_name(-code)}" if code is not None and code < 0 else f"exit status {code}"
                problem = f"its process ended ({how}) during its setup"
            else:
                problem = f"its setup did not finish in {seconds:g} s"
        except ValueError as exc:
            problem = f"its setup answered out of protocol ({exc})"
        if problem is None:
            return
        printed = self.output_tail().splitlines()
        self.stop()
        raise RunSetupError(f"the worker process for {self.stage_name} ({self.source} on {self.device}) could not "
                            f"be set up: {str(problem)[:300]}" + (f" (it printed: {printed[-1]})" if printed else ""))

    def stop(self) -> None:
        """End the worker and everything it started; reap it."""
        if self.process is not None:
            if self.process.pid is not None:
                sandbox.end(self.process.pid)
                LIVE.discard(self.process.pid)
            self.process.join(10)
        if self.channel is not None:
            self.channel.conn.close()
        self.process = self.channel = None

    def close(self) -> None:
        self.stop()
        if self.log >= 0:
            os.close(self.log)
            self.log = -1

    def died(self) -> CallError:
        """The worker is gone or broke protocol: say how, in words."""
        self.process.join(5)
        code = self.process.exitcode
        trace = self.output_tail()
        self.stop()
        if code is None:
            return CallError("lost", "answered out of protocol (its process was killed)", trace=trace)
        if code < 0:
            return CallError("signal", f"killed by {signal_name(-code)} (the process crashed)", trace=trace)
        return CallError("exit", f"exited with status {code} inside the call", trace=trace)

    def call(self, plan: Plan, arena: np.ndarray, checked: bool = False, probe: str = "plain") -> Result:
        """One call in the worker (started first where there is none); once a worker answered out of
        protocol, that answer at once."""
        if self.broken is not None:
            return Result(None, {}, None, self.broken)
        result = self.exchange(plan, arena, checked, probe)
        if result.error is not None and result.error.kind == "lost":
            self.broken = result.error
        return result

    def exchange(self, plan: Plan, arena: np.ndarray, checked: bool, probe: str) -> Result:
        if self.process is None:
            problem = self.start()
            if problem is not None:
                return Result(None, {}, None, problem)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        header_bytes, items = answer_limits(plan)
        if not self.channel.send((plan, arena.tobytes(), checked, probe, items), deadline):
            return Result(None, {}, None, self.died() if not self.process.is_alive() else self.late(False))
        try:
            header = parse_header(self.channel.read_frame(deadline, header_bytes))
            data = self.channel.read_frame(deadline, plan.size, exact=True)
            error = header["error"]
            error = None if error is None else CallError(str(error[0]), str(error[1])[:TEXT],
                                                         tuple(str(t)[:100] for t in error[2][:32]),
                                                         str(error[3])[-4000:], error[4] is True)
            if error is not None and error.kind not in ("raised", "exit", "timeout"):
                raise ValueError("unknown error kind")
            if error is not None and "MemoryError" in error.types and self.memory and self.device == "cpu":
                error.text = f"{error.text} (past the worker's memory limit: {memory_words(self.memory)})"
            values = {k: decode(v) for k, v in header["values"].items()}
            returned = decode(header["returned"])
            measures = header["measures"]
            if not isinstance(measures, dict):
                raise ValueError("measures must be an object")
        except Incomplete as exc:
            return Result(None, {}, None, self.died() if exc.ended else self.late(exc.started))
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, RecursionError) as exc:
            self.stop()
            return Result(None, {}, None, CallError("lost", f"answered out of protocol ({str(exc)[:120]})"))
        if error is not None and error.context_lost:
            self.stop()     # its CUDA context is gone (it ends itself): the next call starts a fresh worker
        return Result(np.frombuffer(data, np.uint8).copy(), values, returned, error, measures)

    def late(self, started: bool) -> CallError:
        """The deadline came: the worker is ended; an answer begun and not finished is out of protocol."""
        trace = self.output_tail()
        self.stop()
        if started:
            return CallError("lost", f"answered out of protocol: its answer was still incomplete after "
                                     f"{self.timeout:g} s", trace=trace)
        return CallError("timeout", f"timed out after {self.timeout:g} s", trace=trace)


def memory_words(asked: int) -> str:
    """The memory limit a CPU worker had, as a report names it."""
    limit, _ = sandbox.worker_memory(asked)
    if limit == asked:
        return f"--memory {asked >> 20}M"
    return f"{sandbox.size_text(limit)}, the limit the judge inherited"


LIVE: set[int] = set()    # the worker processes this process started and has not ended yet (pids)


def end_all() -> None:
    """End every worker process this process started, with everything each started (a process told to stop
    at once: a lane of a sharded run)."""
    for pid in list(LIVE):
        sandbox.end(pid)


def spawn(main, args: tuple):
    """`main(conn, *args)` started in a worker process, and the judge's Channel to it; one retry with a
    fresh forkserver when the server is gone or does not answer (`start_within`; the second failure is
    raised)."""
    for attempt in (1, 2):
        ctx = context()
        parent, child = ctx.Pipe()
        process = ctx.Process(target=main, args=(child, *args), daemon=True)
        try:
            start_within(process, START_SECONDS)
        except (EOFError, OSError, ConnectionError):   # the forkserver died or stalled: start it again
            parent.close()
            child.close()
            restart_forkserver()
            if attempt == 2:
                raise
            continue
        child.close()
        LIVE.add(process.pid)
        return process, Channel(parent, process.sentinel)
    raise AssertionError("unreachable")


def start_within(process, seconds: float) -> None:
    """`process.start()`, bounded. Multiprocessing waits on the forkserver without a limit (to connect, to
    hand over the process, for the pid it answers), and a worker may have stalled the server (connected to
    it and said nothing), so the start runs in a thread; a server that has not answered in `seconds` is
    killed, which ends every wait on it, and TimeoutError is raised."""
    failed: list[BaseException] = []

    def start() -> None:
        try:
            process.start()
        except BaseException as exc:  # raised again in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=start, name="specverify-start", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        restart_forkserver()
        thread.join(10)
        if process.pid is not None:
            sandbox.end(process.pid)
        raise TimeoutError(f"the forkserver did not start a worker in {seconds:g} s")
    if failed:
        raise failed[0]


def restart_forkserver() -> None:
    """Forget a forkserver that is gone, so the next context() starts a new one."""
    from multiprocessing import forkserver

    server = forkserver._forkserver
    pid = server._forkserver_pid
    if pid is not None:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
    if server._forkserver_alive_fd is not None:
        try:
            os.close(server._forkserver_alive_fd)
        except OSError:
            pass
    server._forkserver_pid = server._forkserver_alive_fd = server._forkserver_address = None


def ask_once(main, args: tuple, timeout: float, limit: int) -> dict | str:
    """Run `main(conn, *args)` in a contained worker process and read the one JSON object it answers
    (within `timeout` seconds and `limit` bytes); a one-line problem (str) otherwise. The worker and all it
    started are ended before this returns."""
    try:
        process, channel = spawn(main, args)
    except (EOFError, OSError, ConnectionError):
        return "its worker process could not be started (the forkserver was lost twice)"
    try:
        return parse_header(channel.read_frame(time.monotonic() + timeout, limit))
    except Incomplete as exc:
        if exc.ended:
            process.join(5)
            return f"its process ended (exit status {process.exitcode}) before it answered"
        return f"did not finish in {timeout:g} s"
    except ValueError as exc:
        return f"answered out of protocol ({exc})"
    finally:
        if process.pid is not None:
            sandbox.end(process.pid)
            LIVE.discard(process.pid)
        process.join(10)
        channel.conn.close()

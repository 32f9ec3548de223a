"""Isolated calls: an implementation runs in a worker process, the verdict stays here.

One worker per target, forked from a multiprocessing forkserver that has the heavy imports done. The
parent sends the plan and the arena (pickled: parent to child only); the worker calls the implementation
and answers with a JSON header and the arena's raw bytes, never a pickle, so nothing a hostile
implementation does in its process can run code in the judge or change its verdict. A worker that dies
(any exit, any signal), answers out of protocol or runs past the time limit is killed, its failure is
reported in words, and the next call starts a fresh worker.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from specverify import env
from specverify.calls import CallError, Result, error_text, invoke
from specverify.device import seal
from specverify.materialize import Plan

MAX_HEADER = 64 << 20       # bytes: the JSON answer (a host stage's returned lists included)
START_TIMEOUT = 300.0       # seconds for a fresh worker to import the implementation
PRELOAD = ["numpy", "torch", "hypothesis", "specverify.registry", "specverify.materialize", "specverify.calls"]


def context():
    """The multiprocessing context workers start from (forkserver: no CUDA state is ever forked).

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


# --- values crossing the process boundary: JSON-safe, types kept ------------------------------------

def encode(value: Any, depth: int = 0) -> Any:
    """A JSON-safe description of a host value that `decode` turns back into the same types."""
    if depth > 32:
        return {"t": "other", "type": "nested too deep"}
    if value is None or isinstance(value, (bool, str)):
        return {"t": type(value).__name__, "v": value}
    if type(value) is int:
        return {"t": "int", "v": str(value)}
    if type(value) is float:
        return {"t": "float", "v": np.float64(value).tobytes().hex()}
    if type(value) in (list, tuple):
        return {"t": type(value).__name__, "v": [encode(v, depth + 1) for v in value]}
    if type(value) is dict:
        return {"t": "dict", "v": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        return {"t": "ndarray", "dtype": value.dtype.str, "shape": list(value.shape),
                "v": np.ascontiguousarray(value).tobytes().hex()}
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return {"t": "npscalar", "dtype": value.dtype.str, "v": value.tobytes().hex()}
    if type(value).__module__ == "torch" and type(value).__name__ == "Tensor":
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


def decode(d: Any) -> Any:
    """The value `encode` described; a malformed description raises ValueError."""
    if not isinstance(d, dict) or "t" not in d:
        raise ValueError("malformed value")
    t, v = d["t"], d.get("v")
    if t in ("NoneType", "bool", "str"):
        return v
    if t == "int":
        return int(v)
    if t == "float":
        return float(np.frombuffer(bytes.fromhex(v), np.float64)[0])
    if t in ("list", "tuple"):
        items = [decode(x) for x in v]
        return items if t == "list" else tuple(items)
    if t == "dict":
        return {decode(k): decode(x) for k, x in v}
    if t in ("ndarray", "npscalar"):
        dtype = np.dtype(d["dtype"])
        if dtype.kind not in "biuf":
            raise ValueError("malformed dtype")
        raw = np.frombuffer(bytes.fromhex(v), dtype)
        return raw.reshape(d["shape"]).copy() if t == "ndarray" else raw[0]
    if t == "tensor":
        import torch

        raw = np.frombuffer(bytes.fromhex(v), np.dtype(d["dtype"]))
        return torch.from_numpy(raw.reshape(d["shape"]).copy())
    if t == "other":
        return Opaque(str(d.get("type")))
    raise ValueError("malformed value")


# --- the worker process --------------------------------------------------------------------------------

def worker_main(conn, stage_name: str, source: str, lib: str, device: str, log_path: str) -> None:
    """Load the implementation, then answer calls until told to stop."""
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # Ctrl-C is the parent's to handle
    from specverify import backends

    try:
        seal()      # the measurements' instruments and probe table, before the implementation is imported
        impl = backends.load(source)
    except BaseException as exc:  # a module that fails to import, exits or raises: the target's failure
        missing = isinstance(exc, (ModuleNotFoundError, backends.NotLoadable))
        conn.send_bytes(json.dumps({"ready": False, "missing": missing, "error": error_text(exc)}).encode())
        return
    from specverify.provenance import module_fingerprint

    conn.send_bytes(json.dumps({"ready": True, "module": module_fingerprint(source.partition(":")[0])}).encode())
    while True:
        message = conn.recv()
        if message is None:
            return
        plan, data, checked, probe = message
        arena = np.frombuffer(bytearray(data), np.uint8)
        returned, error, bound, measures = invoke(impl, plan, arena, lib, device, checked, None, probe)
        header = {"returned": encode(returned), "values": {k: encode(v) for k, v in bound.values_after().items()},
                  "error": None if error is None else [error.kind, error.text, list(error.types), error.trace],
                  "measures": measures}
        conn.send_bytes(json.dumps(header).encode())
        conn.send_bytes(arena.tobytes())


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class Isolated:
    """Calls one implementation (by import path) in a worker process, with a time limit per call."""

    isolated = True

    def __init__(self, stage_name: str, source: str, lib: str, device: str, timeout: float | None):
        self.stage_name, self.source, self.lib, self.device = stage_name, source, lib, device
        self.timeout = timeout
        self.process = None
        self.conn = None
        self.log = tempfile.NamedTemporaryFile(prefix="specverify-worker-", suffix=".log", delete=False)
        self.log.close()
        self.load_error: str | None = None
        self.fingerprint: dict | None = None      # the implementation's module, as the worker found it

    def output_tail(self, lines: int = 8) -> str:
        try:
            text = Path(self.log.name).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def start(self) -> CallError | None:
        ctx = context()
        parent, child = ctx.Pipe()
        Path(self.log.name).write_text("")
        self.process = ctx.Process(target=worker_main, daemon=True,
                                   args=(child, self.stage_name, self.source, self.lib, self.device, self.log.name))
        self.process.start()
        child.close()
        self.conn = parent
        answer = self.receive_header(max(START_TIMEOUT, self.timeout or 0), starting=True)
        if isinstance(answer, CallError):
            return answer
        if not answer.get("ready"):
            self.stop()
            self.load_error = str(answer.get("error"))[:300]
            if answer.get("missing") is True:
                return CallError("missing", self.load_error)
            return CallError("raised", f"could not be loaded: {self.load_error}")
        if self.fingerprint is None:
            from specverify.provenance import checked_fingerprint

            self.fingerprint = checked_fingerprint(answer.get("module"), self.source.partition(":")[0])
        return None

    def stop(self) -> None:
        if self.process is not None:
            if self.process.is_alive():
                self.process.kill()
            self.process.join(5)
        if self.conn is not None:
            self.conn.close()
        self.process = self.conn = None

    def close(self) -> None:
        if self.process is not None and self.process.is_alive() and self.conn is not None:
            try:
                self.conn.send(None)
                self.process.join(2)
            except OSError:
                pass
        self.stop()
        Path(self.log.name).unlink(missing_ok=True)

    def died(self) -> CallError:
        """The worker is gone or broke protocol: say how, in words."""
        self.process.join(2)
        code = self.process.exitcode
        tail = self.output_tail()
        self.stop()
        if code is None:
            return CallError("lost", "answered out of protocol (its process was killed)", trace=tail)
        if code < 0:
            return CallError("signal", f"killed by {signal_name(-code)} (the process crashed)", trace=tail)
        return CallError("exit", f"exited with status {code} inside the call", trace=tail)

    def receive_header(self, timeout: float | None, starting: bool = False) -> dict | CallError:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.conn.poll(None if deadline is None else max(0.0, deadline - time.monotonic())):
            self.stop()
            what = "loading" if starting else "the call"
            return CallError("timeout", f"timed out: {what} still running after {timeout:g} s")
        try:
            answer = json.loads(self.conn.recv_bytes(MAX_HEADER))
        except (EOFError, OSError, ValueError, UnicodeDecodeError):
            return self.died()
        return answer if isinstance(answer, dict) else self.died()

    def call(self, plan: Plan, arena: np.ndarray, checked: bool = False, probe: str = "plain") -> Result:
        if self.load_error is not None:
            return Result(None, {}, None, CallError("raised", f"could not be loaded: {self.load_error}"))
        if self.process is None or not self.process.is_alive():
            problem = self.start()
            if problem is not None:
                return Result(None, {}, None, problem)
        started = time.monotonic()
        try:
            self.conn.send((plan, arena.tobytes(), checked, probe))
        except OSError:
            return Result(None, {}, None, self.died())
        header = self.receive_header(self.timeout)
        if isinstance(header, CallError):
            return Result(None, {}, None, header)
        left = None if self.timeout is None else max(0.0, self.timeout - (time.monotonic() - started))
        if not self.conn.poll(left if left is not None else None):
            self.stop()
            return Result(None, {}, None, CallError("timeout", f"timed out after {self.timeout:g} s"))
        try:
            data = self.conn.recv_bytes(plan.size)
            if len(data) != plan.size:
                raise ValueError("arena of the wrong size")
            error = header["error"]
            error = None if error is None else CallError(str(error[0]), str(error[1])[:300],
                                                         tuple(str(t) for t in error[2]), str(error[3])[-4000:])
            if error is not None and error.kind not in ("raised", "exit", "timeout"):
                raise ValueError("unknown error kind")
            values = {k: decode(v) for k, v in header["values"].items()}
            returned = decode(header["returned"])
            measures = header["measures"]
            if not isinstance(measures, dict):
                raise ValueError("measures must be an object")
        except (EOFError, OSError):
            return Result(None, {}, None, self.died())
        except (ValueError, KeyError, TypeError, IndexError):
            self.stop()
            return Result(None, {}, None, CallError("lost", "answered out of protocol"))
        return Result(np.frombuffer(data, np.uint8).copy(), values, returned, error, measures)

"""Hostile implementations that attack the judge's processes, its protocol and its files. Every process
they start names itself $HOSTILE_MARK (its `comm`, what /proc/PID/comm shows outside a PID namespace too),
so a test can check that none of them outlives the run; the report rewriter is told the report's path
($HOSTILE_REPORT), as an attacker who knows it would be."""
import ctypes
import gc
import json
import os
import signal
import struct
import sys
import time
from multiprocessing.connection import Connection


def record() -> None:
    """Name this process $HOSTILE_MARK."""
    ctypes.CDLL(None).prctl(15, os.environ["HOSTILE_MARK"].encode(), 0, 0, 0)    # PR_SET_NAME


def processes_whose_command_has(*words: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    command = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if all(w in command for w in words):
                found.append(int(name))
    return found


def answer_socket() -> Connection:
    return next(o for o in gc.get_objects() if isinstance(o, Connection) and not o.closed)


def kills_its_group(**kw):
    os.killpg(os.getpgrp(), signal.SIGKILL)


def terminates_group_zero(**kw):
    os.kill(0, signal.SIGTERM)


def stops_the_judge(**kw):
    for pid in processes_whose_command_has("specverify", "check", "--vendor"):
        try:
            os.kill(pid, signal.SIGSTOP)
        except OSError:
            pass
    raise RuntimeError("hostile: tried to stop the judge")


def forks_a_sleeper(**kw):
    if os.fork() == 0:
        record()
        time.sleep(3600)
        os._exit(0)
    raise RuntimeError("hostile: left a sleeper behind")


def child_holds_the_socket_then_exits(**kw):
    if os.fork() == 0:
        record()
        time.sleep(3600)
        os._exit(0)
    time.sleep(0.2)
    os._exit(3)


def detached_report_rewriter(**kw):
    """A daemon (two forks, its own session) that rewrites the judge's JSON report once the run is over."""
    report = os.environ["HOSTILE_REPORT"]
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            record()
            time.sleep(6)
            with open(report, "w") as f:
                json.dump({"exit_status": 0, "outcomes": []}, f)
            os._exit(0)
        os._exit(0)
    time.sleep(0.2)
    raise RuntimeError("hostile: left a daemon behind")


def stalls_its_answer(**kw):
    """Announces a 1 MiB answer and sends none of it."""
    os.write(answer_socket().fileno(), struct.pack("!i", 1 << 20))
    time.sleep(3600)


def answers_deep_json(**kw):
    answer_socket().send_bytes(b"[" * 200_000 + b"]" * 200_000)
    time.sleep(3600)


def returns_a_huge_list(**kw):
    return list(range(3_000_000))


def prints_a_huge_line_then_exits(**kw):
    sys.stdout.write("x" * 60_000_000 + "\n")
    sys.stdout.flush()
    os._exit(1)


def replaces_its_log_with_a_fifo(**kw):
    """Replaces the file its output goes to, where that has a name, with a FIFO (which blocks whoever
    opens it to read the worker's last lines), then exits with status 3."""
    path = os.readlink("/proc/self/fd/1")
    if os.path.isfile(path):
        os.unlink(path)
        os.mkfifo(path)
    os._exit(3)


def hogs_memory(**kw):
    hoard = bytearray(64 << 30)
    return len(hoard)


def kills_the_forkserver(**kw):
    """Kills every forkserver it can find, then answers correctly."""
    from specverify.kernels.torch.rejection import greedy

    for pid in processes_whose_command_has("forkserver"):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    greedy(**kw)


def hangs(**kw):
    record()
    time.sleep(3600)

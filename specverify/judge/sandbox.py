"""A process tree the judge can always end: how a worker process contains what an implementation starts.

`contain()` is the first thing a worker process does (before any outside code is imported). It leaves the
judge's session and process group (`setsid`), so a signal an implementation sends to "its" group never
reaches the judge, and, where the kernel allows it (root, or unprivileged user namespaces), puts the
implementation into a PID namespace of its own:

    worker (P, the process the judge started; outside the namespace)
      └── init (PID 1 of the new namespace; runs no outside code: it only reaps)
            └── runner (the implementation runs here, and everything it starts)

Inside the namespace nothing outside it can be seen or signalled: not the judge, not the forkserver, not
the worker (it has a mount namespace and a /proc of its own; CUDA's driver needs a /proc that agrees with
its pids). When the runner ends (any exit, any signal), init ends, and the kernel kills every process left
in the namespace, a detached daemon included; the worker then ends the way the runner did (same exit status,
same signal), so the judge reads the runner's fate from the worker it started. The judge ends a target by
killing the worker's process group (`end`), which takes init and so the whole namespace with it.

Where no PID namespace can be made, the runner is the worker itself, in its own session: signals to its
group still stay there, and `end` kills the group, but a process that starts a session of its own escapes.

Limits set on the runner: no core files, and on CPU workers an address-space limit (`RLIMIT_AS`; CUDA
reserves far more address space than it uses, so CUDA workers get none), never above the limit the judge
inherited (`worker_memory`: a process may not raise its own limit). What this does not protect
against: anything the same user may do outside the process tree (write files, ptrace, read /proc); run the
suite as another user for that.
"""
from __future__ import annotations

import ctypes
import os
import resource
import signal
import struct

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 1 << 14, 1 << 18


def libc():
    return ctypes.CDLL(None, use_errno=True)


def new_pid_namespace() -> bool:
    """Make this process's next child the init of a new PID namespace (and give it a mount namespace of its
    own, for its /proc); False where the kernel refuses."""
    try:
        found = libc()
    except OSError:
        return False
    for flags in (CLONE_NEWPID | CLONE_NEWNS, CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS):
        if found.unshare(flags) == 0:
            return True
    return False


def own_proc() -> None:
    """In the namespace's init: a /proc of the namespace's own (CUDA's driver reads it by pid), mounted
    privately so that nothing outside sees it."""
    found = libc()
    if found.mount(None, b"/", None, MS_REC | MS_PRIVATE, None) == 0:
        found.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)


def size_text(n: int) -> str:
    """Bytes in the largest unit that divides them: 6G, 512M, 1536K, 1000."""
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def worker_memory(asked: int | None, asked_by: str = "--memory") -> tuple[int | None, str]:
    """(the bytes of address space a CPU worker gets, a phrase for a run's header saying so): `asked`
    (None: no limit of its own), or the limit this process inherited (its soft RLIMIT_AS) where that is
    smaller. `asked_by` names where `asked` came from."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    inherited = None if soft == resource.RLIM_INFINITY else soft
    if inherited is None or (asked is not None and asked <= inherited):
        return asked, (f"workers on the CPU may map {size_text(asked)}" if asked else
                       "workers on the CPU have no memory limit")
    found = f"workers on the CPU may map {size_text(inherited)} (the limit this process inherited"
    return inherited, found + (f"; {asked_by} asked {size_text(asked)})" if asked else ")")


def limit_runner(memory: int | None, device: str) -> None:
    """The runner's address space on a CPU worker: `memory` bytes, or the limit it inherited where that is
    smaller (`worker_memory`; no core files is set for the whole tree by `contain`)."""
    if memory and device == "cpu":
        limit, _ = worker_memory(memory)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def contain(keep: list[int], memory: int | None, device: str) -> None:
    """Called first in a worker process. Returns only in the runner; the worker and init end here with the
    runner's fate. `keep`: file descriptors (the judge's connection) that only the runner may hold."""
    os.setsid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the judge's to handle; the worker has no terminal
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if not new_pid_namespace():
        limit_runner(memory, device)
        return
    fate_r, fate_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(fate_r)
        own_proc()
        runner = os.fork()
        if runner == 0:
            os.close(fate_w)
            limit_runner(memory, device)
            return
        for fd in keep:
            os.close(fd)
        status = reap_until(runner)
        try:
            os.write(fate_w, struct.pack("i", status))
        except OSError:                              # the worker is gone (the judge ended the target)
            pass
        os._exit(0)                                  # the namespace ends with its init
    os.close(fate_w)
    for fd in keep:
        os.close(fd)
    data = b""
    while len(data) < 4:
        chunk = os.read(fate_r, 4 - len(data))
        if not chunk:
            break
        data += chunk
    os.waitpid(init, 0)
    end_like(struct.unpack("i", data)[0] if len(data) == 4 else 255 << 8)


def reap_until(runner: int) -> int:
    """init's loop: reap every child (orphans are reparented here) until the runner ends; its wait status."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 255 << 8
        except InterruptedError:
            continue
        if pid == runner:
            return status


def end_like(status: int) -> None:
    """End this process as a child with wait status `status` ended: the same signal, or the same exit code."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            signal.signal(number, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
            os.kill(os.getpid(), number)
        except (OSError, ValueError):
            pass
        os._exit(128 + number)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 255)


def end(pid: int) -> None:
    """Kill a worker's whole process group (and with it its PID namespace), or the worker alone when it has
    not made its group yet."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, signal.SIGKILL)
            return
    except OSError:
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass

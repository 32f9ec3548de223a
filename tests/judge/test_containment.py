"""A judge nothing can kill, stall or outlive: each hostile `rejection.greedy` (tests/hostile_process.py),
run as a vendor beside a correct `rejection.expand`, is that target's reported failure; the other target
passes, the exit status is 1, the JSON report is written once by the judge, and no process the
implementation started is alive afterwards. Each run is a `specverify check` in a process of its own
(its own session), so a judge that could be killed would fail the test, not the test run."""
import hashlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.terminated import terminated_once

ROOT = Path(__file__).resolve().parents[2]
EXPAND = "specverify.kernels.torch.rejection:expand"
GREEDY = "specverify.kernels.torch.rejection:greedy"


def mark(tmp_path: Path) -> str:
    """The process name this test's hostile processes take (15 characters at most, unique per test)."""
    return "sv" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]


def environment(tmp_path: Path) -> dict:
    path = os.pathsep.join(filter(None, [str(ROOT), str(tmp_path), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "HOSTILE_MARK": mark(tmp_path),
            "HOSTILE_REPORT": str(tmp_path / "report.json"), "PYTHONUNBUFFERED": "0"}


def marked(name: str) -> list[int]:
    """Live (not zombie) processes named `name`, in this machine's process table."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm, rest = stat.split("(", 1)[1].rsplit(")", 1)
        if comm == name and rest.split()[0] != "Z":
            found.append(int(pid))
    return found


def survivors(tmp_path: Path) -> list[int]:
    deadline = time.monotonic() + 3
    while marked(mark(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return marked(mark(tmp_path))


def address_space(limit: int | None):
    """A preexec_fn giving a process at most `limit` bytes of address space (as `ulimit -v` does)."""
    return None if limit is None else lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def judge(tmp_path: Path, argv: list[str], timeout: float = 150, env: dict | None = None,
          memory: int | None = None) -> tuple[int, str, float]:
    """Run `specverify check ARGV` in its own session (`env` added to its environment, `memory`: its
    address-space limit); (exit status, output, seconds)."""
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "specverify", "check", *argv], cwd=tmp_path,
                            env={**environment(tmp_path), **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=address_space(memory))
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGCONT)
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the judge did not finish in {timeout} s:\n{out.decode(errors='replace')[-3000:]}")
    return proc.returncode, out.decode(errors="replace"), time.monotonic() - started


# Each hostile implementation is declared for a stage of its own (what it does does not depend on the
# stage: none writes a right output), beside a correct rejection.expand, all in one run.
HOSTILE = {
    "rejection.greedy": ("kills_its_group", "killed by SIGKILL"),
    "rejection.random": ("terminates_group_zero", "killed by SIGTERM"),
    "rejection.recovered": ("stops_the_judge", "tried to stop the judge"),
    "rejection.greedy_padded": ("forks_a_sleeper", "left a sleeper behind"),
    "rejection.sample_padded": ("child_holds_the_socket_then_exits", "exited with status 3"),
    "eagle.next_token_padded": ("detached_report_rewriter", "left a daemon behind"),
    "eagle.prepare_inputs_padded": ("stalls_its_answer", "answered out of protocol: its answer was still incomplete"),
    "eagle.extend_queries": ("answers_deep_json", "answered out of protocol"),
    "eagle.step_slot_mapping": ("returns_a_huge_list", "it returned a Opaque"),
    "graph.step_context": ("prints_a_huge_line_then_exits", "exited with status 1"),
    "stop.spec_stopping": ("hogs_memory", "MemoryError:  (past the worker's memory limit: --memory 4096M)"),
    "scv.acceptance_mask": ("replaces_its_log_with_a_fifo", "exited with status 3"),
}


def vendor_run(tmp_path: Path, declared: dict[str, str], *extra: str) -> tuple[int, dict, str, float]:
    (tmp_path / "hostile_vendor.py").write_text(f"IMPLEMENTATIONS = {declared!r}\n")
    report = tmp_path / "report.json"
    status, out, seconds = judge(tmp_path, ["--vendor", "hostile_vendor", "--device", "cpu", "--check", "valid",
                                            "--examples", "2", "--timeout", "3", "--findings", str(tmp_path / "cases"),
                                            "--report", str(report), *extra])
    return status, json.loads(report.read_text()), out, seconds


def test_every_hostile_worker_fails_alone(tmp_path):
    declared = {stage: f"tests.hostile_process:{name}" for stage, (name, _) in HOSTILE.items()}
    status, report, out, seconds = vendor_run(tmp_path, {**declared, "rejection.expand": EXPAND}, "--memory", "4G")
    assert status == 1 == report["exit_status"], out[-3000:]
    by_stage = {o["stage"]: o for o in report["outcomes"]}
    for stage, (name, words) in HOSTILE.items():
        found = by_stage[stage]
        assert found["status"] == "failed" and words in found["headline"] + found["report"], (name, found["headline"])
        assert len(found["report"]) < 20_000, name           # a huge log is cut to its tail
    assert by_stage["rejection.expand"]["status"] == "passed", by_stage["rejection.expand"]["headline"]
    assert len(out) < 200_000
    assert survivors(tmp_path) == []
    time.sleep(7)           # past the detached daemon's rewrite, had it lived
    assert json.loads((tmp_path / "report.json").read_text()) == report


def test_a_worker_that_kills_the_forkserver_hurts_nobody(tmp_path):
    status, report, out, _ = vendor_run(tmp_path, {"rejection.greedy": "tests.hostile_process:kills_the_forkserver",
                                                   "rejection.expand": EXPAND})
    assert status == 0 and report["totals"]["failed"] == 0, out[-3000:]


def test_a_lost_forkserver_is_started_again(tmp_path):
    from multiprocessing import forkserver

    from specverify.judge.worker import Isolated, context
    from specverify.records import registry

    context()
    os.kill(forkserver._forkserver._forkserver_pid, signal.SIGKILL)
    time.sleep(0.2)
    caller = Isolated("rejection.expand", EXPAND, "torch", "cpu", 60)
    try:
        assert caller.start() is None
    finally:
        caller.close()
    assert "rejection.expand" in registry.all_stages()


def test_an_import_that_never_returns_is_one_failure_within_the_timeout(tmp_path):
    (tmp_path / "hangs_on_import.py").write_text("import time\ntime.sleep(3600)\ndef greedy(**kw):\n    pass\n")
    report = tmp_path / "report.json"
    status, out, seconds = judge(tmp_path, ["--stage", "rejection.greedy", "--impl", "hangs_on_import:greedy",
                                            "--device", "cpu", "--timeout", "3", "--findings", str(tmp_path / "cases"),
                                            "--report", str(report)])
    outcomes = json.loads(report.read_text())["outcomes"]
    assert status == 1 and seconds < 60, out[-2000:]
    assert outcomes and all(o["status"] == "failed" and o["kind"] == "load" for o in outcomes)
    assert all("the import did not finish in 3 s" in o["headline"] for o in outcomes)
    assert not list((tmp_path / "cases").rglob("*.npz"))        # nothing ran: no case file
    assert out.count("the import did not finish") <= len(outcomes) + 1


def test_a_declaration_that_never_imports_is_one_usage_line(tmp_path):
    (tmp_path / "slow_vendor.py").write_text("import time\ntime.sleep(3600)\nIMPLEMENTATIONS = {}\n")
    status, out, seconds = judge(tmp_path, ["--vendor", "slow_vendor", "--device", "cpu", "--timeout", "3"])
    assert status == 2 and seconds < 60 and "did not finish in 3 s" in out, out
    assert len([line for line in out.splitlines() if "error" in line]) == 1 and "Traceback" not in out


def test_sigterm_ends_the_run_with_the_report_of_what_finished(tmp_path):
    """Output arrives line by line (a pipe too), and SIGTERM ends the run: exit 1, the report says it was
    interrupted, the worker and what it started are gone."""
    report = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "specverify", "check", "--stage", "rejection.greedy",
                             "--impl", "tests.hostile_process:hangs", "--device", "cpu", "--timeout", "300",
                             "--findings", str(tmp_path / "cases"), "--report", str(report)],
                            cwd=tmp_path, env=environment(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)

    def header():
        line = proc.stdout.readline().decode()
        assert "specverify check: profile" in line, line

    terminated_once(proc, lambda: marked(mark(tmp_path)), "the hanging implementation never started", header)
    assert json.loads(report.read_text())["interrupted"] == "SIGTERM"
    assert survivors(tmp_path) == []


def test_a_stalled_forkserver_is_started_again_within_the_start_limit(monkeypatch):
    """A connection to the forkserver that says nothing stalls the server (multiprocessing waits on it
    without a limit, to hand over a process and for its pid): the start gives up on it after
    START_SECONDS, kills it and starts the worker from a fresh one."""
    from multiprocessing import forkserver

    from specverify.judge import worker

    restart, restarts = worker.restart_forkserver, []

    def restarted() -> None:       # the fresh server gets the usual time for its preload
        restarts.append(time.monotonic())
        monkeypatch.setattr(worker, "START_SECONDS", 120.0)
        restart()

    worker.context()
    stalled = socket.socket(socket.AF_UNIX)
    stalled.connect(forkserver._forkserver._forkserver_address)
    monkeypatch.setattr(worker, "START_SECONDS", 5.0)
    monkeypatch.setattr(worker, "restart_forkserver", restarted)
    caller = worker.Isolated("rejection.expand", EXPAND, "torch", "cpu", 60)
    started = time.monotonic()
    try:
        assert caller.start() is None
    finally:
        caller.close()
        stalled.close()
    assert restarts and 5 <= restarts[0] - started < 15, restarts


def test_a_correct_implementation_conforms_under_an_inherited_address_space_limit(tmp_path):
    """Run under `ulimit -v 6291456` (6G, below the 8G the profile asks for a CPU worker), the worker gets
    the inherited 6G (a process may not raise its limit) and the run's header says so."""
    limit = 6291456 << 10
    probe = subprocess.run([sys.executable, "-c", "import torch, triton"], capture_output=True, text=True,
                           timeout=300, preexec_fn=address_space(limit))
    if probe.returncode != 0:
        pytest.skip(f"the judge cannot import torch and triton within 6G here: {probe.stderr[-300:]}")
    report = tmp_path / "report.json"
    status, out, _ = judge(tmp_path, ["--stage", "rejection.greedy", "--impl", GREEDY, "--device", "cpu",
                                      "--examples", "5", "--findings", str(tmp_path / "cases"), "--report", str(report)],
                           memory=limit)
    assert status == 0 and json.loads(report.read_text())["totals"]["failed"] == 0, out[-3000:]
    assert "workers on the CPU may map 6G (the limit this process inherited; the profile asked 8G)" in out


def test_a_worker_whose_setup_fails_is_an_error_of_the_run(tmp_path):
    """The judge's own part of a worker fails before the implementation is imported (here a mutation run's
    mutant file is gone): one line naming the cause, exit status 3 (nothing could be checked), never a
    failure of the implementation."""
    from specverify.judge.worker import MUTANT_ENV

    gone = tmp_path / "mutant.json"
    status, out, _ = judge(tmp_path, ["--stage", "rejection.greedy", "--impl", GREEDY, "--device", "cpu",
                                      "--findings", str(tmp_path / "cases"), "--report", str(tmp_path / "report.json")],
                           env={MUTANT_ENV: str(gone)})
    assert status == 3, out[-3000:]
    errors = [line for line in out.splitlines() if "error" in line]
    assert errors == [f"specverify check: error: the worker process for rejection.greedy ({GREEDY} on cpu) could "
                      f"not be set up: FileNotFoundError: [Errno 2] No such file or directory: '{gone}'"], out
    assert "Traceback" not in out and not (tmp_path / "report.json").exists()

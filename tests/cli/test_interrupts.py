"""An interrupt always lands: SIGINT or SIGTERM at any moment of a `specverify check` (the imports, a vendor's
declaration loading, inside Hypothesis, inside a garbage-collector callback, inside a worker call, while the
reports are written) ends the run promptly with one line, exit status 1, reports that hold what finished
marked interrupted, and no process of the run left."""
import gc
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specverify import interrupts
from specverify.cli import main
from specverify.pages import report_files

ROOT = Path(__file__).resolve().parents[2]
DOMAIN = ROOT / "examples" / "vendor_domain"
PROMPT = 2.0          # seconds from the signal to the end of the run, on a quiet machine
SLACK = 2.0           # more, where the machine is shared (CI runs the tests two at a time)


def processes_marked(mark: str) -> list[int]:
    """Processes whose environment holds SPECVERIFY_TEST_MARK=mark (a run's workers inherit it)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as f:
                    if f"SPECVERIFY_TEST_MARK={mark}".encode() in f.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                continue
    return found


# `python -m specverify`, with every thread's stack written to its output on SIGUSR1 (a run that hangs)
DUMPABLE = ("import faulthandler, runpy, signal, sys; faulthandler.register(signal.SIGUSR1, all_threads=True); "
            "sys.argv[0] = 'specverify'; runpy.run_module('specverify', run_name='__main__', alter_sys=True)")


def interrupted_at(moment: tuple[str, float], argv: list[str], tmp_path: Path, number=signal.SIGINT,
                   again: bool = True) -> dict:
    """Start `specverify ARGV --report r.json`, send the signal at `moment` (`delay` seconds after the first
    output line that holds `after`; "" for the start), and check what an interrupted run promises; returns its
    report. A run that ends too slowly is started once more at the same moment (`again`): only a second slow
    end fails, so a stall of the shared machine (CI runs two tests at a time) is not taken for the run's."""
    after, delay = moment
    mark = f"{os.getpid()}-{after}-{delay}-{number}"
    report = tmp_path / f"r-{delay}.json"
    env = {**os.environ, "SPECVERIFY_TEST_MARK": mark,
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(DOMAIN), os.environ.get("PYTHONPATH", "")])}
    run = subprocess.Popen([sys.executable, "-c", DUMPABLE, *argv, "--report", str(report)], cwd=tmp_path,
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(run.stdout), daemon=True)
    reader.start()
    start = time.monotonic()
    while after and not any(after in line for line in lines) and run.poll() is None:
        time.sleep(0.02)
    time.sleep(max(0.0, delay - (time.monotonic() - start if not after else 0.0)))
    if run.poll() is not None:
        pytest.fail(f"the run ended before its signal at {moment}: {''.join(lines)[-2000:]}")
    run.send_signal(number)
    sent = time.monotonic()
    try:
        run.wait(timeout=60)
    except subprocess.TimeoutExpired:
        run.send_signal(signal.SIGUSR1)       # where every thread of the run is, for the failure's message
        time.sleep(2)
        run.kill()
        reader.join(10)
        pytest.fail(f"still running 60 s after {signal.Signals(number).name} at {moment}:\n{''.join(lines)[-8000:]}")
    took = time.monotonic() - sent
    reader.join(10)
    out, name = "".join(lines), signal.Signals(number).name
    assert run.returncode == 1, out[-3000:]
    assert took < PROMPT + SLACK or again, f"{took:.2f} s after {name} at {moment}, twice"
    assert "Traceback" not in out and "Exception ignored" not in out, out[-3000:]
    assert lines and f"interrupted by {name}" in lines[-1], out[-3000:]
    found = json.loads(report.read_text())
    assert found["interrupted"] == name and found["exit_status"] == 1
    deadline = time.monotonic() + 2
    while processes_marked(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_marked(mark) == [], f"left running after {name} at {moment}"
    if took >= PROMPT + SLACK:
        return interrupted_at(moment, argv, tmp_path, number, again=False)
    return found


IN_PROCESS = [("", 0.3), ("", 0.8), ("", 1.4), ("", 2.0), ("", 2.8), ("specverify check:", 0.2),
              ("ok ", 0.0), ("ok ", 0.4), ("ok ", 1.1)]
VENDOR = [("", 0.5), ("", 1.5), ("", 2.5), ("vendor vendor_domain", 0.1), ("specverify check:", 0.5),
          ("specverify check:", 1.5), ("ok ", 0.2), ("ok ", 1.0)]


def test_an_interrupt_at_many_moments_of_an_in_process_run(tmp_path):
    finished = [len(interrupted_at(moment, ["check", "--stage", "rejection.*", "--backend", "torch", "--backend",
                                            "triton", "--device", "cpu"], tmp_path)["outcomes"])
                for moment in IN_PROCESS]
    assert finished[0] == 0 and finished[-1] > 0, finished


def test_an_interrupt_at_many_moments_of_a_vendor_run_leaves_no_worker(tmp_path):
    for i, moment in enumerate(VENDOR):
        interrupted_at(moment, ["check", "--vendor", "vendor_domain.specverify_vendor", "--device", "cpu"], tmp_path,
                       signal.SIGTERM if i % 3 == 2 else signal.SIGINT)


def test_a_signal_while_the_reports_are_written_marks_them(tmp_path, monkeypatch, capsys):
    write = report_files.write
    calls = []

    def signalled(run, *paths):
        calls.append(run.interrupted)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)     # lands in the middle of the writing
        return write(run, *paths)

    monkeypatch.setattr(report_files, "write", signalled)
    status = main(["check", "--stage", "rejection.expand", "--backend", "torch", "--check", "invalid",
                   "--report", str(tmp_path / "r.json")])
    assert status == 1 and calls == [None, "SIGINT"]
    found = json.loads((tmp_path / "r.json").read_text())
    assert found["interrupted"] == "SIGINT" and found["outcomes"][0]["status"] == "passed"
    assert capsys.readouterr().out.strip().splitlines()[-1].startswith("specverify check: interrupted by SIGINT")


def test_a_signal_inside_a_gc_callback_is_not_swallowed(tmp_path, capsys):
    sent = []

    def collecting(phase, info):
        if phase == "start" and not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)     # the handler runs inside this callback

    gc.callbacks.append(collecting)
    try:
        status = main(["check", "--stage", "rejection.*", "--backend", "torch", "--device", "cpu",
                       "--report", str(tmp_path / "r.json")])
    finally:
        gc.callbacks.remove(collecting)
    captured = capsys.readouterr()
    assert sent and status == 1, captured.out[-2000:]
    assert "Exception ignored" not in captured.err and "Traceback" not in captured.err
    assert json.loads((tmp_path / "r.json").read_text())["interrupted"] == "SIGINT"


def test_a_signal_inside_hypothesis_waits_for_the_next_example(tmp_path, monkeypatch, capsys):
    """Sent while a strategy draws: no 'Inconsistent data generation', no error outcome, the run ends."""
    from specverify.runs import search

    strategy = search.tier_strategy
    draws = []

    def signalling(target, tier):
        def draw(example):
            draws.append(1)
            if len(draws) == 7:
                os.kill(os.getpid(), signal.SIGINT)
                assert interrupts.pending() == "SIGINT"    # recorded, not raised, inside Hypothesis
            return example
        return strategy(target, tier).map(draw)

    monkeypatch.setattr(search, "tier_strategy", signalling)
    started = time.monotonic()
    status = main(["check", "--stage", "rejection.greedy", "--backend", "torch", "--device", "cpu",
                   "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert status == 1 and time.monotonic() - started < 30, out[-2000:]
    found = json.loads((tmp_path / "r.json").read_text())
    assert found["interrupted"] == "SIGINT"
    assert all(o["status"] != "error" for o in found["outcomes"]), found["outcomes"]
    assert "Inconsistent" not in out


def test_a_signal_while_a_worker_process_starts_is_not_lost(tmp_path, monkeypatch, capsys):
    from specverify.runs import shard

    started = shard.Workers.start

    def signalled(self, slot):
        os.kill(os.getpid(), signal.SIGINT)      # lands while the worker process starts
        return started(self, slot)

    monkeypatch.setattr(shard.Workers, "start", signalled)
    status = main(["check", "--stage", "rejection.expand", "--stage", "rejection.greedy", "--backend", "torch",
                   "--device", "cpu", "--devices", "cpu:2", "--report", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert status == 1 and "interrupted by SIGINT" in out.strip().splitlines()[-1], out[-2000:]
    assert json.loads((tmp_path / "r.json").read_text())["interrupted"] == "SIGINT"


def test_zones_stay_balanced_under_a_storm_of_signals():
    """A signal at any moment of a zone's entry or exit leaves the zones as they were: the handler never
    raises in the bookkeeping."""
    main_thread, stop, landed = threading.get_ident(), threading.Event(), 0

    def storm():
        while not stop.is_set():
            signal.pthread_kill(main_thread, signal.SIGINT)
            time.sleep(0.0001)

    with interrupts.installed():
        with interrupts.deferred():
            sender = threading.Thread(target=storm, daemon=True)
            sender.start()
            try:
                end = time.monotonic() + 3
                while time.monotonic() < end:
                    interrupts.reset()
                    try:
                        with interrupts.raising():
                            with interrupts.deferred():
                                pass
                    except interrupts.Interrupted:
                        landed += 1
                    assert interrupts._zones == [False]
            finally:
                stop.set()
                sender.join()
                interrupts.caught()
    assert landed > 10 and interrupts._zones == []


class ExtensionFileLoader:
    """Stands for importlib's loader of native modules: the handler knows it by name."""

    raised_inside = False

    def exec_module(self, module=None):
        try:
            os.kill(os.getpid(), signal.SIGINT)     # the handler runs here, as in Python a native init calls back
            sum(range(10_000))
        except interrupts.Interrupted:
            ExtensionFileLoader.raised_inside = True
            raise


def test_a_signal_while_a_native_module_initializes_waits_until_it_is_done():
    """Raised in Python that a native module's init calls (Triton's enums), an exception aborts the process
    (SIGABRT in CI): the signal is recorded there and raised once the init is over."""
    with interrupts.installed():
        with pytest.raises(interrupts.Interrupted):
            ExtensionFileLoader().exec_module()
            assert interrupts.pending() == "SIGINT"
            for _ in range(100):
                time.sleep(0.01)                    # the watcher signals again
        interrupts.caught()
    assert not ExtensionFileLoader.raised_inside


def test_an_interrupt_that_is_swallowed_and_kept_alive_is_raised_again():
    """Code that catches the Interrupted and goes on while keeping it (a stored traceback, native code that
    holds what it fetched) does not end the interrupt: the watcher signals again and the next one lands."""
    kept, again = [], False
    with interrupts.installed():
        try:
            os.kill(os.getpid(), signal.SIGINT)
            sum(range(10_000))
        except interrupts.Interrupted as exc:
            kept.append(exc)                        # swallowed, alive
        try:
            end = time.monotonic() + 5
            while time.monotonic() < end:
                sum(range(1_000))
        except interrupts.Interrupted as exc:
            again = exc is not kept[0]
        interrupts.caught()
    assert kept and again


def test_no_second_interrupt_while_one_is_handled():
    """While an Interrupted is on its way up (a `finally` it passes through that waits), the signals the
    watcher sends again raise nothing: the cleanup finishes."""
    cleaned = False
    with interrupts.installed():
        with pytest.raises(interrupts.Interrupted) as raised:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                sum(range(10_000))
            finally:
                try:
                    raise OSError("a cleanup step that fails and is handled")
                except OSError:
                    time.sleep(0.5)                 # five of the watcher's signals land here
                time.sleep(0.5)
                cleaned = True
        interrupts.caught()
    assert cleaned and raised.value.why == "SIGINT"


def test_a_signal_while_a_thread_starts_waits_until_it_has_started(monkeypatch):
    """Cut inside `Thread.start`, a thread may run yet never be joinable (the run's cleanup then failed and
    left its workers behind): the signal is raised once `start` has returned."""
    name = "_start_new_thread" if hasattr(threading, "_start_new_thread") else "_start_joinable_thread"
    original, returned = getattr(threading, name), False

    def signalled(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)      # lands while the thread starts
        return original(*args, **kwargs)

    worker = threading.Thread(target=time.sleep, args=(0.2,))
    with interrupts.installed():
        monkeypatch.setattr(threading, name, signalled)
        with pytest.raises(interrupts.Interrupted):
            worker.start()
            returned = True
            for _ in range(100):
                time.sleep(0.01)                    # the watcher signals again
        interrupts.caught()
    worker.join()
    assert returned

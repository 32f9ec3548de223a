"""Sharded runs (`--devices`, `--ray`, and the default spread over the CPU cores) and the cross-device
check, on CPU workers.

The examples a run checks depend on its seed only: the same outcomes (statuses, example counts, the
example that first failed, case hashes) from one process, two workers (this process and a spawned one),
a spawned worker alone and a local Ray cluster, handed to the listener in the same order. A failed
check's total count is left out: after the first failure Hypothesis keeps looking for other bugs for up
to 10 seconds of wall time, so on a loaded machine it draws a different number of examples (90 against
91 was seen with three suites sharing an H200 host's cores).
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from specverify.kernels.torch.rejection import greedy
from specverify.records import backends, registry
from specverify.records.backends import BACKENDS, Target
from specverify.runs import properties, session, shard
from specverify.runs.catalogue import CHECKS
from tests.terminated import terminated_once

ROOT = Path(__file__).resolve().parents[2]

GREEDY = registry.all_stages()["rejection.greedy"]
EXPAND = registry.all_stages()["rejection.expand"]


def targets() -> list[Target]:
    """A small run with a failure in it: two stages on oracle and Torch, one planted wrong kernel."""
    found = [backends.target(s, b, "cpu") for s in (GREEDY, EXPAND) for b in ("oracle", "torch")]
    return found + [Target(GREEDY, BACKENDS["torch"], "cpu", "tests.planted_greedy:bonus_even_after_reject")]


def options(findings) -> session.RunPlan:
    return session.RunPlan.build("ci", seed=7, examples=12, findings=findings, checks=("valid", "hazard"))


def summary(outcomes) -> list[tuple]:
    return [(o.stage, o.backend, o.device, o.source, o.check, o.status,
             None if o.status == "failed" else o.examples, o.found_after, o.case.name if o.case else None)
            for o in outcomes]


class Heard(session.Listener):
    """What a front end hears: each outcome as it is handed over, in order."""

    def __init__(self):
        self.done = []

    def check_done(self, target, outcome):
        self.done.append(outcome)


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    return summary(session.run(targets(), options(tmp_path_factory.mktemp("serial"))))


def test_devices_values():
    assert [(lane.name, lane.here) for lane in shard.lanes("cpu:2")] == [("cpu worker 0", True),
                                                                          ("cpu worker 1", False)]
    for bad, words in [("cpu:0", "at least 1"), ("cpu:x", "at least 1")]:
        with pytest.raises(shard.DevicesError, match=words):
            shard.lanes(bad)
    if not torch.cuda.is_available():
        with pytest.raises(shard.DevicesError, match="cpu:N"):
            shard.lanes("all")


def test_the_default_spread_is_one_worker_per_usable_core(monkeypatch, tmp_path):
    """Without --devices: a worker per core this process may use, at most one per stage and MOST_WORKERS;
    this process alone for one stage, one core, `cpu:1` or a target on CUDA."""
    plan = options(tmp_path)
    run = targets()                                  # two stages
    monkeypatch.setattr(shard, "usable_cores", lambda: 2)
    assert [lane.name for lane in shard.spread(None, run, plan)] == ["cpu worker 0", "cpu worker 1"]
    assert shard.spread(None, run[:2], plan) == []                     # one stage
    assert shard.spread("cpu:1", run, plan) == []
    assert len(shard.spread("cpu:3", run, plan)) == 3                  # asked for: as many as named
    cuda = Target(GREEDY, BACKENDS["torch"], "cuda", GREEDY.impls["torch"])
    assert shard.spread(None, run + [cuda], plan) == []
    monkeypatch.setattr(shard, "usable_cores", lambda: 1)
    assert shard.spread(None, run, plan) == []
    monkeypatch.setattr(shard, "usable_cores", lambda: 64)
    stages = [backends.target(s, "oracle", "cpu") for s in registry.all_stages().values()]
    assert len(shard.spread(None, stages, plan)) == shard.MOST_WORKERS
    assert len(shard.spread(None, run, plan)) == 2


def test_two_workers_check_what_one_process_checks(serial, tmp_path):
    assert any(row[5] == "failed" and row[8] for row in serial)      # the planted kernel is caught
    heard = Heard()
    outcomes = shard.run_local(targets(), options(tmp_path), "cpu:2", heard)
    assert summary(outcomes) == serial and summary(heard.done) == serial     # handed over in order
    assert {o.worker for o in outcomes} <= {"cpu worker 0", "cpu worker 1"}
    failed = [o for o in outcomes if o.status == "failed"]
    assert failed and all(o.case.parent.parent == tmp_path and o.case.exists() for o in failed)


def test_a_spawned_worker_checks_what_one_process_checks(serial, tmp_path):
    heard = Heard()
    outcomes = shard.run_local(targets(), options(tmp_path), [shard.Lane(None, "cpu worker 1")], heard)
    assert summary(outcomes) == serial and summary(heard.done) == serial
    assert {o.worker for o in outcomes} == {"cpu worker 1"}


def test_a_spawned_worker_runs_isolated_targets(tmp_path):
    """An implementation run in a worker process of its own (isolated), from a spawned worker."""
    plan = session.RunPlan.build("ci", seed=7, examples=6, findings=tmp_path, checks=("valid",), isolate=True)
    [outcome] = shard.run_local([backends.target(EXPAND, "torch", "cpu")], plan, [shard.Lane(None, "cpu worker 1")])
    assert (outcome.status, outcome.worker) == ("passed", "cpu worker 1"), outcome.headline


def test_a_worker_that_dies_fails_its_stage_and_is_replaced(tmp_path):
    """A kernel that kills its worker process: that target's checks (and those of its stage's targets not
    finished) fail, naming the worker and the signal; the next stage runs in a new worker and passes."""
    dies = Target(GREEDY, BACKENDS["torch"], "cpu", "tests.planted_greedy:kills_its_process")
    run = [dies, backends.target(EXPAND, "torch", "cpu")]
    outcomes = shard.run_local(run, options(tmp_path), [shard.Lane(None, "cpu worker 1")])
    assert [(o.stage, o.check, o.status) for o in outcomes] == [("rejection.greedy", "valid", "error"),
                                                                 ("rejection.expand", "valid", "passed")]
    assert "rejection.greedy on torch/cpu broke: cpu worker 1 ended (killed by SIGKILL)" in outcomes[0].headline


def others_in_group(group: int, grace: float = 0.0) -> list[int]:
    """The live processes of process group `group` besides its leader (waiting up to `grace` seconds for
    them to end: multiprocessing's resource tracker ends once the processes it tracks have)."""
    deadline = time.monotonic() + grace
    while (found := members(group)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def members(group: int) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and int(entry) != group and fields[0] != "Z":
            found.append(int(entry))
    return found


def test_sigterm_ends_a_spread_run_and_its_workers(tmp_path):
    """The default run on two cores: its first line names both workers, results come line by line, and
    SIGTERM ends it with the report of what finished (exit 1) and no worker left behind."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2:
        pytest.skip("needs two cores")
    report = tmp_path / "report.json"
    proc = subprocess.Popen([sys.executable, "-m", "specverify", "check", "--stage", "rejection.*",
                             "--findings", str(tmp_path / "cases"), "--report", str(report)],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=lambda: os.sched_setaffinity(0, cores))

    def first_lines():
        header = proc.stdout.readline().decode()
        assert "2 worker(s): cpu worker 0, cpu worker 1" in header, header
        line = proc.stdout.readline().decode()
        assert line.startswith("ok ") and "[cpu worker" in line, line

    terminated_once(proc, lambda: bool(others_in_group(proc.pid)), "no worker process was started", first_lines)
    written = json.loads(report.read_text())
    assert written["interrupted"] == "SIGTERM" and written["outcomes"][0]["status"] == "passed"
    assert others_in_group(proc.pid, grace=5) == []


def test_ray_cluster_checks_what_one_process_checks(serial, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'specverify[ray]')")
    from specverify.runs import cluster

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        outcomes = cluster.run(targets(), options(tmp_path), "auto")
    finally:
        ray.shutdown()
    assert summary(outcomes) == serial
    failed = [o for o in outcomes if o.status == "failed"]
    assert failed and all(o.case.parent.parent == tmp_path and o.case.exists() for o in failed)
    assert all(str(tmp_path) in o.report for o in failed)      # the replay command names the driver's file


def differs_on_device_1(**kw):
    """A kernel whose compiled form differs between devices: on the second one, rows past the first
    get their first output token off by one."""
    greedy(**kw)
    out = kw["output_token_ids"]
    if properties.device_index.get() == 1 and out.shape[0] > 1:
        out[1:, 0] += 1


def test_cross_device_check(tmp_path, monkeypatch):
    cross = CHECKS["cross-device"]
    good = backends.target(GREEDY, "torch", "cpu")
    assert "needs two or more cpu devices (1 visible)" in cross.applies(good)
    monkeypatch.setattr(properties, "CPU_DEVICES", 2)
    assert cross.applies(good) is None and cross.spans_devices
    opts = session.RunPlan.build("ci", examples=40, findings=tmp_path, checks=("cross-device",))
    [passed] = session.run([good], opts)
    assert passed.status == "passed" and passed.measures == {"devices": 2}
    bad = Target(GREEDY, BACKENDS["torch"], "cpu", "tests:differs", differs_on_device_1)
    [failed] = session.run([bad], opts)
    assert failed.status == "failed" and failed.kind == "device", failed.report
    assert "different bytes on device 1 than on device 0: `output_token_ids`" in failed.headline
    assert failed.case is not None and failed.case.exists() and "replay:" in failed.report


def test_bad_spreads_are_usage_errors(capsys):
    from specverify.cli import main

    assert main(["check", "--stage", "rejection.greedy", "--devices", "cpu:2", "--ray", "auto"]) == 2
    assert "exclude each other" in capsys.readouterr().out
    assert main(["check", "--stage", "rejection.greedy", "--devices", "cpu:0"]) == 2
    assert "at least 1" in capsys.readouterr().out

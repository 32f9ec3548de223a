"""Sharded runs (`--devices`, `--ray`) and the cross-device check, on CPU workers.

The examples a run checks depend on its seed only: the same outcomes (statuses, example counts, the
example that first failed, case hashes) from one process, two pool workers and a local Ray cluster. A
failed check's total count is left out: after the first failure Hypothesis keeps looking for other bugs
for up to 10 seconds of wall time, so on a loaded machine it draws a different number of examples (90
against 91 was seen with three suites sharing an H200 host's cores).
"""
import pytest
import torch

from specverify import backends, properties, registry, session, shard
from specverify.backends import BACKENDS, Target
from specverify.checks import CHECKS
from specverify.kernels.torch.rejection import greedy

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


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    return summary(session.run(targets(), options(tmp_path_factory.mktemp("serial"))))


def test_devices_values():
    assert [lane.name for lane in shard.lanes("cpu:2")] == ["cpu worker 0", "cpu worker 1"]
    for bad, words in [("cpu:0", "at least 1"), ("cpu:x", "at least 1")]:
        with pytest.raises(shard.DevicesError, match=words):
            shard.lanes(bad)
    if not torch.cuda.is_available():
        with pytest.raises(shard.DevicesError, match="cpu:N"):
            shard.lanes("all")


def test_two_workers_check_what_one_process_checks(serial, tmp_path):
    assert any(row[5] == "failed" and row[8] for row in serial)      # the planted kernel is caught
    outcomes = shard.run_local(targets(), options(tmp_path), "cpu:2")
    assert summary(outcomes) == serial
    assert {o.worker for o in outcomes} == {"cpu worker 0", "cpu worker 1"}
    failed = [o for o in outcomes if o.status == "failed"]
    assert failed and all(o.case.parent.parent == tmp_path and o.case.exists() for o in failed)


def test_ray_cluster_checks_what_one_process_checks(serial, tmp_path):
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'specverify[ray]')")
    from specverify import cluster

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

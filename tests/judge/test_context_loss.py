"""A call that loses its process's CUDA context (an illegal address, a device-side assert) is that target's
failure alone: later calls, of the same target while its failure shrinks and of every later target, run in
fresh worker processes, so no verdict depends on what ran before it (`device.probe_context`)."""
import json
import subprocess
import sys

import pytest
import torch

from specverify.judge import calls, device
from specverify.records import registry
from specverify.records.backends import BACKENDS, Target
from specverify.runs import session

GREEDY = registry.all_stages()["rejection.greedy"]


class Spare:
    def __init__(self):
        self.calls, self.closed = 0, False

    def call(self, plan, arena, checked=False, probe="plain"):
        self.calls += 1
        return "from the spare"

    def close(self):
        self.closed = True


@pytest.fixture
def lost(monkeypatch):
    monkeypatch.setattr(device, "_lost", ["RuntimeError: CUDA error: an illegal memory access was encountered"])


def test_after_the_context_is_lost_cuda_calls_go_to_a_spare_worker(lost):
    spares = []

    def spare(name):
        spares.append((name, Spare()))
        return spares[-1][1]

    caller = calls.InProcess(lambda **kw: None, "triton", "cuda:1", spare=spare)
    assert caller.call(None, None) == "from the spare" and caller.call(None, None) == "from the spare"
    assert [name for name, _ in spares] == ["cuda:1"] and spares[0][1].calls == 2     # one spare, kept
    caller.close()
    assert spares[0][1].closed


def test_a_lost_context_isolates_later_cuda_targets_of_ours_only(lost):
    plan = session.RunPlan.build("ci", keep_findings=False)
    assert session.runs_isolated(Target(GREEDY, BACKENDS["triton"], "cuda", GREEDY.impls["triton"]), plan)
    assert not session.runs_isolated(Target(GREEDY, BACKENDS["triton"], "cpu", GREEDY.impls["triton"]), plan)
    assert not session.runs_isolated(Target(GREEDY, BACKENDS["oracle"], "cuda", "x:y"), plan)


def test_the_probe_keeps_the_first_error_that_showed_the_loss(monkeypatch):
    monkeypatch.setattr(device, "_lost", [])
    monkeypatch.setattr(device, "synchronize", lambda name: None)
    assert device.probe_context("cuda") is None and device.probe_context("cpu") is None

    def broken(name):
        raise RuntimeError("CUDA error: device-side assert triggered\nmore")

    monkeypatch.setattr(device, "synchronize", broken)
    assert device.probe_context("cpu") is None
    assert device.probe_context("cuda") == "RuntimeError: CUDA error: device-side assert triggered"
    monkeypatch.setattr(device, "synchronize", lambda name: None)
    assert device.context_lost() == "RuntimeError: CUDA error: device-side assert triggered"


SCRIPT = """
import json, sys, tempfile
from pathlib import Path
from specverify.judge import device
from specverify.records import registry
from specverify.records.backends import BACKENDS, Target
from specverify.runs import session

stage = registry.all_stages()["rejection.greedy"]
plan = session.RunPlan.build("ci", examples=40, findings=Path(tempfile.mkdtemp()), checks=("valid",), isolate=False)
found = {}
for name, source in (("ours first", stage.impls["triton"]), ("hostile", "tests.hostile:loses_the_cuda_context"),
                     ("ours after", stage.impls["triton"])):
    [outcome] = session.run([Target(stage, BACKENDS["triton"], "cuda", source)], plan)
    found[name] = [outcome.status, outcome.headline, outcome.report or ""]
found["lost"] = device.context_lost()
print(json.dumps(found))
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_kernel_that_loses_the_context_fails_alone_and_the_next_target_still_passes():
    """In a process of its own: the loss would otherwise reach this pytest worker's context."""
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["ours first"][0] == "passed" and found["ours after"][0] == "passed", found
    status, headline, report = found["hostile"]
    assert status == "failed" and calls.CONTEXT_LOST in headline + report, found["hostile"]
    assert "device-side assert" in found["lost"]
    assert "B = 3" in report, report    # shrunk in fresh workers to the smallest batch that breaks it

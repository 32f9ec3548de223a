"""Checks that hold in any order: every GPU measurement first makes the same warm-up (`device.warm_up`: the
same number of unmeasured calls, on the stream it measures on, the device synchronized), after the
backend's own warm-up (`calls.warm_backend`, once per device). Tested here with instruments that record
what is done to them (no GPU needed), and on a GPU by running one stage's property checks alone and after
another stage's in the same process: the verdicts must be the same."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from specverify.judge import calls, device
from specverify.records import backends, registry
from specverify.records.backends import BACKENDS, Target
from specverify.runs import session

ROOT = Path(__file__).resolve().parents[2]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


class Recorder:
    """Instruments that log what a measurement does to them: which stream each call ran on, every device
    synchronization, every event recorded, waited for or waited on."""

    def __init__(self):
        self.log, self.streams, self.current = [], 1, 0

    def stream(self, stream_id=None, device_index=0, device_type=1):
        if stream_id is None:                         # no arguments: a new stream
            self.streams += 1
            stream_id = 10 * self.streams
        return SimpleNamespace(stream_id=stream_id, device_index=device_index, device_type=device_type)

    def set_stream(self, stream_id, device_index, device_type):
        self.current = stream_id

    def record(self, event, stream):
        event.on = stream.stream_id
        self.log.append(f"record on {stream.stream_id}")

    def tools(self) -> device.Instruments:
        return device.Instruments(
            synchronize=lambda: self.log.append("sync device"), get_device=lambda: 0, set_device=None,
            set_sync_debug_mode=lambda mode: None, get_sync_debug_mode=lambda: device.SYNC_ERROR,
            sleep=lambda cycles: self.log.append("spin"),
            current_stream=lambda index: (self.current, index, 1), set_stream=self.set_stream,
            stream_type=self.stream, event_type=lambda enable_timing=False: SimpleNamespace(on=None),
            record=self.record, query=lambda event: False,
            wait=lambda event: self.log.append(f"wait for the event on {event.on}"),
            stream_waits=lambda event, stream: self.log.append(f"{stream.stream_id} waits for {event.on}"),
            elapsed_ms=lambda start, end: 1.0, profile=None, cuda_activity=None, cuda_device_type=None)

    def step(self, what: str):
        def run():
            self.log.append(f"{what} on {self.current}")
            return what
        return run


def warmed(stream: int) -> list[str]:
    return ["sync device"] + [f"call on {stream}", "sync device"] * device.WARM_UP_CALLS


@pytest.mark.parametrize("stream", [None, 20])
def test_the_warm_up_calls_on_the_measured_stream_then_synchronizes(stream):
    fake = Recorder()
    given = None if stream is None else fake.stream(stream_id=stream)
    device.warm_up(fake.step("call"), "cuda", given, fake.tools())
    assert fake.log == warmed(stream or 0)
    assert fake.current == 0                          # the caller's stream is current again


def test_no_sync_measures_after_the_warm_up():
    fake = Recorder()
    returned, measures = device.check_no_sync(fake.step("call"), "cuda", fake.tools())
    assert measures == {"witness": "pending"}
    first = fake.log.index("spin")                    # the witness (its rate timed first)
    assert fake.log[:first] == warmed(0) + ["sync device"]
    assert fake.log.count("call on 0") == device.WARM_UP_CALLS + 1


def test_stream_order_calls_and_reads_on_a_fresh_stream_and_waits_for_it_alone():
    fake = Recorder()
    returned, readings = device.stream_ordered(fake.step("call"), fake.step("restore"), fake.step("read"), "cuda",
                                               fake.tools())
    assert (returned, readings) == ("call", "read")
    assert fake.log == ["record on 0", "20 waits for 0", *warmed(20),
                        "restore on 20", "call on 20", "read on 20", "record on 20", "wait for the event on 20"]
    assert fake.current == 0


def test_a_backends_warm_up_runs_once_per_device_before_the_first_call(monkeypatch):
    made = []
    monkeypatch.setattr(calls, "_warmed", set())
    monkeypatch.setattr(backends, "load", lambda path: lambda where: made.append((path, where)))
    monkeypatch.setattr(device, "synchronize", lambda where, tools=None: made.append("sync"))
    for index in (1, 1, 0):
        monkeypatch.setattr(torch.cuda, "current_device", lambda: index)
        calls.warm_backend("pkg.kernels:warm_up", "cuda")
    calls.warm_backend("pkg.kernels:warm_up", "cpu")
    calls.warm_backend("", "cuda")
    assert made == [("pkg.kernels:warm_up", torch.device("cuda", 1)), "sync",
                    ("pkg.kernels:warm_up", torch.device("cuda", 0)), "sync"]


def test_callers_carry_their_backends_warm_up():
    stage = registry.all_stages()["rejection.expand"]
    target = Target(stage, BACKENDS["torch"], "cpu", stage.impls["torch"])
    plan = session.RunPlan.build("ci", keep_findings=False)
    caller = session.caller_for(target, plan)
    assert caller.warm_up == BACKENDS["torch"].warm_up == "specverify.kernels.torch.layout:warm_up"
    isolated = session.Isolated(stage.name, target.source, "torch", "cpu", 60, warm_up=caller.warm_up)
    assert isolated.like("cuda:1").warm_up == caller.warm_up


def test_every_declared_warm_up_is_a_function():
    declared = {b.name: b.warm_up for b in BACKENDS.values() if b.warm_up}
    assert declared
    for path in declared.values():
        assert callable(backends.load(path)), path


# --- on a GPU: the same verdicts alone and after another stage ------------------------------------

def property_verdicts(tmp_path: Path, stages: list[str]) -> dict:
    """(status, kind, launches) of each GPU property check of each stage, from one `specverify check` of
    the torch kernels on CUDA in a fresh process, the stages in the order given."""
    report = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
    argv = [sys.executable, "-m", "specverify", "check", "--device", "cuda", "--backend", "torch",
            *[a for name in stages for a in ("--stage", name)],
            "--check", "no-sync", "--check", "launches", "--check", "graph-replay", "--examples", "30",
            "--findings", str(tmp_path / "cases"), "--json", str(report)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    outcomes = json.loads(report.read_text())["outcomes"]
    assert [o["stage"] for o in outcomes] == sorted((o["stage"] for o in outcomes), key=stages.index)
    return {(o["stage"], o["dialect"], o["check"]): (o["status"], o["kind"], o["measures"].get("launches"))
            for o in outcomes}


@needs_cuda
@pytest.mark.parametrize("first,then", [
    ("graph.fill_common_inputs", "graph.step_context"),
    ("graph.step_context", "graph.fill_common_inputs"),
    ("rejection.expand", "rejection.sample"),
])
def test_property_verdicts_do_not_depend_on_what_ran_before(tmp_path, first, then):
    alone = property_verdicts(tmp_path, [then])
    after = {key: verdict for key, verdict in property_verdicts(tmp_path, [first, then]).items() if key[0] == then}
    assert alone and after == alone

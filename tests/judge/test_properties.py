"""GPU property checks (no host sync, launches per call, CUDA-graph replay): they apply to CUDA targets
only, and on a GPU each catches the implementation built to break it (tests/hostile.py). Their
measurements (specverify/judge/device.py) are sealed against the implementation: the decisions, the sealed
probe table and the fresh worker are tested here without a GPU too."""
import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from specverify.cli import main
from specverify.judge import device, materialize, probes
from specverify.judge.calls import InProcess, Result
from specverify.judge.harness import Failure
from specverify.judge.worker import Isolated
from specverify.kernels.torch.rejection import expand
from specverify.records import backends, registry
from specverify.records.backends import BACKENDS, Target
from specverify.runs import session
from specverify.runs.catalogue import CHECKS
from specverify.runs.profiles import PROFILES
from specverify.runs.properties import fresh_caller, verify_launches, verify_no_sync
from specverify.runs.protocol import Context

EXPAND = registry.all_stages()["rejection.expand"]
PROPERTIES = ("no-sync", "launches", "graph-replay", "stream-order")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_properties_apply_to_cuda_production_targets_only():
    for name in PROPERTIES:
        check = CHECKS[name]
        assert check.applies(Target(EXPAND, BACKENDS["torch"], "cpu", "x:y")) is not None
        assert check.applies(Target(EXPAND, BACKENDS["oracle"], "cuda", "x:y")) is not None
        assert check.applies(Target(EXPAND, BACKENDS["triton"], "cuda", "x:y")) is None
        assert check.applies(Target(EXPAND, BACKENDS["impl"], "cuda", "x:y")) is None


def run_property(function: str, check: str, tmp_path, isolate: bool, stage=EXPAND):
    target = Target(stage, BACKENDS["impl"] if isolate else BACKENDS["torch"], "cuda", f"tests.hostile:{function}")
    plan = session.RunPlan.build("ci", examples=30, findings=tmp_path, checks=(check,), isolate=isolate)
    [outcome] = session.run([target], plan)
    return outcome


@needs_cuda
@pytest.mark.parametrize("isolate", [False, True])
@pytest.mark.parametrize("function,check,words", [
    ("syncs_the_host", "no-sync", "synchronized the device with the host"),
    ("host_copy_not_replayed", "graph-replay", "CUDA graph"),
])
def test_a_property_breaker_is_caught(tmp_path, function, check, words, isolate):
    outcome = run_property(function, check, tmp_path, isolate)
    assert outcome.status == "failed" and words in outcome.headline, outcome.headline
    assert outcome.case is not None


@needs_cuda
def test_launches_are_counted_and_bounded(tmp_path):
    """Our own kernels' property checks are the generated tests (tests/stages/test_stages.py) on a GPU."""
    outcome = run_property("launches_many", "launches", tmp_path, False, replace(EXPAND, launches={}))
    assert outcome.status == "passed" and outcome.measures["launches"] >= 40   # no bound declared: reported
    outcome = run_property("launches_many", "launches", tmp_path, False, replace(EXPAND, launches={"torch": 3}))
    assert outcome.status == "failed" and "its record allows 3" in outcome.headline


# --- the measurements, without a GPU ------------------------------------------------------------------

def forged(call, bound, where, *spec):
    return call(), {"launches": 1}


def expand_call(caller, probe="plain"):
    plan, arena = materialize.plan(EXPAND, EXPAND.worked())
    return caller.call(plan, arena, probe=probe)


def test_an_interrupt_inside_an_in_process_call_is_not_the_callees_failure():
    """SIGTERM or Ctrl-C landing while one of our kernels runs in this process (the CLI's handler raises
    session.Interrupted there) stops the run: the call passes it on and records no failure of the target
    (an H200 run cut by `timeout -s INT` once filed such a call as a nondeterministic failure)."""
    def interrupted(**_):
        raise session.Interrupted("SIGINT")

    with pytest.raises(session.Interrupted):
        expand_call(InProcess(interrupted, "torch", "cpu"))


def test_the_sealed_probe_table_ignores_a_patched_probes_module(monkeypatch):
    probes.seal()
    monkeypatch.setitem(probes.PROBES, "plain", forged)
    monkeypatch.setattr(probes, "plain", forged)
    monkeypatch.setattr(probes, "PROBES", dict.fromkeys(probes.PROBES, forged))
    result = expand_call(InProcess(expand, "torch", "cpu"))
    assert result.error is None and result.measures == {}


@pytest.mark.parametrize("source", ["tests.forges_probes_at_import:expand", "tests.hostile:patches_the_probes"])
def test_a_worker_seals_before_it_imports_the_implementation(source):
    """The implementation forges the probes at its import or at its first call: the worker still measures."""
    caller = Isolated("rejection.expand", source, "torch", "cpu", 60)
    try:
        assert caller.start() is None
        for _ in range(2):
            result = expand_call(caller)
            assert result.error is None and result.measures == {}, result.measures
    finally:
        caller.close()


def test_property_checks_of_an_isolated_target_get_a_fresh_worker():
    base = Isolated("rejection.expand", "tests.hostile:remembers_its_calls", "torch", "cpu", 60)
    ctx = Context(PROFILES["ci"], 0, None, None, base, guard_check=False, deadline=None)
    try:
        assert base.start() is None
        assert [expand_call(base).returned for _ in range(2)] == [1, 2]
        with fresh_caller(ctx) as fresh:
            assert fresh.caller is not base and expand_call(fresh.caller).returned == 1
        assert fresh.caller.process is None            # closed afterwards
        assert expand_call(base).returned == 3
    finally:
        base.close()
    here = Context(PROFILES["ci"], 0, None, None, InProcess(expand, "torch", "cpu"), False, None)
    with fresh_caller(here) as same:
        assert same is here                              # our own kernels keep their caller


def reading(pending=True, mode=device.SYNC_ERROR, spin_s=0.01, call_s=0.001):
    return device.WitnessReading(spin_s, call_s, pending, mode)


def test_the_witness_decides_sync_and_tampering():
    assert device.witness_verdict(reading()) == "pending"
    assert device.witness_verdict(reading(pending=False)) == "finished"
    assert device.witness_verdict(reading(mode=0)) == "tampered"
    assert device.witness_verdict(reading(pending=False, mode=1)) == "tampered"
    assert device.first_witness_s(1e-6) == device.MIN_WITNESS_S
    assert device.first_witness_s(0.002) == pytest.approx(0.04)
    assert device.first_witness_s(30.0) == device.MAX_FIRST_WITNESS_S
    assert device.longer_witness_s(reading(spin_s=0.01, call_s=0.5)) == pytest.approx(device.LONGER * 0.5)


class FakeDevice:
    """Instruments that record what the measurement does; `behaviour` is what the call does to them."""

    def __init__(self, behaviour=None):
        self.mode, self.events, self.calls, self.spins = 0, [], 0, []
        self.behaviour = behaviour or (lambda fake: None)

    def tools(self):
        def event(enable_timing=False):
            made = {"done": False}
            self.events.append(made)
            return made

        return device.Instruments(
            synchronize=self.synchronize, get_device=lambda: 0, set_device=None,
            set_sync_debug_mode=self.set_mode, get_sync_debug_mode=lambda: self.mode,
            sleep=self.spins.append, current_stream=lambda index: (0, index, 1), set_stream=None,
            stream_type=lambda **kw: kw, event_type=event, record=lambda made, stream: None,
            query=lambda made: made["done"], wait=lambda made: None, stream_waits=None,
            elapsed_ms=lambda start, end: 1.0, profile=None, cuda_activity=None, cuda_device_type=None)

    def synchronize(self):
        for made in self.events:
            made["done"] = True

    def set_mode(self, mode):
        self.mode = mode

    def call(self):
        self.calls += 1
        self.behaviour(self)
        return self.calls


def test_no_sync_retries_a_finished_witness_once_then_reports_it():
    honest = FakeDevice()
    warm = device.WARM_UP_CALLS
    assert device.check_no_sync(honest.call, "cuda", honest.tools()) == (warm + 1, {"witness": "pending"})
    assert honest.mode == 0                                   # the mode found is put back
    syncing = FakeDevice(FakeDevice.synchronize)
    assert device.check_no_sync(syncing.call, "cuda", syncing.tools()) == (warm + 2, {"witness": "finished"})
    assert syncing.spins[-1] >= device.LONGER * syncing.spins[-2] * 0.99     # the retry spins longer
    switching = FakeDevice(lambda fake: fake.set_mode(0))
    assert device.check_no_sync(switching.call, "cuda", switching.tools()) == (warm + 1,
                                                                               {"tampered": "sync_debug_mode"})


def test_launches_count_between_the_markers_in_launch_order():
    marker = "at::cuda::(anonymous namespace)::spin_kernel(long)"
    record = [device.Activity("late side-stream kernel", (7, 900.0)), device.Activity(marker, (3, 10.0)),
              device.Activity("fill", (5, 20.0)), device.Activity(marker, (9, 30.0)),
              device.Activity("copy", (4, 15.0))]
    assert device.launches_between_markers(record) == {"launches": 3, "kernels": ["copy", "fill",
                                                                                  "late side-stream kernel"]}
    for cut in (record[:1], record[2:], []):
        assert device.launches_between_markers(cut) == {"tampered": "profiler_record"}


class Profile:
    """A profiler whose record is what `log` holds once the profiled region ends (`keep`: which entries)."""

    def __init__(self, log, keep):
        self.log, self.keep = log, keep

    def __enter__(self):
        self.log.clear()
        return self

    def __exit__(self, *exc):
        return False

    def events(self):
        return [SimpleNamespace(name=name, id=i, time_range=SimpleNamespace(start=i), device_type="cuda")
                for i, name in enumerate(self.log) if self.keep(name)]


@pytest.mark.parametrize("keep,measures", [
    (lambda name: True, {"launches": 2, "kernels": ["fill", "kernel"]}),
    (lambda name: name != device.MARKER, {"tampered": "profiler_record"}),
])
def test_launches_are_read_between_the_markers_of_the_record(keep, measures):
    log = []
    tools = replace(FakeDevice().tools(), sleep=lambda cycles: log.append(device.MARKER),
                    profile=lambda activities: Profile(log, keep), cuda_device_type="cuda")
    assert device.count_launches(lambda: log.extend(["kernel", "fill"]), "cuda", tools) == (None, measures)


class Answers:
    """A caller whose every call answers with the given measures."""

    isolated = False

    def __init__(self, measures):
        self.measures = measures

    def call(self, plan, arena, checked=False, probe="plain"):
        return Result(arena, {}, None, None, self.measures)


@pytest.mark.parametrize("verify,measures,words", [
    (verify_no_sync, {"tampered": "sync_debug_mode"},
     "tampered with the measurement: the call changed CUDA's sync debug mode"),
    (verify_no_sync, {"witness": "finished"}, "synchronized the device with the host inside the call (the "
                                              "witness kernel had finished when the call returned)"),
    (verify_no_sync, {}, "tampered with the measurement: the no-sync measurement did not come back"),
    (verify_launches, {"tampered": "profiler_record"},
     "tampered with the measurement: the profiler's record of the call is incomplete"),
    (verify_launches, {}, "tampered with the measurement: the profiler's record of the call is incomplete"),
])
def test_the_judge_words_what_the_measurement_found(verify, measures, words):
    target = Target(EXPAND, BACKENDS["impl"], "cuda", "x:y")
    ctx = Context(PROFILES["ci"], 0, None, None, Answers(measures), False, None)
    with pytest.raises(Failure) as caught:
        verify(target, EXPAND.worked(), ctx)
    assert words in caught.value.headline
    assert caught.value.kind == ("sync" if measures.get("witness") == "finished" else "tampered")
    assert verify_no_sync(target, EXPAND.worked(), replace(ctx, caller=Answers({"witness": "pending"}))) == {}
    assert verify_launches(target, EXPAND.worked(), replace(ctx, caller=Answers({"launches": 2}))) == {"launches": 2}


# --- on a GPU: implementations that tamper with the measurement -------------------------------------

def check_expand(tmp_path, capsys, impl: str) -> dict:
    report = tmp_path / "report.json"
    main(["check", "--stage", "rejection.expand", "--impl", impl, "--device", "cuda", "--check", "no-sync",
          "--check", "launches", "--examples", "30", "--findings", str(tmp_path / "cases"), "--json", str(report)])
    capsys.readouterr()
    return {o["check"]: o for o in json.loads(report.read_text())["outcomes"]}


@needs_cuda
def test_our_expand_passes_the_sealed_measurements(tmp_path, capsys):
    found = check_expand(tmp_path, capsys, "specverify.kernels.torch.rejection:expand")
    assert [found[c]["status"] for c in ("no-sync", "launches")] == ["passed", "passed"], found
    assert 1 <= found["launches"]["measures"]["launches"] <= EXPAND.launches["torch"]


@needs_cuda
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_our_kernels_pass_in_a_fresh_worker(tmp_path, backend):
    """A fresh worker caches nothing before the measured call: the warm-up call does (graph.step_context's
    Torch kernel makes a device constant from a host list at its first call)."""
    target = backends.target(registry.all_stages()["graph.step_context"], backend, "cuda")
    plan = session.RunPlan.build("ci", examples=30, findings=tmp_path, checks=("no-sync", "launches"), isolate=True)
    outcomes = session.run([target], plan)
    assert [o.status for o in outcomes] == ["passed", "passed"], [o.headline for o in outcomes]


@needs_cuda
@pytest.mark.parametrize("function,words", [
    ("switches_sync_debug_off", "tampered with the measurement: the call changed CUDA's sync debug mode"),
    ("restores_sync_debug_mode", "synchronized the device with the host inside the call (the witness kernel "
                                 "had finished when the call returned)"),
    ("synchronizes_explicitly", "synchronized the device with the host inside the call (the witness kernel "
                                "had finished when the call returned)"),
])
def test_switching_the_sync_check_off_is_caught(tmp_path, capsys, function, words):
    outcome = check_expand(tmp_path, capsys, f"tests.hostile:{function}")["no-sync"]
    assert outcome["status"] == "failed" and words in outcome["headline"], outcome["headline"]


@needs_cuda
@pytest.mark.parametrize("impl", ["tests.forges_probes_at_import:expand", "tests.hostile:patches_the_probes"])
def test_forged_probes_hide_neither_syncs_nor_launches(tmp_path, capsys, impl):
    found = check_expand(tmp_path, capsys, impl)
    assert found["no-sync"]["status"] == "failed", found["no-sync"]
    assert "synchronized the device with the host inside the call" in found["no-sync"]["headline"]
    assert found["launches"]["status"] == "passed" and found["launches"]["measures"]["launches"] >= 41


@needs_cuda
def test_an_emptied_profiler_record_is_tampering(tmp_path, capsys):
    outcome = check_expand(tmp_path, capsys, "tests.hostile:empties_the_profiler")["launches"]
    assert outcome["status"] == "failed" and outcome["kind"] == "tampered"
    assert "tampered with the measurement: the profiler's record of the call is incomplete" in outcome["headline"]


# --- the declared domain ----------------------------------------------------------------------------------

RANDOM = registry.all_stages()["rejection.random"]
NO_OOV = {"excludes": {"oov_drafts": "the drafter samples its own [0, V) head"}}


def test_every_property_check_draws_within_the_declared_domain(monkeypatch):
    """The property checks draw as the tiers do, within the target's declared domain (an H100 run once
    failed vLLM's random kernel, declared without out-of-vocabulary drafts, on stream-order with a case of
    V = 1 and drafts 1 and 8). Every registered property check runs here on the CPU, its call answered by
    the oracle with passing measures: each example it draws is recorded."""
    from specverify.records import domain
    from specverify.runs import properties

    dom = domain.parse(RANDOM, NO_OOV, "test")
    target = Target(RANDOM, BACKENDS["impl"], "cuda", "tests.domain_kernels:random_wrong_only_on_oov_drafts",
                    domain=dom)
    oracle = InProcess(RANDOM.oracle, "numpy", "cpu")
    outside = []

    def call_with(probe, t, example, ctx):
        outside.append(dom.outside(RANDOM, example))
        plan, arena = materialize.plan(RANDOM, example)
        result = oracle.call(plan, arena)
        result.measures.update(witness="pending", launches=1)
        return result

    monkeypatch.setattr(properties, "call_with", call_with)
    ctx = Context(PROFILES["ci"], 0, 60, None, oracle, False, None)
    for name in PROPERTIES:
        outcome = CHECKS[name].run(target, ctx)
        assert outcome.status == "passed" and outcome.examples == 6, (name, outcome.headline)
    assert len(outside) == 4 * 6 and not any(outside), outside


@needs_cuda
def test_a_kernel_wrong_only_outside_its_declared_domain_passes_every_device_property(tmp_path, capsys):
    declare = tmp_path / "declare.toml"
    declare.write_text('[domain.excludes]\noov_drafts = "the drafter samples its own [0, V) head"\n')
    report = tmp_path / "r.json"
    status = main(["check", "--stage", "rejection.random", "--impl",
                   "tests.domain_kernels:random_wrong_only_on_oov_drafts", "--device", "cuda", "--examples", "60",
                   "--declare", str(declare), "--json", str(report), "--findings", str(tmp_path / "f"),
                   *[a for c in ("valid", *PROPERTIES) for a in ("--check", c)]])
    out = capsys.readouterr().out
    outcomes = {o["check"]: o for o in json.loads(report.read_text())["outcomes"]}
    assert status == 0, out
    assert all(outcomes[c]["status"] == "passed" for c in ("valid", *PROPERTIES)), outcomes
    [outside] = json.loads(report.read_text())["verdicts"][0]["outside"]
    assert outside["failed"], outside       # outside the domain it is wrong, and the information draws say so

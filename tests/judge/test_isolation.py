"""Hostile implementations: each must become a clear, replayable failure of its own target, with exit
status 1 and the JSON report written, while every other target still runs (tests/hostile.py)."""
import json
import time

import numpy as np
import pytest

from specverify.cli import main
from specverify.files import cases
from specverify.records import backends, registry
from specverify.records.backends import BACKENDS, Target
from specverify.runs import session

GREEDY = registry.all_stages()["rejection.greedy"]
EXPAND = registry.all_stages()["rejection.expand"]


def check_impl(tmp_path, capsys, function: str, *extra: str, stage: str = "rejection.greedy") -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    status = main(["check", "--stage", stage, "--impl", f"tests.hostile:{function}", "--device", "cpu",
                   "--findings", str(tmp_path / "findings"), "--json", str(report), "--timeout", "3",
                   "--target-timeout", "60", *extra])
    return status, json.loads(report.read_text()), capsys.readouterr().out


@pytest.mark.parametrize("function,words,examples", [
    ("exit_zero", "called sys.exit(0)", "20"),
    ("os_exit_zero", "exited with status 0 inside the call", "20"),
    ("abort", "killed by SIGABRT", "20"),
    ("hang", "timed out", "5"),
    ("patch_the_judge", "output_token_ids[0, 0]: wrong value", "20"),
    ("writes_one_past_the_end", "write past the end of `output_token_ids` by 1 element", "20"),
])
def test_an_outside_implementation_fails_alone_with_a_case(tmp_path, capsys, function, words, examples):
    status, report, out = check_impl(tmp_path, capsys, function, "--examples", examples)
    assert status == 1 and report["exit_status"] == 1
    [outcome] = [o for o in report["outcomes"] if o["check"] == "valid"]
    assert outcome["status"] == "failed" and words in outcome["headline"], outcome["headline"]
    case = outcome["case"]
    assert case and f"specverify replay {case} --impl tests.hostile:{function} --device cpu" in out
    name, example = cases.load(case)
    assert name == "rejection.greedy" and example.tier == "valid"


def test_a_read_past_an_input_is_named_under_conformance(tmp_path, capsys):
    status, report, _ = check_impl(tmp_path, capsys, "reads_one_past_the_end", "--profile", "conformance",
                                   "--examples", "30")
    assert status == 1
    [outcome] = [o for o in report["outcomes"] if o["check"] == "valid"]
    assert "read outside input `draft_token_ids`" in outcome["headline"]
    assert main(["replay", outcome["case"], "--impl", "tests.hostile:reads_one_past_the_end", "--device", "cpu"]) == 1
    assert "read outside input `draft_token_ids`" in capsys.readouterr().out


def test_scribbles_into_gaps_on_hazard_inputs_only_are_caught(tmp_path, capsys):
    status, report, _ = check_impl(tmp_path, capsys, "gaps_on_hazard", "--examples", "40",
                                   stage="rejection.sample_padded")
    assert status == 1
    by_check = {o["check"]: o for o in report["outcomes"]}
    assert by_check["valid"]["status"] == "passed"
    assert by_check["hazard"]["status"] == "failed" and "write into a gap" in by_check["hazard"]["headline"]


@pytest.mark.parametrize("function,kind", [("abort", "signal"), ("os_exit_zero", "exit"), ("hang", "timeout"),
                                           ("exit_zero", "exit")])
def test_a_misbehaving_built_in_kernel_fails_its_target_and_the_run_goes_on(tmp_path, function, kind):
    """A torch-backend target whose kernel misbehaves, run isolated beside a good one."""
    bad = Target(GREEDY, BACKENDS["torch"], "cpu", f"tests.hostile:{function}")
    good = backends.target(EXPAND, "torch", "cpu")
    plan = session.RunPlan.build("conformance", examples=4, findings=tmp_path, timeout=3, target_timeout=60)
    outcomes = session.run([bad, good], plan)
    bad_outcomes = [o for o in outcomes if o.stage == GREEDY.name]
    assert {o.check for o in bad_outcomes} == {"valid", "invalid"}     # every check ran, not just the first
    assert all(o.status == "failed" and o.kind == kind for o in bad_outcomes), [o.headline for o in bad_outcomes]
    assert all(o.case is not None and o.case.exists() for o in bad_outcomes)
    assert [o.status for o in outcomes if o.stage == EXPAND.name] == ["passed", "passed"]


def test_an_import_path_that_names_nothing_is_bad_usage(capsys):
    assert main(["check", "--stage", "rejection.greedy", "--impl", "tests.hostile:no_such_function"]) == 2
    assert main(["check", "--stage", "rejection.greedy", "--impl", "no_such_module_anywhere:f"]) == 2
    out = capsys.readouterr().out
    assert len([line for line in out.splitlines() if "error:" in line]) == 2 and "Traceback" not in out


def test_an_outside_module_that_exits_at_import_is_its_failure(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exits_on_import.py").write_text("import os\nos._exit(3)\ndef greedy(**kw):\n    pass\n")
    status = main(["check", "--stage", "rejection.greedy", "--impl", "exits_on_import:greedy", "--device", "cpu",
                   "--findings", str(tmp_path / "findings"), "--examples", "3"])
    out = capsys.readouterr().out
    assert status == 1 and "could not be loaded" in out or "exited with status 3" in out, out


def test_a_case_of_an_outside_failure_says_so_on_replay_without_impl(tmp_path, capsys):
    _, report, _ = check_impl(tmp_path, capsys, "writes_one_past_the_end", "--examples", "10")
    [case] = [o["case"] for o in report["outcomes"] if o["check"] == "valid"]
    assert main(["replay", case, "--backend", "torch"]) == 0
    assert "failed for an outside implementation (tests.hostile:writes_one_past_the_end)" in capsys.readouterr().out


def test_every_input_is_inside_guards_at_a_non_zero_offset():
    seen = {}

    def spy(**kw):
        for name, value in kw.items():
            if hasattr(value, "storage_offset"):
                seen[name] = (value.storage_offset(), value.untyped_storage().nbytes(),
                              value.numel() * value.element_size())
    example = cases.Example("valid", {"draft_token_ids": np.array([1, 2], np.int32),
                                      "target_argmax": np.array([1, 3], np.int64),
                                      "bonus_token_ids": np.array([9], np.int64),
                                      "cu_num_draft_tokens": np.array([2], np.int32), "is_greedy": None,
                                      "max_spec_len": 2},
                            outputs={"output_token_ids": cases.Buffer((1, 3), "int32")})
    with pytest.raises(Exception):
        session.verify_example(Target(GREEDY, BACKENDS["impl"], "cpu", "spy", spy), example)
    for name, (offset, storage, size) in seen.items():
        assert offset > 0 and storage >= offset * 1 + size, name


def greedy_cases(folder, count: int) -> None:
    """`count` case files of rejection.greedy with non-empty batches in `folder`."""
    for n in range(1, count + 1):
        example = cases.Example("valid", {"draft_token_ids": np.arange(n, dtype=np.int32),
                                          "target_argmax": np.arange(n, dtype=np.int64),
                                          "bonus_token_ids": np.array([9], np.int64),
                                          "cu_num_draft_tokens": np.array([n], np.int32), "is_greedy": None,
                                          "max_spec_len": n},
                                outputs={"output_token_ids": cases.Buffer((1, n + 1), "int32")})
        cases.save(folder, GREEDY.name, example, {"backend": "torch"})


def test_a_stalled_frame_on_every_descriptor_is_its_verdict_within_one_timeout(tmp_path, capsys):
    """The search keeps the example that broke protocol (shrinking it would cost up to 40 more calls, each
    waiting out the deadline); the whole check of the target ends within 30 s at --timeout 3 (one call's
    limit, the import and the judging)."""
    started = time.monotonic()
    status, report, out = check_impl(tmp_path, capsys, "stalls_every_descriptor")
    seconds = time.monotonic() - started
    [outcome] = [o for o in report["outcomes"] if o["check"] == "valid"]
    assert status == 1 and outcome["status"] == "failed" and outcome["kind"] == "lost", outcome["headline"]
    assert "answered out of protocol: its answer was still incomplete after 3 s" in outcome["headline"]
    assert outcome["case"] and seconds < 30, seconds


def test_a_worker_that_broke_protocol_is_asked_nothing_more(tmp_path, capsys):
    """Its first corpus case breaks protocol: the other cases are a note, the valid check fails at once."""
    greedy_cases(tmp_path / "corpus", 3)
    started = time.monotonic()
    status, report, out = check_impl(tmp_path, capsys, "stalls_every_descriptor", "--cases", str(tmp_path / "corpus"))
    seconds = time.monotonic() - started
    by_check = {o["check"]: o for o in report["outcomes"]}
    assert status == 1 and seconds < 30, seconds
    assert by_check["corpus"]["status"] == "failed" and "answered out of protocol" in by_check["corpus"]["headline"]
    assert "its worker answered out of protocol: 2 case(s) not replayed" in by_check["corpus"]["notes"]
    valid = by_check["valid"]
    assert valid["status"] == "failed" and valid["kind"] == "lost" and valid["examples"] == 0
    assert "not run: its worker answered out of protocol in the corpus check" in valid["report"]


def test_a_crash_that_does_not_repeat_is_named_with_what_the_worker_printed(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)       # the worker's folder too: where the implementation marks its first call
    status, report, out = check_impl(tmp_path, capsys, "exits_once")
    [outcome] = [o for o in report["outcomes"] if o["check"] == "valid"]
    assert status == 1 and outcome["status"] == "failed" and outcome["kind"] == "exit", outcome["headline"]
    assert ("exited with status 1 inside the call on this input, then passed on it in a fresh worker: a crash "
            "that does not repeat") in outcome["headline"]
    assert "nondeterministic" not in outcome["headline"]
    assert "hostile: giving up on this batch" in outcome["report"] and "hostile: giving up on this batch" in out


def test_outputs_that_differ_between_calls_on_one_input_are_nondeterministic(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, report, out = check_impl(tmp_path, capsys, "wrong_once")
    [outcome] = [o for o in report["outcomes"] if o["check"] == "valid"]
    assert status == 1 and outcome["status"] == "failed" and outcome["kind"] == "wrong", outcome["headline"]
    assert "is nondeterministic: it failed on an input, then passed on it" in outcome["headline"]
    assert "does not repeat" not in outcome["headline"]

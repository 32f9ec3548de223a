"""Verdicts honest about time and failure reports a person reads: a target whose time runs out is
incomplete, never a failure (terminal, JSON, JUnit, Markdown, matrix, exit status 4); output elements still
holding the poison are shown as poison; a failure shows every input that decides its failing output (the
sizes, the failing request's row, its probability and noise rows); an outside implementation whose kernels
run in Triton's interpreter is drawn the interpreter's shapes."""
import json
import re

import numpy as np
import pytest
from junitparser import JUnitXml, Skipped

from specverify import env
from specverify.cli import main
from specverify.judge.failure_report import failure_report
from specverify.judge.harness import Failure
from specverify.pages import matrix
from specverify.records import registry
from specverify.records.backends import BACKENDS, Target
from specverify.records.stage import Buffer, Example
from specverify.records.values import POISON_A, filled
from specverify.runs.protocol import Outcome
from specverify.runs.session import verify_example
from specverify.runs.verdicts import FAILED, INCOMPLETE, NOTHING_CHECKED, PASSED, Level, exit_status

STAGES = registry.all_stages()
POISON = "0xA5A5A5A5 (poison: never written)"


def slow_check(tmp_path, capsys, *extra):
    paths = {name: tmp_path / f"r.{name}" for name in ("json", "xml", "md")}
    status = main(["check", "--stage", "rejection.greedy", "--impl", "tests.slow_kernels:greedy_slowly",
                   "--device", "cpu", "--check", "valid", "--target-timeout", "4", "--findings", str(tmp_path / "f"),
                   "--json", str(paths["json"]), "--junit", str(paths["xml"]), "--markdown", str(paths["md"]), *extra])
    return status, paths, capsys.readouterr().out


def test_a_target_whose_time_runs_out_is_incomplete_never_a_failure(tmp_path, capsys):
    """SGLang's fill_accept_out_cache_loc, within its domain, was 'does not conform ... contract: FAILS'
    (exit 1) after 44 passing examples because its time ran out."""
    status, paths, out = slow_check(tmp_path, capsys)
    assert status == INCOMPLETE == 4, out
    assert "does not conform" not in out and "FAILS" not in out, out
    ran = re.search(r"incomplete \((\d+) of 100 examples, all passed\)", out)
    assert ran and 0 < int(ran.group(1)) < 100, out
    report = json.loads(paths["json"].read_text())
    [outcome], [verdict] = report["outcomes"], report["verdicts"]
    assert outcome["status"] == "incomplete" and outcome["failures"] == [] and report["exit_status"] == 4
    assert verdict["summary"] == f"incomplete ({ran.group(1)} of 100 examples, all passed)"
    assert report["totals"]["incomplete"] == 1 and report["totals"]["failed"] == 0
    [case] = [c for suite in JUnitXml.fromfile(str(paths["xml"])) for c in suite]
    assert [type(r) for r in case.result] == [Skipped] and "incomplete" in case.result[0].message
    markdown = paths["md"].read_text()
    assert "**Result: incomplete" in markdown and "exit status 4" in markdown
    assert f"incomplete ({ran.group(1)} of 100 examples, all passed)" in markdown
    cell = matrix.build([matrix.load(paths["json"])]).rows[0].cells["rejection.greedy"]
    assert cell.category == "incomplete" and cell.label == "incomplete", cell


def outcome(status: str, examples: int = 3) -> Outcome:
    return Outcome("rejection.greedy", "impl", "cpu", "valid", status=status, examples=examples, planned=10)


def test_exit_status_incomplete_is_4_and_a_failure_wins():
    assert exit_status([outcome("passed"), outcome("incomplete")]) == INCOMPLETE
    assert exit_status([outcome("incomplete"), outcome("failed")]) == FAILED
    assert exit_status([outcome("passed")]) == PASSED
    assert exit_status([outcome("incomplete", examples=0)]) == NOTHING_CHECKED


def test_a_level_says_not_run_once():
    level = Level("robustness", "hazard", "not run", headline="not run: the waiver file skips it")
    assert level.text() == "robustness: not run: the waiver file skips it"


# --- poison and the inputs that decide a failure -----------------------------------------------------------

def random_example() -> Example:
    """rejection.random, one non-greedy request of two drafts over V = 4, both accepted (the bonus follows)."""
    return Example("hazard", {
        "draft_token_ids": np.array([1, 2], np.int32), "bonus_token_ids": np.array([3], np.int64),
        "cu_num_draft_tokens": np.array([2], np.int32), "max_spec_len": 2,
        "draft_probs": np.full((2, 4), 0.25, np.float32),
        "target_probs": np.array([[0.1, 0.6, 0.2, 0.1], [0.1, 0.2, 0.6, 0.1]], np.float32),
        "recovered_token_ids": np.array([0, 0], np.int32), "uniform_probs": np.array([0.5, 0.5]),
        "is_greedy": np.array([False])}, outputs={"output_token_ids": Buffer((1, 3), "int32")})


def report_of(stage: str, example: Example, impl) -> str:
    target = Target(STAGES[stage], BACKENDS["impl"], "cpu", "tests:impl", impl)
    with pytest.raises(Failure) as caught:
        verify_example(target, example)
    return failure_report(target, example, caught.value, "specverify replay ...")


def test_an_untouched_output_prints_as_poison_not_as_a_number():
    untouched = int(filled((1,), np.dtype("int32"), POISON_A)[0])
    hazard = report_of("rejection.random", random_example(), lambda **kw: None)        # writes nothing
    assert "poison" in hazard and str(untouched) not in hazard, hazard
    assert ("row [poison, poison, poison] (poison: 0xA5A5A5A5, never written) is not 1..3 ids in [0, 4) then "
            + POISON) in hazard, hazard
    valid = Example("valid", random_example().inputs, outputs=random_example().outputs)
    assert f"output_token_ids[0, 0]: missing write: expected 1, got {POISON}" in \
        report_of("rejection.random", valid, lambda **kw: None)


def nan_lane() -> Example:
    """lmdeploy's NaN lane: one request, one draft, V = 2, the request's noise all NaN (its recovered id
    must be 0: NaN never wins, and an all-NaN row gives 0)."""
    return Example("hazard", {
        "cu_num_draft_tokens": np.array([1], np.int32), "draft_token_ids": np.array([0], np.int32),
        "draft_probs": None, "target_probs": np.array([[0.25, 0.75]], np.float32),
        "inv_q": np.array([[np.nan, np.nan]], np.float32), "max_spec_len": None},
        outputs={"recovered_token_ids": Buffer((1,), "int32")})


def test_the_nan_lane_case_can_be_understood_from_its_report():
    text = report_of("rejection.recovered", nan_lane(), lambda **kw: kw["recovered_token_ids"].fill_(1))
    assert "recovered_token_ids[0]: every score is NaN, so 0, got 1" in text
    assert "V = 2" in text, text
    assert "target_probs[0] = [0.25, 0.75]" in text and "inv_q[0] = [nan, nan]" in text, text
    assert max(len(line) for line in text.splitlines()) <= 120


def test_the_failing_request_and_its_rows_are_shown_past_the_first_rows():
    """A batch of 20 requests wrong only in request 17: its row of the row table, its probability rows (a
    row of V = 64 values by its deciding entries) and the sizes are in the report."""
    rng = np.random.default_rng(0)
    vocab, batch = 64, 20
    target = rng.random((batch, vocab)).astype(np.float32)
    target /= target.sum(1, keepdims=True)
    example = Example("valid", {
        "draft_token_ids": np.arange(batch, dtype=np.int32) % vocab, "bonus_token_ids": np.zeros(batch, np.int64),
        "cu_num_draft_tokens": np.arange(1, batch + 1, dtype=np.int32), "max_spec_len": 1, "draft_probs": None,
        "target_probs": target, "recovered_token_ids": np.zeros(batch, np.int32),
        "uniform_probs": np.full(batch, 0.5), "is_greedy": np.zeros(batch, bool)},
        outputs={"output_token_ids": Buffer((batch, 2), "int32")})

    def wrong_in_17(**kw):
        from specverify.kernels.torch.rejection import random
        random(**kw)
        kw["output_token_ids"][17, 0] += 1
    text = report_of("rejection.random", example, wrong_in_17)
    assert "output_token_ids[17, 0]: wrong value" in text
    assert re.search(r"^\s+17\s+1\s+False", text, re.M), text
    assert "sizes: T = 20, B = 20, V = 64" in text
    assert re.search(r"target_probs\[17\] = \(64 values\) \[0: \S+, \.\.\., 17: \S+ \(drafted\)", text), text
    assert max(len(line) for line in text.splitlines()) <= 120


# --- outside implementations run in Triton's interpreter ----------------------------------------------------

def test_reaching_triton_kernels_is_found_through_modules_closures_and_wrappers():
    """Every Triton implementation of ours reaches its kernels (some through a kept-kernel Launcher object,
    one through a closure here); no Torch one does."""
    env.prepare()
    from specverify.kernels.triton import rejection as triton_kernels
    from specverify.records.backends import load

    def wrapper(**kw):
        return triton_kernels.greedy(**kw)
    assert env.reaches_triton(wrapper)
    for stage in STAGES.values():
        for backend in ("torch", "triton"):
            if backend in stage.impls:
                assert env.reaches_triton(load(stage.impls[backend])) == (backend == "triton"), stage.impls[backend]


def interpreted_note(tmp_path, capsys, impl: str, *extra) -> list[str]:
    report = tmp_path / "r.json"
    main(["check", "--stage", "rejection.greedy", "--impl", impl, "--device", "cpu", "--examples", "4",
          "--check", "valid", "--json", str(report), "--findings", str(tmp_path / "f"), *extra])
    capsys.readouterr()
    return [n for n in json.loads(report.read_text())["outcomes"][0]["notes"] if "interpreter" in n]


def test_an_outside_triton_kernel_in_the_interpreter_is_drawn_the_interpreters_sizes(tmp_path, capsys):
    """An outside Triton kernel run in the interpreter was drawn full-size shapes (tree.build at N = 513, depth
    1024) and timed out after 300 s, where our own interpreted kernels get small ones."""
    assert interpreted_note(tmp_path, capsys, "specverify.kernels.triton.rejection:greedy") == [
        "drawn at the Triton interpreter's sizes, as our Triton kernels on the CPU are: TRITON_INTERPRET is set "
        "for its worker and it reaches Triton kernels"]
    assert interpreted_note(tmp_path, capsys, "specverify.kernels.torch.rejection:greedy") == []
    declare = tmp_path / "d.toml"
    declare.write_text("interpreted = true\n")
    assert "its declaration says" in interpreted_note(tmp_path, capsys, "specverify.kernels.torch.rejection:greedy",
                                                      "--declare", str(declare))[0]
    assert Target(STAGES["tree.build"], BACKENDS["impl"], "cpu", "x:y", interpreted="declared").slow

"""Rule dialects: `rejection.random` judged by `strict`, `strict_q0` and `approx_div`.

Our strict-tie kernels pass under their dialect and fail under the record's rule on a tie, and the
record's kernels fail under `strict`; the dialects' draws reach their ties (and keep `approx_div`'s
uniforms off the band); `show`, the reports, the CLI, the matrix and the sharded workers name the
dialect. On CUDA, a Triton kernel written with `/` (tests/approx_div_kernel.py) conforms under
`approx_div` and is caught without it.
"""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, find, given, settings

from specverify.cli import main
from specverify.judge.harness import Failure, oracle_outputs
from specverify.oracles import rejection as oracle
from specverify.pages.contract_data import show_text
from specverify.pages.report_files import markdown, to_json
from specverify.pytest_plugin import stage_matrix
from specverify.records import backends, dialects, registry
from specverify.records.backends import BACKENDS, Target
from specverify.records.stage import DrawContext
from specverify.runs import session, shard
from specverify.runs.protocol import Outcome
from specverify.runs.verdicts import Run
from specverify.stages.rejection import random_approx_div_worked, random_strict_q0_worked, random_strict_worked
from specverify.strategies import probability_tables as tables

RANDOM = registry.all_stages()["rejection.random"]
SMALL = DrawContext(small=True)
KERNELS = {"torch": "specverify.kernels.torch.rejection", "triton": "specverify.kernels.triton.rejection"}


def ours(backend: str, function: str, dialect: str = "") -> Target:
    """Our kernel `function` judged by `dialect`, in process (Triton on the GPU where there is one: its
    interpreter runs only where CUDA is absent)."""
    device = "cuda" if backend == "triton" and torch.cuda.is_available() else "cpu"
    return Target(dialects.judged(RANDOM, dialect), BACKENDS[backend], device, f"{KERNELS[backend]}:{function}",
                  dialect=dialect)


def verdict(target: Target, example) -> str:
    try:
        session.verify_example(target, example)
    except Failure as exc:
        return exc.headline
    return "passed"


@pytest.mark.parametrize("backend", sorted(KERNELS))
def test_strict_kernels_pass_strict_and_fail_the_record_on_a_tie(backend):
    assert verdict(ours(backend, "random_strict", "strict"), random_strict_worked()) == "passed"
    assert "output_token_ids[0, 0]" in verdict(ours(backend, "random_strict"), random_strict_worked())


@pytest.mark.parametrize("backend", sorted(KERNELS))
def test_record_kernels_fail_strict_on_a_tie(backend):
    assert verdict(ours(backend, "random"), random_strict_worked()) == "passed"
    assert "output_token_ids[0, 0]" in verdict(ours(backend, "random", "strict"), random_strict_worked())


@pytest.mark.parametrize("backend", sorted(KERNELS))
def test_strict_q0_kernels_accept_q_zero(backend):
    assert verdict(ours(backend, "random_strict_q0", "strict_q0"), random_strict_q0_worked()) == "passed"
    assert "output_token_ids[0, 0]" in verdict(ours(backend, "random_strict", "strict_q0"), random_strict_q0_worked())
    assert "output_token_ids[0, 0]" in verdict(ours(backend, "random_strict_q0", "strict"), random_strict_q0_worked())


def differs(first, second, example) -> bool:
    x = example.inputs
    outs = []
    for rule in (first, second):
        out = np.full((len(x["cu_num_draft_tokens"]), x["max_spec_len"] + 1), -7, np.int32)
        rule(**x, output_token_ids=out)
        outs.append(out)
    return not np.array_equal(*outs)


@pytest.mark.parametrize("dialect,rule", [("strict", oracle.random_strict), ("strict_q0", oracle.random_strict_q0)])
def test_dialect_draws_reach_its_ties(dialect, rule):
    """Some valid draw of the dialect's tier is decided differently by the record's rule (a tie)."""
    strategy = dialects.judged(RANDOM, dialect).valid(SMALL)
    found = find(strategy, lambda ex: differs(oracle.random, rule, ex),
                 settings=settings(max_examples=1000, database=None, derandomize=True,
                                   suppress_health_check=list(HealthCheck)))
    assert found.tier == "valid"


def test_strict_ties_are_exact_in_f32():
    t = tables.Tables(np.array([[0.25, 0.3, 0.7]], np.float32).repeat(3, 0), np.array(
        [[0.5, 0.9, 0.7]], np.float32).repeat(3, 0), np.ones((1, 3), np.float32))
    can, tie = tables.strict_ties(np.array([0, 1, 2]), t)
    assert can.all()
    q, p = t.draft[0], t.target[0]
    assert ((tie.astype(np.float32) * q).astype(np.float32) == p).all()


@settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(dialects.judged(RANDOM, "approx_div").valid(SMALL))
def test_approx_div_uniforms_stay_off_the_band(example):
    x = example.inputs
    t = tables.Tables(x["target_probs"], x["draft_probs"], np.ones((1, 1), np.float32))
    can, lo, hi = tables.approx_div_band(x["draft_token_ids"], t)
    u = x["uniform_probs"]
    assert not (can & (u >= lo) & (u <= hi)).any()


def test_approx_div_example_sits_just_outside_the_band():
    x = random_approx_div_worked().inputs
    ratio = float(np.float32(0.5) / np.float32(0.625))
    above, below = x["uniform_probs"]
    assert below < ratio < above
    out = oracle_outputs(dialects.judged(RANDOM, "approx_div"), random_approx_div_worked())["output_token_ids"]
    assert out[0, 0] == 3 and out[1].tolist() == [1, 3]     # rejected; accepted, then the bonus


def test_show_prints_every_dialect_with_its_worked_example():
    text = show_text([RANDOM])
    for name in ("strict", "strict_q0", "approx_div"):
        assert f"### Dialect `{name}`" in text
    strict = text.split("### Dialect `strict`")[1].split("### Dialect")[0]
    assert "f32(f32(u) * q) < p" in strict and "[2, -, -]" in strict    # the tie rejected, by its own oracle
    assert "approximate f32 division" in text


def test_target_and_matrix_carry_the_dialect():
    target = backends.target(RANDOM, "torch", "cpu", dialect="strict")
    assert target.dialect == "strict" and target.source.endswith(":random_strict")
    assert target.stage.oracle is oracle.random_strict
    rows = {(s.dialect, b, d) for s, b, d, _ in backends.matrix([RANDOM], ["torch"], ["cpu"])}
    assert rows == {("", "torch", "cpu"), ("strict", "torch", "cpu"), ("strict_q0", "torch", "cpu")}
    only = backends.matrix([RANDOM], ["triton"], ["cpu"], "strict")
    assert [(s.dialect, b) for s, b, _, _ in only] == [("strict", "triton")]
    ids = {p.id for p in stage_matrix()}
    assert "rejection.random:strict-torch-cpu-valid" in ids and not any("approx_div" in i for i in ids)
    assert dialects.resolve("rejection.random:strict_q0", registry.all_stages()).oracle is oracle.random_strict_q0
    with pytest.raises(dialects.UnknownDialect, match="its dialects are strict, strict_q0, approx_div"):
        backends.target(RANDOM, "torch", "cpu", dialect="bogus")


def test_a_sharded_worker_rebuilds_the_dialect():
    rebuilt = shard.rebuild(shard.describe(backends.target(RANDOM, "triton", "cpu", dialect="strict")))
    assert rebuilt.dialect == "strict" and rebuilt.stage.oracle is oracle.random_strict


def test_reports_name_the_dialect():
    source = f"{KERNELS['torch']}:random_strict"
    run = Run([Outcome("rejection.random", "torch", "cpu", "valid", examples=3, source=source, dialect="strict"),
               Outcome("rejection.random", "torch", "cpu", "valid", examples=3, source=source)],
              profile="ci", seed=0, device="cpu")
    data = json.loads(json.dumps(to_json(run)))
    assert sorted(v["dialect"] for v in data["verdicts"]) == ["", "strict"]
    assert [o["dialect"] for o in data["outcomes"]] == ["strict", ""]
    assert "under dialect strict (ties reject: f32(u * q) < p)" in markdown(run)


def test_an_unknown_dialect_is_one_usage_line(capsys):
    assert main(["check", "--stage", "rejection.random", "--dialect", "bogus"]) == 2
    out = capsys.readouterr().out.strip().splitlines()
    assert out == ["specverify check: error: dialect 'bogus': rejection.random has no such dialect (its dialects "
                   "are strict, strict_q0, approx_div; '' is the record's rule)"]
    assert main(["check", "--stage", "rejection.greedy", "--dialect", "strict"]) == 2
    assert "rejection.greedy has no such dialect (it has no dialects" in capsys.readouterr().out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="approximate division happens on CUDA only")
def test_approximate_division_conforms_under_approx_div_and_is_caught_without():
    """tests/approx_div_kernel.py writes p / q with Triton's `/` (div.full.f32 on CUDA)."""
    from tests.approx_div_kernel import random as approximate

    plan = session.RunPlan.build("ci", examples=400, checks=("valid",), keep_findings=False, isolate=False)

    def outcome(dialect: str) -> Outcome:
        target = Target(dialects.judged(RANDOM, dialect), BACKENDS["triton"], "cuda",
                        "tests.approx_div_kernel:random", approximate, dialect=dialect)
        [found] = session.run([target], plan)
        return found

    assert outcome("approx_div").status == "passed"
    target = Target(RANDOM, BACKENDS["triton"], "cuda", "tests.approx_div_kernel:random", approximate)
    assert verdict(target, division_ties()).startswith("rejection.random on triton/cuda: output_token_ids[")


def division_ties(requests: int = 8192, seed: int = 7):
    """One draft per request, p < q random f32, and u at the correctly rounded f32(p / q) (a tie: accept)
    or one f32 step above it (reject): a division 1 ulp low rejects a tie, one 1 ulp high accepts above.
    Inside approx_div's band, so only the record's rule judges it."""
    from specverify.records.stage import Buffer, Example

    rng = np.random.default_rng(seed)
    p, q = np.sort(rng.random((2, requests), dtype=np.float32) * np.float32(0.9) + np.float32(0.05), axis=0)
    ratio = (p / q).astype(np.float32)
    u = np.where(np.arange(requests) % 2 == 0, ratio, np.nextafter(ratio, np.float32(2)))
    probs = lambda first: np.stack([first, 1 - first], 1).astype(np.float32)   # noqa: E731
    return Example(tier="valid", inputs={
        "draft_token_ids": np.zeros(requests, np.int32), "bonus_token_ids": np.ones(requests, np.int64),
        "cu_num_draft_tokens": np.arange(1, requests + 1, dtype=np.int32), "max_spec_len": 1,
        "draft_probs": probs(q), "target_probs": probs(p), "recovered_token_ids": np.ones(requests, np.int32),
        "uniform_probs": u.astype(np.float64), "is_greedy": np.zeros(requests, bool)},
        outputs={"output_token_ids": Buffer((requests, 2), "int32")})


def test_division_ties_are_valid_and_our_kernels_pass_them():
    """The record's kernels divide correctly rounded (`tl.math.div_rn`): they pass where the approximate
    fixture is caught."""
    example = division_ties(512)
    assert tables.approx_div_inexact(example)
    for backend in ("torch", "triton"):
        assert verdict(ours(backend, "random"), example) == "passed"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's exact division: CPU only")
def test_the_approximate_kernel_differs_only_in_its_division():
    """Under the Triton interpreter `/` divides exactly, so the fixture conforms to the record's rule on
    its worked examples (on CUDA only the division changes)."""
    from tests.approx_div_kernel import random as approximate

    for example in (RANDOM.worked(), random_approx_div_worked()):
        target = Target(RANDOM, BACKENDS["triton"], "cpu", "tests.approx_div_kernel:random", approximate)
        assert verdict(target, example) == "passed"


def test_reports_say_approximate_f32_division():
    assert dialects.words(RANDOM, "approx_div") == "dialect approx_div (approximate f32 division)"


def test_a_corpus_case_inside_the_approximate_division_band_is_counted_not_replayed(tmp_path, capsys):
    """Under `approx_div` a stored valid-tier case whose uniform lies inside the band has no fair byte
    verdict: the corpus check counts it apart; the record's rule still replays it."""
    from specverify.files import cases

    example = random_approx_div_worked()
    x = example.inputs
    inside = x["uniform_probs"].copy()
    inside[0] = float(np.float32(x["target_probs"][0, x["draft_token_ids"][0]] /
                                 x["draft_probs"][0, x["draft_token_ids"][0]]))
    stored = replace(example, inputs={**x, "uniform_probs": inside})
    assert tables.approx_div_inexact(stored) and tables.approx_div_inexact(example) is None
    cases.save(tmp_path / "cases", "rejection.random", stored, {"origin": "test"})
    cases.save(tmp_path / "cases", "rejection.random", example, {"origin": "test"})

    def corpus(*dialect):
        report = tmp_path / "r.json"
        status = main(["check", "--stage", "rejection.random", "--impl", "tests.approx_div_kernel:random",
                       "--device", "cpu", "--check", "corpus", "--cases", str(tmp_path / "cases"),
                       "--json", str(report), *dialect])
        capsys.readouterr()
        return status, json.loads(report.read_text())["outcomes"][0]
    status, outcome = corpus("--dialect", "approx_div")
    assert status == 0, outcome
    assert any("1 case(s) outside where dialect approx_div (approximate f32 division) judges byte for byte "
               "(a uniform within 6 f32 steps of f32(p / q)): not replayed" in n for n in outcome["notes"]), outcome
    _, whole = corpus()
    assert whole["examples"] == outcome["examples"] + 1, (whole, outcome)


@pytest.mark.parametrize("stage,impl,rule", [
    ("rejection.random", "specverify.kernels.torch.rejection:random_strict", "strict"),
    ("tree.verify_greedy", "specverify.kernels.torch.tree:verify_longest_path", "longest_path")])
def test_a_failing_outside_kernel_is_told_which_dialect_it_may_follow(tmp_path, capsys, stage, impl, rule):
    report = tmp_path / "r.json"
    status = main(["check", "--stage", stage, "--impl", impl, "--device", "cpu", "--check", "valid",
                   "--examples", "60", "--json", str(report), "--findings", str(tmp_path / "f")])
    out = capsys.readouterr().out
    [verdict] = json.loads(report.read_text())["verdicts"]
    assert status == 1 and verdict["summary"] == "does not conform"
    assert rule in verdict["follows"], verdict["rules"]
    assert f"Its failing case and draws pass under dialect {', '.join(verdict['follows'])}: it may follow that " \
           "rule." in out
    assert f'declare dialect = "{rule}"' in out


def test_a_dialect_is_offered_only_when_the_failing_case_passes_under_it(tmp_path, capsys):
    """vLLM's random kernel, reading an out-of-vocabulary draft's probabilities from the next row, was told
    "Its draws pass under dialect strict, approx_div: it may follow that rule" (seed 1: 40 draws of each
    missed its bug, which has nothing to do with ties). Its failing case fails under every dialect."""
    report = tmp_path / "r.json"
    status = main(["check", "--stage", "rejection.random", "--impl",
                   "tests.domain_kernels:random_reading_oov_from_the_next_row", "--device", "cpu", "--seed", "1",
                   "--examples", "60", "--check", "valid", "--json", str(report), "--findings", str(tmp_path / "f")])
    out = capsys.readouterr().out
    [verdict] = json.loads(report.read_text())["verdicts"]
    assert status == 1 and verdict["follows"] == [], verdict["rules"]
    assert "it may follow" not in out and "declare dialect" not in out, out
    for rule in verdict["rules"]:
        assert rule["case"].startswith(("fails: ", "not judged: ")) and rule["judged"] == 0, rule
    assert "under dialect strict (ties reject: f32(u * q) < p) instead: the failing case fails too" in out, out


def test_every_stage_dividing_p_by_q_has_approx_div_with_a_worked_example_outside_its_band():
    stages = registry.all_stages()
    having = sorted(name for name, stage in stages.items() if "approx_div" in stage.dialects)
    assert having == ["rejection.random", "rejection.sample", "rejection.sample_padded"]
    above, below = random_approx_div_worked().inputs["uniform_probs"]
    for name in having[1:]:
        under = dialects.judged(stages[name], "approx_div")
        example = stages[name].dialects["approx_div"].worked()
        assert tables.approx_div_inexact(example) is None
        assert example.inputs["uniform_probs"].reshape(-1).tolist() == [above, below]
        out = oracle_outputs(under, example)["output_token_ids"]
        assert out[0, 0] == 3 and out[1].tolist() == [1, 3]     # rejected (recovered 3); accepted, then the bonus
    assert "### Dialect `approx_div`" in show_text([stages["rejection.sample_padded"]])


def padded_division_ties(requests: int = 4096, seed: int = 3):
    """rejection.sample_padded, one draft per random row, u exactly the correctly rounded f32(p / q) (a tie:
    accept) where p * (1 / q) rounds below it: only the record's rule judges it (inside approx_div's band)."""
    from specverify.records.stage import Buffer, Example

    rng = np.random.default_rng(seed)
    p, q = np.sort(rng.random((2, requests), dtype=np.float32) * np.float32(0.9) + np.float32(0.05), axis=0)
    exact = (p / q).astype(np.float32)
    low = (p * (np.float32(1) / q).astype(np.float32)).astype(np.float32) < exact
    p, q, exact = p[low], q[low], exact[low]
    rows = len(p)
    probs = lambda first: np.stack([first, 1 - first], 1).astype(np.float32).reshape(rows, 1, 2)   # noqa: E731
    return Example(tier="valid", inputs={
        "draft_token_ids": np.zeros((rows, 1), np.int64), "draft_probs": probs(q), "target_probs": probs(p),
        "bonus_token_ids": np.ones(rows, np.int64), "is_greedy": np.zeros(rows, bool),
        "uniform_probs": exact.astype(np.float64).reshape(rows, 1), "inv_q": np.ones((rows, 2), np.float32),
    }, outputs={"output_token_ids": Buffer((rows, 2), "int64"), "num_rejected_tokens": Buffer((rows,), "int64"),
                "last_token_ids": Buffer((rows,), "int64")})


def test_approx_div_on_sample_padded_accepts_an_approximate_division_and_catches_a_real_bug(tmp_path, capsys):
    """tests/approx_div_padded_kernel.py divides as p * (1 / q), on every device."""
    from tests import approx_div_padded_kernel as fixture

    declared = tmp_path / "declare.toml"
    declared.write_text('dialect = "approx_div"\n')
    run = ["check", "--stage", "rejection.sample_padded", "--device", "cpu", "--examples", "60",
           "--check", "valid", "--findings", str(tmp_path / "f")]
    assert main([*run, "--impl", "tests.approx_div_padded_kernel:sample_padded", "--declare", str(declared)]) == 0
    assert "conforms" in capsys.readouterr().out
    assert main([*run, "--impl", "tests.approx_div_padded_kernel:sample_padded_ignoring_q",
                 "--declare", str(declared)]) == 1
    assert "does not conform" in capsys.readouterr().out
    stage = registry.all_stages()["rejection.sample_padded"]
    target = Target(stage, BACKENDS["torch"], "cpu", "tests.approx_div_padded_kernel:sample_padded",
                    fixture.sample_padded)
    ties = padded_division_ties()
    assert len(ties.inputs["uniform_probs"]) > 100
    assert verdict(target, ties).startswith("rejection.sample_padded on torch/cpu: ")
    assert tables.approx_div_inexact(ties)   # the dialect does not judge it byte for byte

"""The distribution tier: its laws (checked against a simulation), its verdicts on honest and planted samplers
that own their random numbers, our kernels under it, and the `randomness` declaration."""
import json

import numpy as np
import pytest

from specverify.cli import main
from specverify.judge import laws
from specverify.records import randomness
from specverify.records.domain import DomainError
from specverify.records.registry import all_stages
from specverify.stages.seeded import FLASHINFER_CHAIN
from specverify.strategies import panels

SAMPLERS = "specverify.mutation.planted_samplers"


def simulated(p, q, drafts, rng) -> np.ndarray:
    """Speculative sampling of each row of `drafts`, one token at a time (tokens [N, K+1], -1 past the end)."""
    k, vocab = len(q), p.shape[-1]
    residual = panels.residual_laws(p, q)
    out = np.full((len(drafts), k + 1), -1)
    for i, row in enumerate(drafts):
        for j in range(k + 1):
            if j < k and rng.random() < min(1.0, p[j, row[j]] / q[j, row[j]]):
                out[i, j] = row[j]
                continue
            out[i, j] = rng.choice(vocab, p=residual[j])
            break
    return out


def test_the_laws_match_a_simulation():
    panel = panels.PANELS[0]
    p, q = panel.target.astype(np.float64), panel.draft.astype(np.float64)
    launch = panels.launch(panel, 8000, seed=3)
    drafts = launch.drafts[:8000]
    rng = np.random.default_rng(0)
    a, b = simulated(p, q, drafts, rng), simulated(p, q, drafts, rng)
    n = (a >= 0).sum(1) - 1
    verdicts = laws.sampled_laws(p, q, a, n, "simulated")
    chances = laws.agreement(p, q, drafts)
    verdicts.append(laws.agreement_test((a == b).all(1), chances, "simulated pairs"))
    assert laws.failing(verdicts) == [], [v for v in verdicts if v.p_value < 1e-3]
    assert np.isclose(laws.length_law(laws.acceptance(p, q)).sum(), 1.0)
    assert laws.failing([laws.agreement_test((a == b).all(1), chances * 0.8, "a wrong agreement law")])


def test_a_g_test_pools_small_cells_and_sees_impossible_outcomes():
    law = np.array([0.5, 0.3, 0.199, 0.001, 0.0])
    seen = np.random.default_rng(1).multinomial(2000, law)
    assert laws.g_test(seen, law, "fair").p_value > 1e-3
    assert laws.g_test(seen + np.array([0, 0, 0, 0, 1]), law, "impossible").p_value == 0.0
    assert laws.g_test(np.array([1000, 0, 1000, 0, 0]), law, "skewed").p_value < 1e-10


def check(argv: list[str], tmp_path, declare: str | None = None) -> tuple[int, dict]:
    extra = []
    if declare is not None:
        (tmp_path / "declare.toml").write_text(declare)
        extra = ["--declare", str(tmp_path / "declare.toml")]
    report = tmp_path / "r.json"
    status = main(["check", *argv, *extra, "--device", "cpu", "--json", str(report)])
    return status, json.loads(report.read_text())


def test_an_honest_sampler_of_its_own_passes_and_a_shared_uniform_fails(tmp_path, capsys):
    """In CI time: the tier passes an honest sampler that owns its random numbers and fails the planted
    shared-uniform one; the report says which tier judged, and gives the acceptance per position."""
    own = 'randomness = "own"\n'
    status, found = check(["--stage", "seeded.chain_sampling", "--impl", f"{SAMPLERS}:honest"], tmp_path, own)
    by_check = {o["check"]: o for o in found["outcomes"]}
    assert status == 0 and set(by_check) >= {"valid", "distribution"}, found["outcomes"]
    assert by_check["distribution"]["randomness"].startswith("randomness: declared its own")
    assert "Its random numbers are its own (declared)" in capsys.readouterr().out
    table = by_check["distribution"]["acceptance"]["V=4, K=2"]
    assert len(table["expected"]) == 2 and abs(table["expected"][0] - table["shown"][0]) < 0.02
    assert any(note.startswith("power against planted bugs (seeded.chain_sampling") for note in
               by_check["distribution"]["notes"]), by_check["distribution"]["notes"]
    status, found = check(["--stage", "seeded.chain_sampling", "--impl", f"{SAMPLERS}:shared_uniform",
                           "--check", "distribution"], tmp_path, own)
    outcome = found["outcomes"][0]
    assert status == 1 and outcome["kind"] == "distribution", outcome
    assert "does not sample the law" in outcome["headline"]
    assert f"rerun: specverify check --stage seeded.chain_sampling --impl {SAMPLERS}:shared_uniform --declare FILE" \
        in outcome["report"] and "--check distribution --profile ci --seed 0" in outcome["report"]


@pytest.mark.parametrize("bug", ["residual_at_draft", "recovery_from_p", "q_not_sampled"])
def test_the_other_planted_samplers_fail(tmp_path, bug):
    status, found = check(["--stage", "seeded.chain_sampling", "--impl", f"{SAMPLERS}:{bug}", "--check",
                           "distribution"], tmp_path, 'randomness = "own"\n')
    assert status == 1 and found["outcomes"][0]["kind"] == "distribution", found["outcomes"][0]["headline"]


def test_a_tree_sampler_with_one_coin_per_request_fails(tmp_path):
    """Target-only tree sampling on chain panels (one-hot draft rows): the shared coin breaks the length law."""
    status, found = check(["--stage", "tree.sample_target_only", "--impl",
                           "tests.planted_tree_sampler:sample_target_only",
                           "--check", "distribution"], tmp_path, 'randomness = "own"\n')
    outcome = found["outcomes"][0]
    assert status == 1 and outcome["kind"] == "distribution", outcome["headline"]


def test_a_sampler_of_its_own_is_judged_by_bytes_only_where_no_draw_decides(tmp_path):
    """Undeclared, the honest sampler fails the replay (wrong bytes, never 'read outside'); declared own, the
    valid tier under the conformance profile (guard patterns on) passes."""
    status, found = check(["--stage", "seeded.chain_sampling", "--impl", f"{SAMPLERS}:honest", "--check", "valid",
                           "--profile", "conformance", "--examples", "20"], tmp_path)
    assert status == 1 and "read outside" not in found["outcomes"][0]["headline"]
    assert found["outcomes"][0]["randomness"].startswith("randomness: replayed byte for byte from generator")
    status, found = check(["--stage", "seeded.chain_sampling", "--impl", f"{SAMPLERS}:honest", "--check", "valid",
                           "--profile", "conformance", "--examples", "20"], tmp_path, 'randomness = "own"\n')
    assert status == 0, found["outcomes"][0]["headline"]


@pytest.mark.parametrize("stage", ["seeded.chain_sampling", "rejection.random", "rejection.sample",
                                   "rejection.sample_padded", "rejection.chain_cdf", "tree.sample_target_only"])
def test_our_torch_kernels_pass_the_distribution_tier(tmp_path, stage):
    status, found = check(["--stage", stage, "--backend", "torch", "--check", "distribution"], tmp_path)
    assert status == 0, found["outcomes"][0]["report"]


def test_the_randomness_declaration_is_checked_against_the_record():
    stages = all_stages()
    seeded, random, greedy = stages["seeded.chain_sampling"], stages["rejection.random"], stages["rejection.greedy"]
    protocol = {"generator": FLASHINFER_CHAIN.generator, "key": FLASHINFER_CHAIN.key,
                "schedule": FLASHINFER_CHAIN.schedule, "version": FLASHINFER_CHAIN.version}
    assert randomness.declared(seeded, protocol, "here", DomainError) is seeded
    assert randomness.declared(seeded, "own", "here", DomainError).own_randomness
    assert randomness.declared(random, "inputs", "here", DomainError) is random
    with pytest.raises(DomainError, match="version '0.7.5' is not the record's '0.7.4'"):
        randomness.declared(seeded, {**protocol, "version": "0.7.5"}, "here", DomainError)
    with pytest.raises(DomainError, match="a protocol names exactly"):
        randomness.declared(seeded, {"generator": "x"}, "here", DomainError)
    with pytest.raises(DomainError, match="must be"):
        randomness.declared(seeded, "inputs", "here", DomainError)
    with pytest.raises(DomainError, match="draws no random numbers"):
        randomness.declared(greedy, "own", "here", DomainError)


def test_a_declaration_that_names_another_protocol_is_bad_usage(tmp_path, capsys):
    (tmp_path / "d.toml").write_text('[randomness]\ngenerator = "curand-xorwow"\nkey = "k"\nschedule = "s"\n'
                                     'version = "1"\n')
    status = main(["check", "--stage", "seeded.chain_sampling", "--impl", f"{SAMPLERS}:honest", "--declare",
                   str(tmp_path / "d.toml"), "--device", "cpu"])
    out = capsys.readouterr().out
    assert status == 2 and "randomness: generator 'curand-xorwow' is not the record's" in out, out

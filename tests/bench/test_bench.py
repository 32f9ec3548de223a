"""`specverify bench` on the CPU: the stages' benchmark inputs, the command's outputs, wrong implementations."""
from __future__ import annotations

import json

import numpy as np
import pytest

from specverify.bench import results, sweep
from specverify.cli import main
from specverify.judge.timing import Settings
from specverify.records import backends, registry
from specverify.records.stage import BENCH_SPEC
from specverify.runs import session

STAGES = list(registry.all_stages().values())
SIZES = [(1, 2), (2, 64), (3, 17)]       # small scaled-down B and V, V = 2 included


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_bench_input_is_valid(stage):
    """Every stage's bench input is a valid, contiguous example the oracle and our host-side backends
    agree on byte for byte, at several B and V."""
    if stage.bench is None:
        pytest.skip(f"{stage.name} has no bench input")
    ours = [b for b in backends.stage_backends(stage) if b in ("oracle", "numpy", "torch")]
    for batch, vocab in SIZES:
        example = stage.bench(batch, vocab, np.random.default_rng(batch))
        assert example.tier == "valid" and not example.layouts
        for name, value in example.inputs.items():
            if isinstance(value, np.ndarray):
                assert value.flags.c_contiguous, name
        for backend in ours:
            session.verify_example(backends.target(stage, backend, "cpu"), example)


@pytest.mark.parametrize("stage", [s for s in STAGES if sweep.reads_vocab(s)], ids=lambda s: s.name)
def test_bench_tables_are_realistic(stage):
    """Stages reading probabilities get normalized f32 rows of width V, drafts in [0, V), K per request
    (K + 1 where the record's target rows include the bonus row)."""
    example = stage.bench(8, 1000, np.random.default_rng(0))
    x = example.inputs
    target = x["target_probs"].reshape(-1, 1000)
    bonus_row = "K+1" in next(f.shape for f in stage.inputs if f.name == "target_probs")
    assert target.dtype == np.float32 and target.shape[0] == 8 * (BENCH_SPEC + bonus_row)
    assert np.allclose(target.sum(axis=1), 1, atol=1e-4)
    drafts = x.get("draft_token_ids")
    if drafts is not None:
        assert ((drafts >= 0) & (drafts < 1000)).all()


def test_reads_vocab_picks_the_table_stages():
    assert {s.name for s in STAGES if sweep.reads_vocab(s)} == {
        "rejection.random", "rejection.recovered", "rejection.sample", "rejection.sample_padded",
        "rejection.chain_cdf", "seeded.chain_sampling", "tree.sample_target_only"}


def test_settings_travel_as_a_probe_name():
    settings = Settings(calls=3, replays=2, repeat=1, graph=False, launches=True)
    name = settings.probe()
    assert name.startswith("bench:") and Settings.parse(name.partition(":")[2]) == settings


def test_finish_ratios_and_memory_bound():
    rows = [{"stage": "s", "backend": "torch", "B": 1, "V": 2, "status": "ok", "bytes": 10_000_000,
             "device_us": 10.0, "host_us": 20.0},
            {"stage": "s", "backend": "torch", "B": 2, "V": 2, "status": "ok", "bytes": 1000,
             "device_us": 4.0, "host_us": 20.0}]
    sweep.finish(rows, {"device_us": 2.0, "host_us": 10.0}, {"gbps": 2000.0})
    assert rows[0]["gbps"] == pytest.approx(1000.0) and rows[0]["gbps_x_copy"] == pytest.approx(0.5)
    assert rows[0]["device_x_floor"] == 5 and rows[0]["host_x_floor"] == 2
    assert rows[0]["memory_bound"] and not rows[1]["memory_bound"]


TINY = ["--batch", "1,2", "--vocab", "16", "--calls", "2", "--replays", "1", "--repeat", "1", "--device", "cpu"]


def test_bench_command_writes_json_plots_and_table(tmp_path, capsys):
    status = main(["bench", "--stage", "rejection.expand", "--stage", "output.parse", "--backend", "torch",
                   "--backend", "numpy", "--out", str(tmp_path), *TINY])
    assert status == 0
    printed = capsys.readouterr().out
    assert "specverify bench on the CPU" in printed and "launch floor" in printed and "wall time" in printed
    written = results.read_json(tmp_path / "results.json")
    rows = written["rows"]
    assert {(r["stage"], r["backend"]) for r in rows} == {
        ("rejection.expand", "torch"), ("output.parse", "numpy"), ("output.parse", "naive")}
    assert len(rows) == 6 and all(r["status"] == "ok" and r["host_us"] > 0 for r in rows)
    assert all(r["device_method"] == "wall" for r in rows if r["stage"] == "rejection.expand")
    assert all("x_baseline" in r for r in rows if r["backend"] == "numpy")
    assert written["floor"]["host_us"] > 0 and written["copy"]["gbps"] > 0
    assert {"python", "torch", "numpy", "commit"} <= set(written["machine"])
    assert [g["stage"] for g in written["goals"]] == ["output.parse"]
    json.dumps(written)
    pytest.importorskip("matplotlib")
    for family in ("rejection", "output"):
        assert (tmp_path / f"{family}.png").read_bytes().startswith(b"\x89PNG")
    (tmp_path / "rejection.png").unlink()
    assert main(["bench", "--plot-from", str(tmp_path / "results.json")]) == 0
    assert (tmp_path / "rejection.png").exists()


def test_wrong_outside_implementation_is_reported_not_timed(tmp_path, capsys):
    status = main(["bench", "--stage", "rejection.greedy", "--impl", "tests.planted_greedy:bonus_even_after_reject",
                   "--backend", "torch", "--out", str(tmp_path), "--no-plots", *TINY, "--batch", "4"])
    assert status == 1
    rows = results.read_json(tmp_path / "results.json")["rows"]
    theirs = [r for r in rows if r["backend"] == "impl"]
    assert theirs and all(r["status"] == "wrong" and "host_us" not in r and "device_us" not in r for r in theirs)
    assert "output_token_ids" in theirs[0]["message"]
    assert all(r["status"] == "ok" and r["host_us"] > 0 for r in rows if r["backend"] == "torch")
    assert "WRONG" in capsys.readouterr().out


def test_plot_from_a_file_that_is_not_results(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text("[]")
    assert main(["bench", "--plot-from", str(bad)]) == 2

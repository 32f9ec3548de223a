"""Damaged files and values: each is one line naming what is wrong and exit status 2, never a
traceback; a damaged file in a corpus folder is one note while the rest of the corpus runs; every case
the suite draws, and every case it ships, fits its stage's record."""
import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from specverify.cli import main
from specverify.files import cases, vendors
from specverify.records import registry
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.strategies.generic import invalid_tier

GREEDY = registry.all_stages()["rejection.greedy"]
ROOT = Path(__file__).resolve().parents[2]
TORCH_GREEDY = "specverify.kernels.torch.rejection:greedy"


def greedy_example(**inputs) -> Example:
    found = {"draft_token_ids": np.array([5, 6], np.int32), "target_argmax": np.array([5, 9], np.int64),
             "bonus_token_ids": np.array([40], np.int64), "cu_num_draft_tokens": np.array([2], np.int32),
             "is_greedy": None, "max_spec_len": 2}
    found.update(inputs)
    return Example("valid", found, outputs={"output_token_ids": Buffer((1, 3), "int32")})


def stored(path: Path, meta, arrays: dict) -> Path:
    """A case file holding exactly this header (a JSON value, or raw bytes) and these arrays."""
    header = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    np.savez(path, __meta__=np.frombuffer(header, np.uint8), **arrays)
    return path


def greedy_case(path: Path, drop=(), meta=None, **arrays) -> Path:
    """The good greedy case with some inputs dropped, header fields replaced or arrays replaced."""
    good_meta, good_arrays = cases.to_meta(GREEDY.name, greedy_example())
    found = {k: v for k, v in good_arrays.items() if k.removeprefix("input.") not in drop}
    found.update({f"input.{k}": v for k, v in arrays.items()})
    return stored(path, {**good_meta, **(meta or {})}, found)


def waiver_file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


GOOD_META = cases.to_meta(GREEDY.name, greedy_example())[0]
CHECK = ["check", "--stage", "rejection.greedy", "--backend", "oracle", "--examples", "1"]

# name -> a function of a temporary folder giving the command line
DAMAGED = {
    "header of 10^6 nested lists": lambda d: ["replay", str(stored(d / "x.npz", b"[" * 10**6 + b"]" * 10**6, {}))],
    "header nested 400000 deep": lambda d: ["replay", str(stored(d / "x.npz", b"[" * 400000 + b"]" * 400000, {}))],
    "rank-100 output": lambda d: ["replay", str(greedy_case(d / "x.npz", meta={"outputs": {
        "output_token_ids": {"shape": [1] * 100, "dtype": "int32", "layout": None}}}))],
    "an input of strings": lambda d: ["replay", str(greedy_case(d / "x.npz", target_argmax=np.array(["5", "9"])))],
    "an input of bytes": lambda d: ["replay", str(greedy_case(d / "x.npz", target_argmax=np.array([b"5", b"9"])))],
    "an input of objects": lambda d: ["replay", str(greedy_case(d / "x.npz", target_argmax=np.array([5, None])))],
    "replay /dev/zero": lambda d: ["replay", "/dev/zero"],
    "replay a folder": lambda d: ["replay", str(d)],
    "a wrong-rank input": lambda d: ["replay", str(greedy_case(d / "x.npz", target_argmax=np.array([[5], [9]])))],
    "a float input": lambda d: ["replay", str(greedy_case(d / "x.npz", target_argmax=np.array([5.0, 9.0])))],
    "a string scalar": lambda d: ["replay", str(greedy_case(d / "x.npz", meta={
        "scalars": {**GOOD_META["scalars"], "max_spec_len": "2"}}))],
    "a scalar of 10^30 shaping an output": lambda d: ["replay", str(greedy_case(d / "x.npz", meta={
        "scalars": {**GOOD_META["scalars"], "max_spec_len": 10**30}}))],
    "a missing input": lambda d: ["replay", str(greedy_case(d / "x.npz", drop=["target_argmax"]))],
    "an unknown input": lambda d: ["replay", str(greedy_case(d / "x.npz", extra=np.array([1])))],
    "a null required input": lambda d: ["replay", str(greedy_case(d / "x.npz", drop=["target_argmax"], meta={
        "scalars": {**GOOD_META["scalars"], "target_argmax": None}}))],
    "an unknown output": lambda d: ["replay", str(greedy_case(d / "x.npz", meta={"outputs": {
        **GOOD_META["outputs"], "spare": {"shape": [1], "dtype": "int32", "layout": None}}}))],
    "an output of a wrong dtype": lambda d: ["replay", str(greedy_case(d / "x.npz", meta={"outputs": {
        "output_token_ids": {"shape": [1, 3], "dtype": "float32", "layout": None}}}))],
    "an invalid case naming no field": lambda d: ["replay", str(greedy_case(d / "x.npz", meta={
        "tier": "invalid", "bad_field": "nonexistent", "rule": "made up"}))],
    "waivers of 100000 nested arrays": lambda d: CHECK + ["--waivers", str(waiver_file(
        d / "w.toml", "x = " + "[" * 100000 + "]" * 100000 + "\n"))],
    "waivers nested inside a string's reach": lambda d: CHECK + ["--waivers", str(waiver_file(
        d / "w.toml", "x = ['''a'''', " + "[" * 100000 + "]" * 100000 + "]\n"))],
    "waivers /dev/zero": lambda d: CHECK + ["--waivers", "/dev/zero"],
    "waivers over the size limit": lambda d: CHECK + ["--waivers", str(waiver_file(d / "w.toml", "#" * (2 << 20)))],
    "--timeout inf": lambda d: CHECK + ["--timeout", "inf"],
    "--timeout 1e308": lambda d: CHECK + ["--timeout", "1e308"],
    "--target-timeout inf": lambda d: CHECK + ["--target-timeout", "inf"],
    "bench --timeout inf": lambda d: ["bench", "--stage", "rejection.greedy", "--timeout", "inf"],
    "replay --timeout 1e308": lambda d: ["replay", "x.npz", "--timeout", "1e308"],
    "check --impl ''": lambda d: ["check", "--stage", "rejection.greedy", "--impl", ""],
    "check --vendor ''": lambda d: ["check", "--vendor", ""],
    "bench --impl ''": lambda d: ["bench", "--stage", "rejection.greedy", "--impl", ""],
    "bench --vendor ' '": lambda d: ["bench", "--vendor", " "],
    "replay --impl ''": lambda d: ["replay", "x.npz", "--impl", ""],
    "--cases a regular file": lambda d: CHECK + ["--cases", str(waiver_file(d / "file", "x"))],
    "--cases /dev/null": lambda d: CHECK + ["--cases", "/dev/null"],
}


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """Exit status and everything printed (argparse's usage errors included)."""
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    done = capsys.readouterr()
    return status, done.out + done.err


@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_file_or_value_is_one_line_and_exit_status_2(tmp_path, capsys, monkeypatch, damage):
    monkeypatch.chdir(tmp_path)   # what a run that wrongly goes ahead writes stays there
    status, out = run_cli(DAMAGED[damage](tmp_path), capsys)
    assert status == 2, out
    assert len([line for line in out.splitlines() if "error" in line]) == 1, out
    assert "Traceback" not in out


def test_a_record_problem_names_the_file_the_field_and_the_rule(tmp_path):
    path = greedy_case(tmp_path / "x.npz", drop=["target_argmax"])
    with pytest.raises(cases.CaseError, match=r"x\.npz: input `target_argmax`: missing \(the stage needs it\)$"):
        cases.load(path)
    path = greedy_case(tmp_path / "y.npz", target_argmax=np.array([[5], [9]]))
    with pytest.raises(cases.CaseError, match=r"y\.npz: input `target_argmax`: rank 2 \(its shape \[T\] has rank 1\)"):
        cases.load(path)


def test_only_the_bad_field_of_an_invalid_case_may_break_the_record():
    from specverify.files import case_fields

    wrong_rank = np.array([[5], [9]], np.int64)
    invalid = Example("invalid", greedy_example(target_argmax=wrong_rank).inputs,
                      outputs={"output_token_ids": Buffer((1, 3), "int32")}, bad_field="target_argmax", rule="rank")
    case_fields.check(GREEDY, invalid)
    invalid.bad_field = "draft_token_ids"
    with pytest.raises(case_fields.RecordError, match="`target_argmax`: rank 2"):
        case_fields.check(GREEDY, invalid)
    with pytest.raises(case_fields.RecordError, match="`target_argmax`: rank 2"):
        case_fields.check(GREEDY, greedy_example(target_argmax=wrong_rank))


@pytest.mark.parametrize("path", sorted(p.relative_to(ROOT) for p in ROOT.glob("**/cases/*/*.npz")), ids=str)
def test_every_shipped_case_fits_its_record(path):
    name, _ = cases.load(ROOT / path)
    assert name == path.parent.name


def tiers(stage):
    ctx = DrawContext(small=True)
    found = {"valid": stage.valid(ctx), "invalid": invalid_tier(stage, ctx)}
    if stage.hazard is not None:
        found["hazard"] = stage.hazard(ctx)
    return [(stage.name, tier, strategy) for tier, strategy in found.items() if strategy is not None]


@pytest.mark.parametrize("stage,tier,strategy", [t for s in registry.all_stages().values() for t in tiers(s)],
                         ids=lambda x: x if isinstance(x, str) else None)
def test_every_drawn_case_round_trips_through_the_record_check(tmp_path, stage, tier, strategy):
    """What the suite draws, saved and loaded again, fits its record (invalid cases but for bad_field)."""
    @settings(max_examples=6, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strategy)
    def round_trip(example):
        path = cases.save(tmp_path, stage, example, {"backend": "torch"})
        assert cases.load(path)[1].tier == example.tier

    round_trip()


def test_a_damaged_file_in_the_corpus_is_a_note_and_the_rest_runs(tmp_path, capsys):
    folder = tmp_path / "cases" / GREEDY.name
    good = cases.save(tmp_path / "cases", GREEDY.name, greedy_example(), {"backend": "torch"})
    damaged = [greedy_case(folder / "rank.npz", target_argmax=np.array([[5], [9]])),
               greedy_case(folder / "missing.npz", drop=["target_argmax"]),
               greedy_case(folder / "strings.npz", target_argmax=np.array(["5", "9"])),
               stored(folder / "deep.npz", b"[" * 400000 + b"]" * 400000, {})]
    (folder / "zero.npz").symlink_to("/dev/zero")
    other = cases.save(tmp_path / "other", "rejection.expand", registry.all_stages()["rejection.expand"].worked(),
                       {"backend": "torch"})
    os.replace(other, folder / "expand.npz")
    status, out = run_cli(["check", "--stage", GREEDY.name, "--impl", TORCH_GREEDY, "--device", "cpu",
                           "--check", "corpus", "--cases", str(tmp_path / "cases")], capsys)
    assert status == 0, out
    assert "contract: passes (1 corpus case)" in out and not any(str(good) in line for line in out.splitlines())
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    for path in [*damaged, folder / "zero.npz", folder / "expand.npz"]:
        assert len([n for n in notes if str(path) in n]) == 1, (path, notes)
    assert "Traceback" not in out


def test_an_invalid_case_the_oracle_accepts_is_a_note_and_a_true_one_runs(tmp_path, capsys):
    """On our Torch backend (which validates): a case marked invalid whose input is valid is damaged."""
    def invalid(**inputs) -> Example:
        return Example("invalid", greedy_example(**inputs).inputs, outputs=greedy_example().outputs,
                       bad_field="target_argmax", rule="rank 1")

    true = cases.save(tmp_path, GREEDY.name, invalid(target_argmax=np.array([[5], [9]], np.int64)), {"backend": "x"})
    fake = cases.save(tmp_path, GREEDY.name, invalid(), {"backend": "x"})
    status, out = run_cli(["check", "--stage", GREEDY.name, "--backend", "torch", "--device", "cpu",
                           "--check", "corpus", "--cases", str(tmp_path)], capsys)
    assert status == 0, out
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert [n for n in notes if str(fake) in n and "the oracle accepts this invalid-tier case" in n], notes
    assert not [n for n in notes if str(true) in n], notes


def test_an_empty_vendor_name_is_refused():
    with pytest.raises(vendors.VendorError, match="empty name"):
        vendors.resolve("", list(registry.all_stages()))


def test_an_empty_vendor_is_a_pytest_usage_error(tmp_path):
    import subprocess
    import sys

    (tmp_path / "conftest.py").write_text('pytest_plugins = ["specverify.pytest_plugin"]\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--specverify-vendor", ""],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 4 and "argument --specverify-vendor: must not be empty" in done.stderr, done


def test_console_messages_keep_emoji_codes_as_text(capsys):
    status, out = run_cli(["check", "--stage", "hostile2:ok:"], capsys)
    assert status == 2 and "hostile2:ok:" in out


def test_every_console_the_suite_makes_leaves_emoji_codes_alone(monkeypatch):
    from rich.console import Console

    from specverify.judge import failure_report

    made = []
    monkeypatch.setattr(failure_report, "Console", lambda **kw: made.append(kw) or Console(**kw))
    failure_report.inputs_table(GREEDY, greedy_example())
    assert made and all(kw.get("emoji") is False for kw in made)


def test_a_case_the_oracle_refuses_is_damaged_in_replay_the_corpus_and_pytest(tmp_path, capsys):
    """A real case whose max_spec_len (it shapes the output) is 10^30: one line naming the file, the field
    and the rule (the oracle's words) in `specverify replay` (exit 2), a note in the corpus check while the
    other case runs, and the one line of a failing pytest case test; never a failure of the target."""
    import subprocess
    import sys

    refused = cases.save(tmp_path / "cases", GREEDY.name, greedy_example(max_spec_len=10**30), {"backend": "torch"})
    words = (f"{refused}: the oracle refuses this valid-tier case: ValueError: output_token_ids: shape must be "
             f"[1, {10**30 + 1}] (B = len(cu_num_draft_tokens), S = max_spec_len), got [1, 3]")
    status, out = run_cli(["replay", str(refused), "--backend", "torch", "--device", "cpu"], capsys)
    assert status == 2 and [line for line in out.splitlines() if "error" in line] == \
        [f"specverify replay: error: {words}"], out

    cases.save(tmp_path / "cases", GREEDY.name, greedy_example(), {"backend": "torch"})
    status, out = run_cli(["check", "--stage", GREEDY.name, "--impl", TORCH_GREEDY, "--device", "cpu",
                           "--check", "corpus", "--cases", str(tmp_path / "cases")], capsys)
    assert status == 0 and "contract: passes (1 corpus case)" in out, out
    assert [line for line in out.splitlines() if line.startswith("note: ")] == \
        [f"note: {GREEDY.name} corpus: not replayed: {words}"], out

    (tmp_path / "conftest.py").write_text('pytest_plugins = ["specverify.pytest_plugin"]\n')
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(refused), "-k",
                           "torch-cpu and not strict"], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 1 and "1 failed" in done.stdout, done.stdout[-3000:]
    lines = done.stdout.splitlines()
    [header] = [i for i, line in enumerate(lines) if line.startswith("_") and " on torch/cpu " in line]
    assert lines[header + 1] == words and lines[header + 2].startswith("===") and "inputs:" not in done.stdout, \
        done.stdout[-3000:]

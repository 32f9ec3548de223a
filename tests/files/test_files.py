"""Files and exit codes that never lie: damaged case files of any shape, unwritable folders, stale
temporary files, writers in parallel, permissions, and runs from any folder."""
import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from specverify.cli import main
from specverify.files import cases
from specverify.records import registry
from specverify.records.stage import Buffer, Example
from specverify.runs.protocol import Outcome
from specverify.runs.verdicts import exit_status
from specverify.usage import NOTHING_CHECKED

GREEDY = registry.all_stages()["rejection.greedy"]
ROOT = Path(__file__).resolve().parents[2]


def greedy_example() -> Example:
    return Example("valid", {"draft_token_ids": np.array([5, 6], np.int32), "target_argmax": np.array([5, 9], np.int64),
                             "bonus_token_ids": np.array([40], np.int64), "cu_num_draft_tokens": np.array([2], np.int32),
                             "is_greedy": None, "max_spec_len": 2},
                   outputs={"output_token_ids": Buffer((1, 3), "int32")})


def write_case(path: Path, meta) -> Path:
    np.savez(path, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8),
             **{"input.draft_token_ids": np.array([1], np.int32)})
    return path


def good_meta() -> dict:
    meta, _ = cases.to_meta(GREEDY.name, greedy_example())
    return meta


DAMAGED = {
    "a list": [1, 2, 3],
    "a string": "hello",
    "a number": 7,
    "no stage": {k: v for k, v in good_meta().items() if k != "stage"},
    "tier of the wrong type": {**good_meta(), "tier": ["valid"]},
    "unknown tier": {**good_meta(), "tier": "sometimes"},
    "outputs a list": {**good_meta(), "outputs": [1]},
    "an output shape of strings": {**good_meta(), "outputs": {"output_token_ids": {"shape": ["a"], "dtype": "int32"}}},
    "a huge output": {**good_meta(), "outputs": {"output_token_ids": {"shape": [2**20, 2**20], "dtype": "int32"}}},
    "an unknown dtype": {**good_meta(), "outputs": {"output_token_ids": {"shape": [1, 3], "dtype": "int33"}}},
    "a bad layout": {**good_meta(), "layouts": {"draft_token_ids": {"step": [0], "pad": [0]}}},
    "scalars a list": {**good_meta(), "scalars": []},
    "containers of the wrong kind": {**good_meta(), "containers": {"x": "pickle"}},
}


@pytest.mark.parametrize("shape", list(DAMAGED))
def test_a_damaged_case_header_of_any_shape_gives_one_line(tmp_path, capsys, shape):
    path = write_case(tmp_path / "bad.npz", DAMAGED[shape])
    with pytest.raises(cases.CaseError):
        cases.load(path)
    assert main(["replay", str(path)]) == 2
    out = capsys.readouterr().out.strip()
    assert len(out.splitlines()) == 1 and "Traceback" not in out and str(path) in out


def test_a_damaged_case_fails_alone_under_pytest(tmp_path):
    """The session goes on: the damaged case is one failed test, the good one passes."""
    folder = tmp_path / "cases" / "rejection.greedy"
    folder.mkdir(parents=True)
    write_case(folder / "bad.npz", [1, 2])
    cases.save(tmp_path / "cases", GREEDY.name, greedy_example(), {"backend": "torch"})
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["specverify.pytest_plugin"]\n')
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "cases"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert "1 failed" in done.stdout and "passed" in done.stdout, done.stdout[-2000:]
    assert "damaged case header" in done.stdout


def test_a_sidecar_that_is_a_list_is_started_afresh(tmp_path):
    path = cases.save(tmp_path, GREEDY.name, greedy_example(), {"backend": "torch", "failure": "a"})
    path.with_suffix(".json").write_text("[1, 2]")
    cases.save(tmp_path, GREEDY.name, greedy_example(), {"backend": "triton", "failure": "b"})
    assert [f["backend"] for f in cases.failures_of(path)] == ["triton"]


def test_stale_temporary_files_and_orphan_sidecars_are_removed(tmp_path):
    folder = tmp_path / GREEDY.name
    folder.mkdir()
    stale, fresh, orphan = folder / ".abc.npz.x1.tmp", folder / ".abc.npz.x2.tmp", folder / "dead.json"
    for path in (stale, fresh, orphan):
        path.write_text("x")
    old = time.time() - 2 * cases.STALE_SECONDS
    os.utime(stale, (old, old))
    os.utime(orphan, (old, old))
    cases.save(tmp_path, GREEDY.name, greedy_example(), {"backend": "torch"})
    assert not stale.exists() and not orphan.exists() and fresh.exists()


def save_one(args):
    directory, backend = args
    cases.save(Path(directory), GREEDY.name, greedy_example(), {"backend": backend, "device": "cpu"})


def test_writers_in_parallel_lose_no_record(tmp_path):
    backends = [f"b{i}" for i in range(12)]
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        pool.map(save_one, [(str(tmp_path), b) for b in backends])
    [path] = list(tmp_path.rglob("*.npz"))
    assert sorted(f["backend"] for f in cases.failures_of(path)) == sorted(backends)


def test_files_get_the_ordinary_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        path = cases.save(tmp_path, GREEDY.name, greedy_example(), {"backend": "torch"})
    finally:
        os.umask(old)
    assert (path.stat().st_mode & 0o777) == (0o666 & ~cases._umask())
    assert (path.with_suffix(".json").stat().st_mode & 0o777) == (0o666 & ~cases._umask())


def test_unwritable_cases_and_report_paths_give_one_line_and_keep_the_failure(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    status = main(["check", "--stage", "rejection.greedy", "--impl", "tests.planted_greedy:bonus_even_after_reject",
                   "--device", "cpu", "--examples", "30", "--findings", str(blocker / "findings"),
                   "--json", str(blocker / "report.json")])
    out = capsys.readouterr().out
    assert status == 1
    assert "FAILED rejection.greedy on impl/cpu" in out and "Traceback" not in out
    assert "the case could not be written" in out
    assert len([line for line in out.splitlines() if "the report could not be written" in line]) == 1


def test_cuda_without_cuda_is_bad_usage(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    assert main(["check", "--stage", "rejection.greedy", "--device", "cuda"]) == 2
    assert main(["check", "--stage", "rejection.greedy", "--impl", "x:y", "--device", "cuda"]) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all("no CUDA device" in line for line in lines)


def test_nothing_checked_is_not_a_pass():
    skipped = Outcome("rejection.greedy", "triton", "cuda", "-", status="skipped", headline="no CUDA")
    assert exit_status([skipped]) == NOTHING_CHECKED == 3
    assert exit_status([skipped, Outcome("a", "b", "c", "valid")]) == 0


def test_a_run_from_the_folder_that_holds_the_clone(tmp_path):
    """A folder named like the package in the current folder (a clone's parent) shadows nothing."""
    (tmp_path / "specverify").mkdir()
    (tmp_path / "specverify" / "README.md").write_text("a clone")
    script = Path(sys.executable).with_name("specverify")
    command = [str(script)] if script.exists() else [sys.executable, "-c", "from specverify.cli import main; main()"]
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    env = {**os.environ, "PYTHONPATH": path} if not script.exists() else dict(os.environ)
    done = subprocess.run(command + ["check", "--profile", "conformance", "--stage", "rejection.expand",
                                     "--backend", "torch", "--examples", "2", "--findings", str(tmp_path / "c")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_a_case_with_dtypes_numpy_lacks_round_trips_bit_for_bit(tmp_path):
    """bfloat16 and fp8 arrays (ml_dtypes) are stored as same-width unsigned ints with their dtype named."""
    import ml_dtypes

    stage = registry.all_stages()["kv.commit_draft"]
    example = stage.worked()
    bf16 = {k: v for k, v in example.inputs.items() if isinstance(v, np.ndarray)}
    example.inputs["key"] = bf16["key"].astype(ml_dtypes.bfloat16)
    example.inputs["value"] = bf16["value"].astype(ml_dtypes.bfloat16)
    path = cases.save(tmp_path, stage.name, example, {"backend": "torch"})
    _, loaded = cases.load(path)
    for name in ("key", "value"):
        assert loaded.inputs[name].dtype == np.dtype(ml_dtypes.bfloat16)
        assert loaded.inputs[name].tobytes() == example.inputs[name].tobytes()
    assert {k: b.dtype for k, b in loaded.outputs.items()} == {k: b.dtype for k, b in example.outputs.items()}

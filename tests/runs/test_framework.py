"""The framework's own tests: the comparator, the case files, the CLI, and planted bugs."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import find, settings

from specverify.cli import main
from specverify.files import cases
from specverify.judge.harness import Failure, expect
from specverify.kernels.torch.rejection import greedy as torch_greedy
from specverify.records import backends, registry
from specverify.records.backends import BACKENDS, Target
from specverify.records.stage import Buffer, DrawContext, Example, I, Layout, O, Stage
from specverify.runs.session import verify_example as verify

GREEDY = registry.all_stages()["rejection.greedy"]


def greedy_example() -> Example:
    """Two greedy requests: one rejected at position 1, one fully accepted (bonus written)."""
    return Example("valid", {
        "draft_token_ids": np.array([5, 6, 7, 1, 2], np.int32),
        "target_argmax": np.array([5, 9, 7, 1, 2], np.int64),
        "bonus_token_ids": np.array([40, 41], np.int64),
        "cu_num_draft_tokens": np.array([3, 5], np.int32),
        "is_greedy": None,
        "max_spec_len": 3,
    }, outputs={"output_token_ids": Buffer((2, 4), "int32")})


def broken(mutate):
    """The real Torch kernel followed by `mutate(kwargs)`."""
    def impl(**kw):
        torch_greedy(**kw)
        mutate(kw)
    return Target(GREEDY, BACKENDS["impl"], "cpu", "test:broken", impl)


def failure_of(target, example) -> str:
    with pytest.raises(Failure) as info:
        verify(target, example)
    return str(info.value)


def test_the_real_kernel_passes():
    verify(backends.target(GREEDY, "torch", "cpu"), greedy_example())


def test_one_byte_difference_is_caught():
    def flip(kw):
        kw["output_token_ids"].view(-1).view(torch.uint8)[0] ^= 1
    message = failure_of(broken(flip), greedy_example())
    assert "output_token_ids[0, 0]: wrong value: expected 5, got 4" in message


def test_missing_write_is_caught():
    def unwrite_bonus(kw):
        kw["output_token_ids"][1, 2] = np.frombuffer(bytes([0xA5] * 4), np.int32)[0].item()
    message = failure_of(broken(unwrite_bonus), greedy_example())
    assert "output_token_ids[1, 2]: missing write: expected 41" in message


def test_stray_write_outside_the_defined_region_is_caught():
    def stray(kw):
        kw["output_token_ids"][0, 3] = -1   # row 0 stops at position 1: the rest is not the stage's
    message = failure_of(broken(stray), greedy_example())
    assert "output_token_ids[0, 3]: stray write" in message


def test_changed_input_is_caught():
    def touch(kw):
        kw["draft_token_ids"][0] += 1
    assert "changed its input `draft_token_ids` at [0]: was 5, now 6" in failure_of(broken(touch), greedy_example())


def test_write_into_a_strided_gap_is_caught():
    def oracle(*, x, out):
        out[...] = x

    def impl(*, x, out):
        out.copy_(x)
        out.as_strided((1,), (1,), out.storage_offset() + 1).fill_(7)   # the element after out[0]

    stage = Stage("toy.copy", (I("x", "int32", "N"),), (O("out", "int32", "N", strided=True),), oracle, None, {})
    example = Example("valid", {"x": np.arange(3, dtype=np.int32)},
                      outputs={"out": Buffer((3,), "int32", Layout((2,), (1,)))})
    verify(Target(stage, BACKENDS["oracle"], "cpu", "toy", oracle), example)
    assert "storage gap at base [1]: write into a gap" in failure_of(Target(stage, BACKENDS["impl"], "cpu", "toy", impl), example)


def test_invalid_input_must_be_refused_naming_the_field():
    example = greedy_example()
    bad = Example("invalid", {**example.inputs, "cu_num_draft_tokens": np.array([3, 2], np.int32)},
                  outputs=example.outputs, bad_field="cu_num_draft_tokens", rule="non-decreasing")
    verify(backends.target(GREEDY, "torch", "cpu"), bad)
    verify(backends.target(GREEDY, "oracle", "cpu"), bad)
    lax = Target(GREEDY, BACKENDS["impl"], "cpu", "test:lax", lambda **kw: None)
    assert "accepted invalid input: cu_num_draft_tokens" in failure_of(lax, bad)

    def crashes(**kw):
        raise IndexError("index 7 is out of bounds")
    assert "crashed on invalid input" in failure_of(Target(GREEDY, BACKENDS["impl"], "cpu", "t:c", crashes), bad)


def test_a_case_is_stored_once_and_round_trips(tmp_path):
    example = greedy_example()
    first = cases.save(tmp_path, GREEDY.name, example, {"backend": "torch", "device": "cpu", "failure": "a"})
    second = cases.save(tmp_path, GREEDY.name, example, {"backend": "triton", "device": "cpu", "failure": "b"})
    assert first == second and len(list(tmp_path.rglob("*.npz"))) == 1
    assert not list(tmp_path.rglob("*.tmp"))
    sidecar = json.loads(first.with_suffix(".json").read_text())
    assert [f["backend"] for f in sidecar["failures"]] == ["torch", "triton"]
    name, loaded = cases.load(first)
    assert name == GREEDY.name and loaded.outputs == example.outputs
    for key, value in example.inputs.items():
        assert np.array_equal(loaded.inputs[key], value) if value is not None else loaded.inputs[key] is None


@pytest.mark.parametrize("content,words", [
    (b"not a zip at all", "not a readable case file"),
    (None, "not a readable case file"),          # truncated: the first half of a real case
    ("foreign", "without the __meta__ header"),
])
def test_bad_case_files_give_one_clear_line(tmp_path, capsys, content, words):
    path = tmp_path / "bad.npz"
    if content is None:
        real = cases.save(tmp_path / "c", GREEDY.name, greedy_example(), {"backend": "torch"})
        data = real.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif content == "foreign":
        np.savez(path, weights=np.zeros(3))
    else:
        path.write_bytes(content)
    assert main(["replay", str(path)]) == 2
    out = capsys.readouterr().out.strip()
    assert words in out and len(out.splitlines()) == 1 and "Traceback" not in out


@pytest.mark.parametrize("planted,min_drafts", [("capped_at_128", 129), ("bonus_even_after_reject", 1)])
def test_a_planted_bug_is_caught_shrunk_and_replayed(tmp_path, capsys, planted, min_drafts):
    impl = f"tests.planted_greedy:{planted}"
    status = main(["check", "--stage", "rejection.greedy", "--impl", impl, "--device", "cpu",
                   "--findings", str(tmp_path), "--examples", "200"])
    report = capsys.readouterr().out
    assert status == 1, report
    [case] = list(tmp_path.rglob("*.npz"))
    _, example = cases.load(case)
    counts = np.diff(example.inputs["cu_num_draft_tokens"], prepend=0)
    assert len(counts) == 1 and counts.max() == min_drafts or planted != "capped_at_128"
    assert len(counts) <= 2, "shrunk to at most two requests"
    assert f"specverify replay {case} --impl {impl} --device cpu" in report
    assert main(["replay", str(case), "--impl", impl, "--device", "cpu"]) == 1
    assert "FAILED" in capsys.readouterr().out
    assert main(["replay", str(case), "--backend", "torch"]) == 0


def test_bad_usage_exits_2(capsys):
    assert main(["check", "--stage", "no.such.*"]) == 2
    assert main(["check", "--stage", "rejection.*", "--stage", "rejection.greedy", "--impl", "x:y",
                 "--backend", "torch"]) == 2
    assert main(["check", "--stage", "rejection.greedy", "--impl", "no_such_module_anywhere:f"]) == 2
    with pytest.raises(SystemExit) as info:
        main(["check", "--examples", "0"])
    assert info.value.code == 2


def test_list_says_why_a_backend_does_not_run(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "rejection.greedy" in out
    for _, backend, device, why in backends.matrix([GREEDY]):
        assert why is None or why in out


def test_readme_test_command_is_what_ci_runs():
    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    blocks = [b.split("```")[0].strip() for b in readme.split("```bash\n")[1:]]
    test_command = next(b for b in blocks if "pytest" in b)
    assert test_command in (root / ".ci" / "run").read_text()


def test_conformance_runs_every_check_in_a_worker(tmp_path, capsys):
    report = tmp_path / "report.json"
    assert main(["check", "--profile", "conformance", "--stage", "rejection.expand", "--backend", "torch",
                 "--examples", "3", "--findings", str(tmp_path), "--json", str(report)]) == 0
    outcomes = json.loads(report.read_text())["outcomes"]
    assert [(o["stage"], o["backend"], o["check"], o["status"], o["examples"]) for o in outcomes
            if o["device"] == "cpu"] == [     # invalid: 1 drawn, then the value rule it offered and did not ask
        ("rejection.expand", "torch", "valid", "passed", 3), ("rejection.expand", "torch", "invalid", "passed", 2)]
    assert "isolated" in capsys.readouterr().out


def test_a_read_outside_an_input_view_is_named():
    def oracle(*, x, out):
        out[...] = x

    def impl(*, x, out):
        out.copy_(x.as_strided(x.shape, (1,)))   # ignores x's stride: reads its gaps

    stage = Stage("toy.copy", (I("x", "int32", "N", strided=True),), (O("out", "int32", "N"),), oracle, None, {})
    example = Example("valid", {"x": np.arange(3, dtype=np.int32)}, outputs={"out": Buffer((3,), "int32")},
                      layouts={"x": Layout((2,), (0,))})
    assert "read outside input `x`: out changed" in failure_of(Target(stage, BACKENDS["impl"], "cpu", "toy", impl),
                                                                 example)


def test_a_read_outside_an_input_that_fails_on_other_guard_bytes_is_named():
    """A kernel that reads one element past its input and takes it as a length: with the first guard pattern the
    length is negative and it writes nothing wrong; with the second the call fails. The failure is the read."""
    def oracle(*, x, out):
        out[...] = x

    def impl(*, x, out):
        past = int(x.as_strided((x.shape[0] + 1,), (1,))[-1])       # the element after x: guard bytes
        if past > 0:
            raise IndexError(f"length {past} runs past out")
        out.copy_(x)

    stage = Stage("toy.copy", (I("x", "int32", "N"),), (O("out", "int32", "N"),), oracle, None, {})
    example = Example("valid", {"x": np.arange(3, dtype=np.int32)}, outputs={"out": Buffer((3,), "int32")})
    message = failure_of(Target(stage, BACKENDS["impl"], "cpu", "toy", impl), example)
    assert "read outside input `x`: the call failed (raised IndexError" in message, message


def normalizing_copy_and_expand(**kwargs):
    """The Torch kernel, then every mask byte rewritten as a canonical bool (0xa5 becomes 0x01): what
    CUDA's torch.where did to the elements it was meant to leave alone."""
    from specverify.kernels.torch.eagle import copy_and_expand_inputs

    copy_and_expand_inputs(**kwargs)
    for name in ("out_is_rejected_token_mask", "out_is_masked_token_mask"):
        raw = kwargs[name].view(torch.uint8)
        raw.copy_(raw != 0)


def test_a_bool_byte_rewritten_in_place_is_a_stray_write_shown_by_its_bytes():
    stage = registry.all_stages()["eagle.copy_and_expand_inputs"]
    target = Target(stage, BACKENDS["torch"], "cpu", "tests", normalizing_copy_and_expand)
    example = find(stage.valid(DrawContext(small=True)), lambda e: not expect(stage, e).defined[
        "out_is_masked_token_mask"].all(), settings=settings(database=None, derandomize=True))
    with pytest.raises(Failure) as caught:
        verify(target, example)
    assert "stray write: expected 0xA5 (poison: never written)" in caught.value.headline, caught.value.headline

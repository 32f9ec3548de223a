"""Worked examples of the `rejection` stages (hand-computed), on every backend here, the composite
`rejection.sample` checked against running its parts (greedy, recovered, random) on the same inputs, and
planted bugs of the kinds engines shipped, each caught at the ci budget."""
from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings

from specverify import env
from specverify.oracles import rejection as oracle
from specverify.records.stage import DrawContext
from specverify.stages.rejection import STAGES
from specverify.strategies import rejection as strategies
from tests.planted_runs import caught

BACKENDS = ["oracle", "torch", "triton"]
BY_NAME = {s.name: s for s in STAGES}


def implementation(stage: str, backend: str):
    if backend == "oracle":
        return BY_NAME[stage].oracle
    env.prepare()
    if backend == "triton" and env.triton_import_error():
        pytest.skip(env.triton_import_error())
    module, function = BY_NAME[stage].impls[backend].split(":")
    return getattr(importlib.import_module(module), function)


def run(stage: str, backend: str, outputs: dict, **inputs) -> dict:
    """Call one backend on NumPy inputs; outputs start as copies of `outputs`; returns them as NumPy."""
    impl = implementation(stage, backend)
    if backend == "oracle":
        outs = {k: v.copy() for k, v in outputs.items()}
        impl(**inputs, **outs)
        return outs
    import torch

    device = "cuda" if env.cuda_available() else "cpu"
    convert = {k: torch.from_numpy(v.copy()).to(device) if isinstance(v, np.ndarray) else v
               for k, v in inputs.items()}
    outs = {k: torch.from_numpy(v.copy()).to(device) for k, v in outputs.items()}
    impl(**convert, **outs)
    return {k: v.cpu().numpy() for k, v in outs.items()}


def i32(*values):
    return np.array(values, np.int32)


def i64(*values):
    return np.array(values, np.int64)


def f32(rows):
    return np.array(rows, np.float32)


@pytest.mark.parametrize("backend", BACKENDS)
def test_recovered_worked(backend):
    # request 0: tokens 0, 1; request 1: token 2 (V = 4)
    target = f32([[0.1, 0.4, 0.3, 0.2], [0.25, 0.25, 0.25, 0.25], [0.5, 0.2, 0.2, 0.1]])
    inv_q = f32([[1, 1, 1, 1], [1, 3, 3, 1]])
    kw = dict(cu_num_draft_tokens=i32(2, 3), draft_token_ids=i32(1, -1, 3), target_probs=target, inv_q=inv_q)
    out = {"recovered_token_ids": i32(-9, -9, -9)}
    # no draft probs: the draft's own id is zeroed (t0: id 1 -> 2 wins); a placeholder zeroes nothing and
    # four equal scores pick the lowest (t1 -> 0); t2 scores [0.5, 0.6, 0.6, 0.1]: the lowest of the tie, 1
    got = run("rejection.recovered", backend, out, draft_probs=None, **kw)
    assert got["recovered_token_ids"].tolist() == [2, 0, 1]
    # with draft probs: residual max(p - q, 0); t0 [0, 0, 0.3, 0.2] -> 2, t1 all zero -> 0, t2 [0, .2, 0, 0]*q -> 1
    draft_probs = f32([[0.5, 0.5, 0, 0], [0.25, 0.25, 0.25, 0.25], [0.5, 0, 0.2, 0.1]])
    got = run("rejection.recovered", backend, out, draft_probs=draft_probs, **kw)
    assert got["recovered_token_ids"].tolist() == [2, 0, 1]
    # hazards: an all-NaN row gives 0, NaN never wins, +inf wins (zero noise), an OOV draft zeroes nothing
    kw.update(target_probs=f32([[np.nan] * 4, [np.nan, 0.1, 0.3, 0.2], [0.5, 0.2, 0.2, 0.1]]),
              inv_q=f32([[1, 1, 1, 1], [1, 1, np.inf, 1]]), draft_token_ids=i32(0, 7, 4))
    got = run("rejection.recovered", backend, out, draft_probs=None, **kw)
    assert got["recovered_token_ids"].tolist() == [0, 2, 2]


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_recovered_keeps_the_first_of_ties_one_lane_apart_at_a_real_vocabulary(backend):
    """64 tokens of V = 151936, each with equal maxima 2048 apart in its first two 2048-wide tiles: on a GPU
    the split pick gives each program several tiles of a row, so both meet in one lane (the valid tier's
    cell budget never draws this shape; the interpreter's shapes are in the corpus)."""
    if backend == "triton" and not env.cuda_available():
        pytest.skip("the shape a GPU's split pick reaches (the interpreter's cases are in cases/rejection.*)")
    rng = np.random.default_rng(7)
    tokens, vocab = 64, 151936
    target = rng.random((tokens, vocab), dtype=np.float32) * np.float32(0.5)
    first = rng.integers(0, 2048, tokens)
    target[np.arange(tokens), first] = target[np.arange(tokens), first + 2048] = 0.75
    kw = dict(cu_num_draft_tokens=i32(tokens), draft_token_ids=np.full(tokens, -1, np.int32), target_probs=target,
              inv_q=np.ones((1, vocab), np.float32), draft_probs=None)
    got = run("rejection.recovered", backend, {"recovered_token_ids": np.full(tokens, -9, np.int32)}, **kw)
    assert got["recovered_token_ids"].tolist() == first.tolist()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_random_reads_a_contiguous_table_past_2_31_elements(backend, wide_cuda):
    """14,200 one-draft requests over V = 151,936 (2.16e9 elements, 8.6 GB; a real batch's size): the target
    row of a late token lies past 2**31 elements, so a token position times the row stride formed in 32 bits
    reads the wrong p. Each draft holds p = 1 and u = 0.5, so every row accepts: draft, then bonus. The
    wide-offsets check never reaches this (no field of rejection.random arrives strided)."""
    import torch

    impl = implementation("rejection.random", backend)
    tokens, vocab, cuda = 14_200, 151_936, wide_cuda
    assert tokens * vocab > 2**31
    drafts = torch.arange(tokens, device=cuda, dtype=torch.int64) * 7919 % vocab
    out = torch.full((tokens, 2), -9, dtype=torch.int32, device=cuda)
    target = torch.zeros((tokens, vocab), dtype=torch.float32, device=cuda)
    target[torch.arange(tokens, device=cuda), drafts] = 1.0
    impl(draft_token_ids=drafts.int(), bonus_token_ids=torch.full((tokens,), 5, dtype=torch.int64, device=cuda),
         cu_num_draft_tokens=torch.arange(1, tokens + 1, dtype=torch.int32, device=cuda), max_spec_len=1,
         draft_probs=None, target_probs=target, recovered_token_ids=torch.zeros(tokens, dtype=torch.int32, device=cuda),
         uniform_probs=torch.full((tokens,), 0.5, dtype=torch.float64, device=cuda),
         is_greedy=torch.zeros(tokens, dtype=torch.bool, device=cuda), output_token_ids=out)
    torch.cuda.synchronize()
    del target
    expected = torch.stack([drafts.int(), torch.full_like(drafts, 5).int()], dim=1)
    wrong = (out != expected).any(dim=1).nonzero().flatten()
    assert len(wrong) == 0, f"{len(wrong)} rows wrong, the first {wrong[0].item()}: {out[wrong[0]].tolist()}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_worked(backend):
    # V = 3. Row 0: ratio 0.25/0.5 = 0.5 == u accepts (ties accept), then u one ulp above the ratio rejects
    # -> recovered. Row 1 greedy: untouched. Row 2: no drafts -> bonus. Row 3: q == 0 rejects.
    # Row 4: a placeholder and an OOV draft reject.  Row 5: all accepted -> bonus.
    target = f32([[0.25, 0.5, 0.25], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8], [0.9, 0.1, 0], [1, 0, 0], [0, 1, 0],
                  [0.3, 0.3, 0.4]])
    draft = f32([[0.5, 0.25, 0.25], [0.2, 0.3, 0.5], [0.1, 0.1, 0.8], [0, 1, 0], [1, 0, 0], [0, 1, 0],
                 [0.3, 0.3, 0.4]])
    ratio = float(np.float32(0.3) / np.float32(0.3))
    out = {"output_token_ids": np.full((6, 3), -9, np.int32)}
    got = run("rejection.random", backend, out,
              draft_token_ids=i32(0, 1, 2, 0, -1, 1, 2), bonus_token_ids=i64(10, 11, 12, 13, 14, 15),
              cu_num_draft_tokens=i32(2, 3, 3, 4, 5, 7), max_spec_len=2, draft_probs=draft, target_probs=target,
              recovered_token_ids=i32(1, 2, 0, 2, 1, 0, 0),
              uniform_probs=np.array([0.5, np.nextafter(1.0, 2.0), 0.1, 0.0, 0.0, 0.0, ratio]),
              is_greedy=np.array([False, True, False, False, False, False]))
    assert got["output_token_ids"].tolist() == [[0, 2, -9], [-9, -9, -9], [12, -9, -9], [2, -9, -9],
                                                [1, -9, -9], [1, 2, 15]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_expand_worked(backend):
    got = run("rejection.expand", backend, {"expanded": np.full(5, -9, np.int32)},
              x=i32(5, 0, 7), cu_num_tokens=i32(2, 2, 5), num_tokens=5, replace_from=0, replace_to=-1)
    assert got["expanded"].tolist() == [5, 5, 7, 7, 7]
    # 130 tokens in one request (an engine capped at 128 would leave two unwritten); -0.0 == 0.0 is replaced
    got = run("rejection.expand", backend, {"expanded": np.full(131, -9, np.float32)},
              x=f32([2.5, -0.0]), cu_num_tokens=i32(130, 131), num_tokens=131, replace_from=0.0, replace_to=1.0)
    assert got["expanded"].tolist() == [2.5] * 130 + [1.0]


def sample_inputs():
    # V = 3; row 0 greedy: argmax t0 = 1 (draft 1 matches), t1 = 2 (the tie 0.3/0.3 loses to 0.4; draft 0
    # differs: emit 2, stop). Row 1 random: p[2] = 0.6 < u = 0.7 rejects; recovered: [0.2, 0.2, 0] -> 0.
    return dict(draft_token_ids=i32(1, 0, 2), cu_num_draft_tokens=i32(2, 3), max_spec_len=3, draft_probs=None,
                target_probs=f32([[0.1, 0.5, 0.4], [0.3, 0.3, 0.4], [0.2, 0.2, 0.6]]), bonus_token_ids=i64(7, 8),
                is_greedy=np.array([True, False]), uniform_probs=np.array([0.1, 0.1, 0.7]),
                inv_q=np.ones((2, 3), np.float32))


@pytest.mark.parametrize("backend", BACKENDS)
def test_sample_worked(backend):
    out = {"output_token_ids": np.full((2, 4), -9, np.int32)}
    got = run("rejection.sample", backend, out, **sample_inputs())
    assert got["output_token_ids"].tolist() == [[1, 2, -1, -1], [0, -1, -1, -1]]
    # every row greedy: the noise is absent; row 1: argmax 2 == draft 2, then the bonus
    got = run("rejection.sample", backend, out, **{**sample_inputs(), "is_greedy": None, "uniform_probs": None,
                                                   "inv_q": None})
    assert got["output_token_ids"].tolist() == [[1, 2, -1, -1], [2, 8, -1, -1]]


def padded_outputs(batch, k):
    return {"output_token_ids": np.full((batch, k + 1), -9, np.int64),
            "num_rejected_tokens": np.full(batch, -9, np.int64), "last_token_ids": np.full(batch, -9, np.int64)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_padded_worked(backend):
    # row 0: drafts match, bonus; row 1: second draft differs; row 2 not greedy: untouched
    inputs = dict(draft_token_ids=np.array([[3, 5], [5, 1], [2, 2]]), target_argmax=np.array([[3, 5], [5, 6], [0, 0]]),
                  bonus_token_ids=i64(9, 8, 7), is_greedy=np.array([True, True, False]))
    got = run("rejection.greedy_padded", backend, padded_outputs(3, 2), **inputs)
    assert got["output_token_ids"].tolist() == [[3, 5, 9], [5, 6, -1], [-9, -9, -9]]
    assert got["num_rejected_tokens"].tolist() == [0, 1, -9]
    assert got["last_token_ids"].tolist() == [9, 6, -9]


@pytest.mark.parametrize("backend", BACKENDS)
def test_sample_padded_worked(backend):
    # row 0 greedy: argmaxes 1, 2; drafts 1, 0 -> [1, 2]. Row 1 random: draft 2 (p .6 >= u .5) accepted,
    # draft 1 (p 0) rejected -> recovered of [1, 0, 0] with id 1 zeroed -> 0.
    inputs = dict(draft_token_ids=np.array([[1, 0], [2, 1]]), draft_probs=None,
                  target_probs=np.array([[[0.1, 0.5, 0.4], [0.3, 0.3, 0.4]], [[0.2, 0.2, 0.6], [1, 0, 0]]], np.float32),
                  bonus_token_ids=i64(7, 8), is_greedy=np.array([True, False]),
                  uniform_probs=np.array([[0.1, 0.1], [0.5, 0.1]]), inv_q=np.ones((2, 3), np.float32))
    got = run("rejection.sample_padded", backend, padded_outputs(2, 2), **inputs)
    assert got["output_token_ids"].tolist() == [[1, 2, -1], [2, 0, -1]]
    assert got["num_rejected_tokens"].tolist() == [1, 1]
    assert got["last_token_ids"].tolist() == [2, 0]


def sample_by_parts(x: dict, out: np.ndarray) -> np.ndarray:
    """rejection.sample spelled out: -1, greedy against np.argmax, then recovered and random."""
    out = np.full_like(out, -1)
    oracle.greedy(draft_token_ids=x["draft_token_ids"], target_argmax=np.argmax(x["target_probs"], 1).astype(np.int64),
                  bonus_token_ids=x["bonus_token_ids"], cu_num_draft_tokens=x["cu_num_draft_tokens"],
                  is_greedy=x["is_greedy"], max_spec_len=x["max_spec_len"], output_token_ids=out)
    if x["is_greedy"] is not None:
        ids = np.zeros(len(x["draft_token_ids"]), np.int32)
        oracle.recovered(cu_num_draft_tokens=x["cu_num_draft_tokens"], draft_token_ids=x["draft_token_ids"],
                         draft_probs=x["draft_probs"], target_probs=x["target_probs"], inv_q=x["inv_q"],
                         recovered_token_ids=ids)
        oracle.random(draft_token_ids=x["draft_token_ids"], bonus_token_ids=x["bonus_token_ids"],
                      cu_num_draft_tokens=x["cu_num_draft_tokens"], max_spec_len=x["max_spec_len"],
                      draft_probs=x["draft_probs"], target_probs=x["target_probs"], recovered_token_ids=ids,
                      uniform_probs=x["uniform_probs"], is_greedy=x["is_greedy"], output_token_ids=out)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(example=strategies.sample_valid(DrawContext(small=True)))
def test_sample_equals_its_parts(backend, example):
    shape = example.outputs["output_token_ids"].shape
    got = run("rejection.sample", backend, {"output_token_ids": np.full(shape, -9, np.int32)}, **example.inputs)
    expected = sample_by_parts(example.inputs, np.zeros(shape, np.int32))
    np.testing.assert_array_equal(got["output_token_ids"], expected)


@pytest.mark.parametrize("backend", BACKENDS)
def test_greedy_rows_with_draft_probs_take_the_target_argmax(backend):
    """A greedy row's alternatives are the argmax of its target row as it stands, whatever its draft probs:
    negative and -inf cells are not clamped to 0 like a residual (row 0's argmax is 1, not 0), a NaN
    draft probability is not subtracted (row 1: 2). Row 2 is random: its residual max(p - q, 0) * inv_q
    is [0, 0, 0.25], so token 2 replaces its draft."""
    target = f32([[[-3, -1, -2]], [[0.25, 0.25, 0.5]], [[0.25, 0.25, 0.5]]])
    draft = f32([[[0.5, 0.25, 0.25]], [[0.5, 0.5, np.nan]], [[0.5, 0.5, 0.25]]])
    inputs = dict(draft_token_ids=i64([0], [0], [0]), draft_probs=draft, target_probs=target,
                  bonus_token_ids=i64(7, 8, 9), is_greedy=np.array([True, True, False]),
                  uniform_probs=np.full((3, 1), 0.9), inv_q=np.ones((3, 3), np.float32))
    got = run("rejection.sample_padded", backend, padded_outputs(3, 1), **inputs)
    assert got["output_token_ids"].tolist() == [[1, -1], [2, -1], [2, -1]]
    flat = dict(inputs, draft_token_ids=i32(0, 0, 0), cu_num_draft_tokens=i32(1, 2, 3), max_spec_len=1,
                draft_probs=draft[:, 0], target_probs=target[:, 0], uniform_probs=np.full(3, 0.9))
    got = run("rejection.sample", backend, {"output_token_ids": np.full((3, 2), -9, np.int32)}, **flat)
    assert got["output_token_ids"].tolist() == [[1, -1], [2, -1], [2, -1]]


def split_rows(vocab: int = 1024) -> np.ndarray:
    """Five score rows (V = 1024: four spans of 256 when the Triton pick splits) whose winners sit across
    span edges: a tie far apart (the lower index wins), -0.0 before +0.0 (equal: the lower wins), NaN
    before -inf (NaN never wins), all NaN (0), a lone peak in the last span."""
    rows = np.full((5, vocab), -1.0, np.float32)
    rows[0, [300, 900]] = 2.0
    rows[1, 5], rows[1, 700] = -0.0, 0.0
    rows[2, :] = np.nan
    rows[2, 1000] = -np.inf
    rows[3, :] = np.nan
    rows[4, vocab - 1] = 3.0
    return rows


@pytest.mark.parametrize("backend", BACKENDS)
def test_picks_across_spans(backend):
    rows = split_rows()
    expected = [300, 5, 1000, 0, 1023]
    kw = dict(cu_num_draft_tokens=i32(2, 5), draft_token_ids=i32(-1, -1, -1, -1, -1), draft_probs=None,
              target_probs=rows, inv_q=np.ones((2, rows.shape[1]), np.float32))
    for _ in range(2):   # twice: the split workspace is left clean
        got = run("rejection.recovered", backend, {"recovered_token_ids": np.full(5, -9, np.int32)}, **kw)
        assert got["recovered_token_ids"].tolist() == expected
    # the same rows as greedy argmaxes (sample, every row greedy): drafts equal to them are all accepted
    got = run("rejection.sample", backend, {"output_token_ids": np.full((1, 6), -9, np.int32)},
              draft_token_ids=np.array(expected, np.int32), cu_num_draft_tokens=i32(5), max_spec_len=5,
              draft_probs=None, target_probs=rows, bonus_token_ids=i64(7), is_greedy=None, uniform_probs=None,
              inv_q=None)
    assert got["output_token_ids"].tolist() == [expected + [7]]
    got = run("rejection.sample_padded", backend, padded_outputs(1, 5), draft_token_ids=np.array([expected]),
              draft_probs=None, target_probs=rows[None], bonus_token_ids=i64(7), is_greedy=None,
              uniform_probs=None, inv_q=None)
    assert got["output_token_ids"].tolist() == [expected + [7]]


def test_split_plan():
    if env.triton_import_error():
        pytest.skip(env.triton_import_error())
    from specverify.kernels.triton.rejection import BLOCK_V, split_plan

    assert split_plan(5, 1024, 32, 16) == (4, 256, 256)     # the CPU plan of test_picks_across_spans
    assert split_plan(5, 1024, 1056, 256) == (4, 256, 256)  # and an H200's (132 SMs)
    for programs, min_block in ((32, 16), (1056, 256)):
        for tokens in (1, 3, 5, 80, 320, 1055, 1056, 5120):
            for vocab in (1, 2, 50, 1024, 8193, 32000, 151936):
                split, tile, span = split_plan(tokens, vocab, programs, min_block)
                assert tile <= BLOCK_V and tile & (tile - 1) == 0
                if split == 1:
                    assert span >= vocab
                    continue
                assert tokens < programs and span % tile == 0       # split slots fit the workspace
                assert (split - 1) * span < vocab <= split * span   # every program has work


SPECIALS = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7F800000, 0xFF800000, 0, 0x80000000,
                     0x7F7FFFFF, 0xFF7FFFFF, 1, 0x80000001, 0x3F800000, 0xBF800000], np.uint32).view(np.float32)


@pytest.mark.parametrize("vocab", [1, 2, 3, 17, 64, 1000])
def test_torch_first_max_is_the_oracle_on_special_rows(vocab):
    """The Torch `first_max` (an int32-view minimum, NaN -> -inf, one max) against the oracle's rule on
    rows of NaN of either sign and payload, +-inf, +-0.0, +-FLT_MAX, denormals and +-1: rows drawn from
    small subsets of them, so ties, rows of -inf and NaN, and all-NaN rows are common."""
    import torch

    from specverify.kernels.torch.rejection import first_max

    rng = np.random.default_rng(vocab)
    rows = np.stack([rng.choice(rng.choice(SPECIALS, rng.integers(1, 4)), vocab) for _ in range(400)])
    expected = [oracle.first_max(row) for row in rows]
    for owned in (False, True):
        table = torch.from_numpy(rows.copy())
        assert first_max(table, owned=owned).tolist() == expected
        assert owned or np.array_equal(table.numpy().view(np.uint32), rows.view(np.uint32))


@pytest.mark.parametrize("name", ["rejection.recovered", "rejection.sample", "rejection.sample_padded"])
def test_torch_scores_stages_equal_the_oracle_on_hazards(name):
    """The hazard tier checks invariants only; the Torch kernels of the stages that take a first maximum
    of scores keep the oracle's exact rule there too (NaN, +-inf, zero noise, out-of-vocabulary drafts)."""
    stage = BY_NAME[name]

    @settings(max_examples=40, deadline=None, derandomize=True, database=None)
    @given(example=stage.hazard(DrawContext(small=True)))
    def compare(example):
        outs = {k: np.full(b.shape, -9, getattr(np, b.dtype)) for k, b in example.outputs.items()}
        got = run(name, "torch", outs, **example.inputs)
        expected = run(name, "oracle", outs, **example.inputs)
        for key in outs:
            np.testing.assert_array_equal(got[key], expected[key], err_msg=key)

    compare()


@pytest.mark.parametrize("stage,impl,check,dialect", [
    ("rejection.random", "oov_read_from_the_next_row", "valid", ""),
    ("rejection.random", "oov_read_from_the_next_row_strict", "valid", "strict"),
    ("rejection.recovered", "nan_residual_as_zero", "hazard", "")])
def test_a_planted_bug_is_caught(tmp_path, capsys, stage, impl, check, dialect):
    """vLLM's random kernel reading an out-of-vocabulary draft's p and q from the next row (the strict dialect's
    draws missed it at seed 0 before out-of-vocabulary first drafts and small vocabularies were planted), and
    a NaN-dropping max(p - q, 0) in the recovery scores (missed at seeds 2 and 3 before lone NaNs)."""
    caught(tmp_path, capsys, stage, f"tests.planted_rejection:{impl}", check, 100 if check == "valid" else 25,
           *(["--dialect", dialect] if dialect else []))

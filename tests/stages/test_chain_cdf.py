"""`rejection.chain_cdf` by hand: the worked examples and the rules one at a time (ties, the V - 1
fallback, placeholders left unread, one u_final per request, the untouched tail, int64 row offsets),
on the oracle and both kernels."""
from __future__ import annotations

import importlib

import numpy as np
import pytest

from specverify import env
from specverify.oracles import rejection as oracle
from specverify.stages.rejection import CHAIN_CDF, cdf_call, chain_cdf_snapshot_worked, chain_cdf_worked
from tests.planted_runs import caught

BACKENDS = ["oracle", "torch", "triton"]
UNTOUCHED = -7
QUARTER = [0.25] * 4


def implementation(backend: str, dialect: str = ""):
    if backend == "oracle":
        return CHAIN_CDF.dialects[dialect].oracle if dialect else CHAIN_CDF.oracle
    env.prepare()
    if backend == "triton" and env.triton_import_error():
        pytest.skip(env.triton_import_error())
    path = CHAIN_CDF.dialects[dialect].impls[backend] if dialect else CHAIN_CDF.impls[backend]
    module, function = path.split(":")
    return getattr(importlib.import_module(module), function)


def run(backend: str, example, dialect: str = "") -> dict:
    """Outputs of one call on the example's inputs, every output slot starting at UNTOUCHED."""
    outs = {name: np.full(buf.shape, UNTOUCHED, buf.dtype) for name, buf in example.outputs.items()}
    impl = implementation(backend, dialect)
    if backend == "oracle":
        impl(**example.inputs, **outs)
        return outs
    import torch

    device = "cuda" if env.cuda_available() else "cpu"
    tensors = {k: torch.from_numpy(v.copy()).to(device) for k, v in {**example.inputs, **outs}.items()}
    impl(**tensors)
    return {k: tensors[k].cpu().numpy() for k in outs}


def expect(found: dict, predicts, accept_index, accept_token_num) -> None:
    u = UNTOUCHED
    assert found["predicts"].tolist() == [u if v is None else v for v in predicts]
    assert found["accept_index"].tolist() == [[u if v is None else v for v in row] for row in accept_index]
    assert found["accept_token_num"].tolist() == accept_token_num


@pytest.mark.parametrize("backend", BACKENDS)
def test_worked_example(backend):
    """The tie at position 0 rejects and the residual's CDF gives 2; all accepted, the bonus from p_2 is 2."""
    expect(run(backend, chain_cdf_worked()), [2, None, None, 1, 2, 2], [[0, None, None], [3, 4, 5]], [0, 2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_snapshot_worked_example(backend):
    found = run(backend, chain_cdf_snapshot_worked(), "snapshot")
    expect(found, [0, 2, 3, None], [[0, 1], [2, None]], [1, 0])
    expect(run(backend, chain_cdf_snapshot_worked()), [0, None, 2, None], [[0, None], [2, None]], [0, 0])


def one(draft, p0, q0, bonus, u, u_final):
    """One request, K = 1: draft, rows p_0, q_0, the bonus row p_1, uniforms [u, 0.75], u_final."""
    return cdf_call([[3, draft]], [[p0, bonus]], [[q0]], [[u, 0.75]], [u_final])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_tie_rejects_and_so_does_u_zero_with_p_zero(backend):
    tie = one(1, [0.25, 0.25, 0.5, 0], [0, 0.5, 0.5, 0], QUARTER, 0.5, 0.0)        # 0.5 * 0.5 == 0.25
    expect(run(backend, tie), [0, None], [[0, None]], [0])                           # residual [0.25, 0, 0, 0]
    zero = one(3, [0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5], QUARTER, 0.0, 0.0)            # 0 * 0.5 == 0 == p
    expect(run(backend, zero), [0, None], [[0, None]], [0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_all_zero_residual_gives_v_minus_1(backend):
    same = one(0, [0, 0.5, 0.5, 0], [0, 0.5, 0.5, 0], QUARTER, 0.5, 0.5)           # q = p = 0 at the draft
    expect(run(backend, same), [3, None], [[0, None]], [0])
    bonus = one(1, QUARTER, QUARTER, [0, 0, 0, 0], 0.5, 0.5)                         # accepted; p_1 all zero
    expect(run(backend, bonus), [1, 3], [[0, 1]], [1])
    at_end = one(1, QUARTER, QUARTER, [0.5, 0, 0, 0], 0.5, 1.0)                      # t = total: past the sum
    expect(run(backend, at_end), [1, 3], [[0, 1]], [1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_t_on_a_running_sum_takes_the_next_positive_cell(backend):
    row = [0.25, 0, 0, 0.25, 0.5]
    ex = cdf_call([[0]], [[row]], np.zeros((1, 0, 5)), [[0.3]], [0.5])              # K = 0: t = 0.5 = sums[3]
    expect(run(backend, ex), [4], [[0]], [0])
    ex = cdf_call([[0]], [[[0, 0, 0.5, 0.5]]], np.zeros((1, 0, 4)), [[0.3]], [0.0])  # t = 0: first positive
    expect(run(backend, ex), [2], [[0]], [0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_q_outside_0_1_rejects_and_counts_as_0_in_the_residual(backend):
    above = one(2, [0.25, 0.25, 0.5, 0], [0.5, 0.5, 2.0, 0], QUARTER, 0.125, 0.5)  # 0.25 < 0.5, but q > 1
    expect(run(backend, above), [2, None], [[0, None]], [0])                         # residual [0, 0, 0.5, 0]
    nan_p = one(1, [0.5, np.nan, 0.5, 0], [0, 0.5, 0.5, 0], QUARTER, 0.0, 0.5)     # NaN p rejects; NaN diff -> 0
    expect(run(backend, nan_p), [0, None], [[0, None]], [0])


@pytest.mark.parametrize("backend", BACKENDS)
def test_placeholder_and_oov_drafts_are_rejected_unread(backend):
    """Row 1's draft is -1: the cells before its rows (the last of row 0's p_1 and q_0, both 1.0) would
    accept it; the contract rejects it, so row 1 picks 2 from its own residual, not a bonus after -1."""
    p_row0, q_row0, bonus0 = QUARTER, [0, 0, 0, 1.0], [0, 0, 0, 1.0]
    p_row1, q_row1 = [0, 0.5, 0.5, 0], [0, 0, 0, 0.5]
    ex = cdf_call([[3, 0], [3, -1]], [[p_row0, bonus0], [p_row1, QUARTER]], [[q_row0], [q_row1]],
                  [[0.5, 0.5], [0.5, 0.5]], [0.5, 0.5])
    expect(run(backend, ex), [1, None, 2, None], [[0, None], [2, None]], [0, 0])
    oov = cdf_call([[3, 4]], [[QUARTER, QUARTER]], [[QUARTER]], [[0.0, 0.5]], [0.5])
    expect(run(backend, oov), [3, None], [[0, None]], [0])   # residual all 0: V - 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_u_final_per_request_and_column_k_unread(backend):
    """All accepted: the bonus uses u_final (0.25 -> token 1), not the never-read column K (0.75 -> 3)."""
    ex = cdf_call([[0, 1], [0, 1]], [[QUARTER, QUARTER]] * 2, [[QUARTER]] * 2, [[0.5, 0.75], [0.5, 0.75]],
                  [0.25, 0.75])
    expect(run(backend, ex), [1, 1, 1, 3], [[0, 1], [2, 3]], [1, 1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_bonus_row_is_summed_as_it_stands(backend):
    """All accepted: p_1's negative and NaN cells are summed as they are, not zeroed like a residual's
    (sums exact in any order). [0.75, -0.5, 0.5, 0.25]: t = 0.5, the first running sum 0.75 exceeds it
    (zeroed: t = 0.75, token 2); [0.25, NaN, 0.5, 0.25]: the total is NaN, so V - 1 (zeroed: token 2)."""
    for bonus, token in (([0.75, -0.5, 0.5, 0.25], 0), ([0.25, np.nan, 0.5, 0.25], 3)):
        expect(run(backend, one(1, QUARTER, QUARTER, bonus, 0.5, 0.5)), [1, token], [[0, 1]], [1])


def test_an_id_below_minus_1_and_a_missing_column_are_refused():
    ex = chain_cdf_worked()
    bad = dict(ex.inputs, candidates=np.array([[7, -2, 2], [7, 1, 2]], np.int64))
    outs = {name: np.zeros(buf.shape, buf.dtype) for name, buf in ex.outputs.items()}
    with pytest.raises(ValueError, match="candidates"):
        oracle.chain_cdf(**bad, **outs)
    with pytest.raises(ValueError, match="candidates"):
        oracle.chain_cdf(**dict(ex.inputs, candidates=np.zeros((2, 0), np.int64)), **outs)


def test_row_offsets_past_2_31_on_torch():
    """B*(K+1)*V = 2**31 + 2**24 cells (zero pages: NumPy's zeros are not touched until written): the
    last request's rows start past 2**31, where an int32 offset wraps. Only that request's pick row is
    nonzero, so a wrapped read finds zeros and returns V - 1 instead of 7."""
    torch = pytest.importorskip("torch")
    from specverify.kernels.torch.rejection import chain_cdf

    batch, k, vocab = 129, 4095, 4096
    try:
        target = np.zeros((batch, k + 1, vocab), np.float32)
        draft = np.zeros((batch, k, vocab), np.float32)
    except MemoryError:
        pytest.skip("no room for 17 GB of untouched pages")
    target[-1, 0, 7] = 1                       # request B-1 rejects its first draft (p = 0) and picks 7
    candidates = np.zeros((batch, k + 1), np.int64)
    outs = {"predicts": torch.full((batch * (k + 1),), UNTOUCHED, dtype=torch.int32),
            "accept_index": torch.full((batch, k + 1), UNTOUCHED, dtype=torch.int32),
            "accept_token_num": torch.full((batch,), UNTOUCHED, dtype=torch.int32)}
    chain_cdf(candidates=torch.from_numpy(candidates), target_probs=torch.from_numpy(target),
              draft_probs=torch.from_numpy(draft), uniform_samples=torch.full((batch, k + 1), 0.5),
              uniform_final=torch.full((batch,), 0.5), **outs)
    picks = outs["predicts"].view(batch, k + 1)[:, 0]
    assert picks[-1].item() == 7 and (picks[:-1] == vocab - 1).all()


def test_the_bench_input_is_on_the_exact_grid():
    """The bench tables are valid-tier tables: multiples of 2**-16 summing to at most 1 and uniforms on the
    2**-8 grid, so any summation order gives the oracle's bytes (on the H200 the softmax tables it had
    before made both kernels differ from the oracle at B >= 64)."""
    from specverify.stages.rejection import chain_cdf_bench

    x = chain_cdf_bench(16, 32000, np.random.default_rng(3)).inputs
    for name in ("target_probs", "draft_probs"):
        table = x[name].astype(np.float64)
        assert ((table * 2**16) % 1 == 0).all() and (table.sum(-1) <= 1).all(), name
    for name in ("uniform_samples", "uniform_final"):
        assert ((x[name].astype(np.float64) * 2**8) % 1 == 0).all(), name


def test_a_walk_that_forgets_its_sum_between_tiles_is_caught(tmp_path, capsys):
    """A pick that restarts its running sum at every tile of 1024 cells (tests/planted_rejection.py): the draws
    of rows that held no mass past their first tile missed it at seeds 0, 2 and 3; the `late pick` plant puts
    t there."""
    valid, shrunk = caught(tmp_path, capsys, "rejection.chain_cdf", "tests.planted_rejection:pick_without_carry")

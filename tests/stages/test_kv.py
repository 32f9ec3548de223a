"""Fixed cases of the `kv` family: the fp8 rounding rule (ties to even, saturation, NaN, signed zeros),
every f16 and bf16 bit pattern converted alike on every backend, the worked example by hand, and what
may and may not share a slot; for the tree bookkeeping, the worked examples by hand, order around
holes, the untouched tail, batches past one block, ranges ending at L, the never-read tail of
out_cache_loc, and the invalid inputs each backend must refuse; a planted per-tensor read of per-token scales
caught and shrunk."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from specverify.judge.harness import Failure, oracle_outputs
from specverify.oracles.kv import FP8, fp8_code, fp8_value
from specverify.records import backends
from specverify.records.backends import BACKENDS, Target
from specverify.records.stage import Buffer, Example, Layout
from specverify.records.values import POISON_A
from specverify.runs.session import verify_example as verify
from specverify.stages import kv
from specverify.stages.kv import accept_out_cache_loc_worked, assign_req_to_token_worked, commit_draft_worked
from tests.planted_runs import caught

STAGE = kv.COMMIT_DRAFT


def targets(stage=STAGE):
    return [backends.target(stage, b, d) for _, b, d, why in backends.matrix([stage]) if why is None]


def cache_bytes(example: Example) -> dict[str, np.ndarray]:
    """Every available backend must match the oracle on `example`; the oracle's caches as bytes."""
    for target in targets():
        verify(target, example)
    return {name: view.view(np.uint8) for name, view in oracle_outputs(STAGE, example).items()}


def commit(key: np.ndarray, cache_dtype: str, scale=1.0, layout="NHD", accepted=None, slots=None) -> Example:
    """All T tokens written to slots 0..T-1 of a cache of blocks of 4 slots (unless told otherwise)."""
    tokens, heads, dim = key.shape
    slots = np.arange(tokens) if slots is None else np.asarray(slots)
    blocks = max(1, -(-int(slots.max(initial=0) + 1) // 4))
    shape = (blocks, 4, heads, dim) if layout == "NHD" else (blocks, heads, 4, dim)
    scale = np.atleast_1d(np.asarray(scale, np.float32)) if cache_dtype in FP8 else None
    return Example("valid", inputs={
        "key": key, "value": key, "slot_mapping": slots.astype(np.int64),
        "accepted_mask": np.ones(tokens, bool) if accepted is None else np.asarray(accepted), "layout": layout,
        "k_scale": scale, "v_scale": scale}, outputs={"key_cache": Buffer(shape, cache_dtype),
                                                     "value_cache": Buffer(shape, cache_dtype)})


@pytest.mark.parametrize("name", sorted(FP8))
def test_decoding_agrees_with_ml_dtypes(name):
    fmt = FP8[name]
    decoded = np.arange(fmt.max_code + 1, dtype=np.uint8).view(getattr(ml_dtypes, name)).astype(np.float64)
    assert [fp8_value(c, fmt) for c in range(fmt.max_code + 1)] == decoded.tolist()


@pytest.mark.parametrize("name", sorted(FP8))
def test_rounding_inside_the_range_agrees_with_ml_dtypes(name):
    # ml_dtypes rounds to nearest even too; it differs only beyond the range (NaN or inf, not saturation)
    xs = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
    xs = xs[np.isfinite(xs) & (np.abs(xs) < fp8_value(FP8[name].max_code, FP8[name]))]
    expected = xs.astype(getattr(ml_dtypes, name)).view(np.uint8)
    assert [fp8_code(float(x), name) for x in xs] == expected.tolist()


@pytest.mark.parametrize("x, name, code", [
    (0.53125, "float8_e4m3fn", 0x30),         # halfway between 0.5 (0x30) and 0.5625 (0x31): the even 0x30
    (0.59375, "float8_e4m3fn", 0x32),         # halfway between 0.5625 (0x31) and 0.625 (0x32): the even 0x32
    (464.0, "float8_e4m3fn", 0x7E),           # halfway to 480 (no such value): saturates to 448
    (1e30, "float8_e4m3fn", 0x7E), (-math.inf, "float8_e4m3fn", 0xFE), (math.inf, "float8_e5m2", 0x7B),
    (61440.0, "float8_e5m2", 0x7B),           # where e5m2 would round to infinity: saturates to 57344
    (math.nan, "float8_e4m3fn", 0x7F), (-math.nan, "float8_e5m2", 0x7F),
    (-0.0, "float8_e4m3fn", 0x80), (2.0 ** -10, "float8_e4m3fn", 0x00),   # half the smallest subnormal: to 0
    (3 * 2.0 ** -10, "float8_e4m3fn", 0x02),  # 1.5 subnormal steps: the even 2 steps
    (-(2.0 ** -17), "float8_e5m2", 0x80),     # half of e5m2's smallest subnormal, negative: -0
])
def test_rounding_rule(x, name, code):
    assert fp8_code(x, name) == code


@pytest.mark.parametrize("cache_dtype", sorted(FP8))
@pytest.mark.parametrize("source", ["float16", "bfloat16"])
def test_every_source_bit_pattern_gives_the_same_byte_everywhere(source, cache_dtype):
    """All 65536 patterns, NaNs and infinities included, through each backend's conversion."""
    key = np.arange(1 << 16, dtype=np.uint16).view(source).reshape(256, 4, 64)
    cache_bytes(commit(key, cache_dtype))


@pytest.mark.parametrize("cache_dtype", sorted(FP8))
def test_float32_near_every_rounding_boundary(cache_dtype):
    """Each fp8 midpoint and its float32 neighbours, per-token scales of one."""
    fmt = FP8[cache_dtype]
    mids = np.array([(fp8_value(c, fmt) + fp8_value(c + 1, fmt)) / 2 for c in range(fmt.max_code)], np.float32)
    values = np.concatenate([mids, np.nextafter(mids, np.float32(0)), np.nextafter(mids, np.float32(np.inf))])
    values = np.concatenate([values, -values])
    key = np.resize(values, 8 * 2 * (-(-len(values) // 16))).astype(np.float32).reshape(-1, 2, 8)
    cache_bytes(commit(key, cache_dtype, scale=np.ones(len(key), np.float32), layout="HND"))


def test_worked_example_by_hand():
    out = cache_bytes(commit_draft_worked())
    key, value = out["key_cache"].reshape(4, 2), out["value_cache"].reshape(4, 2)
    assert key[3].tolist() == [0x30, 0x7E]     # 0.53125 -> 0.5 (a tie, to even); 500 saturates to 448
    assert value[3].tolist() == [0xA8, 0xF8]   # -0.265625 -> -0.25 (a tie, to even); -250 -> -256
    assert (key[:3] == POISON_A).all() and (value[:3] == POISON_A).all()   # slot 0 is a rejected token's


def test_same_dtype_copies_nan_payloads():
    bits = np.array([0x7C01, 0xFE00, 0x8000, 0x3C00], np.uint16)
    key = bits.view(np.float16).reshape(2, 1, 2)
    out = cache_bytes(commit(key, "float16", layout="HND"))
    assert out["key_cache"].view(np.uint16)[0, 0, :2].tolist() == [[0x7C01, 0xFE00], [0x8000, 0x3C00]]


def test_nothing_written_leaves_the_caches_untouched():
    key = np.ones((3, 2, 4), np.float32)
    out = cache_bytes(commit(key, "float8_e5m2", accepted=[False, False, True], slots=[0, 1, -1]))
    assert (out["key_cache"] == POISON_A).all()


def test_rejected_tokens_may_share_a_written_slot():
    key = np.arange(24, dtype=np.float32).reshape(3, 2, 4)
    out = cache_bytes(commit(key, "float32", accepted=[False, True, False], slots=[1, 1, 1]))
    assert out["key_cache"].view(np.float32)[0, 1].tolist() == key[1].tolist()


@pytest.mark.parametrize("target", targets(), ids=lambda t: f"{t.backend}-{t.device}")
def test_two_accepted_tokens_on_one_slot_are_refused(target):
    key = np.ones((2, 1, 1), np.float32)
    ex = commit(key, "float32", slots=[2, 2])
    ex.tier, ex.bad_field, ex.rule = "invalid", "slot_mapping", "no slot written twice"
    verify(target, ex)


def test_a_kernel_writing_rejected_tokens_is_caught():
    """A Torch kernel that ignores accepted_mask: the rejected token's slot gets written."""
    key = np.arange(8, dtype=np.float32).reshape(2, 1, 4)
    ex = commit(key, "float8_e4m3fn", accepted=[True, False], slots=[0, 1])
    torch_target = backends.target(STAGE, "torch", "cpu")

    def ignores_mask(**kw):
        kw["accepted_mask"] = kw["accepted_mask"] | True
        return torch_target.load()(**kw)

    with pytest.raises(Failure, match="stray write"):
        verify(Target(STAGE, BACKENDS["impl"], "cpu", "test", ignores_mask), ex)


def test_a_planted_per_tensor_read_of_per_token_scales_is_caught_and_shrunk(tmp_path, capsys):
    """tests/planted_tree_kv.py: every token's fp8 scale read at token 0. The ci budget on seed 0 catches it
    within a few draws (the old strategy's per-token scales were mostly constant: it first failed at 95)."""
    valid, shrunk = caught(tmp_path, capsys, "kv.commit_draft", "tests.planted_tree_kv:commit_draft_first_scale",
                           within=10)
    scales = [x for x in (shrunk.inputs["k_scale"], shrunk.inputs["v_scale"]) if x is not None and len(x) > 1]
    assert any(len(set(x.tolist())) > 1 for x in scales), valid["headline"]


def test_a_read_past_an_input_that_only_the_second_guard_pattern_shows_is_caught_at_the_ci_budget(tmp_path, capsys):
    """tests/planted_tree_kv.py: a length read one element past `end_offset` (negative under the first guard
    pattern, positive under the second). The ci profile runs the first of every four examples with both
    patterns (`Profile.guard_every`), so the first example catches it, and the input is named."""
    valid, _ = caught(tmp_path, capsys, "kv.assign_req_to_token", "tests.planted_tree_kv:assign_reads_past_end_offsets",
                      within=1)
    assert "read outside input `end_offset`: the call failed (raised IndexError" in valid["headline"], valid


# ---------------------------------------------------------------- kv.accept_out_cache_loc

ACCEPT = kv.ACCEPT_OUT_CACHE_LOC
ASSIGN = kv.ASSIGN_REQ_TO_TOKEN


def agreed(stage, example: Example) -> dict[str, np.ndarray]:
    """Every available backend must match the oracle on `example`; the oracle's outputs."""
    for target in targets(stage):
        verify(target, example)
    return oracle_outputs(stage, example)


def compaction(index, loc, dtype="int64") -> Example:
    index = np.asarray(index, np.int32)
    return Example("valid", inputs={"accept_index": index, "out_cache_loc": np.asarray(loc, dtype)},
                   outputs={"accepted_out_cache_loc": Buffer((index.size,), dtype)})


def poison_of(dtype) -> int:
    return int(np.full(1, POISON_A, np.uint8).repeat(np.dtype(dtype).itemsize).view(dtype)[0])


def test_accept_worked_example_by_hand():
    out = agreed(ACCEPT, accept_out_cache_loc_worked())["accepted_out_cache_loc"]
    assert out[:6].tolist() == [100, 103, 104, 106, 108, 109]
    assert out[6:].tolist() == [poison_of("int64")] * 6        # past the count: untouched


def test_accept_keeps_order_around_holes_and_falling_entries():
    out = agreed(ACCEPT, compaction([[-1, 5, -1, 2], [-1, -1, -1, -1], [0, -1, 1, -1]], np.arange(10, 16),
                                    "int32"))["accepted_out_cache_loc"]
    assert out[:4].tolist() == [15, 12, 10, 11] and (out[4:] == poison_of("int32")).all()


def test_accept_bonus_only_and_full_rows():
    out = agreed(ACCEPT, compaction([[0, -1, -1], [3, 4, 5], [6, -1, -1]], 2**40 + np.arange(9)))
    assert out["accepted_out_cache_loc"][:5].tolist() == [2**40 + i for i in (0, 3, 4, 5, 6)]


def test_accept_batches_past_one_block_of_the_running_count():
    """3 * 1031 entries (not a power of two, more than one 1024-entry block), -1s across block edges."""
    rng = np.random.default_rng(7)
    index = np.arange(3 * 1031, dtype=np.int32).reshape(1031, 3)
    index[rng.random(index.shape) < 0.4] = -1
    loc = rng.permutation(3 * 1031) + 7
    out = agreed(ACCEPT, compaction(index, loc))["accepted_out_cache_loc"]
    kept = index[index != -1]
    assert out[:len(kept)].tolist() == loc[kept].tolist() and (out[len(kept):] == poison_of("int64")).all()


@pytest.mark.parametrize("target", targets(ACCEPT), ids=lambda t: f"{t.backend}-{t.device}")
@pytest.mark.parametrize("index, size, dtype, field", [
    ([[0, -2, 1]], 3, "int64", "accept_index"),                 # below -1: a hole if counted and not written
    ([[0, 4, -1]], 3, "int64", "accept_index"),                 # >= L (L = 4)
    ([[0, 1, -1]], 5, "int64", "accepted_out_cache_loc"),       # B*N entries for a [B, S] array
    ([[0, 1, -1]], 3, "int32", "accepted_out_cache_loc"),       # not the dtype of out_cache_loc
])
def test_accept_refuses(target, index, size, dtype, field):
    ex = compaction(index, [1, 2, 3, 4])
    ex.outputs = {"accepted_out_cache_loc": Buffer((size,), dtype)}
    ex.tier, ex.bad_field, ex.rule = "invalid", field, "a rule of the record"
    verify(target, ex)


def test_accept_rows_table_shows_an_invalid_entry_instead_of_failing():
    """A report of an invalid-tier case renders its rows: entries outside [0, L) show as "?"."""
    ex = compaction([[0, -2, 4, 1]], [7, 8, 9, 10])
    assert ACCEPT.rows(ex)[1] == [[0, "[0, -2, 4, 1]", "[7, '?', '?', 8]"]]


def test_a_kernel_writing_past_the_count_is_caught():
    torch_target = backends.target(ACCEPT, "torch", "cpu")

    def writes_the_tail(**kw):
        torch_target.load()(**kw)
        kept = int((kw["accept_index"] != -1).sum())
        kw["accepted_out_cache_loc"][kept:] = 0

    with pytest.raises(Failure, match="stray write"):
        verify(Target(ACCEPT, BACKENDS["impl"], "cpu", "test", writes_the_tail), accept_out_cache_loc_worked())


# ---------------------------------------------------------------- kv.assign_req_to_token

def assignment(rows, starts, ends, loc, table_shape, layout=None) -> Example:
    return Example("valid", inputs={
        "req_pool_indices": np.asarray(rows, np.int32), "start_offset": np.asarray(starts, np.int64),
        "end_offset": np.asarray(ends, np.int64), "out_cache_loc": np.asarray(loc, np.int64),
        "req_to_token": np.arange(np.prod(table_shape), dtype=np.int32).reshape(table_shape) + 1000},
        layouts={} if layout is None else {"req_to_token": layout})


def test_assign_worked_example_by_hand():
    table = agreed(ASSIGN, assign_req_to_token_worked())["req_to_token"]
    want = np.zeros((4, 8), np.int32)
    want[2, 3:6], want[0, 0:2] = [50, 51, 52], [60, 61]
    assert table.tolist() == want.tolist()


def test_assign_range_ending_at_l_stays_in_its_row_of_a_strided_table():
    """Row 1 written to its last column, in a table whose rows lie 11 elements apart: row 2 and the
    gaps keep their values (and guard bytes)."""
    ex = assignment([1], [5], [8], [70, 71, 72], (3, 8), Layout((1, 1), (0, 3)))
    table = agreed(ASSIGN, ex)["req_to_token"]
    before = ex.inputs["req_to_token"]
    assert table[1, 5:].tolist() == [70, 71, 72] and table[2].tolist() == before[2].tolist()


def test_assign_one_row_twice_in_disjoint_ranges_and_empty_rows():
    ex = assignment([0, 1, 0, 1], [4, 2, 0, 2], [6, 2, 2, 2], [10, 11, 12, 13], (2, 6))
    table = agreed(ASSIGN, ex)["req_to_token"]
    assert table[0].tolist() == [12, 13, 1002, 1003, 10, 11] and table[1].tolist() == list(range(1006, 1012))


def test_assign_never_reads_past_the_sum_of_lengths():
    """The tail holds slots no table could take (2**31 and more, negative): not refused, not written."""
    table = agreed(ASSIGN, assignment([0], [0], [2], [5, 6, 2**31, -9, 2**40], (1, 4)))["req_to_token"]
    assert table[0].tolist() == [5, 6, 1002, 1003]


def test_assign_many_requests_long_ranges_and_slots_near_int32():
    """17 requests (more than one program's 16) with lengths up to 70 (past 32 and past a 64-wide step),
    unsorted rows, slots up to 2**31 - 1."""
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 71, 17)
    lengths[[2, 16]] = 70
    starts = rng.integers(0, 71 - lengths)
    total = int(lengths.sum())
    loc = 2**31 - 1 - rng.choice(10 * total, total, replace=False)
    ex = assignment(rng.permutation(20)[:17], starts, starts + lengths, loc, (20, 70))
    table = agreed(ASSIGN, ex)["req_to_token"]
    assert table[ex.inputs["req_pool_indices"][16], starts[16]:].tolist() == loc[-70:].tolist()


@pytest.mark.parametrize("target", targets(ASSIGN), ids=lambda t: f"{t.backend}-{t.device}")
@pytest.mark.parametrize("rows, starts, ends, loc, field", [
    ([0, 0], [0, 1], [2, 3], [1, 2, 3, 4], "req_pool_indices"),   # overlapping ranges on one row
    ([0, 2], [0, 0], [1, 1], [1, 2], "req_pool_indices"),         # a row past P = 2
    ([0], [-1], [1], [1, 2], "start_offset"),
    ([0], [3], [2], [1], "start_offset"),                        # end < start
    ([0], [3], [5], [1, 2], "end_offset"),                       # end > L = 4
    ([0], [0], [2], [1, 2**31], "out_cache_loc"),                # a slot that int32 cannot hold
    ([0], [0], [3], [1, 2], "out_cache_loc"),                    # fewer slots than the ranges take
])
def test_assign_refuses(target, rows, starts, ends, loc, field):
    ex = assignment(rows, starts, ends, loc, (2, 4))
    ex.tier, ex.bad_field, ex.rule = "invalid", field, "a rule of the record"
    verify(target, ex)


def test_a_kernel_with_o_b_off_by_one_is_caught():
    torch_target = backends.target(ASSIGN, "torch", "cpu")

    def shifted(**kw):
        kw["out_cache_loc"] = kw["out_cache_loc"][1:] if len(kw["out_cache_loc"]) > 5 else kw["out_cache_loc"]
        torch_target.load()(**kw)

    with pytest.raises(Failure, match="differs|req_to_token"):
        verify(Target(ASSIGN, BACKENDS["impl"], "cpu", "test", shifted),
               assignment([1, 0], [0, 0], [2, 3], [1, 2, 3, 4, 5, 6, 7], (2, 4)))

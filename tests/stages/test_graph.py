"""Fixed examples of the `graph` family: hand-computed outputs checked on the oracle and then on every
backend that runs here; over-capacity batches refused everywhere; the uniform fast path of step_context
gives the general path's bytes; the context-parallel shares of dsa lengths add up to the causal length."""
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings

from specverify.judge.harness import oracle_outputs
from specverify.records import backends
from specverify.records.stage import Buffer, DrawContext, Example, Layout
from specverify.records.values import POISON_A
from specverify.runs.session import verify_example as verify
from specverify.stages import graph
from specverify.strategies import graph as strategies

i32, i64 = np.int32, np.int64
UNTOUCHED_I64 = np.full(8, POISON_A, np.uint8).view(np.int64)[0]


def targets(stage):
    return [backends.target(stage, b, d) for _, b, d, why in backends.matrix([stage]) if why is None]


def outputs_everywhere(stage, example: Example) -> dict[str, np.ndarray]:
    """The oracle's outputs (views); every available backend must match them byte for byte."""
    for target in targets(stage):
        verify(target, example)
    return oracle_outputs(stage, example)


# ---------------------------------------------------------------- graph.fill_common_inputs

def test_fill_worked_example():
    out = outputs_everywhere(graph.FILL_COMMON_INPUTS, graph.FILL_COMMON_INPUTS.worked())
    assert out["graph_input_ids"].tolist() == [11, 12, 21, 22, 94, 95, 96, 97]
    assert out["graph_position_ids"][:4].tolist() == [5, 6, 9, 10]
    assert (out["graph_position_ids"][4:] == UNTOUCHED_I64).all()
    assert out["graph_block_offsets"].tolist() == [[3, 4, 0], [7, 8, 0], [0, 0, 0], [0, 0, 0]]
    assert out["graph_qkv_lens"].tolist() == [[0, 2, 0, 0], [2, 2, 2, 2], [7, 11, 2, 2]]
    assert out["graph_cu_seqlens"].tolist() == [[0, 2, 4, 6, 8], [0, 7, 18, 20, 22]]


def test_fill_full_capacity_with_a_sliced_int64_table():
    # a draft step (1 token per request) that fills the graph exactly; the block table is every other
    # column of a wider int64 table, the largest block id narrowed to the graph's int32
    table = np.array([[5, 2**31 - 1], [0, 9]], i64)
    ex = Example("valid",
                 inputs={"input_ids": np.array([7, 8], i64), "position_ids": np.array([40, 3], i64),
                         "block_offsets": table, "q_start_loc": np.array([0, 1], i64),
                         "q_seqlens": np.array([1, 1], i64), "kv_seqlens": np.array([41, 4], i64),
                         "pad_ids": np.array([1, 2], i64), "pad_query_len": 1},
                 outputs={"graph_input_ids": Buffer((2,), "int64"), "graph_position_ids": Buffer((2,), "int64"),
                          "graph_block_offsets": Buffer((2, 2), "int32"), "graph_qkv_lens": Buffer((3, 2), "int32"),
                          "graph_cu_seqlens": Buffer((2, 3), "int32")},
                 layouts={"block_offsets": Layout((1, 2), (0, 1)), "q_seqlens": Layout((3,), (0,))})
    out = outputs_everywhere(graph.FILL_COMMON_INPUTS, ex)
    assert out["graph_input_ids"].tolist() == [7, 8]
    assert out["graph_block_offsets"].tolist() == [[5, 2**31 - 1], [0, 9]]
    assert out["graph_cu_seqlens"].tolist() == [[0, 1, 2], [0, 41, 45]]


@pytest.mark.parametrize("rule", ["B <= MB", "NB <= MNB", "N <= MT"])
def test_fill_over_capacity_is_refused_by_every_backend(rule):
    found = {ex.rule: ex for ex in strategies.fill_over_capacity(graph.FILL_COMMON_INPUTS.worked())}
    for target in targets(graph.FILL_COMMON_INPUTS):
        verify(target, found[rule])   # a ValueError naming the field, never a cut batch


# ---------------------------------------------------------------- graph.step_context

def test_step_context_worked_example():
    out = outputs_everywhere(graph.STEP_CONTEXT, graph.STEP_CONTEXT.worked())
    assert out["q_start_loc"].tolist() == [0, 2, 3]
    assert out["kv_seqlens"].tolist() == [5, 8, 3]
    assert out["position_ids"].tolist() == [5, 6, 7, 0, 1, 2]
    assert out["cu_seqlens"].tolist() == [[0, 2, 3, 6], [0, 5, 13, 16]]


@pytest.mark.parametrize("uniform", [False, True])
def test_step_context_both_paths_give_the_same_bytes(uniform):
    # three target-verify queries of K + 1 = 3 tokens, int64, one history past 2**31
    ex = Example("valid",
                 inputs={"q_seqlens": np.array([3, 3, 3], i64), "history_lengths": np.array([4, 2**31 + 1, 0], i64),
                         "num_ignored_history": np.array([1, 2**31, 0], i64), "uniform_layout": uniform},
                 outputs={"q_start_loc": Buffer((3,), "int64"), "kv_seqlens": Buffer((3,), "int64"),
                          "position_ids": Buffer((9,), "int64"), "cu_seqlens": Buffer((2, 4), "int32")})
    out = outputs_everywhere(graph.STEP_CONTEXT, ex)
    assert out["q_start_loc"].tolist() == [0, 3, 6]
    assert out["kv_seqlens"].tolist() == [6, 4, 3]
    assert out["position_ids"].tolist() == [4, 5, 6, 2**31 + 1, 2**31 + 2, 2**31 + 3, 0, 1, 2]
    assert out["cu_seqlens"].tolist() == [[0, 3, 6, 9], [0, 6, 10, 13]]


@pytest.mark.parametrize("uniform", [False, True])
def test_step_context_int32_positions_past_int32(uniform):
    """int32 inputs at the top of int32 (a window ignores nearly all history): the positions pass 2**31 and
    go out as int64. The Torch kernel's general path once summed them in int32 and wrapped."""
    i32 = np.int32
    ex = Example("valid",
                 inputs={"q_seqlens": np.array([2, 2], i32), "history_lengths": np.array([2**31 - 1, 2**31 - 2], i32),
                         "num_ignored_history": np.array([2**31 - 3, 2**31 - 2], i32), "uniform_layout": uniform},
                 outputs={"q_start_loc": Buffer((2,), "int32"), "kv_seqlens": Buffer((2,), "int32"),
                          "position_ids": Buffer((4,), "int64"), "cu_seqlens": Buffer((2, 3), "int32")})
    out = outputs_everywhere(graph.STEP_CONTEXT, ex)
    assert out["position_ids"].tolist() == [2**31 - 1, 2**31, 2**31 - 2, 2**31 - 1]
    assert out["kv_seqlens"].tolist() == [4, 2]


def test_step_context_refuses_the_uniform_flag_on_ragged_queries():
    ex = replace(graph.STEP_CONTEXT.worked(), tier="invalid", bad_field="uniform_layout", rule="every q equal",
                 inputs={**graph.STEP_CONTEXT.worked().inputs, "uniform_layout": True})
    for target in targets(graph.STEP_CONTEXT):
        verify(target, ex)


@settings(max_examples=30, deadline=None, database=None)
@given(strategies.step_context_valid(DrawContext(small=True)))
def test_step_context_flag_never_changes_the_oracle(ex):
    if not ex.inputs["uniform_layout"]:
        return
    general = replace(ex, inputs={**ex.inputs, "uniform_layout": False})
    fast = oracle_outputs(graph.STEP_CONTEXT, ex)
    slow = oracle_outputs(graph.STEP_CONTEXT, general)
    assert all(fast[k].tobytes() == v.tobytes() for k, v in slow.items())


# ---------------------------------------------------------------- graph.dsa_indexer_metadata

SHARES = {  # request 0: 3 tokens on kv 10 (visible 8, 9, 10); request 1: a decode token on kv 5
    (1, 0): [8, 9, 10, 5],
    (2, 0): [4, 5, 5, 3], (2, 1): [4, 4, 5, 2],
    (4, 0): [2, 3, 3, 2], (4, 1): [2, 2, 3, 1], (4, 2): [2, 2, 2, 1], (4, 3): [2, 2, 2, 1],
}


@pytest.mark.parametrize("dcp", sorted(SHARES), ids=lambda d: f"D{d[0]}r{d[1]}")
def test_dsa_worked_example_every_rank(dcp):
    out = outputs_everywhere(graph.DSA_INDEXER_METADATA, graph.dsa_indexer_metadata_worked(*dcp))
    assert out["indexer_kv_lens"][:4].tolist() == SHARES[dcp]
    assert out["expanded_block_table"][:4].tolist() == [[2, 5], [2, 5], [2, 5], [9, 0]]
    untouched = np.uint32(int.from_bytes(bytes([POISON_A]) * 4, "little")).view(np.int32)
    assert (out["indexer_kv_lens"][4:] == untouched).all() and (out["expanded_block_table"][4:] == untouched).all()


@pytest.mark.parametrize("size", [2, 4])
def test_dsa_rank_shares_add_up_to_the_causal_length(size):
    assert [sum(x) for x in zip(*(SHARES[size, r] for r in range(size)))] == SHARES[1, 0]


def test_dsa_single_token_decode_equals_kv_seqlens():
    kv = np.array([1, 17, 4096, 3], i64)
    ex = Example("valid",
                 inputs={"q_seqlens": np.ones(4, i32), "kv_seqlens": kv, "cu_q": np.arange(5, dtype=i32),
                         "block_offsets": np.arange(8, dtype=i32).reshape(4, 2), "N": 8, "dcp_size": 1,
                         "dcp_rank": 0},
                 outputs={"indexer_kv_lens": Buffer((8,), "int32"), "expanded_block_table": Buffer((8, 2), "int32")})
    out = outputs_everywhere(graph.DSA_INDEXER_METADATA, ex)
    assert out["indexer_kv_lens"][:4].tolist() == kv.tolist()


def test_dsa_hazard_kv_shorter_than_the_query_gives_zero_not_negative():
    ex = replace(graph.dsa_indexer_metadata_worked(2, 1), tier="hazard")
    ex.inputs.update(kv_seqlens=np.array([1, 0], i32))        # visible: -1, 0, 1 and 0
    assert oracle_outputs(graph.DSA_INDEXER_METADATA, ex)["indexer_kv_lens"][:4].tolist() == [0, 0, 0, 0]
    ex.inputs.update(dcp_rank=0)
    outputs = oracle_outputs(graph.DSA_INDEXER_METADATA, ex)
    assert outputs["indexer_kv_lens"][:4].tolist() == [0, 0, 1, 0]
    assert graph.DSA_INDEXER_METADATA.invariants(ex, outputs) == []
    for target in targets(graph.DSA_INDEXER_METADATA):
        verify(target, ex)


# ---------------------------------------------------------------- engine-sized shapes

def engine_examples(capture: int, rng: np.random.Generator) -> list[tuple]:
    """A target-verify step (K = 5) three requests short of a graph captured for `capture` requests,
    64 blocks per request: the fill, both step_context paths, and dsa on rank 1 of 2 over the padded rows."""
    batch, width, blocks = capture - 3, 6, 64
    q = np.full(batch, width, np.int64)
    history = rng.integers(0, 60 * 64, batch)
    table = rng.integers(0, 2**20, (batch, blocks)).astype(i32)
    tokens, rows = batch * width, capture * width
    positions = strategies.packed_positions(history, q)
    fill = Example("valid",
                   inputs={"input_ids": rng.integers(0, 151936, tokens), "position_ids": positions,
                           "block_offsets": table, "q_start_loc": np.arange(batch, dtype=i32) * width,
                           "q_seqlens": q.astype(i32), "kv_seqlens": (q + history).astype(i32),
                           "pad_ids": rng.integers(0, 151936, rows), "pad_query_len": width},
                   outputs={"graph_input_ids": Buffer((rows,), "int64"), "graph_position_ids": Buffer((rows,), "int64"),
                            "graph_block_offsets": Buffer((capture, blocks), "int32"),
                            "graph_qkv_lens": Buffer((3, capture), "int32"),
                            "graph_cu_seqlens": Buffer((2, capture + 1), "int32")})
    steps = [Example("valid",
                     inputs={"q_seqlens": q, "history_lengths": history, "num_ignored_history": history // 3,
                             "uniform_layout": uniform},
                     outputs={"q_start_loc": Buffer((batch,), "int64"), "kv_seqlens": Buffer((batch,), "int64"),
                              "position_ids": Buffer((tokens,), "int64"),
                              "cu_seqlens": Buffer((2, batch + 1), "int32")})
             for uniform in (True, False)]
    dsa = Example("valid",
                  inputs={"q_seqlens": q.astype(i32), "kv_seqlens": (q + history).astype(i32),
                          "cu_q": np.arange(batch + 1, dtype=i32) * width, "block_offsets": table, "N": rows,
                          "dcp_size": 2, "dcp_rank": 1},
                  outputs={"indexer_kv_lens": Buffer((rows,), "int32"),
                           "expanded_block_table": Buffer((rows, blocks), "int32")})
    return [(graph.FILL_COMMON_INPUTS, fill)] + [(graph.STEP_CONTEXT, s) for s in steps] + \
        [(graph.DSA_INDEXER_METADATA, dsa)]


@pytest.mark.parametrize("capture", [256, 512])
def test_engine_sized_shapes(capture):
    for stage, ex in engine_examples(capture, np.random.default_rng(capture)):
        outputs_everywhere(stage, ex)


@pytest.mark.parametrize("stage", [graph.FILL_COMMON_INPUTS, graph.DSA_INDEXER_METADATA], ids=lambda s: s.name)
@pytest.mark.parametrize("step", [1, 2])
def test_transposed_block_table(stage, step):
    """A block table handed over as the transpose of a [NB, B] allocation (column stride > row stride),
    with every other column too: the same outputs as the contiguous table on every backend."""
    ex = stage.worked()
    transposed = replace(ex, layouts={**ex.layouts, "block_offsets": Layout((step, 1), (0, 1), order=(1, 0))})
    strides = transposed.layouts["block_offsets"].strides(ex.inputs["block_offsets"].shape)
    assert strides[0] < strides[1]
    assert {k: v.tobytes() for k, v in outputs_everywhere(stage, transposed).items()} == {
        k: v.tobytes() for k, v in oracle_outputs(stage, ex).items()}

def test_past_one_block():
    """Shapes past the kernels' single-block fast paths: over 1024 requests (running sums carried across
    blocks), over 1024 blocks per request (column steps) and queries longer than the token tile."""
    rng = np.random.default_rng(7)
    batch, capture = 1030, 1100
    q = np.ones(batch, i64)
    q[[0, 700, 1029]] = [150, 0, 90]                 # long queries among decode tokens, one empty
    history = rng.integers(0, 2**20, batch)
    tokens = int(q.sum())
    fill = Example("valid",
                   inputs={"input_ids": rng.integers(0, 151936, tokens),
                           "position_ids": strategies.packed_positions(history, q),
                           "block_offsets": rng.integers(0, 2**31 - 1, (batch, 3)).astype(i32),
                           "q_start_loc": (np.cumsum(q) - q).astype(i32), "q_seqlens": q.astype(i32),
                           "kv_seqlens": (q + history).astype(i32), "pad_ids": rng.integers(0, 9, tokens + 5),
                           "pad_query_len": 3},
                   outputs={"graph_input_ids": Buffer((tokens + 5,), "int64"),
                            "graph_position_ids": Buffer((tokens + 5,), "int64"),
                            "graph_block_offsets": Buffer((capture, 4), "int32"),
                            "graph_qkv_lens": Buffer((3, capture), "int32"),
                            "graph_cu_seqlens": Buffer((2, capture + 1), "int32")})
    step = Example("valid",
                   inputs={"q_seqlens": q, "history_lengths": history + 2**31,
                           "num_ignored_history": history // 2 + 2**31,
                           "uniform_layout": False},
                   outputs={"q_start_loc": Buffer((batch,), "int64"), "kv_seqlens": Buffer((batch,), "int64"),
                            "position_ids": Buffer((tokens,), "int64"), "cu_seqlens": Buffer((2, batch + 1), "int32")})
    few = 3                                          # dsa: 3 requests of a wide table
    dsa = Example("valid",
                  inputs={"q_seqlens": q[:few].astype(i32), "kv_seqlens": (q + history)[:few].astype(i32),
                          "cu_q": np.concatenate([[0], np.cumsum(q[:few])]).astype(i32),
                          "block_offsets": rng.integers(0, 2**20, (few, 1100)).astype(i32), "N": 160,
                          "dcp_size": 2, "dcp_rank": 0},
                  outputs={"indexer_kv_lens": Buffer((160,), "int32"),
                           "expanded_block_table": Buffer((160, 1100), "int32")})
    for stage, ex in ((graph.FILL_COMMON_INPUTS, fill), (graph.STEP_CONTEXT, step), (graph.DSA_INDEXER_METADATA, dsa)):
        outputs_everywhere(stage, ex)

"""Stage records of the `graph` family (STAGES.md: graph.*): the per-step attention metadata and the
fused fill of a captured CUDA graph's input buffers.

Choices where STAGES.md is silent (full list in `specverify.oracles.graph`): capacities are the graph
buffers' shapes; PAD is `pad_query_len` for both the q and the kv row of a padding request; length
rows are int32 or int64 in and int32 in the graph; step_context's flag is `uniform_layout` (a promise
that every query has the same length, refused where values are checked when broken); dsa takes
kv < q as its hazard tier.
"""
from __future__ import annotations

import numpy as np

from specverify.records import bench_inputs as bench
from specverify.records.stage import BENCH_SPEC, Buffer, Example, Floor, I, O
from specverify.records.wiring import wired
from specverify.strategies import graph as draw

IDX = "int32|int64"
BLOCK = 64   # bench: tokens per KV block (the engines' paged caches of this family)


def verify_batch(batch: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """Bench: (query lengths K + 1, histories of 100 to 4000 tokens, blocks per request) of a
    target-verify step, int64."""
    q = np.full(batch, BENCH_SPEC + 1, np.int64)
    history = rng.integers(100, 4000, batch)
    return q, history, -(-(4000 + BENCH_SPEC + 1) // BLOCK)


def fill_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: a target-verify batch filling a graph captured for exactly B requests and B * (K + 1)
    tokens (PAD = K + 1), int32 length rows and block table (64 blocks of 64 tokens), int64 ids."""
    q, history, blocks = verify_batch(batch, rng)
    tokens = int(q.sum())
    positions = (history[:, None] + np.arange(BENCH_SPEC + 1)).reshape(-1)
    return Example("valid", inputs={
        "input_ids": bench.token_ids(rng, tokens, vocab, np.int64), "position_ids": positions,
        "block_offsets": rng.integers(0, 4096 * 64, (batch, blocks)).astype(np.int32),
        "q_start_loc": (np.cumsum(q) - q).astype(np.int32), "q_seqlens": q.astype(np.int32),
        "kv_seqlens": (q + history).astype(np.int32), "pad_ids": bench.token_ids(rng, tokens, vocab, np.int64),
        "pad_query_len": BENCH_SPEC + 1,
    }, outputs={"graph_input_ids": Buffer((tokens,), "int64"), "graph_position_ids": Buffer((tokens,), "int64"),
                "graph_block_offsets": Buffer((batch, blocks), "int32"), "graph_qkv_lens": Buffer((3, batch), "int32"),
                "graph_cu_seqlens": Buffer((2, batch + 1), "int32")})


def step_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: a target-verify step (K + 1 query tokens on 100 to 4000 history each, no sliding window),
    int32, the uniform fast path."""
    q, history, _ = verify_batch(batch, rng)
    return Example("valid", inputs={
        "q_seqlens": q.astype(np.int32), "history_lengths": history.astype(np.int32),
        "num_ignored_history": np.zeros(batch, np.int32), "uniform_layout": True,
    }, outputs={"q_start_loc": Buffer((batch,), "int32"), "kv_seqlens": Buffer((batch,), "int32"),
                "position_ids": Buffer((int(q.sum()),), "int64"), "cu_seqlens": Buffer((2, batch + 1), "int32")})


def dsa_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: a target-verify step (K + 1 query tokens on 100 to 4000 history each), N = sum(q), no
    context parallelism, int32, 64 blocks per request."""
    q, history, blocks = verify_batch(batch, rng)
    tokens = int(q.sum())
    return Example("valid", inputs={
        "q_seqlens": q.astype(np.int32), "kv_seqlens": (q + history).astype(np.int32),
        "cu_q": np.concatenate([[0], np.cumsum(q)]).astype(np.int32),
        "block_offsets": rng.integers(0, 4096 * 64, (batch, blocks)).astype(np.int32),
        "N": tokens, "dcp_size": 1, "dcp_rank": 0,
    }, outputs={"indexer_kv_lens": Buffer((tokens,), "int32"),
                "expanded_block_table": Buffer((tokens, blocks), "int32")})


def fill_common_inputs_worked() -> Example:
    """Two target-verify requests (K = 1) in a graph captured for 4 requests, 8 tokens, 3 blocks each."""
    return Example(
        tier="valid",
        inputs={"input_ids": np.array([11, 12, 21, 22], np.int64), "position_ids": np.array([5, 6, 9, 10], np.int64),
                "block_offsets": np.array([[3, 4], [7, 8]], np.int32),
                "q_start_loc": np.array([0, 2], np.int32), "q_seqlens": np.array([2, 2], np.int32),
                "kv_seqlens": np.array([7, 11], np.int32), "pad_ids": np.arange(90, 98, dtype=np.int64),
                "pad_query_len": 2},
        outputs=draw.buffers(graph_input_ids=((8,), "int64"), graph_position_ids=((8,), "int64"),
                        graph_block_offsets=((4, 3), "int32"), graph_qkv_lens=((3, 4), "int32"),
                        graph_cu_seqlens=((2, 5), "int32")),
    )


FILL_COMMON_INPUTS = wired(
    name="graph.fill_common_inputs",
    hazard=None, invariants=None,
    bounded={"pad_query_len": 0},
    doc="one fused copy of a real batch into the captured graph's buffers, padding everything past it",
    semantics=(
        "The engine replays a CUDA graph captured for MB requests, MT tokens and MNB blocks per request; "
        "each step the real batch (B requests, N tokens, NB blocks per request) is copied in and the rest "
        "is made harmless.\n"
        "- graph_input_ids: the N real ids, then pad_ids at the same index up to MT (every entry written).\n"
        "- graph_position_ids: the N real positions; the tail keeps whatever it held.\n"
        "- graph_block_offsets: each real request's NB block ids, 0 (the padding block) everywhere else.\n"
        "- graph_qkv_lens: rows q_start_loc, q_seqlens, kv_seqlens; a padding request gets 0, PAD, PAD "
        "with PAD = pad_query_len.\n"
        "- graph_cu_seqlens: 0, then the running sums of the q and the kv row over all MB requests.\n"
        "Capacities are the graph buffers' shapes; B > MB, NB > MNB or N > MT is refused, never cut. The "
        "queries must cover the N tokens, q_start_loc must be their exclusive running sum, and every value "
        "and running sum must fit the graph's int32; block ids lie in [0, 2**31 - 1]."),
    tiers={
        "valid": "engine capture sizes (1, 2, 4, ..., 256, then multiples of 256) and batches from empty to "
                 "exactly full; target-verify, draft and ragged queries; int32/int64 length rows and block "
                 "tables; sliced inputs; block ids up to 2**31 - 1 and kv sums up to the int32 limit.",
        "hazard": "none: every in-domain input has exactly defined output bytes, so the edges (empty batch, "
                  "full capacity, the int32 limits) are in the valid tier.",
        "invalid": "a batch, block row or token count one past capacity; negative lengths; queries that do "
                   "not cover the tokens; q_start_loc not their running sum; sums or PAD past int32; "
                   "negative or too large block ids.",
    },
    inputs=(
        I("input_ids", "int64", "N", strided=True, doc="the real batch's token ids"),
        I("position_ids", "int64", "N", strided=True, doc="the real batch's positions"),
        I("block_offsets", IDX, "B, NB", strided=True, doc="per request its KV block ids, in [0, 2**31 - 1]"),
        I("q_start_loc", IDX, "B", strided=True, doc="where each query starts: exclusive running sum of q"),
        I("q_seqlens", IDX, "B", strided=True, doc="query tokens per request; they sum to N"),
        I("kv_seqlens", IDX, "B", strided=True, doc="KV length per request"),
        I("pad_ids", "int64", "MT", strided=True, doc="padding-id noise: the graph's ids past N come from here"),
        I("pad_query_len", "int", doc="PAD: the q and kv length of a padding request, >= 0"),
    ),
    outputs=(
        O("graph_input_ids", "int64", "MT", doc="real ids, then pad_ids; MT is the token capacity"),
        O("graph_position_ids", "int64", "MT", doc="[:N] written, the tail untouched"),
        O("graph_block_offsets", "int32", "MB, MNB", doc="real rows copied, 0 elsewhere; sets MB and MNB"),
        O("graph_qkv_lens", "int32", "3, MB", doc="q_start_loc, q_seqlens, kv_seqlens; padding 0, PAD, PAD"),
        O("graph_cu_seqlens", "int32", "2, MB+1", doc="0, then running sums of the q and kv rows"),
    ),
    bench=fill_bench,
    launches={"triton": 1, "torch": 10},
    floors=(
        Floor("fill: batch = capacity", 10, "B = MB: no padding request", interpreted=True),
        Floor("fill: B < capacity", 8, "padding requests get 0, PAD, PAD and block row 0", interpreted=True),
        Floor("fill: B = 0", 5, "an empty batch: every request is padding", interpreted=True),
        Floor("fill: padding requests with PAD = 0", 4, "PAD = 0: padding adds nothing to the running sums"),
        Floor("fill: tokens = capacity", 8, "N = MT: no pad id", interpreted=True),
        Floor("fill: blocks per request = capacity", 15, "NB = MNB: no zero column", interpreted=True),
        Floor("fill: kv running sum near int32", 4, "every running sum must fit the graph's int32",
              interpreted=True),
        Floor("fill: block id 2**31 - 1", 8, "block ids lie in [0, 2**31 - 1]", interpreted=True),
        Floor("fill: strided inputs", 30, "every input is read through its strides", interpreted=True),
        Floor("fill: more than one token program", 2, "Triton: token tiles past the first", interpreted=True),
        Floor("fill: more than one block-table program", 2, "Triton: block-table tiles past the first",
              interpreted=True),
        Floor("dtype: q_seqlens int64", 10, "length rows int32 or int64 in, int32 in the graph"),
    ),
)


def step_context_worked() -> Example:
    """Three requests: a 2-token query on 5 history tokens of which a sliding window ignores 2, a
    decode step on 7, a 3-token first chunk."""
    return Example(
        tier="valid",
        inputs={"q_seqlens": np.array([2, 1, 3], np.int32), "history_lengths": np.array([5, 7, 0], np.int32),
                "num_ignored_history": np.array([2, 0, 0], np.int32), "uniform_layout": False},
        outputs=draw.buffers(q_start_loc=((3,), "int32"), kv_seqlens=((3,), "int32"), position_ids=((6,), "int64"),
                        cu_seqlens=((2, 4), "int32")),
    )


STEP_CONTEXT = wired(
    name="graph.step_context",
    hazard=None, invariants=None,
    dtype_follows={"history_lengths": "q_seqlens", "num_ignored_history": "q_seqlens", "q_start_loc": "q_seqlens", "kv_seqlens": "q_seqlens"},
    doc="per step: query starts, visible KV lengths, packed positions and the running sums of both",
    semantics=(
        "For each request b with a query of q tokens after h history tokens, of which a sliding window "
        "ignores g: q_start_loc[b] is the sum of the earlier queries, kv_seqlens[b] = q + h - g, and its "
        "tokens get positions h, h + 1, ..., h + q - 1, packed in request order. cu_seqlens holds 0 and the "
        "running sums of the queries (row 0) and the KV lengths (row 1). uniform_layout=True selects a fast "
        "path that takes the common query length from the shapes (N // B) and never reads q_seqlens; it "
        "must produce the same bytes as the general path, and is refused when the queries differ (where "
        "values are checked). The inputs share one dtype, which q_start_loc and kv_seqlens keep."),
    tiers={
        "valid": "decode (q = 1), target-verify (q = K + 1), ragged, one chunk of 9 to 80 tokens among decodes "
                 "and all-empty queries, the flag on and off for uniform batches; no, partial and complete "
                 "sliding windows; int64 histories past 2**31, and int32 histories at the top of int32 (a window "
                 "ignoring nearly all of them) whose positions pass it.",
        "hazard": "none: every in-domain input has exactly defined output bytes.",
        "invalid": "negative lengths; more history ignored than exists; a position buffer not sum(q) long; "
                   "kv sums past int32; the uniform flag on queries of different lengths.",
    },
    inputs=(
        I("q_seqlens", IDX, "B", strided=True, doc="query tokens per request, >= 0"),
        I("history_lengths", IDX, "B", strided=True, doc="tokens already in the cache; dtype of q_seqlens"),
        I("num_ignored_history", IDX, "B", strided=True, doc="history a sliding window drops, <= history"),
        I("uniform_layout", "bool", doc="every query has the same length: take the fast path"),
    ),
    outputs=(
        O("q_start_loc", IDX, "B", doc="exclusive running sum of q; dtype of q_seqlens"),
        O("kv_seqlens", IDX, "B", doc="q + history - ignored; dtype of q_seqlens"),
        O("position_ids", "int64", "sum(q)", doc="history + 0, 1, ..., per request, packed"),
        O("cu_seqlens", "int32", "2, B+1", doc="0, then running sums of q and of kv_seqlens"),
    ),
    bench=step_bench,
    launches={"triton": 1, "torch": 10},
    floors=(
        Floor("step: uniform=True, flag=True", 10, "the fast path: q from the shapes, q_seqlens not read",
              interpreted=True),
        Floor("step: uniform=True, flag=False", 10, "a uniform batch on the general path", interpreted=True),
        Floor("step: uniform=False, flag=False", 3, "ragged queries", interpreted=True),
        Floor("step: every query empty", 5, "all-empty queries: no position", interpreted=True),
        Floor("step: sliding window ignores some history", 8, "kv = q + h - g with 0 < g < h", interpreted=True),
        Floor("step: sliding window ignores all history", 5, "g = h: kv = q", interpreted=True),
        Floor("step: history beyond int32 (positions need int64)", 3, "int64 histories past 2**31",
              interpreted=True),
        Floor("step: int32 history at the top of int32 (positions past it need int64)", 1, "int32 inputs whose "
              "positions pass 2**31: a position summed in int32 wraps (our Torch kernel's general path did)",
              interpreted=True),
        Floor("layout: strided", 20, "inputs read through their strides", interpreted=True),
        Floor("dtype: q_seqlens int64", 15, "q_start_loc and kv_seqlens take its dtype"),
        Floor("queries: one longer than the token tile", 3, "Triton: a query written in more than one step",
              interpreted=True),
        Floor("batch: more than one program", 6, "Triton: programs past the first sum the requests before them",
              interpreted=True),
    ),
)


def dsa_indexer_metadata_worked(dcp_size: int = 1, dcp_rank: int = 0) -> Example:
    """Two requests: 3 query tokens (two drafts and the verified one) on a 10-token context, a decode
    token on 5; a buffer of 6 rows, the last 2 past the queries."""
    return Example(
        tier="valid",
        inputs={"q_seqlens": np.array([3, 1], np.int32), "kv_seqlens": np.array([10, 5], np.int32),
                "cu_q": np.array([0, 3, 4], np.int32), "block_offsets": np.array([[2, 5], [9, 0]], np.int32),
                "N": 6, "dcp_size": dcp_size, "dcp_rank": dcp_rank},
        outputs=draw.buffers(indexer_kv_lens=((6,), "int32"), expanded_block_table=((6, 2), "int32")),
    )


DSA_INDEXER_METADATA = wired(
    name="graph.dsa_indexer_metadata",
    doc="per query token: its causal KV length on this context-parallel rank, and its request's block row",
    semantics=(
        "Query token j of request b sits in row cu_q[b] + j and sees kv - q + j + 1 KV entries (the "
        "history and the query up to itself). With decode context parallelism the entries are dealt "
        "round-robin over dcp_size ranks, so rank r holds ceil((visible - r) / dcp_size) of them, never "
        "fewer than 0: indexer_kv_lens[row] = max((visible + dcp_size - 1 - r) // dcp_size, 0). The row "
        "of expanded_block_table is request b's block row. Rows at or past sum(q) (the graph's padding "
        "up to N) are left untouched. With dcp_size 1 and one token per request the lengths are "
        "kv_seqlens."),
    tiers={
        "valid": "decode, target-verify and ragged queries, one chunk of 9 to 80 tokens among decodes, on kv >= q; "
                 "dcp_size 1, 2, 4 (and 3, 8) with every rank; N exact, with spare rows, or a capture size; "
                 "1, 3, 4, 16, 17 or 64 blocks per table row; int32/int64 inputs, sliced.",
        "hazard": "kv shorter than q (an engine never passes it): tokens whose causal prefix is empty get 0, "
                  "never a negative length; block rows still copied; rows past the queries untouched.",
        "invalid": "negative lengths; kv past int32; cu_q not the running sum of q; queries longer than N; "
                   "N not the buffers' length; rank outside [0, dcp_size); dcp_size < 1; bad block ids.",
    },
    inputs=(
        I("q_seqlens", IDX, "B", strided=True, doc="query tokens per request"),
        I("kv_seqlens", IDX, "B", strided=True, doc="KV length per request, the query included"),
        I("cu_q", IDX, "B+1", strided=True, doc="exclusive running sum of q_seqlens"),
        I("block_offsets", IDX, "B, NB", strided=True, doc="per request its KV block ids"),
        I("N", "int", doc="rows of the outputs (>= sum(q))"),
        I("dcp_size", "int", doc="decode context parallel world size, >= 1"),
        I("dcp_rank", "int", doc="this rank, in [0, dcp_size)"),
    ),
    outputs=(
        O("indexer_kv_lens", "int32", "N", doc="per query token; rows past sum(q) untouched"),
        O("expanded_block_table", "int32", "N, NB", doc="the owner's block row; rows past sum(q) untouched"),
    ),
    bench=dsa_bench,
    launches={"triton": 1, "torch": 11},
    floors=(
        Floor("dsa: rows past the queries", 12, "rows at or past sum(q) are left untouched", interpreted=True),
        Floor("dsa: rank > 0", 10, "rank r holds ceil((visible - r) / dcp_size) entries", interpreted=True),
        Floor("dsa: a token with no entries on this rank", 3, "never fewer than 0 entries", interpreted=True),
        Floor("dsa: a block row wider than 1024 columns", 3, "Triton: a block row copied in more than one column step",
              interpreted=True),
        Floor("layout: strided", 20, "inputs sliced", interpreted=True),
        Floor("queries: one longer than the token tile", 4, "Triton: a query written in more than one step",
              interpreted=True),
        Floor("batch: more than one program", 6, "Triton: requests past one program's rows", interpreted=True),
        Floor("hazard: kv shorter than q", 10, "tokens with an empty causal prefix get 0, never a negative length",
              tier="hazard", interpreted=True),
        Floor("dsa: rows past the queries", 3, "rows past the queries untouched with kv < q too", tier="hazard"),
    ),
)

STAGES = (FILL_COMMON_INPUTS, STEP_CONTEXT, DSA_INDEXER_METADATA)

"""Stage records of the `kv` family (STAGES.md: kv.*): committing draft keys and values, and the KV
bookkeeping of tree verification (`kv.accept_out_cache_loc`, `kv.assign_req_to_token`).

Where STAGES.md is silent (see `specverify.oracles.kv`): the caches are destination buffers whose
defined region is the written slots only (the harness fills them beforehand; everything else must keep
that fill); two accepted tokens with the same slot are invalid input; fp8 NaN is always 0x7F; scales
are float32, [1] or [T] each, required for fp8 caches and never read for same-dtype ones.
"""
from __future__ import annotations

import numpy as np

from specverify.records import bench_inputs as bench
from specverify.records.stage import BENCH_SPEC, Buffer, Example, Floor, I, O
from specverify.records.wiring import wired
from specverify.records.values import np_dtype

SOURCE = "float16|bfloat16|float32"
CACHE = "float16|bfloat16|float32|float8_e4m3fn|float8_e5m2"


def commit_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: K draft tokens per request, 8 KV heads of 128 (bf16), accepted prefixes (0.7 per draft),
    each token on its own slot of an NHD bf16 cache of 16-token blocks holding twice the tokens."""
    tokens, heads, width, block = batch * BENCH_SPEC, 8, 128, 16
    blocks = -(-2 * tokens // block)
    accepted = bench.accepted_counts(rng, batch, BENCH_SPEC)
    source = rng.standard_normal((2, tokens, heads, width), np.float32).astype(np_dtype("bfloat16"))
    return Example("valid", inputs={
        "key": source[0], "value": source[1], "slot_mapping": rng.permutation(blocks * block)[:tokens],
        "accepted_mask": (np.arange(BENCH_SPEC)[None, :] < accepted[:, None]).reshape(-1), "layout": "NHD",
        "k_scale": None, "v_scale": None,
    }, outputs={name: Buffer((blocks, block, heads, width), "bfloat16") for name in ("key_cache", "value_cache")})


def commit_draft_worked() -> Example:
    """Three draft tokens, one head of width 2, an e4m3 cache of 2 blocks of 2 slots (NHD): token 0 is
    written to slot 3, token 1 is rejected, token 2 has no slot. 0.53125 lies halfway between 0.5 and
    0.5625 and rounds to the even 0.5; 500 / 1 saturates to 448; the values are divided by 2."""
    key = np.array([[[0.53125, 500.0]], [[1.0, 2.0]], [[3.0, 4.0]]], np.float32)
    return Example(
        tier="valid",
        inputs={"key": key, "value": -key, "slot_mapping": np.array([3, 0, -1], np.int64),
                "accepted_mask": np.array([True, False, True]), "layout": "NHD",
                "k_scale": np.array([1.0], np.float32), "v_scale": np.array([2.0], np.float32)},
        outputs={"key_cache": Buffer((2, 2, 1, 2), "float8_e4m3fn"),
                 "value_cache": Buffer((2, 2, 1, 2), "float8_e4m3fn")},
    )


COMMIT_FLOORS = (
    Floor("layout: NHD", 15, "caches [NB, BS, H, D]", interpreted=True),
    Floor("layout: HND", 12, "caches [NB, H, BS, D]", interpreted=True),
    Floor("cache: float8_e4m3fn", 6, "e4m3fn: saturation at 448, NaN 0x7F", interpreted=True),
    Floor("cache: float8_e5m2", 8, "e5m2: saturation at 57344", interpreted=True),
    Floor("cache: the source dtype", 10, "a copy of the source bits, the scales ignored"),
    Floor("values: fp8 edges", 4, "midpoints round to even; the largest value and beyond saturate",
          interpreted=True),
    Floor("values: subnormal", 10, "subnormal edges and signed zeros"),
    Floor("values: wide", 5, "a wide sweep of magnitudes"),
    Floor("scale: per token, differing over the written tokens", 3, "[T] scales: each token's own scale",
          interpreted=True),
    Floor("slots: an accepted token without a slot (-1)", 3, "slot -1 skips an accepted token", interpreted=True),
    Floor("unwritten tokens: collide", 6, "a rejected token on an accepted token's slot must not write it"),
    Floor("slots: last slot", 8, "the cache's last slot"),
    Floor("cache: no blocks (tokens, none written)", 3, "caches of no blocks: every token unwritten, nothing "
          "to address"),
    Floor("dtype: slot_mapping int32", 15, "int32 slot mappings"),
    Floor("tokens: more than 16 (several programs)", 3, "Triton programs of 16 tokens", interpreted=True),
    Floor("rows: more than 1024 elements (several programs)", 3, "Triton programs of 1024 row elements",
          interpreted=True),
    Floor("source: any", 12, "strided sources"),
    Floor("cache: any", 8, "strided caches"),
    Floor("hazard: NaN and infinite sources", 20, "NaN becomes 0x7F, infinities saturate", tier="hazard",
          interpreted=True),
    Floor("hazard: a zero, negative, infinite, NaN or subnormal scale", 4, "scales of 0, -0, inf, NaN, -2, "
          "subnormal", tier="hazard", interpreted=True),
)

COMMIT_DRAFT = wired(
    name="kv.commit_draft",
    presence_follows=("k_scale", "v_scale"),   # given exactly when the cache is fp8
    doc="write the accepted draft tokens' keys and values into the paged cache (copied, or fp8 by scale)",
    inputs=(
        I("key", SOURCE, "T, H, D", strided=True, doc="keys of the draft tokens"),
        I("value", SOURCE, "T, H, D", strided=True, doc="their values, dtype of key"),
        I("slot_mapping", "int32|int64", "T", doc="block * block_size + offset of each token, -1: no slot"),
        I("accepted_mask", "bool", "T", doc="which tokens were accepted"),
        I("layout", "str", doc="'NHD': caches [NB, BS, H, D]; 'HND': caches [NB, H, BS, D]"),
        I("k_scale", "float32", "Sk", optional=True, doc="[1] (per tensor) or [T] (per token); fp8 caches only"),
        I("v_scale", "float32", "Sv", optional=True, doc="[1] or [T], as k_scale"),
    ),
    outputs=(
        O("key_cache", CACHE, "NB, BS, H, D", strided=True,
          doc="dtype of key or fp8; shape by layout; only the written slots are defined"),
        O("value_cache", CACHE, "NB, BS, H, D", strided=True, doc="dtype and shape of key_cache"),
    ),
    launches={"triton": 1, "torch": 18},   # 9 for slot rows of the key dtype; fp8 4, a strided slot index 1 to 5
    semantics=(
        "A token is written when it is accepted and its slot is not -1. Its slot names a block "
        "(slot // block_size) and an offset in it (slot % block_size); its [H, D] key goes to "
        "key_cache[block, offset] in NHD or key_cache[block, :, offset] in HND, its value likewise. A cache "
        "of the source dtype receives the source bits unchanged. An fp8 cache receives source / scale, "
        "divided in float32 with IEEE rounding (the token's own scale for [T] scales), rounded to the "
        "nearest fp8 value with ties to the even one; a finite quotient beyond the largest finite value "
        "(448 for e4m3fn, 57344 for e5m2) and an infinite one become that value with their sign; NaN "
        "becomes 0x7F; zeros keep their sign. Nothing else in either cache is written. Two accepted tokens "
        "may not share a slot."
    ),
    tiers={
        "valid": "f16, bf16 and f32 sources into same-dtype, e4m3fn and e5m2 caches in both layouts, strided "
                 "sources and caches; values at fp8 midpoints, the largest value and beyond, subnormal edges, "
                 "signed zeros and a wide sweep; per-tensor and per-token scales (one, powers of two, random, "
                 "tiny); accepted prefixes, slot runs, scattered slots and the last slot; rejected tokens "
                 "pointing at accepted tokens' slots.",
        "hazard": "NaN (either sign, any payload) and infinite sources; scales of 0, -0, inf, NaN, -2 and "
                  "subnormal; checked element by element against the contract, the rest of each cache "
                  "untouched.",
        "invalid": "A slot beyond the cache or below -1, two accepted tokens on one slot, an unknown layout, "
                   "a cache shaped for the other layout or of another source dtype, an fp8 cache without a "
                   "scale, a scale neither [1] nor [T].",
    },
    bench=commit_bench,
    floors=COMMIT_FLOORS,
)


# ---------------------------------------------------------------- kv.accept_out_cache_loc

TREE_NODES = 8   # nodes per request's draft tree in the benchmark inputs


def accept_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: trees of 8 nodes per request, S = K + 1 columns; each row the root and an accepted path
    (0.7 per draft), then -1; every node's slot distinct (int64)."""
    width = BENCH_SPEC + 1
    counts = bench.accepted_counts(rng, batch, BENCH_SPEC) + 1
    index = np.full((batch, width), -1, np.int32)
    for b, count in enumerate(counts):
        path = np.sort(rng.choice(np.arange(1, TREE_NODES), count - 1, replace=False))
        index[b, :count] = b * TREE_NODES + np.concatenate([[0], path])
    return Example("valid", inputs={
        "accept_index": index, "out_cache_loc": rng.permutation(4 * batch * TREE_NODES)[:batch * TREE_NODES]},
        outputs={"accepted_out_cache_loc": Buffer((batch * width,), "int64")})


def accept_out_cache_loc_worked() -> Example:
    """Three requests of four nodes (flat slots b*4 + i), S = 4: row 0 keeps nodes 0, 3 and 4, row 1 only
    its bonus, row 2 two nodes; six of the twelve entries are written."""
    return Example("valid", inputs={
        "accept_index": np.array([[0, 3, 4, -1], [6, -1, -1, -1], [8, 9, -1, -1]], np.int32),
        "out_cache_loc": np.arange(100, 112, dtype=np.int64)},
        outputs={"accepted_out_cache_loc": Buffer((12,), "int64")})


ACCEPT_FLOORS = (
    Floor("accept_index: engine", 5, "engine rows: the root, a rising path, then -1"),
    Floor("accept_index: bonus only", 4, "TREES.md stress: bonus-only rows"),
    Floor("accept_index: all accepted", 1, "TREES.md stress: all rows fully accepted (one of five row kinds)",
          interpreted=True),
    Floor("accept_index: holes", 6, "order kept around a -1 mid-row", interpreted=True),
    Floor("accept_index: B*S not a power of two", 20, "the prefix count runs over a power-of-two lane width",
          interpreted=True),
    Floor("accept_index: more than 1024 entries (several programs)", 8, "past 1024 entries, Triton programs of "
          "256, each counting the kept entries before its own", interpreted=True),
    Floor("accept_index: more than 4352 entries (a program counts in several steps)", 4, "large B*S (PR #26866 "
          "class); the Triton count of the entries before a program goes 4096 at a time", interpreted=True),
    Floor("accept_index: S=0", 5, "S = 0: nothing written"),
    Floor("out_cache_loc: empty (every entry -1)", 3, "no slot at all: nothing to gather, nothing written"),
    Floor("dtype: out_cache_loc int32", 15, "int32 slots (SGLang's NPU path)"),
    Floor("slots: near 2**31", 8, "int32 slots near their top"),
    Floor("slots: near 2**40", 3, "int64 slots beyond int32"),
    Floor("layout: strided", 15, "strided accept_index"),
    Floor("accept_index: scrambled", 20, "any entries: repeated, falling, empty rows", tier="hazard"),
    Floor("slots: anywhere in the dtype", 20, "slots at the dtype's extremes", tier="hazard"),
)

ACCEPT_OUT_CACHE_LOC = wired(
    name="kv.accept_out_cache_loc",
    dtype_follows={"accepted_out_cache_loc": "out_cache_loc"},
    doc="the KV slots of the accepted tree nodes, compacted in order (the rest of the output untouched)",
    inputs=(
        I("accept_index", "int32", "B, S", strided=True,
          doc="per request, the flat node slots it accepted (root first), -1 for none; read row by row"),
        I("out_cache_loc", "int32|int64", "L", doc="the KV slot of each verified node, by flat node slot"),
    ),
    outputs=(O("accepted_out_cache_loc", "int32|int64", "B*S",
               doc="dtype of out_cache_loc; written: the first `count` entries (count = entries of "
                   "accept_index that are not -1)"),),
    semantics=(
        "Read accept_index in row-major order (request by request, left to right) and skip every -1; "
        "the k-th entry e that remains gives accepted_out_cache_loc[k] = out_cache_loc[e]. So the output "
        "holds the accepted nodes' slots packed to the front, their order kept even where a -1 sits "
        "between two entries of a row. Entries from the count on are not written (the engine reads only "
        "the count, the sum of accepted drafts plus one per request). Invalid: an entry below -1 (an "
        "engine that counts by `!= -1` but writes by `> -1` leaves a hole there), an entry >= L, and an "
        "output of any size but B*S."
    ),
    tiers={
        "valid": "Engine rows (the root, a rising path, then -1), bonus-only rows, fully accepted rows, "
                 "rows with -1 between entries; S from 0 to 8, B up to 256 and batches of more than 1024 "
                 "entries with B*S not a power of two; int32 and int64 slots (low, near 2^31, beyond "
                 "int32); strided accept_index.",
        "hazard": "Scrambled rows: any entries, repeated and falling, empty rows; slots anywhere in their "
                  "dtype, its extremes included. Checked: the packed prefix, the rest untouched.",
        "invalid": "An entry of -2 or -5, an entry equal to L, an output of B*(S+2) entries or of the "
                   "other index dtype.",
    },
    bench=accept_bench,
    floors=ACCEPT_FLOORS,
    launches={"triton": 1, "torch": 10},
)


# ---------------------------------------------------------------- kv.assign_req_to_token

def assign_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: a pool of 2B rows of 4096 tokens; each request writes its accepted tokens plus one (0.7
    per draft) after a prefix of 100 to 4000 tokens, into distinct rows in random order; out_cache_loc
    holds B*(K+1) slots, the unused tail garbage."""
    width = 4096
    lengths = bench.accepted_counts(rng, batch, BENCH_SPEC) + 1
    start = rng.integers(100, 4000, batch)
    slots = rng.permutation(8 * batch * (BENCH_SPEC + 1))[:batch * (BENCH_SPEC + 1)]
    return Example("valid", inputs={
        "req_pool_indices": rng.permutation(2 * batch)[:batch].astype(np.int64), "start_offset": start,
        "end_offset": start + lengths, "out_cache_loc": slots,
        "req_to_token": rng.integers(0, 2**31, (2 * batch, width)).astype(np.int32)})


def assign_req_to_token_worked() -> Example:
    """A pool of 4 rows of 8: request 0 writes row 2, columns 3..5; request 1 row 0, columns 0..1."""
    return Example("valid", inputs={
        "req_pool_indices": np.array([2, 0], np.int64), "start_offset": np.array([3, 0], np.int64),
        "end_offset": np.array([6, 2], np.int64), "out_cache_loc": np.array([50, 51, 52, 60, 61], np.int64),
        "req_to_token": np.zeros((4, 8), np.int32)})


ASSIGN_FLOORS = (
    Floor("batch: B not a power of two", 15, "SGLang sums the prefix over next_pow2(B) lanes", interpreted=True),
    Floor("batch: more than 4 requests (several programs)", 10, "Triton programs of 4 requests",
          interpreted=True),
    Floor("batch: more than 1024 requests (a program sums the lengths before it in several steps)", 3,
          "Triton: the lengths of the requests before a program summed 1024 at a time", interpreted=True),
    Floor("ranges: length 0", 20, "length-0 rows write nothing but count"),
    Floor("ranges: longer than 32", 12, "the kernel loops over 32-wide blocks", interpreted=True),
    Floor("ranges: longer than the Triton tile (several steps of a program)", 3, "the Triton tile is about "
          "the mean length wide (8 to 64 slots): a longer range takes several steps", interpreted=True),
    Floor("ranges: one ends at L", 25, "a range ending exactly at L (bugs #8, #9, #11: spills into the next row)",
          interpreted=True),
    Floor("rows: shared, disjoint ranges", 8, "one row twice with disjoint ranges is valid"),
    Floor("rows: distinct, unsorted", 20, "unsorted req_pool_indices"),
    Floor("dtype: req_pool_indices int32", 12, "int32 row indices"),
    Floor("dtype: req_pool_indices int64", 10, "int64 row indices"),
    Floor("out_cache_loc: a tail past the sum of lengths", 15, "the garbage tail is never read"),
    Floor("slots: near 2**31", 10, "slots near 2**31 stored as int32"),
    Floor("req_to_token: transposed", 6, "a transposed table", interpreted=True),
    Floor("req_to_token: no columns (every range empty, slots in out_cache_loc)", 3, "L = 0: nothing to write, "
          "out_cache_loc's slots never read"),
    Floor("layout: row stride > row length", 20, "row-strided tables"),
    Floor("ranges: longer than 32", 3, "slots 0 and 2**31 - 1 over long ranges", tier="hazard"),
)

ASSIGN_REQ_TO_TOKEN = wired(
    name="kv.assign_req_to_token",
    doc="write each request's new KV slots into its row of the request-to-token pool table",
    inputs=(
        I("req_pool_indices", "int32|int64", "B", doc="the table row of each request, in [0, P)"),
        I("start_offset", "int64", "B", doc="the first column each request writes, >= 0"),
        I("end_offset", "int64", "B", doc="one past the last column it writes, start_offset <= end <= L"),
        I("out_cache_loc", "int64", "N",
          doc="the new slots, request after request; N >= the sum of lengths, the rest never read"),
        I("req_to_token", "int32", "P, L", strided=True, inout=True,
          doc="the pool table: the ranges are written, every other element kept"),
    ),
    outputs=(),
    semantics=(
        "Request b writes len_b = end_offset[b] - start_offset[b] slots. Its slots start at o_b, the sum "
        "of the lengths of the requests before it, and req_to_token[req_pool_indices[b], start_offset[b] "
        "+ j] = out_cache_loc[o_b + j] for 0 <= j < len_b, the int64 slot stored as int32. No other "
        "table element is written, and out_cache_loc from the sum of all lengths on is not read. Two "
        "requests may share a table row when their ranges do not overlap. Invalid: start < 0, end < "
        "start, end > L, a row outside [0, P), overlapping ranges on one row, a slot taken outside "
        "[0, 2^31), out_cache_loc shorter than the sum of lengths."
    ),
    tiers={
        "valid": "B up to 128 (3, 5, 17, 33 under stress), distinct rows in random order or rows shared "
                 "by disjoint ranges, lengths of decode steps, above 32 and 0, ranges ending exactly at "
                 "L (1 to 70); slots low or near 2^31; a garbage tail after the slots (values past int32 "
                 "and negative); int32 and int64 row indices; row-strided and transposed tables.",
        "hazard": "The valid shapes with every slot 0 or 2^31 - 1. Checked: each range holds its slots, "
                  "everything else its old value.",
        "invalid": "start -1, start past end, end L + 1, a row of P or -1, a second range onto a written "
                   "one, a slot of 2^31, out_cache_loc one short.",
    },
    bench=assign_bench,
    floors=ASSIGN_FLOORS,
    launches={"triton": 1, "torch": 13},   # 12 when a stride divides the other
)

STAGES = (COMMIT_DRAFT, ACCEPT_OUT_CACHE_LOC, ASSIGN_REQ_TO_TOKEN)

"""Stage record of the `kv` family (STAGES.md: kv.*).

Where STAGES.md is silent (see `specverify.oracles.kv`): the caches are destination buffers whose
defined region is the written slots only (the harness fills them beforehand; everything else must keep
that fill); two accepted tokens with the same slot are invalid input; fp8 NaN is always 0x7F; scales
are float32, [1] or [T] each, required for fp8 caches and never read for same-dtype ones.
"""
from __future__ import annotations

import numpy as np

from specverify.bench import inputs as bench
from specverify.materialize import np_dtype
from specverify.oracles import kv as oracle
from specverify.stage import BENCH_SPEC, Buffer, Example, I, O, Stage, kernels
from specverify.strategies import kv as draw

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

COMMIT_DRAFT = Stage(
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
    oracle=oracle.commit_draft,
    valid=draw.commit_valid,
    hazard=draw.commit_hazard,
    invalid=draw.commit_invalid,
    invariants=draw.commit_invariants,
    rows=draw.commit_table,
    impls=kernels("kv", "commit_draft"),
    launches={"triton": 1, "torch": 27},
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
    worked=draw.commit_worked,
    bench=commit_bench,
)

STAGES = (COMMIT_DRAFT,)

"""Stage records of the `rejection` family (STAGES.md: rejection.*).

Where STAGES.md is silent, the oracles define (and every backend follows):
- an out-of-vocabulary draft (id >= V) is rejected by `random` and zeroes nothing in `recovered`
  without draft probs: its probabilities are never read;
- `recovered` and the argmax of `sample`: NaN never wins, +inf wins like any maximum, an all-NaN row
  gives 0, and max(p - q, 0) keeps a NaN (it does not become 0);
- `random` requires `is_greedy` (no None); `sample` needs its noise exactly when `is_greedy` is given;
- `expand` compares and writes after converting replace_from / replace_to to x's dtype.
"""
from __future__ import annotations

from specverify.oracles import rejection as oracle
from specverify.stage import I, O, Stage, kernels
from specverify.strategies import rejection as draw



GREEDY = Stage(
    name="rejection.greedy",
    doc="emit target argmaxes up to the first mismatching draft; the bonus after a fully accepted row",
    inputs=(
        I("draft_token_ids", "int32", "T"),
        I("target_argmax", "int64", "T"),
        I("bonus_token_ids", "int64", "B"),
        I("cu_num_draft_tokens", "int32", "B", doc="inclusive cumulative draft counts"),
        I("is_greedy", "bool", "B", optional=True, doc="None: every row greedy"),
        I("max_spec_len", "int"),
    ),
    outputs=(O("output_token_ids", "int32", "B, S+1", doc="only the emitted prefix of greedy rows"),),
    oracle=oracle.greedy,
    valid=draw.greedy_valid,
    invalid=draw.greedy_invalid,
    rows=draw.greedy_table,
    impls=kernels("rejection", "greedy"),
)

RANDOM = Stage(
    name="rejection.random",
    doc="rejection sampling of the non-greedy rows: accept while p/q >= u, the recovered token at the first reject",
    inputs=(
        I("draft_token_ids", "int32", "T"),
        I("bonus_token_ids", "int64", "B"),
        I("cu_num_draft_tokens", "int32", "B", doc="inclusive cumulative draft counts"),
        I("max_spec_len", "int"),
        I("draft_probs", "float32", "T, V", optional=True, doc="None: n-gram drafts (one-hot)"),
        I("target_probs", "float32", "T, V"),
        I("recovered_token_ids", "int32", "T", doc="from rejection.recovered"),
        I("uniform_probs", "float64", "T"),
        I("is_greedy", "bool", "B", doc="greedy rows are left untouched"),
    ),
    outputs=(O("output_token_ids", "int32", "B, S+1", doc="only the emitted prefix of non-greedy rows"),),
    oracle=oracle.random,
    valid=draw.random_valid,
    hazard=draw.random_hazard,
    invalid=draw.random_invalid,
    invariants=draw.random_invariants,
    rows=draw.random_table,
    impls=kernels("rejection", "random"),
)

RECOVERED = Stage(
    name="rejection.recovered",
    doc="per draft token: the lowest index maximizing residual * inv_q (the replacement for a rejected draft)",
    inputs=(
        I("cu_num_draft_tokens", "int32", "B", doc="inclusive cumulative draft counts"),
        I("draft_token_ids", "int32", "T"),
        I("draft_probs", "float32", "T, V", optional=True, doc="None: the draft's own id is zeroed"),
        I("target_probs", "float32", "T, V"),
        I("inv_q", "float32", "B, V", doc="reciprocal exponential noise, one row per request"),
    ),
    outputs=(O("recovered_token_ids", "int32", "T"),),
    oracle=oracle.recovered,
    valid=draw.recovered_valid,
    hazard=draw.recovered_hazard,
    invalid=draw.recovered_invalid,
    invariants=draw.recovered_invariants,
    rows=draw.recovered_table,
    impls=kernels("rejection", "recovered"),
)

EXPAND = Stage(
    name="rejection.expand",
    doc="broadcast a per-request value to the request's tokens, replacing one value",
    inputs=(
        I("x", "float32|int32|int64", "B"),
        I("cu_num_tokens", "int32", "B", doc="inclusive cumulative token counts"),
        I("num_tokens", "int"),
        I("replace_from", "int|float"),
        I("replace_to", "int|float"),
    ),
    outputs=(O("expanded", "float32|int32|int64", "T"),),
    oracle=oracle.expand,
    valid=draw.expand_valid,
    invalid=draw.expand_invalid,
    rows=draw.expand_table,
    impls=kernels("rejection", "expand"),
)

SAMPLE = Stage(
    name="rejection.sample",
    doc="the whole verification step: greedy rows against the argmax, the others by rejection sampling",
    inputs=(
        I("draft_token_ids", "int32", "T"),
        I("cu_num_draft_tokens", "int32", "B", doc="inclusive cumulative draft counts"),
        I("max_spec_len", "int"),
        I("draft_probs", "float32", "T, V", optional=True),
        I("target_probs", "float32", "T, V"),
        I("bonus_token_ids", "int64", "B"),
        I("is_greedy", "bool", "B", optional=True, doc="None: every row greedy, the noise is not read"),
        I("uniform_probs", "float64", "T", optional=True),
        I("inv_q", "float32", "B, V", optional=True),
    ),
    outputs=(O("output_token_ids", "int32", "B, S+1", doc="every slot: the emitted prefix, then -1"),),
    oracle=oracle.sample,
    valid=draw.sample_valid,
    hazard=draw.sample_hazard,
    invalid=draw.sample_invalid,
    invariants=draw.sample_invariants,
    rows=draw.sample_table,
    impls=kernels("rejection", "sample"),
)

PADDED_OUTPUTS = (
    O("output_token_ids", "int64", "B, K+1", strided=True, doc="the emitted prefix, then -1"),
    O("num_rejected_tokens", "int64", "B", strided=True, doc="K + 1 - emitted"),
    O("last_token_ids", "int64", "B", strided=True, doc="the last emitted token"),
)

GREEDY_PADDED = Stage(
    name="rejection.greedy_padded",
    doc="greedy verification on the padded [B, K] layout; greedy rows written in full",
    inputs=(
        I("draft_token_ids", "int64", "B, K", strided=True),
        I("target_argmax", "int64", "B, K", strided=True),
        I("bonus_token_ids", "int64", "B", strided=True),
        I("is_greedy", "bool", "B", optional=True, strided=True, doc="None: every row greedy"),
    ),
    outputs=PADDED_OUTPUTS,
    oracle=oracle.greedy_padded,
    valid=draw.greedy_padded_valid,
    invalid=draw.greedy_padded_invalid,
    rows=draw.padded_table,
    impls=kernels("rejection", "greedy_padded"),
)

SAMPLE_PADDED = Stage(
    name="rejection.sample_padded",
    doc="rejection.sample on the padded [B, K] layout; every row written in full",
    inputs=(
        I("draft_token_ids", "int64", "B, K", strided=True),
        I("draft_probs", "float32", "B, K, V", optional=True, strided=True),
        I("target_probs", "float32", "B, K, V", strided=True),
        I("bonus_token_ids", "int64", "B", strided=True),
        I("is_greedy", "bool", "B", optional=True, strided=True, doc="None: every row greedy, the noise is not read"),
        I("uniform_probs", "float64", "B, K", optional=True, strided=True),
        I("inv_q", "float32", "B, V", optional=True, strided=True),
    ),
    outputs=PADDED_OUTPUTS,
    oracle=oracle.sample_padded,
    valid=draw.sample_padded_valid,
    hazard=draw.sample_padded_hazard,
    invalid=draw.sample_padded_invalid,
    invariants=draw.sample_padded_invariants,
    rows=draw.padded_table,
    impls=kernels("rejection", "sample_padded"),
)

STAGES = (GREEDY, RANDOM, RECOVERED, EXPAND, SAMPLE, GREEDY_PADDED, SAMPLE_PADDED)

"""Stage records of the `scv` family (STAGES.md: scv.*).

Where STAGES.md is silent (see `specverify.oracles.scv`): a -1 draft is never accepted; ids compare at
full width; token arrays may run past the batch's drafts (CUDA-graph padding), where the mask is
False. `adaptive_k` is a host policy with a documented step rule, compared exactly (no float rounding).
"""
from __future__ import annotations

import numpy as np

from specverify.records import bench_inputs as bench
from specverify.records.stage import BENCH_SPEC, Buffer, Example, Floor, I, O
from specverify.records.wiring import wired

IDS = "int32|int64"


def acceptance_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: K int32 drafts per request against int64 target ids, each matching with probability 0.7."""
    drafts = bench.token_ids(rng, batch * BENCH_SPEC, vocab)
    return Example("valid", inputs={
        "draft_token_ids": drafts, "target_token_ids": bench.matching(rng, drafts, vocab).astype(np.int64),
        "cu_num_draft_tokens": np.arange(BENCH_SPEC, BENCH_SPEC * batch + 1, BENCH_SPEC, dtype=np.int32),
    }, outputs={"accepted_mask": Buffer((batch * BENCH_SPEC,), "bool"), "num_accepted": Buffer((batch,), "int32")})


def adaptive_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: a history of B steps of K drafts (int64 ndarrays) with 0.7 of them accepted on average,
    a window of the last 32, K within [1, 8], target ratio 0.7."""
    drafted = np.full(batch, BENCH_SPEC, np.int64)
    return Example("valid", inputs={
        "num_accepted_tokens": rng.binomial(BENCH_SPEC, 0.7, batch).astype(np.int64), "num_draft_tokens": drafted,
        "current_k": BENCH_SPEC, "min_k": 1, "max_k": 8, "target_ratio": 0.7, "window": 32,
    }, containers={"num_accepted_tokens": "ndarray", "num_draft_tokens": "ndarray"})


def acceptance_mask_worked() -> Example:
    """Request 0 accepts two drafts and rejects a third; request 1 accepts its one draft; request 2's
    first draft is a -1 (never accepted, though the target is -1 too); the seventh token is padding."""
    return Example(
        tier="valid",
        inputs={"draft_token_ids": np.array([5, 6, 7, 8, -1, 2, 4], np.int32),
                "target_token_ids": np.array([5, 6, 9, 8, -1, 2, 4], np.int64),
                "cu_num_draft_tokens": np.array([3, 4, 6], np.int32)},
        outputs={"accepted_mask": Buffer((7,), "bool"), "num_accepted": Buffer((3,), "int32")},
    )


ACCEPTANCE_MASK = wired(
    name="scv.acceptance_mask",
    doc="each request's accepted prefix of drafts as a per-token mask and a count, with no per-request loop",
    inputs=(
        I("draft_token_ids", IDS, "T", strided=True, doc="flattened drafts; T may exceed the batch's drafts"),
        I("target_token_ids", IDS, "T", strided=True, doc="the target model's id at each draft position"),
        I("cu_num_draft_tokens", "int32", "B", doc="inclusive cumulative draft counts"),
    ),
    outputs=(
        O("accepted_mask", "bool", "T", doc="True on each request's accepted prefix, False elsewhere"),
        O("num_accepted", "int32", "B", doc="length of each request's accepted prefix"),
    ),
    launches={"triton": 1, "torch": 10},
    semantics=(
        "Each request's drafts (its span of the flattened arrays, from the inclusive offsets) are accepted "
        "in order while the draft equals the target id and is not -1; the first other draft ends the "
        "request's acceptance, whatever follows. accepted_mask is True exactly on the accepted drafts and "
        "False everywhere else, padding past the last request included; num_accepted counts them. Every "
        "element of both outputs is written. Kernels may not loop over requests on the host nor wait for "
        "the device."
    ),
    tiers={
        "valid": "Empty, uniform, ragged and long (>128, across a 256-token tile) batches; every draft, none or "
                 "some accepted; the rejection by another id, a -1 draft, or an int64 id equal in its low 32 "
                 "bits; drafts that match again after it; padding tokens; strided token arrays; mixed dtypes.",
        "hazard": "Every draft and target -1, every id at int32's top, or every draft equal to its target; "
                  "checked by restating the contract (prefix masks, counts, the first rejected draft).",
        "invalid": "Offsets beyond the tokens, negative or decreasing; ids below -1 in either array.",
    },
    bench=acceptance_bench,
    floors=(
        Floor("accepted: all", 8, "every draft accepted: no rejection to find"),
        Floor("accepted: none", 8, "the first draft rejected: an empty prefix"),
        Floor("accepted: mixed", 15, "the accepted prefix ends inside the request"),
        Floor("rejected: by another id", 10, "the rejection by a different id"),
        Floor("rejected: by a -1 draft", 10, "a -1 draft is never accepted, though the target be -1"),
        Floor("rejected: by an int64 id equal in its low 32 bits", 3, "ids compare at full width"),
        Floor("drafts that match again after the rejection", 10, "the first rejection ends the acceptance, "
              "whatever follows"),
        Floor("batch: B=0", 3, "an empty batch: every mask element False"),
        Floor("batch: a request with no drafts", 10, "requests of no drafts (equal offsets)"),
        Floor("batch: a request with more than 128 drafts", 10, "long requests"),
        Floor("batch: a request across the 256-draft tile", 3, "the Triton kernel's loop over 256-draft tiles"),
        Floor("dtype: draft and target ids of different dtypes", 8, "int32 drafts against int64 targets"),
        Floor("layout: strided", 15, "token arrays may be strided"),
        Floor("tokens past the batch (CUDA-graph padding)", 10, "padding past the last request is False (the "
              "Triton kernel's padding programs)", interpreted=True),
        Floor("hazard: placeholders", 2, "every draft and target -1", tier="hazard"),
    ),
)


def adaptive_k_worked() -> Example:
    """The last two steps accepted 6 of 8 drafts: 6 >= 0.7 * 8, so K grows from 4 to 5."""
    return Example(
        tier="valid",
        inputs={"num_accepted_tokens": [1, 2, 4], "num_draft_tokens": [4, 4, 4], "current_k": 4, "min_k": 1,
                "max_k": 8, "target_ratio": 0.7, "window": 2},
    )


ADAPTIVE_K = wired(
    name="scv.adaptive_k",
    invariants=None,
    doc="the next step's draft length from the recent acceptance: up, down or kept, within bounds",
    host=True,
    inputs=(
        I("num_accepted_tokens", IDS, "N", doc="accepted drafts per step, oldest first (list, ndarray or tensor)"),
        I("num_draft_tokens", IDS, "N", doc="drafted tokens per recent step (list, ndarray or tensor)"),
        I("current_k", "int", doc=">= 0; may lie outside the bounds (clamped first)"),
        I("min_k", "int", doc="lower bound, >= 0"),
        I("max_k", "int", doc="upper bound, >= min_k"),
        I("target_ratio", "float", doc="acceptance ratio to reach, in (0, 1]"),
        I("window", "int", doc="how many of the latest steps count, >= 1"),
    ),
    outputs=(O("next_k", "int", doc="returned: the draft length of the next step, a Python int"),),
    semantics=(
        "Sum the accepted (a) and drafted (d) tokens of the last `window` steps. Start from current_k clamped "
        "to [min_k, max_k]. With d = 0 keep it; if a >= target_ratio * d add one; if 2a < target_ratio * d "
        "take one away; otherwise keep it; clamp to the bounds again. The comparisons are exact: the float "
        "target is its exact binary value and the sums are unbounded integers. So the result is always "
        "within the bounds, never smaller when more drafts were accepted, and the same on every call."
    ),
    tiers={
        "valid": "Empty to 12-step histories with zero-draft steps, windows shorter and longer than the history, "
                 "bounds of width 0 to 4 with current_k inside and outside them; window sums exactly at the "
                 "target or at half of it (or one either side), and sums whose float quotient equals a decimal "
                 "target (8/10 == 0.8 in floats, below it exactly); lists, ndarrays and tensors of int32 or int64.",
        "hazard": "Counts near 2**62, so window sums pass int64's range; empty histories.",
        "invalid": "Histories of different lengths, accepted above drafted, negative counts, min_k above max_k "
                   "or negative, negative current_k, window 0, a target of 0, above 1, NaN or not a float.",
    },
    bench=adaptive_bench,
    floors=(
        Floor("window sum: on a threshold", 5, "the sums exactly on a threshold of the rule (exact or in floats)"),
        Floor("window sum: one off a threshold", 5, "a count either side of a threshold"),
        Floor("window sum: about the target (the growth rule)", 3, "a >= target_ratio * d adds one"),
        Floor("window sum: about half the target (the shrink rule)", 8, "2a < target_ratio * d takes one away"),
        Floor("window sum: a tie on the shrink rule (2a = target_ratio * d)", 2, "a tie keeps K (2a < target_ratio "
              "* d is strict)"),
        Floor("window sum: a decimal target's whole count (float quotient)", 2, "the comparisons are exact: "
              "8/10 == 0.8 in floats, below it exactly"),
        Floor("window sum: steps of no drafts only (K kept)", 8, "d = 0 keeps K"),
        Floor("history: empty", 6, "no steps: d = 0 keeps K"),
        Floor("history: shorter than the window", 10, "a window longer than the history"),
        Floor("history: longer than the window", 15, "only the last `window` steps count"),
        Floor("current_k outside the bounds", 12, "current_k clamped into the bounds first"),
        Floor("bounds: min_k == max_k", 10, "bounds of width 0"),
        Floor("history: list", 10, "histories as lists"),
        Floor("history: ndarray", 8, "histories as ndarrays"),
        Floor("history: tensor", 6, "histories as tensors"),
        Floor("hazard: window sums beyond int64", 8, "the sums are unbounded integers", tier="hazard"),
    ),
)

STAGES = (ACCEPTANCE_MASK, ADAPTIVE_K)

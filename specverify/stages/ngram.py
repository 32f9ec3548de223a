"""Stage record of the `ngram` family: prompt-lookup (n-gram) drafting, the proposer that needs no draft model.

The record's rule and its dialects are the rules engines ship (see `specverify.oracles.ngram`, which states the
choices made where the sources are silent): the occurrence of the longest match that is proposed, what fills the
draft slots past the proposal, and whether the model's length caps the drafts.
"""
from __future__ import annotations

import numpy as np

from specverify.oracles import ngram as oracle
from specverify.records import bench_inputs as bench
from specverify.records.stage import BENCH_SPEC, Buffer, Dialect, Example, Floor, I, O
from specverify.records.wiring import kernels, wired
from specverify.strategies import ngram as draw

IDS = "int32|int64"


def propose_worked() -> Example:
    """Three requests, K = 3, max_model_len 17. Request 0's pattern [1, 2, 3] occurs at 0, 4 and 8 (leftmost:
    [100, 1, ...], rightmost: [300, 1, ...]) and the cap leaves it 2 drafts; request 1's [5, 6] occurs once,
    with 3 followers; request 2's [7] occurs only in request 1's history (a pooled rule proposes from there)."""
    h0 = [1, 2, 3, 100, 1, 2, 3, 200, 1, 2, 3, 300, 1, 2, 3]
    tokens = np.full((3, 16), -1, np.int32)
    tokens[0, :15], tokens[1, :5], tokens[2, :2] = h0, [5, 6, 7, 5, 6], [4, 7]
    return Example("valid", inputs={"token_ids": tokens, "num_tokens": np.array([15, 5, 2], np.int32), "min_n": 1,
                                    "max_n": 4, "max_model_len": 17},
                   outputs={"draft_token_ids": Buffer((3, 3), "int32"), "num_draft_tokens": Buffer((3,), "int32")})


def propose_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: histories of 256 to 2048 tokens in a [B, 2048] buffer, text-like (runs of 8 to 32 tokens copied
    from earlier in the history between fresh ids), n from 2 to 5, K = BENCH_SPEC, max_model_len 4096."""
    width = 2048
    lengths = rng.integers(256, width + 1, batch)
    tokens = bench.token_ids(rng, (batch, width), vocab).astype(np.int32)
    for b in range(batch):
        at = 64
        while at < lengths[b]:
            run = int(rng.integers(8, 33))
            source = int(rng.integers(0, at - run)) if at > run else 0
            tokens[b, at:at + run] = tokens[b, source:source + run][:width - at]
            at += run + int(rng.integers(1, 16))
    return Example("valid", inputs={"token_ids": tokens, "num_tokens": lengths.astype(np.int32), "min_n": 2,
                                    "max_n": 5, "max_model_len": 4096},
                   outputs={"draft_token_ids": Buffer((batch, BENCH_SPEC), "int32"),
                            "num_draft_tokens": Buffer((batch,), "int32")})


COMMON = (
    "Request b has the history h = token_ids[b, :L], L = num_tokens[b]; positions past L are never read. For n "
    "from min(max_n, L - 1) down to min_n, a match is an earlier window h[s : s+n] equal to the pattern "
    "h[L-n : L] with at least one follower (s + n <= L - 1); the first n that has a match decides. The proposal "
    "is the tokens after the chosen window, h[s+n : s+n+k'], cut at the end of the history. num_draft_tokens[b] "
    "is its length (0 without a match, and for L < min_n + 1) and draft_token_ids[b, :count] the proposal. ")
RULE_TEXT = {
    "": "The leftmost window (smallest s) is chosen; k' = min(K, max_model_len - L), no drafts when that is <= 0; "
        "the slots past the proposal are written -1.",
    "short": "As the record's rule (leftmost, capped), but the slots past the proposal are left as they were: "
             "an engine that returns fewer than K tokens.",
    "uncapped": "As the record's rule (leftmost, -1 fill), with k' = K: drafts may run past max_model_len.",
    "rightmost_last": "The rightmost window (largest s) is chosen; k' = K (no cap); the slots past the proposal "
                      "hold the history's last token h[L-1] (-1 for an empty history).",
    "trtllm_newest": "Pooled: the batch is the pool (so the `independent` check is not asked). Windows of every "
                     "request's history count, each with its own followers; among them the largest key (n, the "
                     "window is the request's own, its start s, minus the request's index) wins: the longest "
                     "match, own history first, then the newest "
                     "(largest) start, then the lowest request. k' = K (no cap); the slots past the proposal are "
                     "written 0 (num_draft_tokens is the only sign of which are real).",
    "trtllm_oldest": "As trtllm_newest, the oldest (smallest) start winning among equal matches of one history.",
}
DIALECT_DOC = {
    "short": ("vLLM's CPU proposer: fewer than K tokens returned, the rest untouched", "the rest untouched",
              False),
    "uncapped": ("vLLM V1's GPU proposer as shipped: no max_model_len cap (vLLM #42533)", "no length cap", False),
    "rightmost_last": ("vLLM V2's Triton proposer: the rightmost occurrence, the last token as fill, no cap",
                       "rightmost, last-token fill", False),
    "trtllm_newest": ("TensorRT-LLM's keyed choice over a shared pool: own history first, newest start, 0 fill",
                      "pooled, newest, 0 fill", True),
    "trtllm_oldest": ("TensorRT-LLM's keyed choice over a shared pool: own history first, oldest start, 0 fill",
                      "pooled, oldest, 0 fill", True),
}


def dialect(name: str) -> Dialect:
    doc, words, pooled = DIALECT_DOC[name]
    return Dialect(doc=doc, rule=COMMON + RULE_TEXT[name], oracle=getattr(oracle, f"propose_{name}"),
                   worked=propose_worked, words=words, impls=kernels("ngram", f"propose_{name}"),
                   valid=draw.propose_pooled_valid if pooled else None,
                   hazard=draw.propose_pooled_hazard if pooled else None,
                   invariants=draw.invariants_of(name), pooled=pooled)


PROPOSE = wired(
    name="ngram.propose",
    doc="prompt-lookup drafting: propose the tokens that followed an earlier occurrence of the history's end",
    dtype_follows={"draft_token_ids": "token_ids"},
    inputs=(
        I("token_ids", IDS, "B, T", strided=True,
          doc="each request's history in its first num_tokens positions; ids in [0, 2**31); the rest unread"),
        I("num_tokens", IDS, "B", doc="L of each request, in [0, T]"),
        I("min_n", "int", doc="the shortest pattern, >= 1"),
        I("max_n", "int", doc="the longest pattern, >= min_n (may exceed T)"),
        I("max_model_len", "int", doc="the model's length, >= 1: at most max_model_len - L drafts (capped rules)"),
    ),
    outputs=(
        O("draft_token_ids", IDS, "B, K", strided=True,
          doc="dtype of token_ids; K >= 1 drafts wanted: the proposal, then the rule's fill"),
        O("num_draft_tokens", "int32", "B", doc="the length of each proposal, in [0, K]"),
    ),
    launches={"triton": 1, "torch": 64},   # Torch: 51 on the H100 (bench input, the record's rule); pooled rules add 3
    semantics=COMMON + RULE_TEXT[""] + (
        " Both outputs are written for every request. The result is the same as measuring, for every "
        "position e <= L - 2, how many tokens up to e agree with the history's end (at most max_n and L - 1) "
        "and taking the earliest position with the largest such count of at least min_n "
        "(`oracles.ngram.suffix_search`). Invalid: num_tokens outside [0, T], a history id outside [0, 2**31), "
        "min_n < 1, max_n < min_n, max_model_len < 1, K = 0, draft_token_ids of another dtype than token_ids."),
    tiers={
        "valid": "Batches of histories of one kind each (periodic, so that the longest suffix occurs several "
                 "times; a pattern planted at up to 3 earlier places; a run of one token at the end, whose only "
                 "match has one follower; one token throughout; empty; min_n - 1 to min_n + 1 tokens; random) over "
                 "alphabets of 1 to 50 letters mapped to ids from 0, small ids or ids just below 2**31; buffers "
                 "of 0 to 48 columns, some of 100 to 600; the tail past each history filled with traps (the "
                 "pattern, -1, the largest id, zeros); max_n up to 64 (beyond T); K of 1 to 8; the cap far away or "
                 "at a request's length less 1, exactly or plus 1; int32 and int64 fields; strided, offset and "
                 "transposed views of the token buffer and of the draft buffer.",
        "hazard": "The same histories over ids that include 0 and 2**31 - 1, the ids a fill value (0, the last "
                  "token) or an overflow would imitate. Checked against the independent suffix-length search "
                  "under the rule judged (drafts, count and fill of every request).",
        "invalid": "min_n = 0, max_n < min_n, max_model_len = 0, K = 0, draft_token_ids of the other id dtype, "
                   "num_tokens of T + 1 or -1, a history id of -1 or 2**31.",
    },
    bench=propose_bench,
    twin=draw.propose_twin,
    dialects={name: dialect(name) for name in DIALECT_DOC},
    floors=(
        Floor("history: periodic", 10, "the longest suffix occurs several times: the occurrence rule decides "
              "(leftmost, rightmost, newest, oldest)"),
        Floor("history: planted", 6, "a pattern at several earlier places with different followers"),
        Floor("history: one follower", 10, "the only match ends at L - 2: a window needs a follower"),
        Floor("history: repeated", 10, "one token throughout: every n matches"),
        Floor("history: empty", 8, "L = 0: no drafts"),
        Floor("history: short", 10, "L of min_n - 1 to min_n + 1: no window, or one"),
        Floor("history: random", 8, "histories of no planted structure"),
        Floor("K > every L", 5, "the proposal cut at the end of the history"),
        Floor("cap: max_model_len - L = -1 for a request", 5, "a proposing request past the model's length: "
              "no drafts"),
        Floor("cap: max_model_len - L = 0 for a request", 5, "a proposing request at the model's length: "
              "no drafts"),
        Floor("cap: max_model_len - L = 1 for a request", 3, "one draft left before the model's length"),
        Floor("cap: cuts a proposal short", 12, "vLLM #42533: the GPU proposer shipped without the length cap"),
        Floor("max_n > T", 10, "max_n beyond the buffer: n from min(max_n, L - 1)"),
        Floor("ids: 2**31 - 1 in a history", 2, "history ids up to 2**31 - 1, which an overflow would imitate"),
        Floor("ids: zero and the largest", 4, "ids 0 and 2**31 - 1, which a fill value or an overflow imitates"),
        Floor("ids: near 2**31", 4, "ids just below 2**31: an overflow of a sum or a hash"),
        Floor("past the history: the pattern", 10, "positions past L are never read: a copy of the pattern "
              "there would match", interpreted=True),
        Floor("past the history: -1", 3, "positions past L are never read"),
        Floor("past the history: the largest id", 5, "positions past L are never read"),
        Floor("past the history: zeros", 2, "positions past L are never read (a 0 fill imitates them)"),
        Floor("histories: several hundred tokens", 2, "histories over several blocks of a program's loop"),
        Floor("dtype: token_ids int64", 10, "draft_token_ids keeps the dtype of token_ids"),
        Floor("dtype: num_tokens int32", 15, "num_tokens of either id dtype"),
        Floor("layout: strided", 15, "token_ids and draft_token_ids may be strided"),
        Floor("ids: zero and the largest", 20, "the hazard tier's ids: 0 and 2**31 - 1 always among them",
              tier="hazard"),
    ),
)

STAGES = (PROPOSE,)

"""Stage records of the `output` family: what the engine does with the verified tokens.

`output.parse` is a host stage (it returns Python values); `output.spec_metadata` writes buffers.
"""
from __future__ import annotations

import numpy as np

from specverify.records import bench_inputs as bench
from specverify.records.stage import BENCH_SPEC, Buffer, Example, Floor, I, O
from specverify.records.wiring import wired



def parse_worked() -> Example:
    """Row 0 has an out-of-vocabulary id between two valid ones; row 1 is discarded. Only positions 0
    and 2 (row 0) return tokens, so only their logprob rows come back."""
    return Example("valid", inputs={
        "output_token_ids": np.array([[7, 100, 5], [1, 2, -1]], np.int32),
        "vocab_size": 100,
        "discard_req_indices": np.array([1]),
        "token_ids": np.array([[7, 3], [0, 3], [5, 8], [1, 3], [2, 3], [0, 3]], np.int64),
        "logprobs": np.array([[-0.5, -1.5], [-0.0, -2.0], [-0.25, -np.inf], [-1, -2], [-1, -2], [-1, -2]],
                             np.float32),
        "ranks": np.array([1, 4, 2, 1, 1, 1], np.int64),
    }, containers={"output_token_ids": "ndarray", "discard_req_indices": "list", "token_ids": "ndarray",
                   "logprobs": "ndarray", "ranks": "ndarray"})


def parse_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: verification output [B, K+1] (accepted + 1 ids, then -1; 2 % of the ids out of vocabulary),
    about 1 request in 16 discarded (a list), no logprobs."""
    ids = bench.emitted_rows(rng, batch, BENCH_SPEC, vocab)
    ids[(rng.random(ids.shape) < 0.02) & (ids >= 0)] = vocab + 7
    return Example("valid", inputs={
        "output_token_ids": ids, "vocab_size": vocab,
        "discard_req_indices": np.flatnonzero(rng.random(batch) < 1 / 16),
        "token_ids": None, "logprobs": None, "ranks": None,
    }, containers={"output_token_ids": "ndarray", "discard_req_indices": "list"})


PARSE = wired(
    name="output.parse",
    hazard=None, invariants=None,
    presence_follows=("token_ids", "logprobs", "ranks"),   # the three come together
    doc="the valid ids of each request's row as Python lists ([] when discarded), with their logprobs",
    host=True,
    inputs=(
        I("output_token_ids", "int32", "B, S", doc="ndarray or CPU tensor; the tokens each request emitted"),
        I("vocab_size", "int", doc="V, >= 1"),
        I("discard_req_indices", "int", "D", doc="list, ndarray or tensor of rows in [0, B); duplicates allowed"),
        I("token_ids", "int32|int64", "B*S, k+1", optional=True, doc="logprobs: candidate ids per position"),
        I("logprobs", "float32", "B*S, k+1", optional=True, doc="logprobs: their log-probabilities"),
        I("ranks", "int32|int64", "B*S", optional=True, doc="logprobs: rank of each position's token"),
    ),
    outputs=(
        O("tokens", "list[list[int]]", "B", doc="returned first: the valid ids per row"),
        O("logprobs_lists", "tuple", "4", optional=True,
          doc="returned second: (token_ids, logprobs, ranks, cu_num_tokens[B+1]) of the returned tokens"),
    ),
    semantics="""\
A host stage: it returns the tuple `(tokens, logprobs_lists)` and writes nothing.
- `tokens[r]` lists the valid ids (0 <= id < V) of row r in order. -1 and ids >= V are dropped wherever
  they sit: an out-of-vocabulary id mid-row leaves a gap and later ids still count. A row named in
  `discard_req_indices` (once or more) gives `[]`.
- `logprobs_lists` is None without the logprobs inputs (they come all three or not at all). With them,
  for each returned token in the order of `tokens` flattened, at flattened position p = r * S + j: the
  row `token_ids[p]` as a list of ints, the row `logprobs[p]` as a list of floats, and `ranks[p]` as an
  int; the fourth item `cu_num_tokens` is B + 1 exclusive offsets of each request's tokens in those lists.

The result is compared as Python values, types included: lists of Python ints and floats (no NumPy or
torch scalars), the outer result and `logprobs_lists` tuples, floats bit for bit (-0.0, -inf and NaN
come back as they went in). Arrays may arrive as ndarrays or CPU tensors and the indices also as a
list; none of the inputs may be changed.

Invalid: ids below -1, `output_token_ids` not a 2-D int32 array on the host, `vocab_size` not a Python
int of at least 1, discard indices outside [0, B), not integers (a boolean mask is refused) or not 1-D,
logprobs inputs incomplete or of the wrong shape or dtype.""",
    tiers={
        "valid": "B from 0 to 1024, S from 0 to 40, V at tile edges or small. Rows are an emitted prefix "
                 "then -1 (sometimes with out-of-vocabulary ids inside the prefix) or ids, -1 and V, V+7 "
                 "anywhere; no row, some rows, every row, or some rows twice discarded; every array in a "
                 "drawn container (ndarray or CPU tensor; the indices also a list, int32 or int64); half "
                 "the draws carry logprobs of 1 to 6 candidates with -inf, -0.0 and NaN mixed in.",
        "invalid": "One rule broken: ids of int64 or 1-D, an id below -1, `vocab_size` 0 or a float, a "
                   "discard index of B or -1, float indices or a boolean mask, 2-D indices, one logprobs "
                   "input missing, logprobs inputs of the wrong shape or dtype.",
    },
    bench=parse_bench,
    floors=(
        Floor("ids: an out-of-vocabulary id before a valid one in its row", 10, "an out-of-vocabulary id mid-row "
              "leaves a gap and later ids still count"),
        Floor("ids: a -1 before a valid id in its row", 4, "-1 is dropped wherever it sits"),
        Floor("ids: an id equal to V", 10, "valid ids are 0 <= id < V: V itself is dropped"),
        Floor("rows: OOV ids inside the emitted prefix", 8, "rejection-sampler rows with out-of-vocabulary ids"),
        Floor("discard: none", 10, "no row discarded"),
        Floor("discard: some", 10, "some rows discarded, unsorted"),
        Floor("discard: duplicates", 3, "a row named twice gives [] once"),
        Floor("discard: every row", 5, "every row discarded"),
        Floor("logprobs: given", 15, "the logprobs lists of the returned tokens"),
        Floor("logprobs: -inf, -0.0 or NaN among them", 12, "floats come back bit for bit"),
        Floor("size: B*S > 256", 8, "the host kernel's vectorized path"),
        Floor("size: filtered in Python (B*S <= 256)", 20, "the host kernel's Python path"),
        Floor("vocab: V=1", 6, "a vocabulary of one id"),
        Floor("rows: none (B = 0) or empty (S = 0)", 1, "no tokens at all: one example shows the empty result"),
        Floor("container: discard_req_indices as list", 10, "the indices as a list"),
        Floor("container: discard_req_indices as tensor", 4, "the indices as a CPU tensor"),
        Floor("container: output_token_ids as tensor", 8, "the ids as a CPU tensor"),
        Floor("container: logprobs as tensor", 5, "the logprobs as a CPU tensor"),
    ),
)


def spec_metadata_worked() -> Example:
    """Request 0 verifies 2 drafts in a decode step; request 1 is a prompt chunk of 5 tokens without
    drafts; request 2 verifies 1 draft. input_ids holds one token more than is scheduled."""
    sizes = {"cu_num_draft_tokens": 3, "cu_num_sampled_tokens": 3, "logits_indices": 6,
             "target_logits_indices": 3, "bonus_logits_indices": 3, "draft_token_ids": 3}
    return Example("valid", inputs={
        "num_draft_tokens": [2, 0, 1],
        "cu_num_scheduled_tokens": np.array([3, 8, 10], np.int32),
        "input_ids": np.arange(1000, 1011, dtype=np.int32),
    }, outputs={name: Buffer((n,), "int32") for name, n in sizes.items()})


def spec_metadata_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: a decode step, every request verifying K drafts (K + 1 scheduled tokens each), int32 ids."""
    k, tokens = BENCH_SPEC, batch * BENCH_SPEC
    sizes = {"cu_num_draft_tokens": batch, "cu_num_sampled_tokens": batch, "logits_indices": tokens + batch,
             "target_logits_indices": tokens, "bonus_logits_indices": batch, "draft_token_ids": tokens}
    return Example("valid", inputs={
        "num_draft_tokens": [k] * batch,
        "cu_num_scheduled_tokens": np.arange(k + 1, (k + 1) * batch + 1, k + 1, dtype=np.int32),
        "input_ids": bench.token_ids(rng, (k + 1) * batch, vocab),
    }, outputs={name: Buffer((n,), "int32") for name, n in sizes.items()})


SPEC_METADATA = wired(
    name="output.spec_metadata",
    hazard=None, invariants=None,
    dtype_follows={"draft_token_ids": "input_ids"},
    doc="logits positions of each request's drafts and bonus, and the draft ids they verify",
    inputs=(
        I("num_draft_tokens", "int", "B", doc="n[r], a list of Python ints, zeros allowed"),
        I("cu_num_scheduled_tokens", "int32", "B", doc="inclusive offsets of the scheduled tokens"),
        I("input_ids", "int32|int64", "N", doc="the scheduled token ids; N may exceed the scheduled total"),
    ),
    outputs=(
        O("cu_num_draft_tokens", "int32", "B", doc="inclusive cumsum of n"),
        O("cu_num_sampled_tokens", "int32", "B", doc="inclusive cumsum of n + 1"),
        O("logits_indices", "int32", "T+B", doc="every request's last n + 1 scheduled positions"),
        O("target_logits_indices", "int32", "T", doc="index into logits_indices of each draft's logits"),
        O("bonus_logits_indices", "int32", "B", doc="index into logits_indices of each bonus's logits"),
        O("draft_token_ids", "int32|int64", "T", doc="the draft ids, dtype of input_ids"),
    ),
    semantics="""\
Request r schedules the tokens start(r) .. `cu_num_scheduled_tokens[r]` - 1 (inclusive offsets); its last
n[r] + 1 are sampled: they start at first(r) = `cu_num_scheduled_tokens[r]` - n[r] - 1, and the drafts
are the scheduled ids right after first(r). With s(r) the sum of n + 1 and d(r) the sum of n over the
requests before r:
- `cu_num_draft_tokens[r]` = d(r) + n[r]; `cu_num_sampled_tokens[r]` = s(r) + n[r] + 1;
- `logits_indices[s(r) + j]` = first(r) + j for j = 0 .. n[r]: every sampled position, packed;
- `target_logits_indices[d(r) + j]` = s(r) + j for j < n[r]: where in `logits_indices` the logits that
  verify draft j sit;
- `bonus_logits_indices[r]` = s(r) + n[r]: where the bonus token's logits sit;
- `draft_token_ids[d(r) + j]` = `input_ids[first(r) + 1 + j]`.

Every element of the six outputs is written.

Invalid: `num_draft_tokens` not a list of Python ints >= 0, `cu_num_scheduled_tokens` not int32 of
length B, a request scheduling fewer than n[r] + 1 tokens, `input_ids` shorter than the scheduled total,
outputs of the wrong dtype or length.""",
    tiers={
        "valid": "Draft batches as in rejection (B up to 1024, zeros, rows of more than 128 drafts); decode "
                 "steps that schedule exactly n + 1 tokens per request, or mixed with prompt chunks of up "
                 "to 39 more; `input_ids` as long as the scheduled total or 1 or 17 longer, int32 or int64.",
        "invalid": "One rule broken: counts as an array, a count of -1, int64 or B + 1 offsets, a request "
                   "scheduling only n tokens, `input_ids` one short, output buffers of the wrong length or "
                   "dtype.",
    },
    bench=spec_metadata_bench,
    launches={"triton": 2, "torch": 9},
    floors=(
        Floor("scheduled: decode only (n + 1)", 10, "decode steps schedule exactly n + 1 tokens"),
        Floor("scheduled: a prompt chunk before a request's sampled tokens", 10, "first(r) past start(r): the "
              "sampled tokens are the request's last n + 1"),
        Floor("input_ids: longer than the scheduled tokens", 15, "N may exceed the scheduled total"),
        Floor("batch: a request with no drafts", 12, "n[r] = 0: the bonus only"),
        Floor("batch: a request with more than 128 drafts", 10, "long requests"),
        Floor("batch: B=0", 5, "an empty batch"),
        Floor("dtype: input_ids int32", 8, "draft_token_ids keeps the dtype of input_ids"),
        Floor("dtype: input_ids int64", 15, "draft_token_ids keeps the dtype of input_ids"),
        Floor("batch: B>1", 12, "one Triton program per request: later ones sum the counts before them",
              interpreted=True),
    ),
)

STAGES = (PARSE, SPEC_METADATA)

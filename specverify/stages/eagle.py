"""Stage records of the `eagle` family: the inputs of the next drafting pass.

Index dtypes: index inputs (offsets, lengths, positions, block tables) may be int32 or int64, and an
output derived from one keeps its dtype; fixed choices are listed in `specverify.oracles.eagle`.
"""
from __future__ import annotations

import numpy as np

from specverify.records import bench_inputs as bench
from specverify.records.stage import BENCH_SPEC, Buffer, Example, Floor, I, Layout, O
from specverify.records.wiring import wired
from specverify.strategies import eagle as draw

IDX = "int32|int64"
i32, i64 = np.int32, np.int64

QSL = "exclusive offsets: request r's query is qsl[r] .. qsl[r+1] - 1"
DTYPES = "Index fields are drawn int32 or int64 independently."
PROGRAMS = "Triton: a batch past one program's rows (rows offset by the program id)"


def programs_floor(least: int, interpreted: bool = True) -> Floor:
    """The floor of a batch spanning two programs of the stage's Triton kernel or more."""
    return Floor("batch: more than one program", least, PROGRAMS, interpreted=interpreted)


def verify_offsets(batch: int) -> np.ndarray:
    """Bench: query_start_loc of a verification step, K + 1 tokens per request, int32 [B+1]."""
    return np.arange(0, (BENCH_SPEC + 1) * batch + 1, BENCH_SPEC + 1, dtype=i32)


# ---------------------------------------------------------------- eagle.next_token_padded

def next_token_padded_worked() -> Example:
    """Row 0 has a gap (-1) and ends in an out-of-vocabulary id: two valid ids, the last is 7; row 1 has
    none and takes its backup; row 2 is discarded. The rows are 7 elements apart."""
    return Example("valid", inputs={
        "sampled_token_ids": np.array([[5, -1, 7, 100], [-1, 107, -1, -1], [1, 2, 3, 4]], i32),
        "discard_mask": np.array([False, False, True]),
        "backup_next_token_ids": np.array([40, 41, 42], i32),
        "vocab_size": 100,
    }, outputs={"next_token_ids": Buffer((3,), "int32"), "valid_sampled_tokens_count": Buffer((3,), "int32")},
        layouts={"sampled_token_ids": Layout((1, 1), (0, 3))})


def next_token_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: verification output [B, K+1] (accepted + 1 ids, then -1), about 1 request in 16 discarded."""
    return Example("valid", inputs={
        "sampled_token_ids": bench.emitted_rows(rng, batch, BENCH_SPEC, vocab),
        "discard_mask": rng.random(batch) < 1 / 16, "backup_next_token_ids": bench.token_ids(rng, batch, vocab),
        "vocab_size": vocab,
    }, outputs={"next_token_ids": Buffer((batch,), "int32"), "valid_sampled_tokens_count": Buffer((batch,), "int32")})


NEXT_TOKEN_PADDED = wired(
    name="eagle.next_token_padded",
    hazard=None, invariants=None,
    classes={"oov_ids": ("sampled_token_ids", "oov"), "discarded_rows": ("discard_mask", "true")},
    doc="per row: the count of valid sampled ids and the last valid one (the backup when none or discarded)",
    inputs=(
        I("sampled_token_ids", "int32", "B, S", strided=True,
          doc="the tokens each request emitted this step; -1 and ids >= V allowed; row stride may exceed S"),
        I("discard_mask", "bool", "B", doc="requests whose sampled tokens are ignored"),
        I("backup_next_token_ids", "int32", "B", doc="the next token when a row has no valid id"),
        I("vocab_size", "int", doc="V, >= 1"),
    ),
    outputs=(O("next_token_ids", "int32", "B", doc="written: every row"),
             O("valid_sampled_tokens_count", "int32", "B", doc="written: every row")),
    semantics="""\
Every row r is written. An entry of `sampled_token_ids[r]` is valid when it is neither -1 nor >= V.
- a discarded row (`discard_mask[r]` True): `next_token_ids[r]` = `backup_next_token_ids[r]`, count 0;
- otherwise the count is the number of valid entries anywhere in the row (gaps allowed), and
  `next_token_ids[r]` is the rightmost valid entry (not the end of a leading run), or the backup when
  the row has none.

Invalid: ids below -1, `vocab_size` below 1, a 1-D `sampled_token_ids`, wrong dtypes or lengths.""",
    tiers={
        "valid": "B from 0 to 1024, S from 0 to 33, V at tile edges or small. Rows are an emitted prefix then "
                 "-1 (what rejection writes), rows with gaps of -1, V and V+7 before later valid ids, or a "
                 "mix; no row, some rows or every row discarded; rows further apart than their length.",
        "invalid": "One rule broken: an id below -1, `vocab_size` 0, a 1-D `sampled_token_ids`, a wrong dtype "
                   "or length of an input or output.",
    },
    bench=next_token_bench,
    launches={"triton": 1, "torch": 10},
    floors=(
        Floor("sampled: a valid id after a gap", 15, "the rightmost valid entry, not the end of a leading run",
              interpreted=True),
        Floor("sampled: an id >= V", 15, "an id >= V is not valid (a drafter's larger vocabulary)", interpreted=True),
        Floor("sampled: a row without a valid id", 15, "no valid id: the backup, count 0", interpreted=True),
        Floor("discard: some rows", 6, "a discarded row takes its backup whatever it holds", interpreted=True),
        Floor("discard: all rows", 6, "every row discarded"),
        Floor("vocab: V=1", 5, "one id: every id but 0 is out of the vocabulary"),
        Floor("sampled: S = 0", 3, "S = 0: no column, every row takes its backup", interpreted=True),
        Floor("layout: row stride > row length", 15, "rows further apart than their length", interpreted=True),
        programs_floor(5),
    ),
)


# ---------------------------------------------------------------- eagle.prepare_inputs_padded

def prepare_inputs_padded_worked() -> Example:
    """Request 0 drafted 2 tokens and accepted none (2 rejected); request 1 drafted none (0 rejected,
    whatever its count says); request 2 accepted all 3; row 3 is past num_reqs and holds junk."""
    return Example("valid", inputs={
        "cu_num_draft_tokens": np.array([2, 2, 5, 99], i32),
        "valid_sampled_tokens_count": np.array([1, 1, 4, -3], i32),
        "query_start_loc": np.array([0, 3, 4, 8, 1], i64),
        "num_reqs": 3,
    }, outputs={"token_indices_to_sample": Buffer((4,), "int64"), "num_rejected_tokens": Buffer((4,), "int32")})


def prepare_padded_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: K drafts and K + 1 query tokens per request, accepted + 1 sampled (0 for 1 in 16), all real."""
    counts = bench.accepted_counts(rng, batch, BENCH_SPEC) + 1
    counts[rng.random(batch) < 1 / 16] = 0
    return Example("valid", inputs={
        "cu_num_draft_tokens": np.arange(BENCH_SPEC, BENCH_SPEC * batch + 1, BENCH_SPEC, dtype=i32),
        "valid_sampled_tokens_count": counts.astype(i32), "query_start_loc": verify_offsets(batch),
        "num_reqs": batch,
    }, outputs={"token_indices_to_sample": Buffer((batch,), "int32"), "num_rejected_tokens": Buffer((batch,), "int32")})


PREPARE_INPUTS_PADDED = wired(
    name="eagle.prepare_inputs_padded",
    hazard=None, invariants=None,
    dtype_follows={"token_indices_to_sample": "query_start_loc"},
    doc="rejected tokens and the index to sample of each of the first num_reqs requests",
    inputs=(
        I("cu_num_draft_tokens", "int32", "B", doc="inclusive offsets of each request's drafts"),
        I("valid_sampled_tokens_count", "int32", "B", doc="tokens each request emitted: accepted + 1, or 0"),
        I("query_start_loc", IDX, "B+1", doc=QSL + " (padded: n + 1 tokens or more per request)"),
        I("num_reqs", "int", doc="real requests, <= B; later rows are ignored and not written"),
    ),
    outputs=(O("token_indices_to_sample", IDX, "B", doc="dtype of query_start_loc; written: rows < num_reqs"),
             O("num_rejected_tokens", "int32", "B", doc="written: rows < num_reqs")),
    semantics="""\
For each request r < `num_reqs`, with n[r] its draft count and c = `valid_sampled_tokens_count[r]`:
- `num_rejected_tokens[r]` = n[r] + 1 - c when n[r] > 0, else 0;
- `token_indices_to_sample[r]` = `query_start_loc[r+1]` - 1 - `num_rejected_tokens[r]`: where the
  request's last accepted token sits in the padded query.

Rows from `num_reqs` on are not written, and their inputs (which may hold anything) affect nothing.

Invalid (values are checked in the first `num_reqs` rows only): `num_reqs` negative or above B, offsets
that are negative or decrease, a count below 0 or above n[r] + 1, `query_start_loc` not starting at 0 or
decreasing, wrong dtypes or lengths.""",
    tiers={
        "valid": "Draft batches as in rejection (B up to 1024, zeros, rows of more than 128 drafts); queries of "
                 "n + 1 tokens, some longer (prefill chunks); counts from 1 to n + 1, or 0 for discarded "
                 "requests; `num_reqs` = B or less, with junk in the rows past it. " + DTYPES,
        "invalid": "One rule broken: `num_reqs` of B + 1 or -1, a count of n + 2 or -1, `query_start_loc` not "
                   "starting at 0 or decreasing, decreasing draft offsets, a wrong dtype or length.",
    },
    bench=prepare_padded_bench,
    launches={"triton": 1, "torch": 7},
    floors=(
        Floor("num_reqs < B", 10, "rows from num_reqs on are not written", interpreted=True),
        Floor("stale rows past num_reqs", 4, "junk in the rows past num_reqs affects nothing", interpreted=True),
        Floor("requests: some discarded (0 sampled)", 15, "a count of 0: n + 1 rejected", interpreted=True),
        Floor("batch: a request with no drafts", 10, "n = 0: 0 rejected whatever its count", interpreted=True),
        Floor("queries: some longer than n + 1 (prefill chunks)", 5, "the index counts from the query's end, not "
              "its start + n", interpreted=True),
        Floor("batch: a request with more than 128 drafts", 8, "rows of more than 128 drafts (tiers)"),
        Floor("dtype: query_start_loc int64", 10, "token_indices_to_sample takes query_start_loc's dtype"),
        programs_floor(2, interpreted=False),
    ),
)


# ---------------------------------------------------------------- eagle.verify_and_prepare_padded

def verify_and_prepare_padded_worked() -> Example:
    """Request 0 accepts its first draft and rejects the second (2 tokens, 1 rejected); request 1 accepts
    both and takes its bonus; request 2 has no drafts and is discarded; request 3 is not greedy and
    already holds what random verification emitted; row 4 is past num_reqs."""
    return Example("valid", inputs={
        "draft_token_ids": np.array([5, 6, 3, 4, 8], i32),
        "target_argmax": np.array([5, 9, 3, 4, 8], i64),
        "bonus_token_ids": np.array([11, 12, 13, 14, 15], i64),
        "cu_num_draft_tokens": np.array([2, 4, 4, 5, 5], i32),
        "is_greedy": np.array([True, True, True, False, True]),
        "max_spec_len": 2,
        "output_token_ids": np.array([[-1, -1, -1], [-1, -1, -1], [-1, -1, -1], [7, -1, -1], [-1, -1, -1]], i32),
        "discard_mask": np.array([False, False, True, False, False]),
        "backup_next_token_ids": np.array([40, 41, 42, 43, 44], i32),
        "vocab_size": 100,
        "query_start_loc": np.array([0, 3, 6, 7, 9, 10], i32),
        "num_reqs": 4,
    }, outputs={"next_token_ids": Buffer((5,), "int32"), "valid_sampled_tokens_count": Buffer((5,), "int32"),
                "token_indices_to_sample": Buffer((5,), "int32"), "num_rejected_tokens": Buffer((5,), "int32")})


VERIFY_AND_PREPARE_PADDED = wired(
    name="eagle.verify_and_prepare_padded",
    hazard=None, invariants=None,
    dtype_follows={"token_indices_to_sample": "query_start_loc"},
    doc="the padded EAGLE step after the target pass, fused: greedy verification, next token, prepare inputs",
    inputs=(
        I("draft_token_ids", "int32", "T", doc="draft ids, request by request; -1 and ids >= V allowed"),
        I("target_argmax", "int64", "T", doc="the target model's choice at each draft position, >= 0"),
        I("bonus_token_ids", "int64", "B", doc="the token a row emits after accepting all its drafts"),
        I("cu_num_draft_tokens", "int32", "B", doc="inclusive offsets: request r owns draft positions "
                                                   "start(r) .. cu[r] - 1"),
        I("is_greedy", "bool", "B", optional=True, doc="rows to verify; None: every row"),
        I("max_spec_len", "int", doc="S: the row width of output_token_ids minus one; every n[r] <= S"),
        I("output_token_ids", "int32", "B, S+1", strided=True, inout=True,
          doc="rejection.greedy's output (the caller's -1 pre-fill, rows of other verifiers) and "
              "next_token_padded's sampled_token_ids; verification writes each greedy row's emitted prefix"),
        I("discard_mask", "bool", "B", doc="requests whose sampled tokens are ignored"),
        I("backup_next_token_ids", "int32", "B", doc="the next token when a row has no valid id"),
        I("vocab_size", "int", doc="V, >= 1"),
        I("query_start_loc", IDX, "B+1", doc=QSL + " (padded: n + 1 tokens or more per request)"),
        I("num_reqs", "int", doc="real requests, <= B; prepare_inputs_padded writes only rows below it"),
    ),
    outputs=(O("next_token_ids", "int32", "B", doc="written: every row"),
             O("valid_sampled_tokens_count", "int32", "B", doc="written: every row"),
             O("token_indices_to_sample", IDX, "B", doc="dtype of query_start_loc; written: rows < num_reqs"),
             O("num_rejected_tokens", "int32", "B", doc="written: rows < num_reqs")),
    semantics="""\
The work an engine's padded EAGLE path launches as three kernels after the target model's forward pass
(greedy sampling), as one call whose every output is byte for byte what the three give when run one
after another:
- first `rejection.greedy` (the flattened layout, int32 rows: the verification stage whose output
  next_token_padded reads; `rejection.greedy_padded`'s int64 [B, K] layout does not compose with it)
  writes the emitted prefix of each greedy row into `output_token_ids`, leaving every other slot as
  the caller left it;
- then `eagle.next_token_padded` reads the whole of `output_token_ids` as its `sampled_token_ids` (gaps and
  the caller's slots included) and writes `next_token_ids` and `valid_sampled_tokens_count`;
- then `eagle.prepare_inputs_padded` reads `cu_num_draft_tokens` and those counts and writes
  `num_rejected_tokens` and `token_indices_to_sample` for the first `num_reqs` rows.

So for a greedy request r < `num_reqs`, not discarded, whose row was pre-filled with -1 and that
emits e tokens, all valid ids: count e, next token its last emitted id, n[r] + 1 - e rejected
tokens when n[r] > 0 (else 0), and the index `query_start_loc[r+1]` - 1 minus those.

Invalid: whatever one of the three refuses, with its error; checks that read what verification wrote
(ids of output_token_ids below -1, a row of more than n[r] + 1 valid ids) apply after it writes, as in
the composition.""",
    tiers={
        "valid": "Draft batches as in rejection.greedy (B up to 1024, zeros, rows of more than 128 drafts), drafts "
                 "matching the argmax for a drawn prefix; `is_greedy` None, all, none or mixed. output_token_ids "
                 "pre-filled with -1, rows that are not greedy holding 1 to n + 1 ids (some out of the "
                 "vocabulary), junk ids in greedy rows' first n + 1 slots, out-of-vocabulary ids past them; a "
                 "strided buffer at times. Discard masks, `num_reqs` and stale `query_start_loc` entries as in "
                 "the eagle stages. " + DTYPES,
        "invalid": "One rule of a piece broken: decreasing offsets, a count above `max_spec_len`, a draft id or "
                   "argmax out of range, `vocab_size` 0, `num_reqs` of B + 1, `query_start_loc` not starting at "
                   "0, a -2 where verification does not write, a row holding more valid ids than n + 1, a "
                   "wrong dtype or length.",
    },
    launches={"triton": 1, "torch": 24},   # Torch: verification 10, next token 8, prepare 5 (23); the H200
                                           # counted one more on a B = 1, K = 1, V = 1 example
    bench=draw.verify_and_prepare_padded_bench,
    floors=(
        Floor("is_greedy: mixed", 12, "rows that are not greedy keep what the caller left", interpreted=True),
        Floor("is_greedy: none", 2, "is_greedy None: every row verified", interpreted=True),
        Floor("drafts: accepted prefix all", 10, "every draft accepted: the bonus is emitted, 0 rejected",
              interpreted=True),
        Floor("drafts: accepted prefix none", 3, "the first draft rejected: one token emitted, n rejected"),
        Floor("output_token_ids: junk in greedy rows' first n + 1 slots", 15, "next_token_padded reads the whole "
              "row: the caller's slots past what verification writes count", interpreted=True),
        Floor("output_token_ids: out-of-vocabulary ids past n + 1", 15, "ids >= V past the emitted prefix are "
              "not valid", interpreted=True),
        Floor("discard: some rows", 4, "a discarded row: its backup, count 0", interpreted=True),
        Floor("num_reqs < B", 12, "prepare_inputs_padded writes only rows below num_reqs", interpreted=True),
        Floor("stale query_start_loc past num_reqs", 10, "entries past num_reqs are not read", interpreted=True),
        Floor("layout: strided", 15, "output_token_ids of any strides, read back and written", interpreted=True),
        Floor("batch: a request with more than 128 drafts", 10, "rows of more than 128 drafts (tiers)"),
        programs_floor(5),
    ),
)


# ---------------------------------------------------------------- eagle.prepare_inputs

def prepare_inputs_worked() -> Example:
    """Queries of 4, 7 and 5 tokens lose 1, 3 and 2 rejected tokens."""
    return Example("valid", inputs={
        "query_start_loc": np.array([0, 4, 11, 16], i32),
        "seq_lens": np.array([10, 20, 30], i32),
        "num_draft_tokens": np.array([3, 6, 4], i32),
        "num_sampled": np.array([3, 4, 3], i32),
    }, outputs={"new_query_start_loc": Buffer((4,), "int32"), "token_indices": Buffer((10,), "int32"),
                "new_seq_lens": Buffer((3,), "int32")})


def prepare_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: K drafts and K + 1 query tokens per request, accepted + 1 sampled, contexts of 100 to 4000."""
    sampled = bench.accepted_counts(rng, batch, BENCH_SPEC) + 1
    kept = int(sampled.sum())     # a query keeps its sampled tokens: q - (n + 1 - num_sampled)
    return Example("valid", inputs={
        "query_start_loc": verify_offsets(batch),
        "seq_lens": (rng.integers(100, 4000, batch) + BENCH_SPEC + 1).astype(i32),
        "num_draft_tokens": np.full(batch, BENCH_SPEC, i32), "num_sampled": sampled.astype(i32),
    }, outputs={"new_query_start_loc": Buffer((batch + 1,), "int32"), "token_indices": Buffer((kept,), "int32"),
                "new_seq_lens": Buffer((batch,), "int32")})


PREPARE_INPUTS = wired(
    name="eagle.prepare_inputs",
    hazard=None, invariants=None,
    dtype_follows={"new_query_start_loc": "query_start_loc", "token_indices": "query_start_loc", "new_seq_lens": "seq_lens"},
    doc="drop rejected tokens from each query: new offsets, kept token indices, shorter sequences",
    inputs=(
        I("query_start_loc", IDX, "B+1", doc=QSL),
        I("seq_lens", IDX, "B", doc="sequence length of each request, rejected tokens included"),
        I("num_draft_tokens", IDX, "B", doc="n[r], drafts verified this step"),
        I("num_sampled", IDX, "B", doc="tokens emitted: accepted + 1, or 0 for a discarded request"),
    ),
    outputs=(O("new_query_start_loc", IDX, "B+1", doc="dtype of query_start_loc; written: every entry"),
             O("token_indices", IDX, "sum(q')", doc="dtype of query_start_loc; written: every entry"),
             O("new_seq_lens", IDX, "B", doc="dtype of seq_lens; written: every entry")),
    semantics="""\
Request r rejects rej[r] = n[r] + 1 - `num_sampled[r]` tokens when n[r] > 0, else none (so
`num_sampled[r]` = 0 drops all n[r] + 1). Its query of q[r] = `query_start_loc[r+1] - query_start_loc[r]`
tokens keeps its first q'[r] = q[r] - rej[r]:
- `new_query_start_loc` = [0, q'[0], q'[0] + q'[1], ...];
- `token_indices` lists, request by request, `query_start_loc[r]` + 0 .. q'[r] - 1;
- `new_seq_lens[r]` = `seq_lens[r]` - rej[r].

Invalid: `query_start_loc` not starting at 0 or decreasing, a negative draft count, `num_sampled` below 0
or above n[r] + 1, a query or sequence shorter than its rejected tokens, a `token_indices` buffer whose
length is not the sum of q', wrong dtypes or lengths.""",
    tiers={
        "valid": "Draft batches as in rejection, one in six of more than 32 requests; queries of n + 1 tokens, "
                 "some longer; `num_sampled` from 1 to n + 1, or 0 for some requests; sequences as long as their "
                 "query or up to 300 longer (a sequence left empty happens). " + DTYPES,
        "invalid": "One rule broken: `query_start_loc` starting at -1 or decreasing, `num_sampled` above n + 1, "
                   "a draft count of -1, a sequence shorter than its rejected tokens, a float dtype, wrong "
                   "lengths of inputs or outputs.",
    },
    bench=prepare_bench,
    launches={"triton": 1, "torch": 10},
    floors=(
        Floor("batch: more than one program", 4, "Triton: a later program sums the kept tokens of the requests "
              "before its own", interpreted=True),
        Floor("requests: some discarded (0 sampled)", 20, "num_sampled 0 drops all n + 1 tokens", interpreted=True),
        Floor("batch: a request with no drafts", 8, "n = 0: nothing rejected whatever num_sampled says",
              interpreted=True),
        Floor("prepare: a sequence left empty", 5, "a sequence of only rejected tokens: new length 0 (tiers)"),
        Floor("queries: some longer than n + 1 (prefill chunks)", 3, "a query keeps q - rejected tokens, more "
              "than n + 1", interpreted=True),
        Floor("batch: B=0", 5, "no request: new_query_start_loc = [0]", interpreted=True),
        Floor("dtype: query_start_loc int64", 10, "new_query_start_loc and token_indices take its dtype"),
    ),
)


# ---------------------------------------------------------------- eagle.copy_and_expand_inputs

def copy_and_expand_inputs_worked() -> Example:
    """No shift, P = 2: request 0 keeps 2 of its 3 tokens (one rejected slot of padding), request 1 keeps
    both; each gets its next token and one masked parallel-drafting slot."""
    size = 5 + 2 * 2
    return Example("valid", inputs={
        "target_token_ids": np.array([10, 11, 12, 13, 14], i32),
        "target_positions": np.array([100, 101, 102, 200, 201], i64),
        "next_token_ids": np.array([50, 60], i32),
        "query_start_loc": np.array([0, 3, 5], i32),
        "query_end_loc": np.array([1, 4], i32),
        "padding_token_id": -1,
        "parallel_drafting_token_id": 99,
        "P": 2,
        "shift_input_ids": False,
        "max_query_len": 3,
    }, outputs={"out_input_ids": Buffer((size,), "int32"), "out_positions": Buffer((size,), "int64"),
                "out_is_rejected_token_mask": Buffer((size,), "bool"),
                "out_is_masked_token_mask": Buffer((size,), "bool"),
                "out_new_token_indices": Buffer((4,), "int32"), "out_hidden_state_mapping": Buffer((5,), "int32")})


def copy_expand_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: a draft model's next pass (no shift, P = 1): K + 1 tokens per request, the accepted ones kept
    (the rest padding, id -1), positions after contexts of 100 to 4000, int32 ids, int64 positions."""
    width, size = BENCH_SPEC + 1, (BENCH_SPEC + 1) * batch
    qsl = verify_offsets(batch)
    positions = (rng.integers(100, 4000, batch)[:, None] + np.arange(width)).reshape(-1)
    return Example("valid", inputs={
        "target_token_ids": bench.token_ids(rng, size, vocab), "target_positions": positions.astype(i64),
        "next_token_ids": bench.token_ids(rng, batch, vocab), "query_start_loc": qsl,
        "query_end_loc": (qsl[:-1] + bench.accepted_counts(rng, batch, BENCH_SPEC)).astype(i32),
        "padding_token_id": -1, "parallel_drafting_token_id": vocab - 1, "P": 1, "shift_input_ids": False,
        "max_query_len": width,
    }, outputs={"out_input_ids": Buffer((size + batch,), "int32"), "out_positions": Buffer((size + batch,), "int64"),
                "out_is_rejected_token_mask": Buffer((size + batch,), "bool"),
                "out_is_masked_token_mask": Buffer((size + batch,), "bool"),
                "out_new_token_indices": Buffer((batch,), "int32"),
                "out_hidden_state_mapping": Buffer((size,), "int32")})


COPY_AND_EXPAND_INPUTS = wired(
    name="eagle.copy_and_expand_inputs",
    hazard=None, invariants=None,
    hints=("max_query_len",),
    dtype_follows={"next_token_ids": "target_token_ids", "query_end_loc": "query_start_loc", "out_input_ids": "target_token_ids", "out_positions": "target_positions"},
    doc="lay out each request's drafting input: kept ids, next token, parallel slots, rejected padding",
    inputs=(
        I("target_token_ids", IDX, "N", doc="the target pass's input ids; N may exceed qsl[B]"),
        I("target_positions", IDX, "N", doc="their positions, >= 0"),
        I("next_token_ids", IDX, "B", doc="dtype of target_token_ids; each request's newly sampled token"),
        I("query_start_loc", IDX, "B+1", doc=QSL),
        I("query_end_loc", IDX, "B", doc="dtype of query_start_loc; the last kept token, qs <= qe < qn"),
        I("padding_token_id", "int", doc="id written in rejected slots (fits the id dtype)"),
        I("parallel_drafting_token_id", "int", doc="id written in the P - 1 parallel slots"),
        I("P", "int", doc="slots per request for the next token and parallel drafting, >= 1"),
        I("shift_input_ids", "bool", doc="Python bool; True: drop each query's first id (EAGLE-style shift)"),
        I("max_query_len", "int", optional=True, doc="a host hint: None, or at least the longest query qn - qs "
                                                    "(lets a kernel size its grid without a device read)"),
    ),
    outputs=(
        O("out_input_ids", IDX, "N + B*P - (B if shift)", doc="dtype of target_token_ids"),
        O("out_positions", IDX, "N + B*P - (B if shift)", doc="dtype of target_positions; 0 in rejected slots"),
        O("out_is_rejected_token_mask", "bool", "N + B*P - (B if shift)", doc="True in padding slots"),
        O("out_is_masked_token_mask", "bool", "N + B*P - (B if shift)", doc="True in parallel-drafting slots"),
        O("out_new_token_indices", "int32", "B*P", doc="where each request's P new slots landed"),
        O("out_hidden_state_mapping", "int32", "N", doc="where each target token's hidden state goes; "
                                                      "written only when shifting"),
    ),
    semantics="""\
Request r has qs = `query_start_loc[r]`, qn = `query_start_loc[r+1]`, qe = `query_end_loc[r]`, and
rej = qn - qe - 1 rejected tokens after qe. Its output span starts at out0 and holds kept + P + rej
slots, j = 0 .. kept + P + rej - 1:
- no shift: kept = qe - qs + 1 ids copied from `target_token_ids[qs + j]`, out0 = qs + r * P;
- shift: kept = qe - qs ids copied from `target_token_ids[qs + 1 + j]` (each query's first id is
  dropped), out0 = qs + r * (P - 1);
- slot kept: `next_token_ids[r]`; slots kept + 1 .. kept + P - 1: `parallel_drafting_token_id`, with
  `out_is_masked_token_mask` True; the last rej slots: `padding_token_id`, with
  `out_is_rejected_token_mask` True (both masks False elsewhere in the span);
- `out_positions[out0 + j]` = `target_positions[qs]` + j, and 0 in the rejected slots;
- `out_new_token_indices[r * P + i]` = out0 + kept + i for i < P;
- shift only: `out_hidden_state_mapping[qs + j]` = out0 + j for j < qn - qs.

The spans of all requests are written and nothing else: when N exceeds qsl[B] the tails of the four
token-length outputs and of the hidden-state mapping are left untouched, and without shift the mapping is
not written at all.

Invalid: `query_start_loc` not starting at 0, decreasing or ending beyond N, `query_end_loc` outside
[qs, qn), negative positions or positions + N + P that overflow their dtype, padding or parallel ids that
do not fit the id dtype, P below 1, `shift_input_ids` not a bool, a `max_query_len` hint below the
longest query, wrong dtypes or lengths.""",
    tiers={
        "valid": "B up to 512 requests of 1 to 12 tokens; each query kept whole or cut at a drawn end "
                 "(rejected tokens); buffers exactly as long as needed or 1 or 5 tokens longer; shift on or "
                 "off; P of 1, 2, 3 or 5; padding id 0, -1 or V; parallel id V - 1, V or 0. Id and position "
                 "dtypes int32 or int64 independently; a quarter of the int64 positions past 2**31.",
        "invalid": "One rule broken: P = 0, `shift_input_ids` an int, `next_token_ids` of another dtype than "
                   "the ids, a float `query_end_loc`, a padding id of 2^63, `query_end_loc` at qn, a last "
                   "offset beyond N, a `max_query_len` hint one below the longest query, output buffers of the "
                   "wrong dtype or length.",
    },
    bench=copy_expand_bench,
    launches={"triton": 1, "torch": 23},   # Torch: 19, and the hidden-state mapping's 4 when shifting
    floors=(
        Floor("copy_expand: rejected tokens", 20, "the last rej slots: padding id, rejected mask, position 0",
              interpreted=True),
        Floor("copy_expand: buffers longer than needed", 15, "tails past qsl[B] are left untouched", interpreted=True),
        Floor("copy_expand: shift=True, P=1", 6, "EAGLE: each query's first id dropped, no parallel slot",
              interpreted=True),
        Floor("copy_expand: shift=True, P=>1", 8, "out0 = qs + r * (P - 1), masked parallel slots",
              interpreted=True),
        Floor("copy_expand: shift=False, P=1", 4, "a draft model's pass: ids kept whole, the mapping not written",
              interpreted=True),
        Floor("copy_expand: shift=False, P=>1", 2, "out0 = qs + r * P without shift"),
        Floor("copy_expand: P >= 16 (past the span codes cached warm)", 3, "16 parallel slots: a wide span (Torch: "
              "its table of slot codes grows past the warm 16)", interpreted=True),
        Floor("copy_expand: int64 positions past 2**31", 1, "a position held or added in 32 bits wraps",
              interpreted=True),
        Floor("max_query_len: None", 3, "no host hint: sizes from the buffers"),
        Floor("max_query_len: exact", 10, "a hint equal to the longest query (a grid sized from it)"),
        programs_floor(10),
    ),
)


# ---------------------------------------------------------------- eagle.extend_queries

def extend_queries_worked() -> Example:
    """Three queries (one empty) each grow by 2 tokens."""
    return Example("valid", inputs={
        "query_start_loc": np.array([0, 2, 2, 5], i32),
        "seq_lens": np.array([10, 3, 7], i64),
        "N": 2,
    }, outputs={"new_query_start_loc": Buffer((4,), "int32"), "new_seq_lens": Buffer((3,), "int64")})


def extend_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: K + 1 query tokens per request, contexts of 100 to 4000, each query growing by N = 1."""
    return Example("valid", inputs={
        "query_start_loc": verify_offsets(batch), "seq_lens": rng.integers(100, 4000, batch).astype(i32), "N": 1,
    }, outputs={"new_query_start_loc": Buffer((batch + 1,), "int32"), "new_seq_lens": Buffer((batch,), "int32")})


EXTEND_QUERIES = wired(
    name="eagle.extend_queries",
    hazard=None, invariants=None, rows=None,
    dtype_follows={"new_query_start_loc": "query_start_loc", "new_seq_lens": "seq_lens"},
    doc="every query grows by N tokens: shifted offsets, longer sequences",
    inputs=(I("query_start_loc", IDX, "B+1", doc=QSL),
            I("seq_lens", IDX, "B", doc="sequence length of each request, >= 0"),
            I("N", "int", doc="tokens added to every query, >= 0")),
    outputs=(O("new_query_start_loc", IDX, "B+1", doc="dtype of query_start_loc; written: every entry"),
             O("new_seq_lens", IDX, "B", doc="dtype of seq_lens; written: every entry")),
    semantics="""\
- `new_query_start_loc[r]` = `query_start_loc[r]` + N * r for r = 0 .. B;
- `new_seq_lens[r]` = `seq_lens[r]` + N.

The host bookkeeping that goes with it (the token total grows by B * N, the longest query and the
longest sequence by N) is the caller's, not part of the stage.

Invalid: `query_start_loc` not starting at 0 or decreasing, a negative sequence length, N negative or not
a Python int, results that do not fit the dtype.""",
    tiers={
        "valid": "B from 0 to 1024, queries of 0 to 11 tokens, sequences up to 4000 longer than their query, "
                 "N of 0, 1, 2, 3 or 7. " + DTYPES,
        "invalid": "One rule broken: N = -1, N a float, N = 2^63 (overflow), a sequence length of -1, "
                   "`query_start_loc` starting at 3 or decreasing, `seq_lens` uint8 or too long, output "
                   "buffers of the wrong dtype or length.",
    },
    bench=extend_bench,
    launches={"triton": 1, "torch": 2},
    floors=(
        Floor("extend: N = 0", 2, "N = 0: both outputs are the inputs", interpreted=True),
        Floor("extend: an empty query", 10, "a query of 0 tokens grows too", interpreted=True),
        Floor("extend: B = 0", 3, "no request: new_query_start_loc = [0]", interpreted=True),
        Floor("dtype: query_start_loc int64", 15, "new_query_start_loc takes its dtype"),
        Floor("dtype: seq_lens int64", 15, "new_seq_lens takes its dtype"),
        programs_floor(4, interpreted=False),
    ),
)


# ---------------------------------------------------------------- eagle.step_slot_mapping

def step_slot_mapping_worked() -> Example:
    """Row 0 advances into block 0 (id 3); row 1 reaches max_model_len and is clamped; row 2 is past
    batch_size (untouched); slots 2 and 3 are CUDA-graph padding. The block table is a strided view."""
    return Example("valid", inputs={
        "positions": np.array([2, 9, 5], i64),
        "block_table": np.array([[3, 4], [5, 6], [7, 8]], i32),
        "seq_lens": np.array([3, 10, 6], i32),
        "block_size": 4,
        "max_model_len": 10,
        "batch_size": 2,
        "input_batch_size": 4,
    }, outputs={"clamped_positions": Buffer((3,), "int64"), "slot_mapping": Buffer((4,), "int64")},
        layouts={"block_table": Layout((2, 1), (0, 3))})


def step_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: one drafting step of B real rows (no graph padding), block size 16, an 8192-token model
    (512 blocks per row, distinct block ids), sequences of 100 to 4000, int64 positions."""
    block, max_len = 16, 8192
    seq = rng.integers(100, 4000, batch)
    table = rng.permutation(batch * (max_len // block)).reshape(batch, max_len // block)
    return Example("valid", inputs={
        "positions": (seq - 1).astype(i64), "block_table": table.astype(i32), "seq_lens": seq.astype(i32),
        "block_size": block, "max_model_len": max_len, "batch_size": batch, "input_batch_size": batch,
    }, outputs={"clamped_positions": Buffer((batch,), "int64"), "slot_mapping": Buffer((batch,), "int64")})


STEP_SLOT_MAPPING = wired(
    name="eagle.step_slot_mapping",
    hazard=None, invariants=None,
    dtype_follows={"clamped_positions": "positions"},
    bounded={"B": None},   # B counts block-table rows (the batch plus graph padding rows), not drawn as a batch
    doc="one drafting step: next positions (clamped past max_model_len), their KV slots, longer sequences",
    inputs=(
        I("positions", IDX, "B", doc="each request's current position"),
        I("block_table", IDX, "B, NB", strided=True, doc="KV-cache block ids per request, NB >= 1"),
        I("seq_lens", IDX, "B", inout=True, doc="sequence lengths, <= max_model_len; updated for the real rows"),
        I("block_size", "int", doc="tokens per KV block, >= 1"),
        I("max_model_len", "int", doc="longest sequence the model takes, >= 1"),
        I("batch_size", "int", doc="real rows; <= input_batch_size and <= B"),
        I("input_batch_size", "int", doc="CUDA-graph padded batch: the length of slot_mapping"),
    ),
    outputs=(O("clamped_positions", IDX, "B", doc="dtype of positions; written: real rows"),
             O("slot_mapping", "int64", "input_batch_size", doc="written: every entry, -1 for padded rows")),
    semantics="""\
For each real row r < `batch_size`, with p = `positions[r]` + 1:
- when p >= `max_model_len` the row has run out of room: `clamped_positions[r]` = 0,
  `slot_mapping[r]` = -1 and `seq_lens[r]` = 1;
- otherwise `clamped_positions[r]` = p, blk = min(p // `block_size`, NB - 1) (positions beyond the
  table use its last block), `slot_mapping[r]` = `block_table[r, blk]` * `block_size` + p % `block_size`
  computed in int64, and `seq_lens[r]` = min(`seq_lens[r]` + 1, `max_model_len`).

For `batch_size` <= r < `input_batch_size`: `slot_mapping[r]` = -1. Rows of `seq_lens` and
`clamped_positions` from `batch_size` on are not written, and those rows of the inputs (which may hold
anything) affect nothing.

Invalid (values checked in the real rows only): `batch_size` above `input_batch_size` or B, `block_size` or
`max_model_len` below 1, `max_model_len` beyond the dtype of `seq_lens`, NB = 0, a negative position or one
whose successor overflows, a sequence length below 0 or above `max_model_len`, a negative block id or one
whose slot overflows int64, wrong dtypes or lengths.""",
    tiers={
        "valid": "B from 0 to 1024, sometimes 2 extra rows past `batch_size` holding junk, `input_batch_size` "
                 "equal to `batch_size` or 1 or 9 larger; block size 1, 7 or 16, NB from 1 to 6; "
                 "`max_model_len` equal to the table's capacity, 1 or 3 more, half, or 1; positions inside, "
                 "just below, at and past the limit, or past the table; block ids up to 2^31 - 1 (slots "
                 "beyond int32); a block table with rows further apart than their length. " + DTYPES,
        "invalid": "One rule broken: `batch_size` above `input_batch_size` or B, block size 0, "
                   "`max_model_len` 0, NB = 0, a position of -1, a sequence longer than `max_model_len`, a "
                   "block id of -1, wrong dtypes or lengths of inputs and outputs.",
    },
    bench=step_bench,
    launches={"triton": 1, "torch": 11},   # Torch: 10 without padded rows or without positions past the table
    floors=(
        Floor("step: a position reaches max_model_len", 20, "p >= max_model_len: position 0, slot -1, length 1",
              interpreted=True),
        Floor("step: a row with room past the table (its last block)", 8, "blk = min(p // block_size, NB - 1)",
              interpreted=True),
        Floor("step: max_model_len one past the table, a row at its last position", 3, "the block clamp's edge: "
              "an off-by-one clamp (tests/planted_eagle.py) passes every other draw", interpreted=True),
        Floor("step: a row with room whose sequence is at max_model_len", 3, "seq_lens = min(seq_lens + 1, "
              "max_model_len)", interpreted=True),
        Floor("step: CUDA-graph padded rows", 20, "rows batch_size .. input_batch_size - 1: slot -1",
              interpreted=True),
        Floor("step: junk rows past batch_size", 15, "rows past batch_size are not read or written",
              interpreted=True),
        Floor("step: slots beyond int32", 10, "the slot is computed in int64", interpreted=True),
        Floor("step: max_model_len beyond int32", 2, "positions and blocks past 32 bits (Triton: the wide path)"),
        Floor("step: block size not a power of two", 6, "Triton: a division, not a shift", interpreted=True),
        Floor("layout: row stride > row length", 15, "a strided block table", interpreted=True),
        Floor("dtype: positions int64", 10, "clamped_positions takes its dtype"),
        programs_floor(4, interpreted=False),
    ),
)

STAGES = (NEXT_TOKEN_PADDED, PREPARE_INPUTS_PADDED, VERIFY_AND_PREPARE_PADDED, PREPARE_INPUTS, COPY_AND_EXPAND_INPUTS, EXTEND_QUERIES,
          STEP_SLOT_MAPPING)

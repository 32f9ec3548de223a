"""Strategies of the `eagle` family.

Index dtypes (int32, int64) are drawn wherever the contract leaves them open; rows a stage must not
touch (past num_reqs, past batch_size) are filled with stale values it must not read into its outputs.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from specverify.records.stage import BENCH_SPEC, Buffer, DrawContext, Example, Layout
from specverify.strategies import rejection
from specverify.strategies.blocks import (PLACEHOLDER, TILE_ROWS, DraftBatch, batch_size, bound, draft_batch,
                                          exclusive_offsets, generator, host_hint, inclusive_offsets, invalid, label,
                                          label_programs, labelled_dtype, layout, mode, one_invalid, request_rows,
                                          short, tile_rows, vocab_size)

INT32_MAX = 2**31 - 1
LANE_ROWS = 128     # rows per program of the Triton one-lane-per-row kernels (ROWS)
COPY_ROWS = 2       # requests per program of copy_and_expand_inputs' Triton kernel
STEP_ROWS = 64      # slots per program of step_slot_mapping's Triton kernel


@st.composite
def spanning_batch(draw, ctx: DrawContext, rows: int, kind: str) -> DraftBatch:
    """`draft_batch`, one draw in six of more than `rows` requests (up to the context's limit): a Triton
    kernel of `rows` requests per program then runs two programs or more, whose later ones start past
    the first requests (and, in prepare_inputs, sum their kept tokens). Shrinks to the plain draw."""
    several = draw(st.sampled_from([False] * 5 + [True]))
    return draw(draft_batch(ctx, low=min(rows + 1, ctx.max_batch) if several else 0, kind=kind))


def buffers(**specs: tuple) -> dict[str, Buffer]:
    """Output buffers by field: name=(shape, dtype)."""
    return {name: Buffer(tuple(int(n) for n in shape), dtype) for name, (shape, dtype) in specs.items()}


def column_rows(**columns) -> tuple[list[str], list[list]]:
    """One row per request; a 2-D column shows its row, a missing entry '?'."""
    length = max((len(v) for v in columns.values() if v is not None), default=0)
    rows = []
    for r in range(length):
        row = [r]
        for v in columns.values():
            cell = None if v is None else ("?" if r >= len(v) else v[r])
            row.append(short(cell) if isinstance(cell, np.ndarray) else
                       cell.item() if isinstance(cell, np.generic) else cell)
        rows.append(row)
    return ["req", *columns], rows


def strided(name: str, layout: Layout | None) -> dict[str, Layout]:
    """Example.layouts for one input: empty when contiguous."""
    return {} if layout is None else {name: layout}


def stale(rng: np.random.Generator, values: np.ndarray, start: int) -> np.ndarray:
    """`values` with every entry from `start` on replaced by junk a stage must not read."""
    out = values.copy()
    out[start:] = rng.integers(-7, 50, len(out) - start)
    return out


def other_index_dtype(dtype) -> str:
    return "int64" if np.dtype(dtype) == np.int32 else "int32"


def unlike(ex: Example, name: str, like: str) -> Example:
    """Output `name` in the other index dtype than input `like`, whose dtype it must have."""
    buf = ex.outputs[name]
    return invalid(ex, name, f"dtype of {like}",
                   outputs={name: Buffer(buf.shape, other_index_dtype(ex.inputs[like].dtype), buf.layout)})


def with_value(ex: Example, name: str, index: int, value: int, rule: str) -> Example:
    changed = ex.inputs[name].copy()
    changed[index] = value
    return invalid(ex, name, rule, **{name: changed})


# ---------------------------------------------------------------- eagle.next_token_padded

@st.composite
def sampled_rows(draw, batch: int, width: int, vocab: int, stress: bool = False, oov: bool = True) -> np.ndarray:
    """Rows of sampled ids: an emitted prefix then -1 (what rejection emits), rows with gaps of -1 and
    OOV ids (-1 only, without `oov`) before later valid ones, or a mix of both (always when `stress`)."""
    rng = draw(generator())
    ids = rng.integers(0, draw(bound(vocab)), (batch, width))
    prefix = np.arange(width) < rng.integers(0, width + 1, (batch, 1))
    holes = rng.random((batch, width)) < draw(st.sampled_from([0.2, 0.5, 0.9]))
    junk = rng.choice([PLACEHOLDER, vocab, vocab + 7] if oov else [PLACEHOLDER] * 3, (batch, width))
    kind = draw(st.sampled_from(["prefix", "gaps", "mixed"]))
    kind = "mixed" if stress else kind
    gap_rows = np.full((batch, 1), kind == "gaps") if kind != "mixed" else rng.random((batch, 1)) < 0.5
    ids = np.where(gap_rows, np.where(holes, junk, ids), np.where(prefix, ids, PLACEHOLDER))
    label(f"sampled: {kind}")
    if (ids >= vocab).any():
        label("sampled: an id >= V")
    valid = (ids != PLACEHOLDER) & (ids < vocab)
    if (valid[:, 1:] & np.logical_or.accumulate(~valid, axis=1)[:, :-1]).any():
        label("sampled: a valid id after a gap")
    if batch and (~valid.any(axis=1)).any():
        label("sampled: a row without a valid id")
    return ids.astype(np.int32)


@st.composite
def next_token_padded_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    stress = kind == "stress"
    if kind == "single":
        batch, width = 1, 1
    else:
        batch, width = draw(batch_size(ctx)), draw(st.one_of(st.integers(0, 9), st.integers(0, 33)))
    vocab = draw(vocab_size(ctx))
    rng = draw(generator())
    rate = draw(st.sampled_from([0.0, 0.3, 1.0]))
    discard = rng.random(batch) < (0.3 if stress else rate)
    if ctx.excludes("discarded_rows"):
        discard[:] = False
    if discard.any():
        label("discard: all rows" if discard.all() else "discard: some rows")
    if width == 0:
        label("sampled: S = 0")
    label_programs(batch, tile_rows(width))
    return Example(
        tier="valid",
        inputs={"sampled_token_ids": draw(sampled_rows(batch, width, vocab, stress, not ctx.excludes("oov_ids"))),
                "discard_mask": discard,
                "backup_next_token_ids": rng.integers(0, draw(bound(vocab)), batch).astype(np.int32),
                "vocab_size": vocab},
        outputs=buffers(next_token_ids=((batch,), "int32"), valid_sampled_tokens_count=((batch,), "int32")),
        layouts=strided("sampled_token_ids", draw(layout(2, True if stress else None))),
    )


@st.composite
def next_token_padded_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(next_token_padded_valid(ctx))
    x = ex.inputs
    found = [invalid(ex, "vocab_size", "vocab_size >= 1", vocab_size=0)]
    if x["sampled_token_ids"].size:
        bad = x["sampled_token_ids"].copy()
        bad.reshape(-1)[bad.size // 2] = -2
        found.append(invalid(ex, "sampled_token_ids", "ids >= -1", sampled_token_ids=bad))
    return draw(one_invalid(found))


def next_token_padded_table(ex: Example):
    x = ex.inputs
    return column_rows(discard=x["discard_mask"], backup=x["backup_next_token_ids"], sampled=x["sampled_token_ids"])


# ---------------------------------------------------------------- eagle.prepare_inputs_padded

@st.composite
def query_lengths(draw, counts: np.ndarray) -> np.ndarray:
    """Query lengths of requests with `counts` drafts: n + 1 (decode), a few longer (prefill chunks)."""
    rng = draw(generator())
    extra = np.where(rng.random(len(counts)) < draw(st.sampled_from([0.0, 0.2])), rng.integers(1, 20, len(counts)), 0)
    if extra.any():
        label("queries: some longer than n + 1 (prefill chunks)")
    return counts + 1 + extra


@st.composite
def sampled_counts(draw, counts: np.ndarray, stress: bool = False) -> np.ndarray:
    """Accepted + 1 per request (1 to n + 1), 0 for discarded requests (some always when `stress`)."""
    rng = draw(generator())
    sampled = rng.integers(1, counts + 2)
    if draw(st.booleans()) or stress:
        sampled[rng.random(len(counts)) < 0.3] = 0
        label("requests: some discarded (0 sampled)")
    return sampled


@st.composite
def prepare_inputs_padded_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    stress = kind == "stress"
    batch = draw(spanning_batch(ctx, LANE_ROWS, kind))
    b = batch.batch
    num_reqs = draw(st.one_of(st.just(b), st.integers(0, b)))
    num_reqs = min(num_reqs, max(b - 1, 0)) if stress else num_reqs
    label_programs(num_reqs, LANE_ROWS)
    qsl = exclusive_offsets(draw(query_lengths(batch.counts)), draw(labelled_dtype("query_start_loc", ctx)))
    cu, count = inclusive_offsets(batch.counts), draw(sampled_counts(batch.counts, stress)).astype(np.int32)
    if num_reqs < b:
        label("num_reqs < B")
        if draw(st.booleans()) or stress:
            label("stale rows past num_reqs")
            rng = draw(generator())
            cu, count, qsl = stale(rng, cu, num_reqs), stale(rng, count, num_reqs), stale(rng, qsl, num_reqs + 1)
    return Example(
        tier="valid",
        inputs={"cu_num_draft_tokens": cu, "valid_sampled_tokens_count": count, "query_start_loc": qsl,
                "num_reqs": num_reqs},
        outputs=buffers(token_indices_to_sample=((b,), qsl.dtype.name), num_rejected_tokens=((b,), "int32")),
    )


@st.composite
def prepare_inputs_padded_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(prepare_inputs_padded_valid(ctx))
    x = ex.inputs
    b, n = len(x["cu_num_draft_tokens"]), x["num_reqs"]
    found = [
        invalid(ex, "num_reqs", "num_reqs <= B", num_reqs=b + 1),
        invalid(ex, "num_reqs", "num_reqs >= 0", num_reqs=-1),
        unlike(ex, "token_indices_to_sample", "query_start_loc"),
    ]
    if n:
        first = int(x["cu_num_draft_tokens"][0])
        found += [with_value(ex, "valid_sampled_tokens_count", 0, first + 2, "count <= n + 1"),
                  with_value(ex, "valid_sampled_tokens_count", n - 1, -1, "count >= 0"),
                  with_value(ex, "query_start_loc", 0, 1, "leading 0")]
        if n >= 2 and first > 0:
            found.append(with_value(ex, "cu_num_draft_tokens", 1, first - 1, "non-decreasing"))
        if int(x["query_start_loc"][1]) > 0 and n >= 2:
            found.append(with_value(ex, "query_start_loc", 2, 0, "non-decreasing"))
    return draw(one_invalid(found))


def prepare_inputs_padded_table(ex: Example):
    x = ex.inputs
    cu = x["cu_num_draft_tokens"]
    return column_rows(n=np.diff(cu, prepend=0), count=x["valid_sampled_tokens_count"],
                      qs=x["query_start_loc"][:-1], qn=x["query_start_loc"][1:],
                      read=np.arange(len(cu)) < x["num_reqs"])


# ---------------------------------------------------------------- eagle.verify_and_prepare_padded

@st.composite
def verified_buffer(draw, counts: np.ndarray, columns: int, is_greedy, vocab: int, stress: bool = False):
    """output_token_ids as the caller hands it to greedy verification: -1 (the engine's pre-fill), rows
    that are not greedy already holding what random verification emitted (1 to n + 1 ids, an
    out-of-vocabulary bonus among them at times), and at times (always when `stress`) junk ids in the
    first n + 1 slots of greedy rows that verification may leave standing. Past slot n only -1 or
    out-of-vocabulary ids, so a row never holds more than n + 1 valid ids."""
    rng = draw(generator())
    batch = len(counts)
    cols = np.arange(columns)
    ids = rng.integers(0, draw(bound(vocab)), (batch, columns))
    ids = np.where(rng.random((batch, columns)) < 0.1, rng.choice([vocab, vocab + 7], (batch, columns)), ids)
    emitted = rng.integers(1, counts + 2)
    random_rows = np.zeros(batch, bool) if is_greedy is None else ~is_greedy
    out = np.where(random_rows[:, None] & (cols < emitted[:, None]), ids, PLACEHOLDER)
    if draw(st.booleans()) or stress:
        label("output_token_ids: junk in greedy rows' first n + 1 slots")
        junk = ~random_rows[:, None] & (cols <= counts[:, None]) & (rng.random((batch, columns)) < 0.5)
        out = np.where(junk, ids, out)
    if draw(st.booleans()) or stress:
        label("output_token_ids: out-of-vocabulary ids past n + 1")
        out = np.where((cols > counts[:, None]) & (rng.random((batch, columns)) < 0.3), vocab + 7, out)
    return out.astype(np.int32)


@st.composite
def verify_and_prepare_padded_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    stress = kind == "stress"
    batch = draw(spanning_batch(ctx, TILE_ROWS, kind))
    b, counts, spec = batch.batch, batch.counts, batch.max_spec_len
    vocab = draw(vocab_size(ctx))
    rng = draw(generator())
    top = draw(bound(vocab))
    argmax = rng.integers(0, top, batch.num_tokens).astype(np.int64)
    is_greedy = draw(rejection.greedy_rows(b, stress, ctx.given("is_greedy")))
    label_programs(b, tile_rows(spec + 1))
    num_reqs = draw(st.one_of(st.just(b), st.integers(0, b)))
    num_reqs = min(num_reqs, max(b - 1, 0)) if stress else num_reqs
    qsl = exclusive_offsets(draw(query_lengths(counts)), draw(labelled_dtype("query_start_loc", ctx)))
    if num_reqs < b:
        label("num_reqs < B")
        if draw(st.booleans()) or stress:
            label("stale query_start_loc past num_reqs")
            qsl = stale(rng, qsl, num_reqs + 1)
    discard = rng.random(b) < (0.3 if stress else draw(st.sampled_from([0.0, 0.3, 1.0])))
    if discard.any():
        label("discard: all rows" if discard.all() else "discard: some rows")
    return Example(
        tier="valid",
        inputs={
            "draft_token_ids": draw(rejection.drafts_against(argmax, counts, vocab, stress)),
            "target_argmax": argmax,
            "bonus_token_ids": rng.integers(0, top, b).astype(np.int64),
            "cu_num_draft_tokens": inclusive_offsets(counts),
            "is_greedy": is_greedy,
            "max_spec_len": spec,
            "output_token_ids": draw(verified_buffer(counts, spec + 1, is_greedy, vocab, stress)),
            "discard_mask": discard,
            "backup_next_token_ids": rng.integers(0, top, b).astype(np.int32),
            "vocab_size": vocab,
            "query_start_loc": qsl,
            "num_reqs": num_reqs,
        },
        outputs=buffers(next_token_ids=((b,), "int32"), valid_sampled_tokens_count=((b,), "int32"),
                        token_indices_to_sample=((b,), qsl.dtype.name), num_rejected_tokens=((b,), "int32")),
        layouts=strided("output_token_ids", draw(layout(2, True if stress else None))),
    )


@st.composite
def verify_and_prepare_padded_invalid(draw, ctx: DrawContext) -> Example:
    """The value rules of the three pieces, each broken on its own (dtypes, ranks, lengths and None come
    from the record). A -2 is planted where verification does not write: past a row's n + 1 slots."""
    ex = draw(verify_and_prepare_padded_valid(ctx))
    x = ex.inputs
    b, n = len(x["cu_num_draft_tokens"]), x["num_reqs"]
    found = [as_inout(c) for c in rejection.batch_corruptions(ex)] + [
        invalid(ex, "vocab_size", "vocab_size >= 1", vocab_size=0),
        invalid(ex, "num_reqs", "num_reqs <= B", num_reqs=b + 1),
        unlike(ex, "token_indices_to_sample", "query_start_loc"),
    ]
    if len(x["target_argmax"]):
        found.append(with_value(ex, "target_argmax", 0, -1, "ids >= 0"))
    counts = np.diff(x["cu_num_draft_tokens"], prepend=0)
    free = np.flatnonzero(counts + 1 < x["max_spec_len"] + 1)
    if len(free):
        out = x["output_token_ids"].copy()
        out[free[0], -1] = -2
        found.append(invalid(ex, "output_token_ids", "ids >= -1", output_token_ids=out))
    if n:
        found.append(with_value(ex, "query_start_loc", 0, 1, "leading 0"))
        r = int(np.argmax(~x["discard_mask"][:n])) if not x["discard_mask"][:n].all() else None
        if r is not None and x["max_spec_len"] > counts[r]:  # one valid id more than n + 1 in a read row
            out = x["output_token_ids"].copy()
            out[r, :] = 0
            found.append(invalid(ex, "valid_sampled_tokens_count", "count <= n + 1", output_token_ids=out))
    return draw(one_invalid(found))


def verify_and_prepare_padded_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """The engine's all-greedy step: BENCH_SPEC drafts per request, each accepted with probability 0.7
    until the first rejection, output_token_ids pre-filled with -1, queries of BENCH_SPEC + 1 tokens,
    no request discarded, every request real."""
    k = BENCH_SPEC
    argmax = rng.integers(0, vocab, batch * k)
    accepted = rng.random(batch * k) < 0.7
    drafts = np.where(accepted, argmax, (argmax + 1) % vocab if vocab > 1 else PLACEHOLDER)
    counts = np.full(batch, k)
    return Example("valid", inputs={
        "draft_token_ids": drafts.astype(np.int32), "target_argmax": argmax.astype(np.int64),
        "bonus_token_ids": rng.integers(0, vocab, batch).astype(np.int64),
        "cu_num_draft_tokens": inclusive_offsets(counts), "is_greedy": None, "max_spec_len": k,
        "output_token_ids": np.full((batch, k + 1), PLACEHOLDER, np.int32),
        "discard_mask": np.zeros(batch, bool),
        "backup_next_token_ids": rng.integers(0, vocab, batch).astype(np.int32), "vocab_size": vocab,
        "query_start_loc": exclusive_offsets(counts + 1), "num_reqs": batch,
    }, outputs=buffers(next_token_ids=((batch,), "int32"), valid_sampled_tokens_count=((batch,), "int32"),
                       token_indices_to_sample=((batch,), "int32"), num_rejected_tokens=((batch,), "int32")))


def as_inout(corrupted: Example) -> Example:
    """A rejection corruption that resizes the output_token_ids buffer, with that buffer an input here
    (its first S + 1 columns)."""
    buffer = corrupted.outputs.pop("output_token_ids", None)
    if buffer is not None:
        corrupted.inputs["output_token_ids"] = corrupted.inputs["output_token_ids"][:, :buffer.shape[1]].copy()
    return corrupted


def verify_and_prepare_padded_table(ex: Example):
    x = ex.inputs
    headers, rows = request_rows(
        x["cu_num_draft_tokens"],
        per_token={"draft_token_ids": x["draft_token_ids"], "target_argmax": x["target_argmax"]},
        per_request={"is_greedy": x["is_greedy"], "bonus": x["bonus_token_ids"], "discard": x["discard_mask"],
                     "backup": x["backup_next_token_ids"], "qsl_end": x["query_start_loc"][1:],
                     "read": np.arange(len(x["cu_num_draft_tokens"])) < x["num_reqs"]})
    for r, row in enumerate(rows):
        row.append(short(x["output_token_ids"][r]))
    return headers + ["output_token_ids (on entry)"], rows


# ---------------------------------------------------------------- eagle.prepare_inputs

@st.composite
def prepare_inputs_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    batch = draw(spanning_batch(ctx, TILE_ROWS, kind))
    label_programs(batch.batch, TILE_ROWS)
    counts = batch.counts
    q = draw(query_lengths(counts))
    sampled = draw(sampled_counts(counts, kind == "stress"))
    rejected = np.where(counts > 0, counts + 1 - sampled, 0)
    rng = draw(generator())
    seq_lens = q + rng.integers(0, draw(bound(300)), len(q)) * draw(st.sampled_from([0, 1]))
    if (seq_lens == rejected).any():
        label("prepare: a sequence left empty")
    dtypes = [draw(labelled_dtype(f, ctx)) for f in ("query_start_loc", "seq_lens", "num_draft_tokens", "num_sampled")]
    qsl = exclusive_offsets(q, dtypes[0])
    b = batch.batch
    return Example(
        tier="valid",
        inputs={"query_start_loc": qsl, "seq_lens": seq_lens.astype(dtypes[1]),
                "num_draft_tokens": counts.astype(dtypes[2]), "num_sampled": sampled.astype(dtypes[3])},
        outputs=buffers(new_query_start_loc=((b + 1,), dtypes[0]), new_seq_lens=((b,), dtypes[1]),
                        token_indices=((int((q - rejected).sum()),), dtypes[0])),
    )


@st.composite
def prepare_inputs_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(prepare_inputs_valid(ctx))
    x = ex.inputs
    b = len(x["seq_lens"])
    found = [
        with_value(ex, "query_start_loc", 0, -1, "leading 0"),
        unlike(ex, "new_query_start_loc", "query_start_loc"), unlike(ex, "token_indices", "query_start_loc"),
        unlike(ex, "new_seq_lens", "seq_lens"),
    ]
    if b:
        n, q = x["num_draft_tokens"], np.diff(x["query_start_loc"])
        found += [with_value(ex, "num_sampled", 0, int(n[0]) + 2, "num_sampled <= n + 1"),
                  with_value(ex, "num_draft_tokens", b - 1, -1, "counts >= 0")]
        drafted = np.flatnonzero(n > 0)
        if len(drafted):
            r = int(drafted[0])  # all rejected and a too short sequence: rej = n + 1 > seq_lens
            sampled, seq = x["num_sampled"].copy(), x["seq_lens"].copy()
            sampled[r] = seq[r] = 0
            found.append(invalid(ex, "seq_lens", "seq_lens >= rejected", num_sampled=sampled, seq_lens=seq))
        if b >= 2 and q[0] > 0:
            found.append(with_value(ex, "query_start_loc", 1, int(x["query_start_loc"][2]) + 1, "non-decreasing"))
    return draw(one_invalid(found))


def prepare_inputs_table(ex: Example):
    x = ex.inputs
    return column_rows(q=np.diff(x["query_start_loc"]), n=x["num_draft_tokens"], sampled=x["num_sampled"],
                      seq_len=x["seq_lens"])


# ---------------------------------------------------------------- eagle.copy_and_expand_inputs

@st.composite
def copy_and_expand_inputs_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    stress = kind == "stress"
    b = 1 if kind == "single" else draw(batch_size(ctx, 0, ctx.max_batch // 2))
    rng = draw(generator())
    q = rng.integers(1, (1 if kind == "single" else draw(st.sampled_from([2, 6, 12]))) + 1, b)
    qsl = exclusive_offsets(q, draw(labelled_dtype("query_start_loc", ctx)))
    ends = qsl[1:] - 1
    if draw(st.booleans()) or stress:
        ends = qsl[:-1] + rng.integers(0, q)
        label("copy_expand: rejected tokens")
    spare = draw(st.sampled_from([0, 0, 1, 5]))
    spare = max(spare, 1) if stress else spare
    if spare:
        label("copy_expand: buffers longer than needed")
    tokens, vocab = int(qsl[-1]) + spare, draw(vocab_size(ctx))
    ids, positions = draw(labelled_dtype("target_token_ids", ctx)), draw(labelled_dtype("target_positions", ctx))
    shift, parallel = draw(st.booleans()) or stress, draw(st.sampled_from([1, 1, 2, 3, 5]))
    parallel = 16 if parallel > 1 and rng.random() < 0.3 else parallel
    label(f"copy_expand: shift={shift}, P={'1' if parallel == 1 else '>1'}")
    if parallel >= 16:   # Torch: span codes past the 16 its warm cache holds (the cache grows)
        label("copy_expand: P >= 16 (past the span codes cached warm)")
    label_programs(b, COPY_ROWS)
    size = tokens + b * parallel - (b if shift else 0)
    top = draw(bound(vocab))
    target_ids = rng.integers(0, top, tokens).astype(ids)
    target_positions = rng.integers(0, draw(bound(5000)), tokens).astype(positions)
    next_ids = rng.integers(0, top, b).astype(ids)
    if positions == "int64" and b > 0 and draw(st.integers(0, 3)) == 0:     # a quarter: past int32
        target_positions += 2**31
        label("copy_expand: int64 positions past 2**31")
    return Example(
        tier="valid",
        inputs={"target_token_ids": target_ids,
                "target_positions": target_positions,
                "next_token_ids": next_ids,
                "query_start_loc": qsl, "query_end_loc": ends.astype(qsl.dtype),
                "padding_token_id": draw(st.sampled_from([0, PLACEHOLDER, vocab])),
                "parallel_drafting_token_id": draw(st.sampled_from([vocab - 1, vocab, 0])),
                "P": parallel, "shift_input_ids": shift,
                "max_query_len": draw(host_hint("max_query_len", int(q.max(initial=0)), ctx.given("max_query_len")))},
        outputs=buffers(out_input_ids=((size,), ids), out_positions=((size,), positions),
                        out_is_rejected_token_mask=((size,), "bool"), out_is_masked_token_mask=((size,), "bool"),
                        out_new_token_indices=((b * parallel,), "int32"),
                        out_hidden_state_mapping=((tokens,), "int32")),
    )


@st.composite
def copy_and_expand_inputs_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(copy_and_expand_inputs_valid(ctx))
    x = ex.inputs
    other = other_index_dtype(x["target_token_ids"].dtype)
    found = [
        invalid(ex, "P", "P >= 1", P=0),
        invalid(ex, "next_token_ids", "dtype of target_token_ids", next_token_ids=x["next_token_ids"].astype(other)),
        invalid(ex, "query_end_loc", "dtype of query_start_loc",
                query_end_loc=x["query_end_loc"].astype(other_index_dtype(x["query_start_loc"].dtype))),
        invalid(ex, "padding_token_id", "fits the id dtype", padding_token_id=2**63),
        unlike(ex, "out_input_ids", "target_token_ids"), unlike(ex, "out_positions", "target_positions"),
    ]
    b = len(x["next_token_ids"])
    if b:
        qsl = x["query_start_loc"]
        found += [with_value(ex, "query_end_loc", b - 1, int(qsl[-1]), "qs <= qe < qn"),
                  with_value(ex, "query_start_loc", b, len(x["target_token_ids"]) + 1, "last offset <= N"),
                  invalid(ex, "max_query_len", "the host hint >= the longest query",
                          max_query_len=int(np.diff(qsl).max()) - 1)]
    return draw(one_invalid(found))


def copy_and_expand_inputs_table(ex: Example):
    x = ex.inputs
    qsl = x["query_start_loc"]
    return column_rows(qs=qsl[:-1], qe=x["query_end_loc"], qn=qsl[1:], next=x["next_token_ids"],
                      ids=[x["target_token_ids"][a:e] for a, e in zip(qsl[:-1], qsl[1:])])


# ---------------------------------------------------------------- eagle.extend_queries

@st.composite
def extend_queries_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    b = 1 if kind == "single" else draw(batch_size(ctx))
    rng = draw(generator())
    q = np.ones(1, np.int64) if kind == "single" else rng.integers(0, 12, b)
    qsl = exclusive_offsets(q, draw(labelled_dtype("query_start_loc", ctx)))
    seq_dtype = draw(labelled_dtype("seq_lens", ctx))
    grow = max(draw(st.sampled_from([0, 1, 2, 3, 7])), int(kind == "stress"))
    label("extend: B = 0" if b == 0 else "extend: N = 0" if grow == 0 else "extend: N > 0")
    if (q == 0).any():
        label("extend: an empty query")
    label_programs(b + 1, LANE_ROWS)     # B + 1 offsets, one lane each
    return Example(
        tier="valid",
        inputs={"query_start_loc": qsl, "seq_lens": (q + rng.integers(0, draw(bound(4000)), b)).astype(seq_dtype),
                "N": grow},
        outputs=buffers(new_query_start_loc=((b + 1,), qsl.dtype.name), new_seq_lens=((b,), seq_dtype)),
    )


@st.composite
def extend_queries_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(extend_queries_valid(ctx))
    x = ex.inputs
    b = len(x["seq_lens"])
    found = [
        invalid(ex, "N", "N >= 0", N=-1),
        with_value(ex, "query_start_loc", 0, 3, "leading 0"),
        unlike(ex, "new_seq_lens", "seq_lens"), unlike(ex, "new_query_start_loc", "query_start_loc"),
    ]
    if b:
        found.append(with_value(ex, "seq_lens", b - 1, -1, "seq_lens >= 0"))
        found.append(invalid(ex, "N", "results fit the dtype", N=2**63))
        if b >= 2 and int(x["query_start_loc"][1]) > 0:
            found.append(with_value(ex, "query_start_loc", 2, 0, "non-decreasing"))
    return draw(one_invalid(found))


# ---------------------------------------------------------------- eagle.step_slot_mapping

@st.composite
def step_positions(draw, rng, batch: int, max_model_len: int, table_tokens: int, stress: bool = False) -> np.ndarray:
    """Positions below the limit, just below and at it (pos + 1 == max_model_len), beyond it, and at or
    beyond the block table's reach (pos + 1 >= its tokens: the last block is used); all of these together
    when `stress`."""
    kind = draw(st.sampled_from(["inside", "edges", "mixed"]))
    kind = "mixed" if stress else kind
    label(f"positions: {kind}")
    inside = rng.integers(0, max_model_len, batch)
    edges = max_model_len + rng.choice([-2, -1, 0, 5], batch)
    beyond_table = table_tokens - 1 + rng.integers(0, 4, batch)   # from the last position whose next one
                                                                  # lies past the table
    pick = {"inside": 0, "edges": 1, "mixed": 2}[kind]
    choice = np.full(batch, pick) if pick < 2 else rng.integers(0, 3, batch)
    return np.maximum(np.choose(choice, [inside, edges, beyond_table]), 0)


@st.composite
def step_slot_mapping_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    stress = kind == "stress"
    batch = 1 if kind == "single" else draw(batch_size(ctx))
    rows = batch + max(draw(st.sampled_from([0, 0, 2])), 2 * stress)
    input_batch = batch + max(draw(st.sampled_from([0, 0, 1, 9])), int(stress))
    if input_batch > batch:
        label("step: CUDA-graph padded rows")
    if rows > batch:
        label("step: junk rows past batch_size")
    label_programs(input_batch, STEP_ROWS)
    block, blocks = draw(st.sampled_from([1, 7, 16])), draw(st.integers(1, 6))
    if block == 7:
        label("step: block size not a power of two")
    capacity = blocks * block          # + 1: the first limit whose last position lies past the table
    max_model_len = draw(st.sampled_from([capacity, capacity + 1, capacity + 1, capacity + 3, max(1, capacity // 2),
                                          1]))
    rng = draw(generator())
    pos_dtype, table_dtype, seq_dtype = (draw(labelled_dtype(f, ctx)) for f in ("positions", "block_table", "seq_lens"))
    if np.dtype(pos_dtype) == np.dtype(seq_dtype) == np.int64 and draw(st.booleans()):
        label("step: max_model_len beyond int32")     # positions and their blocks past 32 bits
        max_model_len += INT32_MAX
    positions = draw(step_positions(rng, batch, max_model_len, blocks * block, stress))
    if (positions + 1 >= max_model_len).any():
        label("step: a position reaches max_model_len")
    ahead = positions + 1
    room = ahead < max_model_len
    past_table = room & (ahead >= capacity)
    if past_table.any():
        label("step: a row with room past the table (its last block)")
    if (past_table & (ahead == capacity) & (max_model_len == capacity + 1)).any():
        label("step: max_model_len one past the table, a row at its last position")
    wide, small = draw(st.booleans()), draw(bound(1000))   # both drawn: shrinking `wide` keeps the rest
    top = INT32_MAX if wide else small
    if top == INT32_MAX:
        label("step: slots beyond int32")
    table = rng.integers(0, top, (rows, blocks), endpoint=True)
    seq = rng.integers(0, max_model_len + 1, rows)
    if (room & (seq[:batch] == max_model_len)).any():
        label("step: a row with room whose sequence is at max_model_len")
    pad = rows - batch   # rows never read: junk
    positions = np.concatenate([positions, rng.integers(-5, 5, pad)])
    table[batch:] = -3
    seq[batch:] = rng.integers(-5, 5, pad)
    return Example(
        tier="valid",
        inputs={"positions": positions.astype(pos_dtype), "block_table": table.astype(table_dtype),
                "seq_lens": seq.astype(seq_dtype), "block_size": block, "max_model_len": max_model_len,
                "batch_size": batch, "input_batch_size": input_batch},
        outputs=buffers(clamped_positions=((rows,), pos_dtype), slot_mapping=((input_batch,), "int64")),
        layouts=strided("block_table", draw(layout(2, True if stress else None))),
    )


@st.composite
def step_slot_mapping_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(step_slot_mapping_valid(ctx))
    x = ex.inputs
    batch, rows = x["batch_size"], len(x["positions"])
    table = x["block_table"]
    found = [
        invalid(ex, "batch_size", "batch_size <= input_batch_size", batch_size=x["input_batch_size"] + 1),
        invalid(ex, "batch_size", "batch_size <= B", batch_size=rows + 1),
        invalid(ex, "block_size", "block_size >= 1", block_size=0),
        invalid(ex, "max_model_len", "max_model_len >= 1", max_model_len=0),
        invalid(ex, "block_table", "NB >= 1", block_table=table[:, :0]),
        unlike(ex, "clamped_positions", "positions"),
    ]
    if batch:
        found += [with_value(ex, "positions", batch - 1, -1, "positions >= 0"),
                  with_value(ex, "seq_lens", 0, x["max_model_len"] + 1, "seq_lens <= max_model_len")]
        bad = table.copy()
        bad[0, -1] = -1
        found.append(invalid(ex, "block_table", "block ids >= 0", block_table=bad))
    return draw(one_invalid(found))


def step_slot_mapping_table(ex: Example):
    x = ex.inputs
    real = np.arange(len(x["positions"])) < x["batch_size"]
    return column_rows(real=real, position=x["positions"], seq_len=x["seq_lens"], blocks=x["block_table"])

"""Strategies of the `output` family.

`output.parse` is a host stage: every array it takes is handed over in a drawn container
(`Example.containers`), so the oracle, the NumPy backend and outside implementations see the same
Python values, lists, ndarrays and CPU tensors an engine passes.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from specverify.records.stage import Buffer, DrawContext, Example
from specverify.strategies.blocks import (PLACEHOLDER, SMALL_ARRAY, batch_size, bound, draft_batch, generator,
                                          inclusive_offsets, index_dtype, invalid, label, mode, one_invalid, short,
                                          token_ids, vocab_size)

SMALL = 256   # elements of output_token_ids the host kernel filters in Python; more take a vectorized path
INDEX_CONTAINERS = ("list", "ndarray", "tensor")
ARRAY_CONTAINERS = ("ndarray", "tensor")
LOGPROB_FIELDS = ("token_ids", "logprobs", "ranks")


@st.composite
def emitted_rows(draw, batch: int, width: int, vocab: int, stress: bool = False) -> np.ndarray:
    """output_token_ids [B, S] int32: rejection-sampler rows (an emitted prefix, -1 after it, now and
    then an out-of-vocabulary id inside the prefix), or ids, -1 and OOV ids anywhere (a few ids are
    drawn one by one, see `token_ids`). When `stress`, the OOV ids are always there."""
    rng = draw(generator())
    kind = "scattered" if batch * width <= SMALL_ARRAY else draw(st.sampled_from(["prefix", "scattered"]))
    label(f"rows: {kind}")
    if kind == "scattered":
        return draw(token_ids(batch * width, vocab, stress=stress)).reshape(batch, width)
    emitted = rng.integers(0, width + 1, batch)
    ids = rng.integers(0, draw(bound(vocab)), (batch, width))
    ids[np.arange(width)[None, :] >= emitted[:, None]] = PLACEHOLDER
    rate = draw(st.sampled_from([0.0, 0.15, 0.4]))
    rate = max(rate, 0.15) if stress else rate
    if rate:
        oov = (rng.random((batch, width)) < rate) & (ids != PLACEHOLDER)
        ids[oov] = vocab + rng.choice([0, 7], (batch, width))[oov]
        label("rows: OOV ids inside the emitted prefix")
    return ids.astype(np.int32)


@st.composite
def discard_indices(draw, batch: int, stress: bool = False) -> np.ndarray:
    """Row indices to discard: none, some (unsorted), every row, or some named twice (some, maybe
    twice, when `stress`)."""
    kinds = ["none"] + (["some", "all", "duplicates"] if batch else [])
    kind = draw(st.sampled_from(kinds))
    kind = "some" if stress and kind in ("none", "all") and batch else kind
    label(f"discard: {kind}")
    rng = draw(generator())
    if kind == "none":
        rows = np.zeros(0, np.int64)
    elif kind == "all":
        rows = rng.permutation(batch)
    else:
        rows = rng.permutation(batch)[:draw(st.integers(1, batch))]
        if kind == "duplicates":
            rows = rng.permutation(np.concatenate([rows, rows[:draw(st.integers(1, len(rows)))]]))
    return rows.astype(draw(index_dtype()))


@st.composite
def logprob_arrays(draw, positions: int, vocab: int) -> dict[str, np.ndarray]:
    """token_ids, logprobs and ranks of k+1 candidates per flattened position (k from 0): logprobs
    include -inf, -0.0 and NaN, which must come back bit for bit."""
    rng = draw(generator())
    width = draw(st.integers(1, 6))
    logprobs = (-rng.exponential(3.0, (positions, width))).astype(np.float32)
    specials = np.array([-np.inf, -0.0, np.nan], np.float32)
    odd = rng.random((positions, width)) < 0.1
    logprobs[odd] = rng.choice(specials, (positions, width))[odd]
    top = draw(bound(vocab))
    return {"token_ids": rng.integers(0, top, (positions, width)).astype(draw(index_dtype())),
            "logprobs": logprobs,
            "ranks": rng.integers(1, top + 1, positions).astype(draw(index_dtype()))}


@st.composite
def parse_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    stress = kind == "stress"   # discarded rows, OOV ids and logprobs together, on either filtering path
    batch, width = draw(batch_size(ctx)), draw(st.one_of(st.integers(1, 9), st.integers(0, 40)))
    vectorized = draw(st.booleans())
    if kind == "single":
        batch, width = 1, 1
    elif stress:   # either filtering path: the fewest columns that take the vectorized one, or fewer
        batch = min(max(batch, 1), 64)
        large = -(-(SMALL + 1) // batch)
        width = max(width, large) if vectorized else min(max(width, 1), large - 1)
    vocab = draw(vocab_size(ctx))
    inputs = {"output_token_ids": draw(emitted_rows(batch, width, vocab, stress)), "vocab_size": vocab,
              "discard_req_indices": draw(discard_indices(batch, stress)), "token_ids": None, "logprobs": None,
              "ranks": None}
    containers = {"output_token_ids": draw(st.sampled_from(ARRAY_CONTAINERS)),
                  "discard_req_indices": draw(st.sampled_from(INDEX_CONTAINERS))}
    if draw(st.booleans()) or stress:
        inputs.update(draw(logprob_arrays(batch * width, vocab)))
        containers.update({name: draw(st.sampled_from(ARRAY_CONTAINERS)) for name in LOGPROB_FIELDS})
        label("logprobs: given")
    for name, container in containers.items():
        label(f"container: {name} as {container}")
    label("size: filtered in Python (B*S <= 256)" if batch * width <= SMALL else "size: B*S > 256")
    parse_reached(inputs)
    return Example(tier="valid", inputs=inputs, containers=containers)


def parse_reached(x: dict) -> None:
    """Label the classes the drawn values hold: no rows or no columns, an id of exactly V, an out-of-vocabulary
    id or a -1 with a valid id after it in its row (the later ids still count), every row discarded, logprobs
    with -inf, -0.0 or NaN."""
    ids, vocab = x["output_token_ids"], x["vocab_size"]
    if not ids.size:
        label("rows: none (B = 0) or empty (S = 0)")
    valid = (ids >= 0) & (ids < vocab)
    later_valid = np.zeros_like(valid)
    later_valid[:, :-1] = np.flip(np.logical_or.accumulate(np.flip(valid[:, 1:], axis=1), axis=1), axis=1)
    if (ids == vocab).any():
        label("ids: an id equal to V")
    if ((ids >= vocab) & later_valid).any():
        label("ids: an out-of-vocabulary id before a valid one in its row")
    if ((ids == PLACEHOLDER) & later_valid).any():
        label("ids: a -1 before a valid id in its row")
    if len(ids) and set(np.asarray(x["discard_req_indices"]).tolist()) == set(range(len(ids))):
        label("discard: every row")
    if x["logprobs"] is not None:
        special = x["logprobs"][np.isinf(x["logprobs"]) | np.isnan(x["logprobs"]) | (x["logprobs"] == 0)]
        if special.size:
            label("logprobs: -inf, -0.0 or NaN among them")


def parse_corruptions(ex: Example) -> list[Example]:
    """The value rules of a valid `output.parse` example (the generic rules come from the record)."""
    x = ex.inputs
    ids, discard = x["output_token_ids"], x["discard_req_indices"]
    batch = ids.shape[0]
    found = [
        invalid(ex, "vocab_size", ">= 1", vocab_size=0),
        invalid(ex, "discard_req_indices", "indices < B", discard_req_indices=np.append(discard, batch)),
        invalid(ex, "discard_req_indices", "indices >= 0", discard_req_indices=np.append(discard, -1)),
    ]
    if ids.size:
        below = ids.copy()
        below.reshape(-1)[ids.size // 2] = -2 - ids.size % 3
        found.append(invalid(ex, "output_token_ids", "ids >= -1", output_token_ids=below))
    if x["token_ids"] is not None:
        found.append(invalid(ex, "ranks", "all three logprobs inputs or none", ranks=None))
    return found


@st.composite
def parse_invalid(draw, ctx: DrawContext) -> Example:
    return draw(one_invalid(parse_corruptions(draw(parse_valid(ctx)))))


def parse_table(ex: Example):
    x = ex.inputs
    dropped = set(np.asarray(x["discard_req_indices"]).reshape(-1).tolist())
    return (["req", "discarded", "output_token_ids", "vocab_size"],
            [[r, r in dropped, short(row, 12), x["vocab_size"] if r == 0 else ""]
             for r, row in enumerate(np.atleast_2d(x["output_token_ids"]))])


@st.composite
def spec_metadata_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    batch = draw(draft_batch(ctx, kind=kind))
    rng = draw(generator())
    counts = batch.counts
    # decode steps schedule exactly n + 1 tokens; a mixed batch also schedules prompt chunks
    mixed = draw(st.booleans()) or kind == "stress"
    label("scheduled: mixed with prompt chunks" if mixed else "scheduled: decode only (n + 1)")
    extra = rng.integers(0, 40, batch.batch) * (rng.random(batch.batch) < 0.5) if mixed else 0
    cu_sched = inclusive_offsets(counts + 1 + extra)
    scheduled = int(cu_sched[-1]) if batch.batch else 0
    capacity = scheduled + draw(st.sampled_from([0, 0, 1, 17]))
    if capacity > scheduled:
        label("input_ids: longer than the scheduled tokens")
    if mixed and (extra > 0).any():
        label("scheduled: a prompt chunk before a request's sampled tokens")
    id_dtype = draw(index_dtype())
    label(f"dtype: input_ids {id_dtype}")
    total = batch.num_tokens
    return Example(
        tier="valid",
        inputs={"num_draft_tokens": counts.tolist(), "cu_num_scheduled_tokens": cu_sched,
                "input_ids": rng.integers(0, draw(bound(draw(vocab_size(ctx)))), capacity).astype(id_dtype)},
        outputs={"cu_num_draft_tokens": Buffer((batch.batch,), "int32"),
                 "cu_num_sampled_tokens": Buffer((batch.batch,), "int32"),
                 "logits_indices": Buffer((total + batch.batch,), "int32"),
                 "target_logits_indices": Buffer((total,), "int32"),
                 "bonus_logits_indices": Buffer((batch.batch,), "int32"),
                 "draft_token_ids": Buffer((total,), id_dtype)},
    )


def spec_metadata_corruptions(ex: Example, r: int = 0) -> list[Example]:
    """Every invalid variant of a valid `output.spec_metadata` example (request r breaks the per-request
    rules)."""
    x = ex.inputs
    counts, cu, ids = x["num_draft_tokens"], x["cu_num_scheduled_tokens"], x["input_ids"]
    drafts = ex.outputs["draft_token_ids"]
    other = "int32" if drafts.dtype == "int64" else "int64"
    found = [
        invalid(ex, "num_draft_tokens", "a list of Python ints", num_draft_tokens=np.array(counts, np.int64)),
        invalid(ex, "draft_token_ids", "dtype of input_ids",
                outputs={"draft_token_ids": Buffer(drafts.shape, other)}),
    ]
    if counts:
        found.append(invalid(ex, "num_draft_tokens", ">= 0",
                             num_draft_tokens=[-1 if i == r else n for i, n in enumerate(counts)]))
        short_cu = cu.astype(np.int64)
        short_cu[r:] -= int(cu[r]) - (int(cu[r - 1]) if r else 0) - counts[r]
        found.append(invalid(ex, "cu_num_scheduled_tokens", "each request schedules >= n + 1 tokens",
                             cu_num_scheduled_tokens=short_cu.astype(np.int32)))
        found.append(invalid(ex, "input_ids", "holds every scheduled token", input_ids=ids[:int(cu[-1]) - 1]))
    return found


@st.composite
def spec_metadata_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(spec_metadata_valid(ctx))
    request = draw(st.integers(0, max(len(ex.inputs["num_draft_tokens"]) - 1, 0)))
    return draw(one_invalid(spec_metadata_corruptions(ex, request)))


def spec_metadata_table(ex: Example):
    x = ex.inputs
    counts = np.asarray(x["num_draft_tokens"]).tolist()
    cu = x["cu_num_scheduled_tokens"].tolist()
    rows = [[r, counts[r] if r < len(counts) else "?", cu[r] if r < len(cu) else "?"]
            for r in range(max(len(counts), len(cu)))]
    return ["req", "num_draft_tokens", "cu_num_scheduled_tokens"], rows

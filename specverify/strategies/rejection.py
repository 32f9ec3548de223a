"""Strategies of the `rejection` family.

`rejection.chain_cdf` (the last section): valid draws keep every sum exact in f32 whatever the order it is taken in:
probabilities are multiples of 2**-bits (bits 2 to 16) with row sums <= 1, uniforms multiples of 2**-ubits (ubits 1
to 8), so each partial sum, difference and product u * q is exact. Coarse grids make ties (u * q == p) and running
sums equal to t common; both are also planted. General floats, NaN, infinities and negative cells go to the hazard
tier, checked by `invariants`.
"""
from __future__ import annotations

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from specverify.oracles.rejection import cdf_accepts, cdf_residual, residual, running_sums
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.records.values import POISON_A, filled, output_value, output_values
from specverify.strategies.blocks import (PLACEHOLDER, DraftBatch, aim, batch_size, bound, draft_batch, generator,
                                          inclusive_offsets, invalid, label, layout, mode, one_invalid, request_rows,
                                          short, token_ids, vocab_size)
from specverify.strategies.draft_hazards import (hazards, label_tested_oov, oov_first_drafts,
                                                 oov_recovery_at_last_cell)
from specverify.strategies.probability_tables import (SMALL_BATCH, approx_div_uniforms, cdf_vocab, drafts_from,
                                                      request_of_tokens, sized_batch, strict_q0_uniforms,
                                                      strict_uniforms, table_budget, table_vocab, tables, uniforms)


@st.composite
def greedy_rows(draw, batch: int, stress: bool = False, given: bool | None = None) -> np.ndarray | None:
    """is_greedy: None (every row greedy), all True, all False, or mixed (always when `stress`); never
    None when the declared domain says it is always `given`."""
    kind = draw(st.sampled_from(["none", "all", "no", "mixed"]))
    kind = "mixed" if stress else "all" if given and kind == "none" else kind
    rng = draw(generator())
    label(f"is_greedy: {kind}")
    if kind == "none":
        return None
    if kind == "mixed":
        return rng.random(batch) < 0.5
    return np.full(batch, kind == "all")


@st.composite
def drafts_against(draw, target: np.ndarray, counts: np.ndarray, vocab: int, stress: bool = False,
                   excluded: frozenset[str] = frozenset()) -> np.ndarray:
    """int32 drafts for flattened requests: each request matches `target` for a drawn prefix (all, none,
    anywhere, or near its end; one of the long ones when `stress`), then differs (another valid id
    close to the target, a placeholder or an out-of-vocabulary id, except the kinds a declared domain
    `excluded`); after that first difference, drafts match again at random, which must not matter."""
    rng = draw(generator())
    kind = draw(st.sampled_from(["all", "none", "anywhere", "near the end"]))
    kind = "near the end" if stress and kind in ("none", "anywhere") else kind
    label(f"drafts: accepted prefix {kind}")
    accepted = {"all": counts, "none": np.zeros_like(counts),
                "anywhere": rng.integers(0, counts + 1),
                "near the end": np.maximum(counts - rng.integers(1, 4, len(counts)), 0)}[kind]
    aim(int(accepted.max(initial=0)), "longest accepted prefix")
    size = len(target)
    request = request_of_tokens(counts)
    position = np.arange(size) - np.repeat(np.cumsum(counts) - counts, counts)
    oov = vocab + rng.choice([0, 7], size)
    if vocab > 1:   # another valid id, at most `bound` above the target (mod V)
        other = (target + 1 + rng.integers(0, min(draw(bound(vocab)), vocab - 1), size)) % vocab
        other = np.select([rng.random(size) < 0.2, rng.random(size) < 0.2], [PLACEHOLDER, oov], other)
    else:           # a single id: a differing draft is a placeholder or out of the vocabulary
        other = np.where(rng.random(size) < 0.5, PLACEHOLDER, oov)
    if "placeholder" in excluded:
        other = np.where(other == PLACEHOLDER, oov if "oov" not in excluded or vocab == 1 else target, other)
    if "oov" in excluded:
        other = np.where(other >= vocab, PLACEHOLDER if "placeholder" not in excluded else target, other)
    after_cut = position > accepted[request]
    matches = (position < accepted[request]) | (after_cut & (rng.random(size) < 0.5))
    stop = other[position == accepted[request]]          # the draft where each request stops matching
    for kind, found in (("a placeholder", stop == PLACEHOLDER), ("out of the vocabulary", stop >= vocab),
                        ("another valid id", (stop >= 0) & (stop < vocab))):
        if found.any():
            label(f"drafts: first mismatch {kind}")
    return np.where(matches, target, other).astype(np.int32)


@st.composite
def greedy_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    batch = draw(draft_batch(ctx, kind=kind))
    vocab = draw(vocab_size(ctx))
    rng = draw(generator())
    top = draw(bound(vocab))
    argmax = rng.integers(0, top, batch.num_tokens).astype(np.int64)
    return Example(
        tier="valid",
        inputs={
            "draft_token_ids": draw(drafts_against(argmax, batch.counts, vocab, kind == "stress")),
            "target_argmax": argmax,
            "bonus_token_ids": rng.integers(0, top, batch.batch).astype(np.int64),
            "cu_num_draft_tokens": inclusive_offsets(batch.counts),
            "is_greedy": draw(greedy_rows(batch.batch, kind == "stress", ctx.given("is_greedy"))),
            "max_spec_len": batch.max_spec_len,
        },
        outputs={"output_token_ids": Buffer((batch.batch, batch.max_spec_len + 1), "int32")},
    )


def batch_corruptions(ex: Example) -> list[Example]:
    """Value rules every flattened-layout stage shares: offsets, counts, ids (dtype, rank, length and
    None come from the record: `strategies.generic`)."""
    x = ex.inputs
    cu, draft = x["cu_num_draft_tokens"], x["draft_token_ids"]
    batch, counts = len(cu), np.diff(cu, prepend=0)
    found = []
    if batch >= 2 and cu[0] > 0:
        bad = cu.copy()
        bad[1] = cu[0] - 1
        found.append(invalid(ex, "cu_num_draft_tokens", "non-decreasing", cu_num_draft_tokens=bad))
    if batch and counts.max() > 0:
        smaller = int(counts.max()) - 1
        found.append(invalid(ex, "cu_num_draft_tokens", "counts <= max_spec_len", max_spec_len=smaller,
                             outputs={"output_token_ids": Buffer((batch, smaller + 1), "int32")}))
    if len(draft):
        below = draft.copy()
        below[len(draft) // 2] = -2 - len(draft) % 5
        found.append(invalid(ex, "draft_token_ids", "ids >= -1", draft_token_ids=below))
        found.append(invalid(ex, "cu_num_draft_tokens", "last offset == number of tokens",
                             draft_token_ids=draft[:-1]))
    return found


@st.composite
def greedy_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(greedy_valid(ctx))
    found = batch_corruptions(ex)
    if len(ex.inputs["target_argmax"]):
        neg = ex.inputs["target_argmax"].copy()
        neg[0] = -1
        found.append(invalid(ex, "target_argmax", "ids >= 0", target_argmax=neg))
    assume(found)
    return draw(one_invalid(found))


def draft_rows(x: dict, **per_token) -> tuple[list[str], list[list]]:
    """The row table of a chain of drafts: per token its draft id and `per_token`, per request its greedy
    flag and bonus."""
    return request_rows(x["cu_num_draft_tokens"], per_token={"draft_token_ids": x["draft_token_ids"], **per_token},
                        per_request={"is_greedy": x["is_greedy"], "bonus": x["bonus_token_ids"]})


def greedy_table(ex: Example):
    return draft_rows(ex.inputs, target_argmax=ex.inputs["target_argmax"])


@st.composite
def random_rows(draw, batch: int, stress: bool = False) -> np.ndarray:
    """is_greedy where it may not be None: every row greedy, none, or some."""
    rows = draw(greedy_rows(batch, stress))
    return np.zeros(batch, bool) if rows is None else rows


def recovered_ids(rng, tokens, top) -> np.ndarray:
    return rng.integers(0, top, tokens).astype(np.int32)


def outside(values: np.ndarray, vocab: int) -> bool:
    return bool(((values < 0) | (values >= vocab)).any())


def row_problems(name: str, row: np.ndarray, vocab: int, most: int, rest) -> str | None:
    """A written row must be a prefix of 1..most ids in [0, V) followed by `rest` (the fill)."""
    emitted = int(np.argmax(row == rest)) if (row == rest).any() else len(row)
    tail_ok = bool((row[emitted:] == rest).all())
    if not 1 <= emitted <= most or outside(row[:emitted], vocab) or not tail_ok:
        return (f"{name}: row {output_values(row)} is not 1..{most} ids in [0, {vocab}) then "
                f"{output_value(np.asarray(rest, row.dtype))}")
    return None


# --- rejection.recovered -----------------------------------------------------------------------------

@st.composite
def recovered_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    batch, vocab = draw(sized_batch(ctx, kind))
    drafts = draw(token_ids(batch.num_tokens, vocab, stress=kind == "stress",
                              excluded=ctx.excluded_kinds("draft_token_ids")))
    t = draw(tables(batch.counts, vocab, drafts, ctx.given("draft_probs")))
    if t.draft is None and (drafts >= vocab).any():
        label("reached: an out-of-vocabulary draft without draft probs (it zeroes no cell)")
    return Example(
        tier="valid",
        inputs={"cu_num_draft_tokens": inclusive_offsets(batch.counts), "draft_token_ids": drafts,
                "draft_probs": t.draft, "target_probs": t.target, "inv_q": t.inv_q,
                "max_spec_len": slack_hint(batch, ctx.given("max_spec_len"))},
        outputs={"recovered_token_ids": Buffer((batch.num_tokens,), "int32")},
    )


def slack_hint(batch: DraftBatch, given: bool | None = None) -> int | None:
    """The `max_spec_len` host hint from the slack `draft_batch` drew above the longest request (0, 1 or
    3): None for a slack of 1 (unless the declared domain says it is always `given`), else the batch's
    max_spec_len. No draw of its own, so every other field is drawn as before the hint existed (a seed
    still finds what it found)."""
    slack = batch.max_spec_len - int(batch.counts.max(initial=0))
    if slack == 1 and not given:
        label("max_spec_len: None")
        return None
    label("max_spec_len: exact" if slack == 0 else "max_spec_len: above")
    return batch.max_spec_len


def recovered_hazard(ctx: DrawContext):
    return recovered_valid(ctx).flatmap(lambda ex: hazards(ex, ctx.excluded_kinds("draft_token_ids")))


def recovered_invariants(ex: Example, views: dict) -> list[str]:
    """Ids in [0, V); the chosen score is a maximum of the non-NaN scores; NaN never wins (an all-NaN
    row gives 0)."""
    x = ex.inputs
    vocab = x["target_probs"].shape[1]
    ids = views["recovered_token_ids"]
    if outside(ids, vocab):
        t = int(np.flatnonzero((ids < 0) | (ids >= vocab))[0])
        return [f"recovered_token_ids[{t}] = {output_value(ids[t])}: outside [0, {vocab}) "
                f"(recovered_token_ids: {output_values(ids)})"]
    request = request_of_tokens(np.diff(x["cu_num_draft_tokens"], prepend=0))
    for t, chosen in enumerate(ids.tolist()):
        with np.errstate(all="ignore"):
            score = residual(x["target_probs"][t], None if x["draft_probs"] is None else x["draft_probs"][t],
                             int(x["draft_token_ids"][t])) * x["inv_q"][request[t]]
        numbers = score[~np.isnan(score)]
        if not len(numbers) and chosen != 0:
            return [f"recovered_token_ids[{t}]: every score is NaN, so 0, got {chosen}"]
        if len(numbers) and not score[chosen] >= numbers.max():
            return [f"recovered_token_ids[{t}]: score {score[chosen]} at {chosen} is not the maximum {numbers.max()}"]
    return []


def probability_corruptions(ex: Example) -> list[Example]:
    """Value rules of the probability tables: a vocabulary of at least one id."""
    return [invalid(ex, "target_probs", "V >= 1", target_probs=ex.inputs["target_probs"][..., :0])]


@st.composite
def recovered_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(recovered_valid(ctx))
    x = ex.inputs
    cu, drafts = x["cu_num_draft_tokens"], x["draft_token_ids"]
    found = probability_corruptions(ex)
    if len(cu):
        found.append(invalid(ex, "cu_num_draft_tokens", "last offset == number of tokens",
                             cu_num_draft_tokens=cu + np.int32(1)))
    if len(drafts):
        below = drafts.copy()
        below[-1] = -2
        found.append(invalid(ex, "draft_token_ids", "ids >= -1", draft_token_ids=below))
    largest = int(np.diff(cu, prepend=0).max(initial=0))
    if largest:
        found.append(invalid(ex, "max_spec_len", "the host hint >= the most drafts of a request",
                             max_spec_len=largest - 1))
    return draw(one_invalid(found))


def recovered_table(ex: Example):
    x = ex.inputs
    return request_rows(x["cu_num_draft_tokens"], per_token={"draft_token_ids": x["draft_token_ids"]},
                        per_request={})


# --- rejection.random --------------------------------------------------------------------------------

@st.composite
def random_valid(draw, ctx: DrawContext, uniforms_of=uniforms) -> Example:
    """rejection.random's valid tier; `uniforms_of(drafts, tables, stress)` draws the uniforms (a
    dialect's boundaries)."""
    kind = draw(mode())
    batch, vocab = draw(sized_batch(ctx, kind))
    rng = draw(generator())
    top = draw(bound(vocab))
    excluded = ctx.excluded_kinds("draft_token_ids")
    drafts = draw(token_ids(batch.num_tokens, vocab, stress=kind == "stress", excluded=excluded))
    is_greedy = draw(random_rows(batch.batch, kind == "stress"))
    drafts = draw(oov_first_drafts(drafts, batch.counts, vocab, is_greedy, excluded))
    t = draw(tables(batch.counts, vocab, drafts, ctx.given("draft_probs")))
    u = draw(uniforms_of(drafts, t, kind == "stress"))
    label_tested_oov(drafts, batch.counts, t, u, ~is_greedy)
    return Example(
        tier="valid",
        inputs={
            "draft_token_ids": drafts,
            "bonus_token_ids": rng.integers(0, top, batch.batch).astype(np.int64),
            "cu_num_draft_tokens": inclusive_offsets(batch.counts),
            "max_spec_len": batch.max_spec_len,
            "draft_probs": t.draft,
            "target_probs": t.target,
            "recovered_token_ids": recovered_ids(rng, batch.num_tokens, top),
            "uniform_probs": u,
            "is_greedy": is_greedy,
        },
        outputs={"output_token_ids": Buffer((batch.batch, batch.max_spec_len + 1), "int32")},
    )


def random_strict_valid(ctx: DrawContext):
    """Dialect `strict`'s valid tier: rejection.random's, its uniforms at the strict test's ties."""
    return random_valid(ctx, strict_uniforms)


def random_strict_q0_valid(ctx: DrawContext):
    """Dialect `strict_q0`'s valid tier."""
    return random_valid(ctx, strict_q0_uniforms)


def random_approx_div_valid(ctx: DrawContext):
    """Dialect `approx_div`'s valid tier: every uniform outside the approximate-division band."""
    return random_valid(ctx, approx_div_uniforms)


def random_hazard(ctx: DrawContext):
    return random_valid(ctx).flatmap(lambda ex: hazards(ex, ctx.excluded_kinds("draft_token_ids")))


def flat_rows_violations(ex: Example, out: np.ndarray, written, rest) -> list[str]:
    """Each row r with written[r] is 1..n[r]+1 ids in [0, V) then `rest`; other rows are all `rest`."""
    x = ex.inputs
    vocab = x["target_probs"].shape[1]
    counts = np.diff(x["cu_num_draft_tokens"], prepend=0)
    found = []
    for r, row in enumerate(out):
        problem = (row_problems(f"output_token_ids[{r}]", row, vocab, int(counts[r]) + 1, rest) if written[r]
                   else None if (row == rest).all() else f"output_token_ids[{r}]: a row it must not touch changed")
        if problem:
            found.append(problem)
    return found[:3]


def random_invariants(ex: Example, views: dict) -> list[str]:
    poison = filled((1,), np.dtype("int32"), POISON_A)[0]
    return flat_rows_violations(ex, views["output_token_ids"], ~ex.inputs["is_greedy"], poison)


@st.composite
def random_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(random_valid(ctx))
    x = ex.inputs
    vocab = x["target_probs"].shape[1]
    found = batch_corruptions(ex) + probability_corruptions(ex)
    if len(x["draft_token_ids"]):
        oov = x["recovered_token_ids"].copy()
        oov[0] = vocab
        found.append(invalid(ex, "recovered_token_ids", "ids in [0, V)", recovered_token_ids=oov))
    return draw(one_invalid(found))


def random_table(ex: Example):
    return draft_rows(ex.inputs, recovered=ex.inputs["recovered_token_ids"], uniform=ex.inputs["uniform_probs"])


# --- rejection.expand --------------------------------------------------------------------------------

EXPAND_ONE_ROW, LONG_SPAN = 8, 1100   # Triton expand: batches one request per program, a span past its 1024 tile

# float32 replace_from values, by kind: a zero of either sign, a number float32 rounds, another number
REPLACE_FROM = {"zero": (0.0, -0.0), "not a float32": (0.1, 1e-7), "a float32": (-1.0, 0.5)}
FLOAT_SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, np.nan, np.inf, 0.5], np.float32)


@st.composite
def expand_valid(draw, ctx: DrawContext) -> Example:
    batch = draw(draft_batch(ctx))
    rng = draw(generator())
    dtype = ctx.dtype("expanded", ctx.dtype("x", draw(st.sampled_from(["float32", "int32", "int64"]))))
    label(f"x: {dtype}")
    if dtype == "float32":
        replace_from = draw(st.sampled_from(REPLACE_FROM[draw(st.sampled_from(list(REPLACE_FROM)))]))
        replace_to = draw(st.sampled_from([1.0, -0.0, 2.5, 3]))
        pool = np.append(FLOAT_SPECIALS, np.float32(replace_from))
        x = np.where(rng.random(batch.batch) < 0.5, rng.choice(pool, batch.batch),
                     rng.normal(size=batch.batch)).astype(np.float32)
        same = np.float32(replace_from)             # the contract's cases in up to three rows: NaN, replace_from
        cases = np.array([np.nan, same, -same if same == 0 else -0.0], np.float32)   # as an f32, the zero of
        rows = rng.choice(batch.batch, min(3, batch.batch), replace=False)          # the other sign
        x[rows] = rng.permutation(cases)[:len(rows)]
        if np.isnan(x).any():
            label("x: a NaN (never replaced)")
        if replace_from == 0 and (np.signbit(x[x == 0]) != np.signbit(np.float32(replace_from))).any():
            label("x: a zero of the other sign than replace_from 0.0 (equal to it)")
        if float(np.float32(replace_from)) != replace_from and (x == np.float32(replace_from)).any():
            label("x: replace_from rounded to float32 first")
    else:
        info = np.iinfo(dtype)
        replace_from = draw(st.sampled_from([0, -1, int(info.max), int(info.min)]))
        replace_to = draw(st.sampled_from([0, 1, -1, int(info.max)]))
        x = np.where(rng.random(batch.batch) < 0.4, replace_from,
                     rng.integers(-5, 100, batch.batch)).astype(dtype)
        if len(x) and replace_from in (info.min, info.max):
            label("x: replace_from the dtype's min or max")
    within = ctx.limits("max_spec_len", 0, LONG_SPAN)[1] == LONG_SPAN     # a declared bound on spans may exclude it
    if 0 < batch.batch <= EXPAND_ONE_ROW and within and rng.random() < 0.4:   # Triton: a span over tiles of 1024
        counts = batch.counts.copy()
        counts[rng.integers(batch.batch)] = LONG_SPAN
        batch = DraftBatch(counts, max(batch.max_spec_len, LONG_SPAN))
        label("expand: a span of more than 1024 tokens (one request over several tiles)")
    return Example(
        tier="valid",
        inputs={"x": x, "cu_num_tokens": inclusive_offsets(batch.counts), "num_tokens": batch.num_tokens,
                "replace_from": replace_from, "replace_to": replace_to},
        outputs={"expanded": Buffer((batch.num_tokens,), dtype)},
    )


@st.composite
def expand_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(expand_valid(ctx))
    x, total = ex.inputs["x"], ex.inputs["num_tokens"]
    other = draw(st.sampled_from([d for d in ("float32", "int32", "int64") if d != x.dtype.name]))
    found = [
        invalid(ex, "expanded", "dtype of x", outputs={"expanded": Buffer((total,), other)}),
        invalid(ex, "cu_num_tokens", "last offset == num_tokens", num_tokens=total + 1,
                outputs={"expanded": Buffer((total + 1,), str(x.dtype))}),
    ]
    if x.dtype.kind == "i":
        found.append(invalid(ex, "replace_from", "an int that fits x's dtype", replace_from=0.5))
    return draw(one_invalid(found))


def expand_table(ex: Example):
    x = ex.inputs
    return request_rows(x["cu_num_tokens"], per_token={}, per_request={"x": x["x"]})


# --- rejection.sample --------------------------------------------------------------------------------

def first_max_rows(target: np.ndarray) -> np.ndarray:
    """Lowest-index argmax per row of a [N, V] table (no NaN in the valid tier)."""
    return target.argmax(1).astype(np.int64) if target.size else np.zeros(len(target), np.int64)


@st.composite
def sample_valid(draw, ctx: DrawContext, uniforms_of=uniforms) -> Example:
    kind = draw(mode())
    batch, vocab = draw(sized_batch(ctx, kind))
    rng = draw(generator())
    counts = batch.counts
    guess = draw(token_ids(batch.num_tokens, vocab))
    t = draw(tables(counts, vocab, guess, ctx.given("draft_probs")))
    excluded = ctx.excluded_kinds("draft_token_ids")
    drafts = draw(drafts_against(first_max_rows(t.target), counts, vocab, kind == "stress", excluded))
    is_greedy = draw(greedy_rows(batch.batch, kind == "stress", ctx.given("is_greedy")))
    grid = batch.max_spec_len is not None and len(counts) > 0 and bool((counts == batch.max_spec_len).all())
    if is_greedy is not None:    # without draft probs, always: a tested one is where the recovery's clamp shows
        drafts = draw(oov_first_drafts(drafts, counts, vocab, is_greedy, excluded, always=t.draft is None))
    noise = is_greedy is not None
    bonus = rng.integers(0, draw(bound(vocab)), batch.batch).astype(np.int64)
    u = draw(uniforms_of(drafts, t, kind == "stress")) if noise else None
    if grid:
        label("batch: every request max_spec_len drafts (a [B, S] grid)")
    label_tested_oov(drafts, counts, t, u, None if is_greedy is None else ~is_greedy, grid)
    if is_greedy is not None:
        oov_recovery_at_last_cell(drafts, counts, t, u, ~is_greedy)
    return Example(
        tier="valid",
        inputs={
            "draft_token_ids": drafts,
            "cu_num_draft_tokens": inclusive_offsets(batch.counts),
            "max_spec_len": batch.max_spec_len,
            "draft_probs": t.draft,
            "target_probs": t.target,
            "bonus_token_ids": bonus,
            "is_greedy": is_greedy,
            "uniform_probs": u,
            "inv_q": t.inv_q if noise else None,
        },
        outputs={"output_token_ids": Buffer((batch.batch, batch.max_spec_len + 1), "int32")},
    )


def sample_approx_div_valid(ctx: DrawContext):
    """Dialect `approx_div`'s valid tier of rejection.sample: every uniform outside the approximate-division band."""
    return sample_valid(ctx, approx_div_uniforms)


def sample_hazard(ctx: DrawContext):
    return sample_valid(ctx).flatmap(lambda ex: hazards(ex, ctx.excluded_kinds("draft_token_ids")))


def sample_invariants(ex: Example, views: dict) -> list[str]:
    out = views["output_token_ids"]
    return flat_rows_violations(ex, out, np.ones(len(out), bool), PLACEHOLDER)


@st.composite
def sample_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(sample_valid(ctx))
    found = batch_corruptions(ex) + probability_corruptions(ex)
    if ex.inputs["is_greedy"] is not None:
        found.append(invalid(ex, "inv_q", "required when is_greedy is given", inv_q=None))
    return draw(one_invalid(found))


def sample_table(ex: Example):
    return draft_rows(ex.inputs, target_argmax=first_max_rows(ex.inputs["target_probs"]))


# --- padded layout: rejection.greedy_padded, rejection.sample_padded -------------------------------------

PADDED_OUTPUTS = ("output_token_ids", "num_rejected_tokens", "last_token_ids")


@st.composite
def padded_shape(draw, ctx: DrawContext, kind: str, vocab: int = 1) -> tuple[int, int]:
    """(B, K) with B * K * V within the table budget; (1, 1) for a "single" draw."""
    if kind == "single":
        label("padded: one request, one draft")
        return 1, 1
    k = draw(st.integers(0, 8))
    cells, tokens = table_budget(ctx)
    most = max(1, min(tokens, cells // vocab) // max(k, 1))
    batch = draw(batch_size(ctx, 0, most))
    label(f"padded: K={k}" if k < 2 else "padded: K>1")
    return batch, k


@st.composite
def strided(draw, inputs: dict, names, stress: bool = False) -> dict:
    """Drawn layouts for the named array inputs present (every one strided when `stress`)."""
    found = {}
    for name in names:
        if isinstance(inputs.get(name), np.ndarray):
            chosen = draw(layout(inputs[name].ndim, True if stress else None))
            if chosen is not None:
                found[name] = chosen
    return found


def padded_shapes(batch: int, k: int) -> dict[str, tuple[int, ...]]:
    """The [B, K] layout's outputs (`rejection.greedy_padded`, `sample_padded`): each one's shape."""
    return {"output_token_ids": (batch, k + 1), "num_rejected_tokens": (batch,), "last_token_ids": (batch,)}


def padded_buffers(batch: int, k: int) -> dict[str, Buffer]:
    """The [B, K] layout's outputs, contiguous int64."""
    return {name: Buffer(shape, "int64") for name, shape in padded_shapes(batch, k).items()}


@st.composite
def padded_outputs(draw, batch: int, k: int, stress: bool = False) -> dict:
    return {name: Buffer(shape, "int64", draw(layout(len(shape), True if stress else None)))
            for name, shape in padded_shapes(batch, k).items()}


@st.composite
def greedy_padded_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    stress = kind == "stress"
    batch, k = draw(padded_shape(ctx, kind))
    vocab = draw(vocab_size(ctx))
    rng = draw(generator())
    top = draw(bound(vocab))
    argmax = rng.integers(0, top, (batch, k)).astype(np.int64)
    drafts = draw(drafts_against(argmax.reshape(-1), np.full(batch, k), vocab, stress))
    inputs = {
        "draft_token_ids": drafts.astype(np.int64).reshape(batch, k),
        "target_argmax": argmax,
        "bonus_token_ids": rng.integers(0, top, batch).astype(np.int64),
        "is_greedy": draw(greedy_rows(batch, stress, ctx.given("is_greedy"))),
    }
    return Example(tier="valid", inputs=inputs, outputs=draw(padded_outputs(batch, k, stress)),
                   layouts=draw(strided(inputs, inputs, stress)))


def padded_corruptions(ex: Example) -> list[Example]:
    """Value rules of the padded layout's ids."""
    drafts = ex.inputs["draft_token_ids"]
    if not drafts.size:
        return []
    below = drafts.copy()
    below[0, 0] = -3
    return [invalid(ex, "draft_token_ids", "ids >= -1", draft_token_ids=below)]


@st.composite
def greedy_padded_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(greedy_padded_valid(ctx))
    argmax = ex.inputs["target_argmax"]
    found = padded_corruptions(ex)
    if argmax.size:
        neg = argmax.copy()
        neg[-1, -1] = -1
        found.append(invalid(ex, "target_argmax", "ids >= 0", target_argmax=neg))
    assume(found)
    return draw(one_invalid(found))


def padded_table(ex: Example):
    x = ex.inputs
    rows = []
    argmax = x.get("target_argmax")
    if argmax is None:
        argmax = first_max_rows(x["target_probs"].reshape(-1, x["target_probs"].shape[-1])).reshape(
            x["draft_token_ids"].shape)
    greedy = x["is_greedy"]
    for b, drafts in enumerate(x["draft_token_ids"]):
        rows.append([b, None if greedy is None else bool(greedy[b]), int(x["bonus_token_ids"][b]), short(drafts),
                     short(argmax[b])])
    return ["row", "is_greedy", "bonus", "draft_token_ids", "target_argmax"], rows


@st.composite
def sample_padded_valid(draw, ctx: DrawContext, uniforms_of=uniforms) -> Example:
    kind = draw(mode())
    stress = kind == "stress"
    vocab = draw(table_vocab(ctx))
    batch, k = draw(padded_shape(ctx, kind, vocab))
    rng = draw(generator())
    counts = np.full(batch, k)
    guess = draw(token_ids(batch * k, vocab))
    t = draw(tables(counts, vocab, guess, ctx.given("draft_probs")))
    excluded = ctx.excluded_kinds("draft_token_ids")
    drafts = draw(drafts_against(first_max_rows(t.target), counts, vocab, stress, excluded))
    is_greedy = draw(greedy_rows(batch, stress, ctx.given("is_greedy")))
    if is_greedy is not None:
        drafts = draw(oov_first_drafts(drafts, counts, vocab, is_greedy, excluded))
    noise = is_greedy is not None
    bonus = rng.integers(0, draw(bound(vocab)), batch).astype(np.int64)
    u = draw(uniforms_of(drafts, t, stress)) if noise else None
    label_tested_oov(drafts, counts, t, u, None if is_greedy is None else ~is_greedy)
    inputs = {
        "draft_token_ids": drafts.astype(np.int64).reshape(batch, k),
        "draft_probs": None if t.draft is None else t.draft.reshape(batch, k, vocab),
        "target_probs": t.target.reshape(batch, k, vocab),
        "bonus_token_ids": bonus,
        "is_greedy": is_greedy,
        "uniform_probs": None if u is None else u.reshape(batch, k),
        "inv_q": t.inv_q if noise else None,
    }
    cells, _ = table_budget(ctx)
    names = [n for n, v in inputs.items() if isinstance(v, np.ndarray) and (v.ndim < 3 or v.size * 27 <= cells)]
    return Example(tier="valid", inputs=inputs, outputs=draw(padded_outputs(batch, k, stress)),
                   layouts=draw(strided(inputs, names, stress)))


def sample_padded_approx_div_valid(ctx: DrawContext):
    """Dialect `approx_div`'s valid tier of rejection.sample_padded."""
    return sample_padded_valid(ctx, approx_div_uniforms)


def sample_padded_hazard(ctx: DrawContext):
    return sample_padded_valid(ctx).flatmap(lambda ex: hazards(ex, ctx.excluded_kinds("draft_token_ids")))


def sample_padded_invariants(ex: Example, views: dict) -> list[str]:
    vocab = ex.inputs["target_probs"].shape[-1]
    out, rejected, last = (views[name] for name in PADDED_OUTPUTS)
    found = []
    for b, row in enumerate(out):
        problem = row_problems(f"output_token_ids[{b}]", row, vocab, len(row), PLACEHOLDER)
        emitted = int((row != PLACEHOLDER).sum())
        if not problem and (rejected[b] != len(row) - emitted or last[b] != row[emitted - 1]):
            problem = f"row {b}: num_rejected_tokens or last_token_ids disagree with output_token_ids"
        if problem:
            found.append(problem)
    return found[:3]


@st.composite
def sample_padded_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(sample_padded_valid(ctx))
    found = padded_corruptions(ex) + probability_corruptions(ex)
    if ex.inputs["is_greedy"] is not None:
        found.append(invalid(ex, "uniform_probs", "required when is_greedy is given", uniform_probs=None))
    return draw(one_invalid(found))


# --- rejection.chain_cdf ------------------------------------------------------------------------------------

f32 = np.float32
PLANTS = ("ties", "equal rows", "q zero at draft", "q above one", "zero bonus row", "boundary", "u_final 0 or 1",
          "placeholder bait", "late pick")


def grid_uniforms(rng, shape, bits: int) -> np.ndarray:
    return (rng.integers(0, 2**bits, shape) / 2.0**bits).astype(f32)


CDF_TILE = 1024     # the widest tile of the Triton pick: a wider row is swept in several
CHAIN_SPANS = (1, 2, 3, 4, 5, 6, 7, 8, 0, 0)     # K: a chain of drafts, shrinking to one; 0 (bonus only) one in five


@st.composite
def cdf_shape(draw, ctx: DrawContext, kind: str, vocab: int) -> tuple[int, int]:
    """(B, K): K from CHAIN_SPANS (0, the pick from p_0 alone, in one draw of five); B * (K + 1) * V within the
    table budget, B <= SMALL_BATCH for the interpreter; (1, 1) for a "single" draw."""
    if kind == "single":
        return 1, 1
    k = draw(st.sampled_from(CHAIN_SPANS))
    cells, tokens = table_budget(ctx)
    most = max(1, min(tokens, cells // (vocab * (k + 1))))
    batch = draw(batch_size(ctx, 0, min(most, SMALL_BATCH) if ctx.small else most))
    label("chain: K=0 (bonus only)" if k == 0 else "chain: K=1" if k == 1 else "chain: K>1")
    label("batch: B=0" if batch == 0 else "batch: B=1" if batch == 1 else "batch: B>1")
    return batch, k


def unit_rows(rng, shape, bits: int, zeros: float) -> np.ndarray:
    """f32 rows of multiples of 2**-bits: 2**bits units (in a quarter of the rows down to half as many, so
    sums in [1/2, 1) come too) dealt among the cells by gamma weights, of which about `zeros` are 0 (never
    all: a row keeps its largest). Every row holds mass however coarse the grid and wide the row."""
    w = rng.gamma(0.7, size=shape)
    largest = w == w.max(-1, keepdims=True, initial=0)
    w[(rng.random(shape) < zeros) & ~largest] = 0
    rows = shape[:-1]
    units = np.where(rng.random(rows) < 0.75, 2**bits, rng.integers(2**(bits - 1), 2**bits + 1, rows))
    dealt = rng.multinomial(units, w / w.sum(-1, keepdims=True)) if w.size else w
    return (dealt / 2.0**bits).astype(f32)


def pick_inputs(x: dict, q_range: bool = True) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """(num [B], the row each request picks from, t [B] as f32) by the record's rule, per request."""
    cand, p, q, u, uf = (x[n] for n in ("candidates", "target_probs", "draft_probs", "uniform_samples",
                                          "uniform_final"))
    k = cand.shape[1] - 1
    nums, rows, ts = [], [], []
    for b in range(cand.shape[0]):
        num = 0
        while num < k and cdf_accepts(int(cand[b, num + 1]), p[b, num], q[b, num], u[b, num], q_range):
            num += 1
        res = cdf_residual(p[b, num], q[b, num] if num < k else None, q_range)
        with np.errstate(all="ignore"):
            ts.append(f32(uf[b] * running_sums(res)[-1]))
        nums.append(num)
        rows.append(res)
    return np.array(nums, np.int64), rows, np.array(ts, f32)


def plant(rng, chosen: set, x: dict, bits: int) -> None:
    """Apply the chosen plants (each to a share of the positions or requests) in place."""
    cand, p, q, u, uf = (x[n] for n in ("candidates", "target_probs", "draft_probs", "uniform_samples",
                                          "uniform_final"))
    batch, k1, vocab = p.shape
    k = k1 - 1
    if not batch:
        return
    drafts = cand[:, 1:]
    if "equal rows" in chosen:          # q = p and drafts drawn from it: all accepted, unless a later plant
        rows = rng.random(batch) < 0.1  # rejects one (then a zero residual, mostly)
        q[rows] = p[rows, :k]
        drafts[rows] = drafts_from(rng, q[rows], vocab, 0.0)
    valid = (drafts >= 0) & (drafts < vocab)
    some = rng.random((batch, k)) < 0.35
    b_idx, pos_idx = np.nonzero(some & valid)
    d = drafts[b_idx, pos_idx]
    if "q zero at draft" in chosen:
        q[b_idx, pos_idx, d] = 0
    if "q above one" in chosen:
        q[b_idx, pos_idx, d] = f32(rng.choice([1.25, 2.0]))
    if "ties" in chosen:                # u * q == p exactly: u = 1/2, q = 2p (or u = 0 with p = 0)
        zero = rng.random(len(d)) < 0.3
        half = np.minimum(p[b_idx, pos_idx, d], f32(0.5))
        p[b_idx, pos_idx, d] = np.where(zero, f32(0), half)
        q[b_idx, pos_idx, d] = np.where(zero, q[b_idx, pos_idx, d], 2 * half)
        u[b_idx, pos_idx] = np.where(zero, f32(0), f32(0.5))
    if "zero bonus row" in chosen:
        p[rng.random(batch) < 0.15, k] = 0
    if "u_final 0 or 1" in chosen:
        ends = rng.random(batch) < 0.5
        uf[ends] = rng.choice(np.array([0, 1], f32), batch)[ends]
    if "placeholder bait" in chosen:    # the cells just before a -1 draft's rows (the previous rows' last
        flat_p, flat_q = p.reshape(-1), q.reshape(-1)      # cells) would accept it, were they read
        for b, pos in zip(*np.nonzero(drafts == PLACEHOLDER)):
            at_p, at_q = (b * k1 + pos) * vocab - 1, (b * k + pos) * vocab - 1
            if at_p >= 0 and at_q >= 0:
                flat_p[at_p], flat_q[at_q] = f32(0.5), f32(0.25)
    if "boundary" in chosen:            # u_final = S_v / total exactly, for a drawn v where that is on the grid
        _, rows, _ = pick_inputs(x)
        for b, res in enumerate(rows):
            sums = running_sums(res).astype(np.float64)
            if sums[-1] > 0:
                ratio = sums[res > 0] / sums[-1] * 256
                on_grid = ratio[(ratio == np.floor(ratio)) & (ratio < 256)]
                if len(on_grid):
                    uf[b] = f32(rng.choice(on_grid) / 256)
    if "late pick" in chosen and vocab > CDF_TILE:   # the pick of half the requests past the first tile, which
        nums, _, _ = pick_inputs(x)                  # holds mass too: a walk tile by tile must carry its sum
        late = np.flatnonzero(rng.random(batch) < 0.5)
        for b in late:
            row, first = p[b, nums[b]], p[b, nums[b], :CDF_TILE]
            if row[CDF_TILE:].sum() * 64 < row.sum() and np.count_nonzero(first) > 1:   # too little mass past
                cell, top = rng.integers(CDF_TILE, vocab), first.argmax()   # the first tile: its largest cell
                row[cell], row[top] = row[top], row[cell]                   # moves there, the rest stays
        _, rows, _ = pick_inputs(x)
        for b in late:
            sums = running_sums(rows[b]).astype(np.float64)
            low = int(sums[CDF_TILE - 1] / sums[-1] * 256) + 1 if sums[-1] > 0 else 256
            if low < 256:
                uf[b] = f32(rng.integers(low, 256) / 256)


@st.composite
def chain_cdf_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    stress = kind == "stress"
    vocab = draw(cdf_vocab(ctx))
    batch, k = draw(cdf_shape(ctx, kind, vocab))
    rng = draw(generator())
    bits = draw(st.sampled_from([2, 4, 8, 16, 16]))
    ubits = draw(st.sampled_from([1, 2, 3, 8, 8]))
    zeros = draw(st.sampled_from([0.0, 0.5, 0.9]))
    odd = draw(st.sampled_from([0.0, 0.1, 0.3]))
    chosen = draw(st.sets(st.sampled_from(PLANTS), max_size=len(PLANTS)))
    if stress:
        chosen, odd = set(PLANTS), max(odd, 0.1)
    label(f"grid: 2**-{bits} probabilities, 2**-{ubits} uniforms")
    for name in sorted(chosen):
        label(f"planted: {name}")
    target = unit_rows(rng, (batch, k + 1, vocab), bits, zeros)
    draft = unit_rows(rng, (batch, k, vocab), bits, zeros)
    uniforms = grid_uniforms(rng, (batch, k + 1), ubits)
    uniforms[:, k] = grid_uniforms(rng, batch, 8)      # never read: a value of its own
    x = {"candidates": np.concatenate([rng.integers(0, vocab, (batch, 1)), drafts_from(rng, draft, vocab, odd)],
                                      1).astype(np.int64),
         "target_probs": target, "draft_probs": draft, "uniform_samples": uniforms,
         "uniform_final": grid_uniforms(rng, batch, ubits)}
    plant(rng, chosen, x, bits)
    if vocab > CDF_TILE:
        label(f"vocab: more than one pick tile of {CDF_TILE}")
    coverage_labels(x)
    return Example("valid", inputs=x, outputs=buffers(batch, k))


def coverage_labels(x: dict) -> None:
    """What the draw reached: all accepted, a zero residual (V - 1), t equal to a running sum, a pick that
    carries a running sum across tiles, and the draft that stopped a request: a -1 or out-of-vocabulary id,
    a tie u * q == p, q = 0 or q > 1."""
    if not len(x["candidates"]) or x["target_probs"].size > 400_000:
        return
    nums, rows, ts = pick_inputs(x)
    k = x["candidates"].shape[1] - 1
    if k and (nums == k).any():
        label("reached: every draft accepted (bonus pick)")
    if (nums < k).any():
        label("reached: a rejection (residual pick)")
    reached = {f"reached: a rejection at {kind}" for b, num in enumerate(nums) if num < k
               for kind in [stopping_kind(int(x["candidates"][b, num + 1]), x["target_probs"][b, num],
                                          x["draft_probs"][b, num], x["uniform_samples"][b, num])] if kind}
    for res, t in zip(rows, ts):
        sums = running_sums(res)
        if not sums[-1] > 0:
            reached.add("reached: an all-zero pick row (V - 1)")
            continue
        if (sums[res > 0] == t).any():
            reached.add("reached: t on a running sum")
        if len(res) > CDF_TILE and 0 < sums[CDF_TILE - 1] <= t < sums[-1]:
            reached.add(f"reached: a pick past the first tile of {CDF_TILE}, the tile before it not empty")
    for text in sorted(reached):
        label(text)


def stopping_kind(draft: int, p_row, q_row, u) -> str | None:
    """What rejects a draft the record's rule rejects: "a placeholder", "an out-of-vocabulary draft", "q = 0",
    "q > 1", "a tie u * q == p" (None: an ordinary rejection, u * q > p)."""
    if draft == PLACEHOLDER or draft >= len(p_row):
        return "a placeholder" if draft == PLACEHOLDER else "an out-of-vocabulary draft"
    q = q_row[draft]
    if not 0 < q <= 1:
        return "q = 0" if q == 0 else "q > 1"
    return "a tie u * q == p" if f32(u * q) == p_row[draft] else None


def buffers(batch: int, k: int) -> dict[str, Buffer]:
    return {"predicts": Buffer((batch * (k + 1),), "int32"), "accept_index": Buffer((batch, k + 1), "int32"),
            "accept_token_num": Buffer((batch,), "int32")}


HAZARDS = ("general floats", "nan", "inf", "negative", "above one")


@st.composite
def cdf_hazards(draw, ex: Example) -> Example:
    """The valid draw made pathological: general f32 rows and uniforms (sums depend on their order),
    NaN, +-inf, negative and > 1 cells in p and q."""
    rng = draw(generator())
    x = {n: v.copy() for n, v in ex.inputs.items()}
    kinds = draw(st.sets(st.sampled_from(HAZARDS), min_size=1))
    for kind in sorted(kinds):
        label(f"hazard: {kind}")
    p, q = x["target_probs"], x["draft_probs"]
    if "general floats" in kinds:
        for a in (p, q):
            w = rng.gamma(0.7, size=a.shape).astype(f32)
            a[...] = w / np.maximum(w.sum(-1, keepdims=True), f32(1e-30))
        x["uniform_samples"][...] = rng.random(x["uniform_samples"].shape, dtype=f32)
        x["uniform_final"][...] = rng.random(x["uniform_final"].shape, dtype=f32)
    rate = draw(st.sampled_from([0.01, 0.3, 1.0]))
    specials = [v for name, v in (("nan", np.nan), ("inf", np.inf), ("inf", -np.inf), ("negative", -0.25),
                                  ("above one", 1.5)) if name in kinds]
    for a in (p, q):
        if specials and a.size:
            spot = rng.random(a.shape) < rate
            a[spot] = np.array(specials, f32)[rng.integers(0, len(specials), a.shape)][spot]
    return Example("hazard", inputs=x, outputs=ex.outputs, layouts=ex.layouts)


def chain_cdf_hazard(ctx: DrawContext):
    return chain_cdf_valid(ctx).flatmap(cdf_hazards)


def chain_cdf_invariants(ex: Example, views: dict) -> list[str]:
    """num in [0, K]; the accepted drafts and then one id in [0, V) in predicts; accept_index the flat
    slots b*(K+1) + 0..num; every other slot untouched; and when the pick row is finite, >= 0, with a
    positive total that t stays clear of (t < total * (1 - 2**-20), in f64), the id's cell is > 0. That
    last check is made where the record and dialect `snapshot` pick from the same row (these invariants
    serve both)."""
    x = ex.inputs
    cand = x["candidates"]
    batch, k1 = cand.shape
    vocab = x["target_probs"].shape[-1]
    poison = filled((1,), np.dtype("int32"), POISON_A)[0]
    pred = views["predicts"].reshape(batch, k1) if batch else views["predicts"].reshape(0, k1)
    index, nums = views["accept_index"], views["accept_token_num"]
    contract_nums, rows, _ = pick_inputs(x)
    snapshot_nums, snapshot_rows, _ = pick_inputs(x, q_range=False)
    found = []
    for b in range(batch):
        num = int(nums[b])
        if not 0 <= num < k1:
            found.append(f"accept_token_num[{b}] = {output_value(nums[b])}: outside [0, {k1 - 1}]")
            continue
        token = int(pred[b, num])
        if (pred[b, :num] != cand[b, 1:num + 1]).any() or not 0 <= token < vocab:
            found.append(f"predicts row {b}: {output_values(pred[b])} is not its {num} drafts then an id in "
                         f"[0, {vocab})")
        elif (index[b, :num + 1] != b * k1 + np.arange(num + 1)).any():
            found.append(f"accept_index[{b}] = {output_values(index[b])} is not the slots {b * k1} .. {b * k1 + num}")
        elif (pred[b, num + 1:] != poison).any() or (index[b, num + 1:] != poison).any():
            found.append(f"row {b}: a slot after the {num + 1} emitted ones was written")
        else:
            same = num == contract_nums[b] == snapshot_nums[b] and np.array_equal(rows[b], snapshot_rows[b],
                                                                                   equal_nan=True)
            res = rows[b].astype(np.float64) if same else None
            if res is not None and np.isfinite(res).all() and (res >= 0).all():
                total = res.sum()
                t = float(x["uniform_final"][b]) * total
                if total > 0 and 0 <= t < total * (1 - 2**-20) and not res[token] > 0:
                    found.append(f"row {b}: picked {token}, whose residual cell is 0 (total {total:g})")
    return found[:3]


@st.composite
def chain_cdf_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(chain_cdf_valid(ctx))
    cand = ex.inputs["candidates"]
    found = []
    if cand.size:
        below = cand.copy()
        below[-1, -1] = -2
        found.append(invalid(ex, "candidates", "ids >= -1", candidates=below))
    empty = np.zeros((len(cand), 0), np.int64)
    found.append(invalid(ex, "candidates", "K + 1 >= 1 columns", candidates=empty))
    return draw(one_invalid(found))


def chain_cdf_table(ex: Example):
    x = ex.inputs
    rows = [[b, short(x["candidates"][b]), short(x["uniform_samples"][b]), float(x["uniform_final"][b])]
            for b in range(len(x["candidates"]))]
    return ["row", "candidates", "uniform_samples", "uniform_final"], rows

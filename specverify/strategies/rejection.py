"""Strategies of the `rejection` family."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from specverify.oracles.rejection import residual
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.records.values import POISON_A, filled, output_value, output_values
from specverify.strategies.blocks import (PLACEHOLDER, DraftBatch, aim, batch_size, bound, draft_batch, generator,
                                          inclusive_offsets, invalid, label, layout, mode, one_invalid, request_rows,
                                          short, token_ids, vocab_size)


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


# --- probability-reading stages: shared pieces -------------------------------------------------------

TILES = (1024, 2048, 4096)          # tile widths production kernels sweep the vocabulary in


def table_budget(ctx: DrawContext) -> tuple[int, int]:
    """(largest T * V, largest T) a drawn example may have: the oracle loops per token and the Triton
    interpreter costs milliseconds per program. In the interpreter 16 tokens still reach a split pick
    sweeping several tiles per program (T >= 9 at V = 8193: CPU_PROGRAMS = 32 programs, 2048-wide tiles)."""
    return (100_000, 16) if ctx.small else (2_000_000, 2048)


@st.composite
def sized_batch(draw, ctx: DrawContext, kind: str) -> tuple[DraftBatch, int]:
    """A draft batch and a vocab size whose [T, V] tables fit the budget (151936 comes with tiny T)."""
    vocab = draw(vocab_size(ctx))
    cells, tokens = table_budget(ctx)
    return draw(draft_batch(ctx, 0, min(tokens, cells // vocab), kind)), vocab


def request_of_tokens(counts: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(counts)), counts)


@dataclass
class Tables:
    target: np.ndarray              # f32 [T, V]
    draft: np.ndarray | None        # f32 [T, V] or None
    inv_q: np.ndarray               # f32 [B, V]


@st.composite
def tables(draw, counts: np.ndarray, vocab: int, drafts: np.ndarray, given: bool | None = None) -> Tables:
    """Target and draft probabilities and the reciprocal exponential noise, with planted boundaries:
    equal maxima far apart (within and across tiles), all-zero residuals, a lone peak in the last
    (partial) tile, zero draft probability at the drafted id, rows of -0.0 then +0.0; besides, in a
    quarter of the tables with draft probabilities, one request's first drafted id with q = 0 < p. Draft probabilities
    are never None when the declared domain says they are always `given`."""
    rng = draw(generator())
    tokens, batch = int(counts.sum()), len(counts)
    sparsity = draw(st.sampled_from([0.0, 0.5, 0.95]))
    target = rng.random((tokens, vocab), dtype=np.float32)
    target[rng.random((tokens, vocab)) < sparsity] = 0
    target = (target / np.maximum(target.sum(1, keepdims=True), np.float32(1e-30))).astype(np.float32)
    kind = draw(st.sampled_from(["none", "independent", "close"]))
    kind = "independent" if given and kind == "none" else kind
    draft = None
    if kind == "independent":
        draft = rng.random((tokens, vocab), dtype=np.float32)
        draft = (draft / np.maximum(draft.sum(1, keepdims=True), np.float32(1e-30))).astype(np.float32)
    elif kind == "close":  # mostly equal to the target: many exact-zero residuals and ratios of 1
        draft = np.where(rng.random((tokens, vocab)) < 0.7, target,
                         target * rng.random((tokens, vocab), dtype=np.float32) * 2).astype(np.float32)
    label(f"draft_probs: {kind}")
    noise = rng.exponential(size=(batch, vocab)).astype(np.float32)
    inv_q = (np.float32(1) / np.maximum(noise, np.float32(1e-6))).astype(np.float32)
    plant = draw(st.sampled_from(["plain", "ties", "zero residual", "zero tiles", "last tile", "tile edge",
                                  "zero draft prob", "signed zeros"]))
    label(f"planted: {plant}")
    rows, request = np.arange(tokens), request_of_tokens(counts)
    valid = (drafts >= 0) & (drafts < vocab)
    if plant == "ties" and tokens:
        gap = int(rng.choice(TILES)) * int(rng.integers(1, 4)) if vocab > 1024 else vocab - 1
        first = np.where(rng.random(tokens) < 0.5, edge_indices(rng, vocab, tokens),
                         rng.integers(0, max(1, vocab - gap), tokens))
        second = np.where(first + gap < vocab, first + gap, vocab - 1)
        target *= np.float32(0.5)
        for v in (first, second):
            target[rows, v] = np.float32(0.75)
            if draft is not None:
                draft[rows, v] = 0
        peak = inv_q.max(1)
        inv_q[request, first] = peak[request]
        inv_q[request, second] = peak[request]
    elif plant == "zero residual":
        if draft is None:
            target[:] = 0
            target[rows[valid], drafts[valid]] = 1
        else:
            draft = target.copy()
    elif plant == "zero tiles" and tokens:  # a zero residual on one side of a tile edge
        edge = int(edge_indices(rng, vocab, 1)[0]) + 1
        zero = slice(edge, None) if rng.random() < 0.5 else slice(0, edge)
        if draft is None:
            target[:, zero] = 0
        else:
            draft[:, zero] = target[:, zero]
    elif plant in ("last tile", "tile edge") and tokens:
        peak = np.full(tokens, vocab - 1) if plant == "last tile" else edge_indices(rng, vocab, tokens)
        target *= np.float32(0.5)
        target[rows, peak] = 1
        if draft is not None:
            draft[rows, peak] = 0
        inv_q[request, peak] = inv_q.max(1)[request]
    elif plant == "zero draft prob" and draft is not None:
        draft[rows[valid], drafts[valid]] = 0
    elif plant == "signed zeros" and tokens:  # zero rows, -0.0 then +0.0: every score ties at zero
        zero = rng.random(tokens) < 0.5
        zero[rng.integers(0, tokens)] = True
        target[zero] = np.where(np.arange(vocab) < rng.integers(1, vocab + 1), np.float32(-0.0), np.float32(0))
        if draft is not None:
            draft[zero] = 0     # -0.0 - 0.0 keeps the sign in the residual
    firsts = (np.cumsum(counts) - counts)[counts > 0]          # a request's first draft is always tested
    firsts = firsts[valid[firsts]]
    if draft is not None and len(firsts) and draw(st.integers(0, 3)) == 0:
        label("a first drafted id with q = 0 < p")   # p / 0 = +inf: a ratio test without q > 0 accepts it
        at = int(rng.choice(firsts))
        draft[at, drafts[at]] = 0
        target[at, drafts[at]] = max(target[at, drafts[at]], np.float32(1 / vocab))
    return Tables(target, draft, inv_q)


def edge_indices(rng, vocab: int, size: int) -> np.ndarray:
    """Indices on vocabulary tile edges (the last of a tile, the first of the next), and V - 1."""
    edges = {e for tile in TILES for j in range(1, vocab // tile + 1) for e in (tile * j - 1, tile * j)}
    return rng.choice(sorted({e for e in edges if e < vocab} | {vocab - 1}), size)


def acceptance_ratios(drafts, t: Tables) -> tuple[np.ndarray, np.ndarray]:
    """(whether a draft can be accepted at all, f64(f32(p / q)) where it can)."""
    vocab = t.target.shape[1]
    valid = (drafts >= 0) & (drafts < vocab)
    safe = np.where(valid, drafts, 0)
    rows = np.arange(len(drafts))
    p = t.target[rows, safe]
    q = np.ones_like(p) if t.draft is None else t.draft[rows, safe]
    can = valid & (q > 0)
    with np.errstate(all="ignore"):
        ratio = (p / np.where(can, q, np.float32(1))).astype(np.float32).astype(np.float64)
    return can, ratio


@st.composite
def uniforms(draw, drafts: np.ndarray, t: Tables, stress: bool = False) -> np.ndarray:
    """f64 uniforms; at a drawn rate (always some when `stress`) exactly at the f32 acceptance ratio,
    one f64 ulp either side, or one f32 step either side (where a division 1 ulp off decides the other way);
    at the same rate 0.0 where no draft can be accepted (a placeholder, an id >= V, q = 0): a kernel that
    lets such a draft reach its ratio test then accepts it."""
    rng = draw(generator())
    u = rng.random(len(drafts))
    rate = draw(st.sampled_from([0.0, 0.5, 1.0]))
    rate = max(rate, 0.5) if stress else rate
    label(f"uniforms: at the ratio at rate {rate}")
    can, ratio = acceptance_ratios(drafts, t)
    side = rng.integers(0, 5, len(drafts))
    up = np.where(side % 2 == 1, np.inf, -np.inf)
    f32_step = np.nextafter(ratio.astype(np.float32), up.astype(np.float32)).astype(np.float64)
    beside = np.where(side == 0, ratio, np.where(side <= 2, np.nextafter(ratio, up), f32_step))
    planted = rng.random(len(drafts)) < rate
    return np.where(can & planted, beside, np.where(~can & planted, 0.0, u))


def strict_ties(drafts, t: Tables, q_range: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(where a tie of dialect `strict` can be planted, the f64 uniform u there with f32(f32(u) * q) == p
    exactly in [0, 1]): f32(p / q) or the f32 next to it on either side, whichever ties first (u = 0
    where p = 0). `q_range`: q in (0, 1] (`strict`); else any q >= 0 (`strict_q0`)."""
    vocab = t.target.shape[1]
    valid = (drafts >= 0) & (drafts < vocab)
    safe, rows = np.where(valid, drafts, 0), np.arange(len(drafts))
    p = t.target[rows, safe]
    q = np.ones_like(p) if t.draft is None else t.draft[rows, safe]
    with np.errstate(all="ignore"):
        ratio = (p / np.where(q > 0, q, np.float32(1))).astype(np.float32)
        tie = np.full(len(drafts), np.nan)
        for u in (np.nextafter(ratio, np.float32(-np.inf)), np.nextafter(ratio, np.float32(np.inf)), ratio):
            tie = np.where((u * q).astype(np.float32) == p, u.astype(np.float64), tie)   # f32 * f32
    tie = np.where(p == 0, 0.0, tie)
    in_range = (q > 0) & (q <= 1) if q_range else q >= 0
    return valid & in_range & (tie >= 0) & (tie <= 1), np.nan_to_num(tie)


@st.composite
def strict_uniforms(draw, drafts: np.ndarray, t: Tables, stress: bool = False, q_range: bool = True) -> np.ndarray:
    """f64 uniforms; at a drawn rate (always some when `stress`) at a tie of the strict test (see
    `strict_ties`), one f64 step above it (the same f32 once rounded), or the f32 either side of it."""
    rng = draw(generator())
    u = rng.random(len(drafts))
    rate = draw(st.sampled_from([0.0, 0.5, 1.0]))
    rate = max(rate, 0.5) if stress else rate
    label(f"uniforms: at the strict tie at rate {rate}")
    can, tie = strict_ties(drafts, t, q_range)
    tie32, side = tie.astype(np.float32), rng.integers(0, 4, len(drafts))
    beside = np.select([side == 0, side == 1, side == 2],
                       [tie, np.nextafter(tie, np.inf), np.nextafter(tie32, np.float32(np.inf)).astype(np.float64)],
                       np.maximum(np.nextafter(tie32, np.float32(-np.inf)), 0).astype(np.float64))
    return np.where(can & (rng.random(len(drafts)) < rate), beside, u)


@st.composite
def strict_q0_uniforms(draw, drafts: np.ndarray, t: Tables, stress: bool = False) -> np.ndarray:
    """`strict_uniforms` for dialect `strict_q0` (ties also where q = 0 and p = 0)."""
    return draw(strict_uniforms(drafts, t, stress, q_range=False))


# f32 steps each side of the correctly rounded f32(p / q) that an approximate division may reach: CUDA's
# div.full.f32 is documented within 2 ulp of the exact quotient; 6 steps cover that, the correct
# rounding's half ulp and a binade edge (where the steps below are half as wide)
APPROX_DIV_STEPS = 6


def approx_div_band(drafts, t: Tables) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(where the ratio decides, the f64 bounds lo, hi of the band around f32(p / q) where a division
    within 2 ulp may land on either side of u)."""
    can, ratio = acceptance_ratios(drafts, t)
    lo = hi = ratio.astype(np.float32)
    for _ in range(APPROX_DIV_STEPS):
        lo, hi = np.nextafter(lo, np.float32(-np.inf)), np.nextafter(hi, np.float32(np.inf))
    return can, lo.astype(np.float64), hi.astype(np.float64)


def approx_div_inexact(ex: Example) -> str | None:
    """Where a stored case's uniform lies inside the approximate-division band of its draft: there a
    division within 2 ulp may decide either way, so no byte verdict is fair under `approx_div`. Flat or
    padded layout; a case without uniforms (every row greedy) divides nothing."""
    x = ex.inputs
    if x.get("uniform_probs") is None:
        return None
    vocab = x["target_probs"].shape[-1]
    flat = (lambda table: None if table is None else table.reshape(-1, vocab))   # noqa: E731
    can, lo, hi = approx_div_band(x["draft_token_ids"].reshape(-1),
                                  Tables(flat(x["target_probs"]), flat(x["draft_probs"]), None))
    u = x["uniform_probs"].reshape(-1)
    inside = can & (u >= lo) & (u <= hi)
    if not inside.any():
        return None
    return f"a uniform within {APPROX_DIV_STEPS} f32 steps of f32(p / q)"


@st.composite
def approx_div_uniforms(draw, drafts: np.ndarray, t: Tables, stress: bool = False) -> np.ndarray:
    """f64 uniforms outside the band of `approx_div_band` (a uniform drawn inside it is moved to the
    first f64 above it), and at a drawn rate (always some when `stress`) the first f64 outside either
    edge: every verdict is then the same under any f32 division within 2 ulp."""
    rng = draw(generator())
    u = rng.random(len(drafts))
    rate = draw(st.sampled_from([0.0, 0.5, 1.0]))
    rate = max(rate, 0.5) if stress else rate
    label(f"uniforms: at the edge of the approximate-division band at rate {rate}")
    can, lo, hi = approx_div_band(drafts, t)
    above, below = np.nextafter(hi, np.inf), np.nextafter(lo, -np.inf)
    u = np.where(can & (rng.random(len(drafts)) < rate), np.where(rng.random(len(drafts)) < 0.5, above, below), u)
    return np.where(can & (u >= lo) & (u <= hi), above, u)


@st.composite
def random_rows(draw, batch: int, stress: bool = False) -> np.ndarray:
    """is_greedy where it may not be None: every row greedy, none, or some."""
    rows = draw(greedy_rows(batch, stress))
    return np.zeros(batch, bool) if rows is None else rows


def recovered_ids(rng, tokens, top) -> np.ndarray:
    return rng.integers(0, top, tokens).astype(np.int32)


@st.composite
def hazards(draw, ex: Example, excluded: frozenset[str] = frozenset()) -> Example:
    """A valid example made pathological: NaN and +-inf probabilities, zero noise (inv_q = inf), NaN
    noise, zero uniforms, out-of-vocabulary drafts (unless a declared domain `excluded` them). Non-finite
    values land in whole rows or single cells."""
    rng = draw(generator())
    x = dict(ex.inputs)
    kinds = draw(st.sets(st.sampled_from(["nan", "inf", "zero noise", "oov drafts", "zero uniforms"]), min_size=1))
    for kind in sorted(kinds):
        label(f"hazard: {kind}")
    for name in ("target_probs", "draft_probs", "inv_q"):
        if x.get(name) is None or not x[name].size or not kinds & {"nan", "inf", "zero noise"}:
            continue
        a = x[name].copy()
        spot = rng.random(a.shape) < draw(st.sampled_from([0.01, 0.3, 1.0]))
        choices = [v for k, v in (("nan", np.nan), ("inf", np.inf), ("inf", -np.inf)) if k in kinds]
        if name == "inv_q" and "zero noise" in kinds:
            choices.append(np.inf)
        if choices:
            a[spot] = np.array(choices, np.float32)[rng.integers(0, len(choices), a.shape)][spot]
        x[name] = a
    if "oov drafts" in kinds and x["draft_token_ids"].size and "oov" not in excluded:
        d = x["draft_token_ids"].copy()
        vocab = x["target_probs"].shape[-1]
        d[rng.random(d.shape) < 0.5] = vocab + rng.choice([0, 7])
        x["draft_token_ids"] = d
    if "zero uniforms" in kinds and x.get("uniform_probs") is not None:
        x["uniform_probs"] = np.zeros_like(x["uniform_probs"])
    return Example(tier="hazard", inputs=x, outputs=ex.outputs, layouts=ex.layouts)


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
    drafts = draw(token_ids(batch.num_tokens, vocab, stress=kind == "stress",
                              excluded=ctx.excluded_kinds("draft_token_ids")))
    t = draw(tables(batch.counts, vocab, drafts, ctx.given("draft_probs")))
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
            "uniform_probs": draw(uniforms_of(drafts, t, kind == "stress")),
            "is_greedy": draw(random_rows(batch.batch, kind == "stress")),
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

FLOAT_SPECIALS = np.array([0.0, -0.0, 1.0, -1.0, np.nan, np.inf, 0.5], np.float32)


@st.composite
def expand_valid(draw, ctx: DrawContext) -> Example:
    batch = draw(draft_batch(ctx))
    rng = draw(generator())
    dtype = ctx.dtype("expanded", ctx.dtype("x", draw(st.sampled_from(["float32", "int32", "int64"]))))
    label(f"x: {dtype}")
    if dtype == "float32":
        replace_from = draw(st.sampled_from([0.0, -1.0, 0.5, 1e-7]))
        replace_to = draw(st.sampled_from([1.0, -0.0, 2.5, 3]))
        pool = np.append(FLOAT_SPECIALS, np.float32(replace_from))
        x = np.where(rng.random(batch.batch) < 0.5, rng.choice(pool, batch.batch),
                     rng.normal(size=batch.batch)).astype(np.float32)
    else:
        info = np.iinfo(dtype)
        replace_from = draw(st.sampled_from([0, -1, int(info.max), int(info.min)]))
        replace_to = draw(st.sampled_from([0, 1, -1, int(info.max)]))
        x = np.where(rng.random(batch.batch) < 0.4, replace_from,
                     rng.integers(-5, 100, batch.batch)).astype(dtype)
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
    drafts = draw(drafts_against(first_max_rows(t.target), counts, vocab, kind == "stress",
                                 ctx.excluded_kinds("draft_token_ids")))
    is_greedy = draw(greedy_rows(batch.batch, kind == "stress", ctx.given("is_greedy")))
    noise = is_greedy is not None
    return Example(
        tier="valid",
        inputs={
            "draft_token_ids": drafts,
            "cu_num_draft_tokens": inclusive_offsets(batch.counts),
            "max_spec_len": batch.max_spec_len,
            "draft_probs": t.draft,
            "target_probs": t.target,
            "bonus_token_ids": rng.integers(0, draw(bound(vocab)), batch.batch).astype(np.int64),
            "is_greedy": is_greedy,
            "uniform_probs": draw(uniforms_of(drafts, t, kind == "stress")) if noise else None,
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


@st.composite
def padded_outputs(draw, batch: int, k: int, stress: bool = False) -> dict:
    shapes = {"output_token_ids": (batch, k + 1), "num_rejected_tokens": (batch,), "last_token_ids": (batch,)}
    return {name: Buffer(shape, "int64", draw(layout(len(shape), True if stress else None)))
            for name, shape in shapes.items()}


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
    vocab = draw(vocab_size(ctx))
    batch, k = draw(padded_shape(ctx, kind, vocab))
    rng = draw(generator())
    counts = np.full(batch, k)
    guess = draw(token_ids(batch * k, vocab))
    t = draw(tables(counts, vocab, guess, ctx.given("draft_probs")))
    drafts = draw(drafts_against(first_max_rows(t.target), counts, vocab, stress,
                                 ctx.excluded_kinds("draft_token_ids")))
    is_greedy = draw(greedy_rows(batch, stress, ctx.given("is_greedy")))
    noise = is_greedy is not None
    inputs = {
        "draft_token_ids": drafts.astype(np.int64).reshape(batch, k),
        "draft_probs": None if t.draft is None else t.draft.reshape(batch, k, vocab),
        "target_probs": t.target.reshape(batch, k, vocab),
        "bonus_token_ids": rng.integers(0, draw(bound(vocab)), batch).astype(np.int64),
        "is_greedy": is_greedy,
        "uniform_probs": draw(uniforms_of(drafts, t, stress)).reshape(batch, k) if noise else None,
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

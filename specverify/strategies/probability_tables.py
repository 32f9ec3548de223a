"""Probability tables for the stages that read them (`rejection.*`, `tree.*`, `seeded.*`): draft batches sized
to a cell budget, target and draft tables with planted boundaries, and the uniforms that land on, just off and
around each acceptance test (the record's ratio, the strict ties, the approximate division); and chains of rows
on a dyadic grid, whose every sum is exact in any order (the chain samplers)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from specverify.records.stage import DrawContext, Example
from specverify.strategies.blocks import PLACEHOLDER, DraftBatch, batch_size, draft_batch, generator, label, vocab_size

TILES = (1024, 2048, 4096)          # tile widths production kernels sweep the vocabulary in
LANE_TIE = 2048     # equal maxima this far apart share a lane of any sweep in tiles of up to 2048


def table_budget(ctx: DrawContext) -> tuple[int, int]:
    """(largest T * V, largest T) a drawn example may have: the oracle loops per token and the Triton
    interpreter costs milliseconds per program. In the interpreter 16 tokens still reach a split pick
    sweeping several tiles per program (T >= 9 at V = 8193: CPU_PROGRAMS = 32 programs, 2048-wide tiles)."""
    return (100_000, 16) if ctx.small else (2_000_000, 2048)


SMALL_VOCAB = 64     # a vocabulary where a cell of a nearby row, read for an out-of-vocabulary draft, is often large


@st.composite
def table_vocab(draw, ctx: DrawContext) -> int:
    """V of the `rejection` tables: `vocab_size`'s, or in a third of the draws 1 to SMALL_VOCAB (within the
    declared domain's bounds), where vLLM's random kernel, reading an out-of-vocabulary draft's p and q in
    the next row, often accepts it."""
    low, high = ctx.limits("V", *ctx.limits("vocab_size", 1, SMALL_VOCAB))
    if draw(st.integers(0, 2)) or low > high:
        return draw(vocab_size(ctx))
    label(f"vocab: V <= {SMALL_VOCAB}")
    return draw(st.integers(low, high))


@st.composite
def sized_batch(draw, ctx: DrawContext, kind: str) -> tuple[DraftBatch, int]:
    """A draft batch and a vocab size (`table_vocab`) whose [T, V] tables fit the budget (151936 comes with
    tiny T)."""
    vocab = draw(table_vocab(ctx))
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
    equal maxima far apart (within and across tiles, and in one lane of a tiled sweep in every table past
    2 * LANE_TIE: `lane_ties`), all-zero residuals, a lone peak in the last
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
    if vocab > 2 * LANE_TIE and tokens:     # the generator's bytes: no Hypothesis draw
        lane_ties(rng, target, draft, inv_q, request)
    return Tables(target, draft, inv_q)


def lane_ties(rng, target, draft, inv_q, request) -> None:
    """In half the rows (one at least), equal maxima LANE_TIE apart in the row's first two tiles of
    LANE_TIE: in the target (0.75 at both, the rest halved; draft 0 there) and in the request's noise (its peak at both). A
    kernel that keeps a best per lane over a program's tiles sees both in one lane: a later equal cell
    must not replace the first."""
    rows = np.flatnonzero(rng.random(len(target)) < 0.5)
    rows = rows if len(rows) else rng.integers(0, len(target), 1)
    first = rng.integers(0, LANE_TIE, len(rows))
    target[rows] *= np.float32(0.5)
    peak = inv_q[request[rows]].max(1)
    for v in (first, first + LANE_TIE):
        target[rows, v] = np.float32(0.75)
        if draft is not None:
            draft[rows, v] = 0
        inv_q[request[rows], v] = peak
    label(f"ties: {LANE_TIE} apart in the first two tiles (one lane of a {LANE_TIE}-wide sweep)")


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


# --- chains of probability rows (`rejection.chain_cdf`, `seeded.chain_sampling`) --------------------

CDF_VOCABS = (1, 2, 1023, 1024, 1025, 2049, 4097)   # one id, the kernels' tile edges, a few thousand
SMALL_BATCH = 4    # the most requests of an interpreter draw
@st.composite
def cdf_vocab(draw, ctx: DrawContext) -> int:
    """V: tile edges (1024), a few thousand, or small; the interpreter stays at or below 1025."""
    low, high = ctx.limits("V", 1, 1025 if ctx.small else 4097)
    edges = [v for v in CDF_VOCABS if low <= v <= high]
    small = st.integers(low, max(low, min(high, low + 63)))
    vocab = draw(st.one_of(st.sampled_from(edges), small) if edges else small)
    label("vocab: V=1" if vocab == 1 else "vocab: tile edge or large" if vocab in CDF_VOCABS else "vocab: small")
    return vocab


@st.composite
def chain_shape(draw, ctx: DrawContext, kind: str, vocab: int) -> tuple[int, int]:
    """(B, K): K in 0..8, B * (K + 1) * V within the table budget, B <= SMALL_BATCH for the interpreter
    (each program costs it tens of ms); (1, 1) for a "single" draw."""
    if kind == "single":
        return 1, 1
    k = draw(st.integers(0, 8))
    cells, tokens = table_budget(ctx)
    most = max(1, min(tokens, cells // (vocab * (k + 1))))
    batch = draw(batch_size(ctx, 0, min(most, SMALL_BATCH) if ctx.small else most))
    label("chain: K=0 (bonus only)" if k == 0 else "chain: K=1" if k == 1 else "chain: K>1")
    label("batch: B=0" if batch == 0 else "batch: B=1" if batch == 1 else "batch: B>1")
    return batch, k


def grid_rows(rng, shape, bits: int, zeros: float) -> np.ndarray:
    """f32 rows of multiples of 2**-bits summing to at most 1, about `zeros` of the cells 0."""
    w = rng.gamma(0.7, size=shape)
    w[rng.random(shape) < zeros] = 0
    total = w.sum(-1, keepdims=True)
    w = w / np.where(total > 0, total, 1)
    return (np.floor(w * 2.0**bits) / 2.0**bits).astype(np.float32)


def inverse_cdf(sums: np.ndarray, r: np.ndarray, vocab: int) -> np.ndarray:
    """Per row of running sums `sums` [..., V]: the lowest v whose running sum exceeds r (a draw from the row
    for r uniform in [0, sum)), V - 1 where none does."""
    return np.minimum((sums <= r[..., None]).sum(-1), vocab - 1)


def drafts_from(rng, draft: np.ndarray, vocab: int, odd: float) -> np.ndarray:
    """int64 [B, K]: each draft drawn from its q row (uniformly where the row is all zero), then a
    fraction `odd` replaced by -1 or an out-of-vocabulary id (V, V + 7)."""
    sums = np.cumsum(draft.astype(np.float64), -1)
    totals = sums[..., -1] if vocab else np.zeros(draft.shape[:-1])
    r = rng.random(draft.shape[:-1]) * totals
    picked = inverse_cdf(sums, r, vocab)
    picked = np.where(totals > 0, picked, rng.integers(0, vocab, draft.shape[:-1]))
    special = rng.choice(np.array([PLACEHOLDER, vocab, vocab + 7]), draft.shape[:-1])
    return np.where(rng.random(draft.shape[:-1]) < odd, special, picked).astype(np.int64)

"""Strategies of `rejection.chain_cdf`.

Valid draws keep every sum exact in f32 whatever the order it is taken in: probabilities are multiples
of 2**-bits (bits 2 to 16) with row sums <= 1, uniforms multiples of 2**-ubits (ubits 1 to 8), so each
partial sum, difference and product u * q is exact. Coarse grids make ties (u * q == p) and running
sums equal to t common; both are also planted. General floats, NaN, infinities and negative cells go to
the hazard tier, checked by `invariants`.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from specverify.oracles.rejection_cdf import PLACEHOLDER, accepts, residual, running_sums
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.records.values import POISON_A, filled, output_value, output_values
from specverify.strategies.blocks import batch_size, generator, invalid, label, mode, one_invalid, short
from specverify.strategies.rejection import table_budget

f32 = np.float32
CDF_VOCABS = (1, 2, 1023, 1024, 1025, 2049, 4097)   # one id, the kernels' tile edges, a few thousand
SMALL_BATCH = 4    # the most requests of an interpreter draw
PLANTS = ("ties", "equal rows", "q zero at draft", "q above one", "zero bonus row", "boundary", "u_final 0 or 1",
          "placeholder bait")


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
    return (np.floor(w * 2.0**bits) / 2.0**bits).astype(f32)


def grid_uniforms(rng, shape, bits: int) -> np.ndarray:
    return (rng.integers(0, 2**bits, shape) / 2.0**bits).astype(f32)


def drafts_from(rng, draft: np.ndarray, vocab: int, odd: float) -> np.ndarray:
    """int64 [B, K]: each draft drawn from its q row (uniformly where the row is all zero), then a
    fraction `odd` replaced by -1 or an out-of-vocabulary id (V, V + 7)."""
    sums = np.cumsum(draft.astype(np.float64), -1)
    totals = sums[..., -1] if vocab else np.zeros(draft.shape[:-1])
    r = rng.random(draft.shape[:-1]) * totals
    picked = np.minimum((sums <= r[..., None]).sum(-1), vocab - 1)
    picked = np.where(totals > 0, picked, rng.integers(0, vocab, draft.shape[:-1]))
    special = rng.choice(np.array([PLACEHOLDER, vocab, vocab + 7]), draft.shape[:-1])
    return np.where(rng.random(draft.shape[:-1]) < odd, special, picked).astype(np.int64)


def pick_inputs(x: dict, q_range: bool = True) -> tuple[np.ndarray, list[np.ndarray], np.ndarray]:
    """(num [B], the row each request picks from, t [B] as f32) by the record's rule, per request."""
    cand, p, q, u, uf = (x[n] for n in ("candidates", "target_probs", "draft_probs", "uniform_samples",
                                          "uniform_final"))
    k = cand.shape[1] - 1
    nums, rows, ts = [], [], []
    for b in range(cand.shape[0]):
        num = 0
        while num < k and accepts(int(cand[b, num + 1]), p[b, num], q[b, num], u[b, num], q_range):
            num += 1
        res = residual(p[b, num], q[b, num] if num < k else None, q_range)
        with np.errstate(all="ignore"):
            ts.append(f32(uf[b] * running_sums(res)[-1]))
        nums.append(num)
        rows.append(res)
    return np.array(nums, np.int64), rows, np.array(ts, f32)


def plant(rng, chosen: set, x: dict, bits: int) -> None:
    """Apply the chosen plants (each to about a third of the positions or requests) in place."""
    cand, p, q, u, uf = (x[n] for n in ("candidates", "target_probs", "draft_probs", "uniform_samples",
                                          "uniform_final"))
    batch, k1, vocab = p.shape
    k = k1 - 1
    if not batch:
        return
    drafts = cand[:, 1:]
    valid = (drafts >= 0) & (drafts < vocab)
    some = rng.random((batch, k)) < 0.35
    b_idx, pos_idx = np.nonzero(some & valid)
    d = drafts[b_idx, pos_idx]
    if "equal rows" in chosen:          # q = p: accepted while p(d) > 0; a rejection leaves a zero residual
        rows = rng.random(batch) < 0.4
        q[rows] = p[rows, :k]
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
        p[rng.random(batch) < 0.5, k] = 0
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


@st.composite
def chain_cdf_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    stress = kind == "stress"
    vocab = draw(cdf_vocab(ctx))
    batch, k = draw(chain_shape(ctx, kind, vocab))
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
    target = grid_rows(rng, (batch, k + 1, vocab), bits, zeros)
    draft = grid_rows(rng, (batch, k, vocab), bits, zeros)
    uniforms = grid_uniforms(rng, (batch, k + 1), ubits)
    uniforms[:, k] = grid_uniforms(rng, batch, 8)      # never read: a value of its own
    x = {"candidates": np.concatenate([rng.integers(0, vocab, (batch, 1)), drafts_from(rng, draft, vocab, odd)],
                                      1).astype(np.int64),
         "target_probs": target, "draft_probs": draft, "uniform_samples": uniforms,
         "uniform_final": grid_uniforms(rng, batch, ubits)}
    plant(rng, chosen, x, bits)
    coverage_labels(x)
    return Example("valid", inputs=x, outputs=buffers(batch, k))


def coverage_labels(x: dict) -> None:
    """What the draw reached: all accepted, a zero residual (V - 1), t equal to a running sum."""
    if not len(x["candidates"]) or x["target_probs"].size > 400_000:
        return
    nums, rows, ts = pick_inputs(x)
    k = x["candidates"].shape[1] - 1
    if k and (nums == k).any():
        label("reached: every draft accepted (bonus pick)")
    if (nums < k).any():
        label("reached: a rejection (residual pick)")
    reached = set()
    for res, t in zip(rows, ts):
        sums = running_sums(res)
        if not sums[-1] > 0:
            reached.add("reached: an all-zero pick row (V - 1)")
        elif (sums[res > 0] == t).any():
            reached.add("reached: t on a running sum")
    for text in sorted(reached):
        label(text)


def buffers(batch: int, k: int) -> dict[str, Buffer]:
    return {"predicts": Buffer((batch * (k + 1),), "int32"), "accept_index": Buffer((batch, k + 1), "int32"),
            "accept_token_num": Buffer((batch,), "int32")}


HAZARDS = ("general floats", "nan", "inf", "negative", "above one")


@st.composite
def hazards(draw, ex: Example) -> Example:
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
    return chain_cdf_valid(ctx).flatmap(hazards)


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

"""Strategies of the `scv` family.

`acceptance_mask`: drafts are built from the targets with a drawn accepted length per request, the
first rejection being a different id, a -1 draft, or (int64) an id equal to the target in its low 32
bits; after it, drafts often match again (only the prefix counts). Padding tokens past the batch
match their targets. `adaptive_k`: short histories, bounds, windows and targets, with sums drawn on
purpose exactly at the target and at half of it, and targets such as 0.1 whose binary value is not
the decimal one.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import strategies as st

from specverify.oracles.scv import PLACEHOLDER
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.records.values import output_value
from specverify.strategies.blocks import (draft_batch, generator, inclusive_offsets, index_dtype, invalid, label,
                                          labelled_dtype, layout, one_invalid, request_rows, short, vocab_size)

# ---------------------------------------------------------------- scv.acceptance_mask

TILE = 256   # drafts per tile of the Triton kernel (kernels/triton/scv.py BLOCK)
REJECTIONS = {"other id": "by another id", "placeholder": "by a -1 draft",
              "high bits": "by an int64 id equal in its low 32 bits"}

@st.composite
def accepted_lengths(draw, rng, counts: np.ndarray) -> np.ndarray:
    """Per request: all drafts accepted, none, or anywhere in between (half the requests longer than a
    tile from the last draft of the first tile on)."""
    kind = draw(st.sampled_from(["mixed", "all", "none", "mixed"]))
    label(f"accepted: {kind}")
    mixed = rng.integers(0, counts + 1)
    edge = (counts > TILE) & (rng.random(len(counts)) < 0.5)
    mixed[edge] = rng.integers(TILE - 1, counts[edge] + 1)
    return {"all": counts, "none": np.zeros_like(counts), "mixed": mixed}[kind]


@st.composite
def acceptance_mask_valid(draw, ctx: DrawContext, tier: str = "valid") -> Example:
    batch = draw(draft_batch(ctx))
    counts = batch.counts
    pad = draw(st.sampled_from([0, 0, 0, 1, 9]))
    if pad:
        label("tokens past the batch (CUDA-graph padding)")
    tokens = int(counts.sum()) + pad
    draft_dtype, target_dtype = draw(labelled_dtype("draft_token_ids", ctx)), draw(labelled_dtype("target_token_ids", ctx))
    vocab = draw(vocab_size(ctx))
    rng = draw(generator())
    target = rng.integers(0, vocab, tokens)
    draft = target.copy()
    wide = draft_dtype == target_dtype == "int64"
    if draft_dtype != target_dtype:
        label("dtype: draft and target ids of different dtypes")
    kinds = ("other id", "placeholder", "high bits" if wide else "other id")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    rejections, again = set(), False
    for r, length in enumerate(draw(accepted_lengths(rng, counts))):
        start, n = int(starts[r]), int(counts[r])
        after = np.arange(start + length + 1, start + n)
        draft[after] = np.where(rng.random(len(after)) < 0.5, target[after], (target[after] + 1) % vocab)
        again |= bool((draft[after] == target[after]).any())
        if length < n:
            kind = kinds[int(rng.integers(0, 3))]
            t = start + int(length)
            other = (target[t] + 1 + rng.integers(0, vocab)) % (vocab + 1)   # in [0, V], never the target
            draft[t] = {"other id": other, "placeholder": PLACEHOLDER, "high bits": target[t] + 2**32}[kind]
            rejections |= {kind, "past the first 256-draft tile"} if length >= TILE else {kind}
    for kind in sorted(rejections):
        label(f"rejected: {REJECTIONS.get(kind, kind)}")
    if again:
        label("drafts that match again after the rejection")
    if counts.max(initial=0) > TILE:
        label("batch: a request across the 256-draft tile")
    if tier == "hazard":
        draft, target = draw(degenerate_ids(rng, draft, target))
    return Example(
        tier=tier,
        inputs={"draft_token_ids": draft.astype(draft_dtype), "target_token_ids": target.astype(target_dtype),
                "cu_num_draft_tokens": inclusive_offsets(counts)},
        outputs={"accepted_mask": Buffer((tokens,), "bool"), "num_accepted": Buffer((len(counts),), "int32")},
        layouts={k: v for k, v in (("draft_token_ids", draw(layout(1))), ("target_token_ids", draw(layout(1))))
                 if v is not None},
    )


@st.composite
def degenerate_ids(draw, rng, draft: np.ndarray, target: np.ndarray):
    """Hazard: every draft a placeholder matching a placeholder target, every id at int32's top, or ids
    that agree everywhere."""
    kind = draw(st.sampled_from(["placeholders", "largest ids", "all equal"]))
    label(f"hazard: {kind}")
    if kind == "placeholders":
        return np.full_like(draft, PLACEHOLDER), np.full_like(target, PLACEHOLDER)
    if kind == "largest ids":
        top = np.full_like(target, 2**31 - 1)
        return np.where(rng.random(len(draft)) < 0.5, top, draft), top
    return target.copy(), target


def acceptance_mask_hazard(ctx: DrawContext):
    return acceptance_mask_valid(ctx, tier="hazard")


def acceptance_mask_invariants(ex: Example, out: dict) -> list[str]:
    """Hazard tier: the outputs restated from the contract: each request's mask is a prefix of exactly
    num_accepted tokens, every accepted draft equals its target and is not -1, the token after the prefix
    (if in the request) is not acceptable, and padding tokens are False."""
    x = ex.inputs
    draft, target = x["draft_token_ids"].astype(np.int64), x["target_token_ids"].astype(np.int64)
    cu = x["cu_num_draft_tokens"]
    mask, count = out["accepted_mask"].view(np.uint8), out["num_accepted"]
    broken = []
    start = 0
    for r, end in enumerate(cu.tolist()):
        n, k = end - start, int(count[r])
        ok = (draft[start:end] == target[start:end]) & (draft[start:end] != PLACEHOLDER)
        if not 0 <= k <= n:
            broken.append(f"request {r}: num_accepted {output_value(count[r])} outside [0, {n}]")
        elif mask[start:end].tolist() != [1] * k + [0] * (n - k):
            broken.append(f"request {r}: the mask is not a prefix of {k} accepted tokens")
        elif not ok[:k].all() or (k < n and ok[k]):
            broken.append(f"request {r}: {k} accepted does not end at the first rejected draft")
        start = end
    if (mask[start:] != 0).any():
        broken.append("a token past the batch is marked accepted")
    return broken[:3]


@st.composite
def acceptance_mask_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(acceptance_mask_valid(ctx))
    x = ex.inputs
    cu, draft, target = x["cu_num_draft_tokens"], x["draft_token_ids"], x["target_token_ids"]
    found = []
    if len(cu):
        more = cu.copy()
        more[-1] = len(draft) + 1
        found.append(invalid(ex, "cu_num_draft_tokens", "counts no more drafts than tokens",
                             cu_num_draft_tokens=more))
        found.append(invalid(ex, "cu_num_draft_tokens", "starts at a count >= 0",
                             cu_num_draft_tokens=np.concatenate([[-1], cu]).astype(np.int32),
                             outputs={"num_accepted": Buffer((len(cu) + 1,), "int32")}))
    if len(cu) >= 2 and cu[-1] > 0:
        down = cu.copy()
        down[-2] = cu[-1] + 0
        down[-1] = cu[-1] - 1
        found.append(invalid(ex, "cu_num_draft_tokens", "non-decreasing", cu_num_draft_tokens=down))
    if len(draft):
        i = draw(st.integers(0, len(draft) - 1))
        for name, ids in (("draft_token_ids", draft), ("target_token_ids", target)):
            bad = ids.copy()
            bad[i] = -2
            found.append(invalid(ex, name, "ids >= -1", **{name: bad}))
    if not found:
        found.append(invalid(ex, "cu_num_draft_tokens", "counts no more drafts than tokens",
                             cu_num_draft_tokens=np.array([1], np.int32),
                             outputs={"num_accepted": Buffer((1,), "int32")}))
    return draw(one_invalid(found))


def acceptance_mask_table(ex: Example):
    x = ex.inputs
    cu, draft, target = x["cu_num_draft_tokens"], x["draft_token_ids"], x["target_token_ids"]
    headers, rows = request_rows(cu, {"draft": draft, "target": target}, {})
    last = int(cu[-1]) if len(cu) else 0
    if len(draft) > last:
        rows.append(["padding", len(draft) - last, short(draft[last:]), short(target[last:])])
    return headers, rows


# ---------------------------------------------------------------- scv.adaptive_k

TARGETS = (0.5, 0.75, 0.8, 1.0, 0.1, 0.3, 0.7, 0.9)   # 0.1, 0.3, 0.7, 0.9: binary values off the decimal ones
TIES = (0.5, 0.75, 0.25, 0.625)   # targets of small power-of-two denominators: thresholds that counts meet


@st.composite
def history(draw, steps: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """Drafted tokens per step (zeros among them) and accepted ones, at most the drafted."""
    drafted = rng.integers(0, draw(st.sampled_from([1, 5, 9, 64])), steps)
    if draw(st.booleans()):
        drafted[rng.random(steps) < 0.3] = 0
    return rng.integers(0, drafted + 1), drafted


@st.composite
def boundary(draw, accepted: np.ndarray, drafted: np.ndarray, window: int, target: float):
    """The window's sums moved onto a threshold of the rule, a = target * d (growth) or 2a = target * d
    (shrink): exactly (a tie; the target then one of TIES unless its thresholds are whole counts already) or
    with the float quotient a / d (2a / d) equal to the float target, the decimal reading of the threshold
    (0.1 * 10 is not exactly 1); or one above or below. The window's drafts are made a multiple of what the
    threshold needs. Returns (accepted, drafted, target), the history unchanged where the float quotient
    cannot meet the target (most float targets)."""
    first = max(0, len(accepted) - window)
    name = draw(st.sampled_from(["exactly at the target", "exactly at half the target",
                                 "a / d == target in floats", "2a / d == target in floats"] * 2 +
                                ["exactly at the target", "exactly at half the target"]))   # ties the most
    half, exact = "half" in name or name.startswith("2a"), name.startswith("exactly")
    if exact and Fraction(target).denominator > 64:
        target = draw(st.sampled_from(TIES))
    multiple = (Fraction(target).denominator if exact else 10) * (2 if half else 1)
    moved = drafted.copy()
    d = int(moved[first:].sum())
    moved[-1] += (-d) % multiple + (0 if d else multiple)
    d = int(moved[first:].sum())
    want = int(Fraction(target) * d / (2 if half else 1)) if exact else round(target * d / (2 if half else 1))
    if not exact and (2 * want if half else want) / d != target:
        return accepted, drafted, target
    nudge = draw(st.sampled_from([0, 0, -1, 0, 1]))
    want += nudge
    if not 0 <= want <= d:
        return accepted, drafted, target
    accepted = accepted.copy()
    accepted[first:] = 0
    for i in range(first, len(accepted)):
        take = min(int(moved[i]), want)
        accepted[i], want = take, want - take
    label(f"window sum: {name}" + {0: "", -1: ", one below", 1: ", one above"}[nudge])
    label("window sum: one off a threshold" if nudge else "window sum: on a threshold")
    label("window sum: about half the target (the shrink rule)" if half else
          "window sum: about the target (the growth rule)")
    if not exact:
        label("window sum: a decimal target's whole count (float quotient)")
    return accepted, moved, target


@st.composite
def adaptive_k_valid(draw, ctx: DrawContext, tier: str = "valid") -> Example:
    rng = draw(generator())
    steps = draw(st.integers(0, 12))
    accepted, drafted = draw(history(steps, rng))
    window = draw(st.one_of(st.integers(1, 8), st.integers(1, 4), st.just(steps + 3)))
    target = draw(st.one_of(st.sampled_from(TARGETS), st.sampled_from(TARGETS), st.floats(1e-3, 1.0)))
    if drafted[max(0, steps - window):].any():   # a window of drafts onto a threshold, where the target
        accepted, drafted, target = draw(boundary(accepted, drafted, window, target))   # makes one whole
    low = draw(st.integers(0, 6))
    high = low + draw(st.sampled_from([0, 1, 4]))
    current = draw(st.integers(max(0, low - 2), high + 2))
    if not low <= current <= high:
        label("current_k outside the bounds")
    if low == high:
        label("bounds: min_k == max_k")
    wide = ctx.dtype("num_draft_tokens", ctx.dtype("num_accepted_tokens", "int64"))
    if tier == "hazard":
        accepted, drafted = draw(huge_counts(rng, accepted, drafted, wide))
    containers = {name: draw(st.sampled_from(["list", "ndarray", "tensor"])) for name in
                  ("num_accepted_tokens", "num_draft_tokens")}
    dtype = ctx.dtype("num_draft_tokens", ctx.dtype("num_accepted_tokens", draw(index_dtype()))) \
        if tier == "valid" else wide
    label(f"history: {containers['num_accepted_tokens']}")
    label("history: empty" if steps == 0 else
          "history: shorter than the window" if steps < window else "history: longer than the window")
    if (drafted == 0).any():
        label("history: a step of no drafts")
    a, d = int(accepted[max(0, steps - window):].sum()), int(drafted[max(0, steps - window):].sum())
    if steps and not d:
        label("window sum: steps of no drafts only (K kept)")
    if d and a == Fraction(target) * d:
        label("window sum: a tie on the growth rule (a = target_ratio * d)")
    if d and 2 * a == Fraction(target) * d:
        label("window sum: a tie on the shrink rule (2a = target_ratio * d)")
    return Example(
        tier=tier,
        inputs={"num_accepted_tokens": accepted.astype(dtype), "num_draft_tokens": drafted.astype(dtype),
                "current_k": current, "min_k": low, "max_k": high, "target_ratio": float(target),
                "window": window},
        containers=containers,
    )


@st.composite
def huge_counts(draw, rng, accepted: np.ndarray, drafted: np.ndarray, dtype: str = "int64"):
    """Hazard: counts near a quarter of the dtype's range, so sums over a window pass it."""
    if not len(drafted):
        label("hazard: empty history")
        return accepted, drafted
    label(f"hazard: window sums beyond {dtype}")
    drafted = np.full(len(drafted), 2**(62 if dtype == "int64" else 30) + draw(st.integers(0, 7)), np.int64)
    return (drafted - rng.integers(0, 2, len(drafted))) * (rng.random(len(drafted)) < 0.8), drafted


def adaptive_k_hazard(ctx: DrawContext):
    return adaptive_k_valid(ctx, tier="hazard")


@st.composite
def adaptive_k_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(adaptive_k_valid(ctx))
    x = ex.inputs
    accepted, drafted = x["num_accepted_tokens"], x["num_draft_tokens"]
    found = [
        invalid(ex, "num_accepted_tokens", "one count per step",
                num_accepted_tokens=np.append(accepted, 0).astype(accepted.dtype)),
        invalid(ex, "min_k", "min_k <= max_k", min_k=x["max_k"] + 1),
        invalid(ex, "min_k", "min_k >= 0", min_k=-1),
        invalid(ex, "current_k", "current_k >= 0", current_k=-1),
        invalid(ex, "window", "window >= 1", window=0),
        invalid(ex, "target_ratio", "target_ratio > 0", target_ratio=0.0),
        invalid(ex, "target_ratio", "target_ratio <= 1", target_ratio=1.5),
        invalid(ex, "target_ratio", "target_ratio is a number", target_ratio=float("nan")),
        invalid(ex, "target_ratio", "a Python float", target_ratio=1),
    ]
    if len(drafted):
        i = draw(st.integers(0, len(drafted) - 1))
        more = accepted.copy()
        more[i] = drafted[i] + 1
        found.append(invalid(ex, "num_accepted_tokens", "accepted <= drafted", num_accepted_tokens=more))
        negative = drafted.copy()
        negative[i] = -1
        found.append(invalid(ex, "num_draft_tokens", "counts >= 0", num_draft_tokens=negative))
    return draw(one_invalid(found))


def adaptive_k_table(ex: Example):
    x = ex.inputs
    headers = ["step", "accepted", "drafted"]
    rows = [[i, int(a), int(d)] for i, (a, d) in enumerate(zip(x["num_accepted_tokens"], x["num_draft_tokens"]))]
    rows.append(["K", f"current {x['current_k']} in [{x['min_k']}, {x['max_k']}]",
                 f"target {x['target_ratio']!r}, window {x['window']}"])
    return headers, rows



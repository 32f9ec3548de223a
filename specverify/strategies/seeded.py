"""Strategies of the `seeded` family.

`seeded.chain_sampling`: probabilities on the dyadic grid of the chain samplers (every sum exact in any order);
seeds and offsets drawn, then planted where only a replay can see the difference: a draw of exactly 1.0 (a
state from `ONE_WORDS` put at the draw it should hit), `U * q == p` ties made from the request's own stream,
all-zero pick rows (-1), -1 and out-of-vocabulary drafts with bait before them, seeds next to 2^64, offsets
that are not multiples of 4 or lie next to 2^64, and rows that share a seed and offset (or whose offsets are
K + 2 apart) so that a stream not keyed by the row would collide.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from specverify.oracles.seeded import request_uniforms, sample_row
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.strategies.blocks import PLACEHOLDER, generator, invalid, label, mode, one_invalid, short
from specverify.strategies.probability_tables import cdf_vocab, chain_shape, drafts_from, grid_rows

f32 = np.float32
PLANTS = ("draw of 1.0", "ties", "equal rows", "zero bonus row", "seeds near 2^64", "odd offsets",
          "colliding rows", "placeholder bait", "first cell leads")
# (seed, subsequence, n): curand word n after curand_init(seed, subsequence, 0) is one of the 128 that give a
# curand_uniform of exactly 1.0 (found by a search over the port; tests/stages/test_seeded.py checks each)
ONE_WORDS = ((24301, 0, 14565860), (2**64 - 3, 0, 55248742), (24301, 1, 39428595), (2**64 - 3, 1, 5309952),
             (24301, 2, 12427040), (2**64 - 3, 2, 1527409), (24301, 3, 59669891), (2**64 - 3, 3, 19293560))


def as_int64(values) -> np.ndarray:
    """uint64 values by their int64 bit pattern (how the seed and offset fields hold them)."""
    return np.array([int(v) % 2**64 for v in values], dtype=np.uint64).view(np.int64)


def stream(x: dict) -> np.ndarray:
    """[B, K+2] f32: the uniforms each request draws (row b's stream, seed[b], offset[b])."""
    return request_uniforms(x["seed"], x["offset"], x["draft_token_ids"].shape[1])


def plant(rng, chosen: set, x: dict) -> None:
    """Apply the chosen plants in place; the ties last, from the stream the other plants leave."""
    drafts, p, q, seed, offset = (x[n] for n in ("draft_token_ids", "target_probs", "draft_probs", "seed", "offset"))
    batch, k = drafts.shape
    vocab = p.shape[-1]
    if not batch:
        return
    if "colliding rows" in chosen:      # one seed; one offset, or offsets K + 2 apart
        seed[:] = seed[0]
        offset[:] = offset[0] + (np.arange(batch) * (k + 2) if rng.random() < 0.5 else 0)
    if "seeds near 2^64" in chosen:
        near = rng.random(batch) < 0.5
        seed[near] = as_int64([2**64 - 1 - int(n) for n in rng.integers(0, 4, batch)])[near]
    if "odd offsets" in chosen:
        odd = rng.random(batch) < 0.5
        offset[odd] = as_int64(rng.choice([1, 2, 3, 5, 2**34 + 3, 2**64 - 1, 2**64 - 3 - k], batch))[odd]
    if "draw of 1.0" in chosen:         # row b < 4 hits 1.0 at draw j: an acceptance, the count or the pick
        for b in range(min(batch, 4)):
            if rng.random() < 0.6:
                hit = [w for w in ONE_WORDS if w[1] == b][rng.integers(0, 2)]
                j = int(rng.integers(0, k + 2))
                seed[b], offset[b] = as_int64([hit[0], hit[2] - j])
    if "first cell leads" in chosen:    # cell 0 holds most of every row's mass and the last cell some: the pick is
        lead = rng.random(batch) < 0.5  # mostly v = 0, with positive cells in the last tile (a kernel that lets a
        p[lead, :, 0], p[lead, :, -1] = f32(0.75), f32(2.0**-4)     # later tile overwrite it is seen)
        q[lead, :, 0], q[lead, :, -1] = 0, 0
    if "equal rows" in chosen:          # q = p: accepted while p(d) > 0; a rejection leaves an all-zero row
        rows = rng.random(batch) < 0.4
        q[rows] = p[rows, :k]
    if "zero bonus row" in chosen:
        p[rng.random(batch) < 0.5, k] = 0
    if "placeholder bait" in chosen:    # the cells just before a -1 draft's rows would accept it, were they read
        flat_p, flat_q = p.reshape(-1), q.reshape(-1)
        for b, pos in zip(*np.nonzero(drafts == PLACEHOLDER)):
            at_p, at_q = (b * (k + 1) + pos) * vocab - 1, (b * k + pos) * vocab - 1
            if at_p >= 0 and at_q >= 0:
                flat_p[at_p], flat_q[at_q] = f32(0.5), f32(0.25)
    if "ties" in chosen:                # p = f32(U * q) at the drafted token, with U_i or U_{i+1}
        uniforms = stream(x)
        for b, i in zip(*np.nonzero((rng.random((batch, k)) < 0.35) & (drafts >= 0) & (drafts < vocab))):
            d = drafts[b, i]
            p[b, i, d] = f32(uniforms[b, i + int(rng.random() < 0.3)] * q[b, i, d])


def coverage_labels(x: dict) -> None:
    """What the draw reached: a rejection, every draft accepted, a -1 pick, a draw of 1.0, a later acceptance
    counted after the first rejection, a tie f32(U * q) == p > 0, -1 and out-of-vocabulary drafts (the walk
    tests every draft: those after the first rejection for the count)."""
    if not len(x["draft_token_ids"]) or x["target_probs"].size > 400_000:
        return
    uniforms = stream(x)
    drafts, p, q = x["draft_token_ids"], x["target_probs"], x["draft_probs"]
    k, vocab = drafts.shape[1], p.shape[-1]
    reached = set()
    for b in range(len(uniforms)):
        tokens, accepted, emitted = sample_row(drafts[b], p[b], q[b], uniforms[b])
        reached.add("reached: every draft accepted (bonus pick)" if emitted == k else "reached: a rejection")
        if tokens[emitted] == PLACEHOLDER:
            reached.add("reached: an all-zero pick row (-1)")
        if accepted > emitted:
            reached.add("reached: a later draft counted as accepted")
        if (uniforms[b, :k + 2 - (emitted == k)] == 1).any():
            reached.add("reached: a draw of exactly 1.0")
        if (drafts[b] == PLACEHOLDER).any():
            reached.add("reached: a -1 draft")
        if (drafts[b] >= vocab).any():
            reached.add("reached: an out-of-vocabulary draft")
        for i in range(k):
            d, u = int(drafts[b, i]), uniforms[b, i if i <= emitted else i + 1]
            if 0 <= d < vocab and p[b, i, d] > 0 and f32(u * q[b, i, d]) == p[b, i, d]:
                reached.add("reached: a tie f32(U * q) == p")
    for text in sorted(reached):
        label(text)


def multi_tile(ctx: DrawContext):
    """V just past a vocabulary tile of the kernels (1024 cells): two tiles or more, the last one short."""
    low, high = ctx.limits("V", 1, 1025 if ctx.small else 4097)
    edges = [v for v in (1025, 2049, 4097) if low <= v <= high]
    return st.sampled_from(edges) if edges else cdf_vocab(ctx)


@st.composite
def chain_sampling_valid(draw, ctx: DrawContext) -> Example:
    kind = draw(mode())
    vocab = draw(st.one_of(cdf_vocab(ctx), multi_tile(ctx)))
    if vocab > 1024:
        label("vocab: more than one 1024-cell tile")
    batch, k = draw(chain_shape(ctx, kind, vocab))
    rng = draw(generator())
    bits = draw(st.sampled_from([2, 4, 8, 16, 16]))
    zeros = draw(st.sampled_from([0.0, 0.5, 0.9]))
    odd = draw(st.sampled_from([0.0, 0.1, 0.3]))
    chosen = draw(st.sets(st.sampled_from(PLANTS), max_size=len(PLANTS)))
    if kind == "stress":
        chosen, odd = set(PLANTS), max(odd, 0.1)
    label(f"grid: 2**-{bits} probabilities")
    for name in sorted(chosen):
        label(f"planted: {name}")
    draft = grid_rows(rng, (batch, k, vocab), bits, zeros)
    x = {"draft_probs": draft, "draft_token_ids": drafts_from(rng, draft, vocab, odd).astype(np.int32),
         "target_probs": grid_rows(rng, (batch, k + 1, vocab), bits, zeros),
         "seed": as_int64(rng.integers(0, 2**63, batch, dtype=np.uint64)),
         "offset": as_int64(rng.integers(0, 2**40, batch, dtype=np.uint64)),
         "output_accepted_token_num": rng.integers(0, 1000, batch).astype(np.int32),
         "output_emitted_draft_token_num": rng.integers(0, 1000, batch).astype(np.int32)}
    plant(rng, chosen, x)
    coverage_labels(x)
    return Example("valid", inputs=x, outputs=buffers(batch, k))


def buffers(batch: int, k: int) -> dict[str, Buffer]:
    return {"output_token_ids": Buffer((batch, k + 1), "int32")}


@st.composite
def chain_sampling_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(chain_sampling_valid(ctx))
    drafts = ex.inputs["draft_token_ids"]
    found = [invalid(ex, "seed", "one seed per request [B]", seed=np.zeros(len(drafts) + 1, np.int64))]
    if drafts.size:
        below = drafts.copy()
        below[-1, -1] = -2
        found.append(invalid(ex, "draft_token_ids", "ids >= -1", draft_token_ids=below))
    return draw(one_invalid(found))


def chain_sampling_table(ex: Example):
    x = ex.inputs
    rows = [[b, short(x["draft_token_ids"][b]), int(x["seed"][b]) % 2**64, int(x["offset"][b]) % 2**64]
            for b in range(len(x["draft_token_ids"]))]
    return ["row", "draft_token_ids", "seed", "offset"], rows


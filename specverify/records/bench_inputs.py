"""Building blocks of the stages' benchmark inputs (`Stage.bench`): realistic contents, cheap to make.

Acceptance: each draft matches the target with probability ACCEPT (0.7), independently, so a request's
accepted prefix is geometric, cut at K, as engines report for EAGLE-style drafters. Probability tables
are softmax rows of random logits with a confident top token; the drafters are greedy (no draft
probabilities: `draft_probs` None, as vLLM's EAGLE and n-gram drafters pass it). A large table is made of
a pool of distinct rows, each copy rotated by its own random shift (every row differs, and generating
3 GB takes about as long as copying it).
"""
from __future__ import annotations

import numpy as np

ACCEPT = 0.7        # probability that a draft equals the target's token
POOL = 32           # distinct probability rows behind a table
LOGIT_SCALE = 3.0   # target logits ~ N(0, 3^2) ...
TOP_PROB = 0.8      # ... then the top token's raised to hold this probability (a confident model)
DRAFT_TOP = 0.85    # a greedy drafter proposes the target's top token this often


def token_ids(rng: np.random.Generator, shape, vocab: int, dtype=np.int32) -> np.ndarray:
    """Ids in [0, V)."""
    return rng.integers(0, vocab, shape).astype(dtype)


def matching(rng: np.random.Generator, drafts: np.ndarray, vocab: int, rate: float = ACCEPT) -> np.ndarray:
    """Target ids: each equal to its draft with probability `rate`, else another id in [0, V) (V >= 2)."""
    other = (drafts.astype(np.int64) + rng.integers(1, vocab, drafts.shape)) % vocab
    return np.where(rng.random(drafts.shape) < rate, drafts, other).astype(drafts.dtype)


def accepted_counts(rng: np.random.Generator, batch: int, spec: int, rate: float = ACCEPT) -> np.ndarray:
    """Accepted drafts per request (0 .. spec): the length of a run of successes of probability `rate`."""
    hits = rng.random((batch, spec)) < rate
    return np.where(hits.all(axis=1), spec, np.argmin(hits, axis=1)).astype(np.int64)


def emitted_rows(rng: np.random.Generator, batch: int, spec: int, vocab: int) -> np.ndarray:
    """What verification emits, [B, K+1] int32: accepted + 1 ids in [0, V), then -1."""
    rows = token_ids(rng, (batch, spec + 1), vocab)
    emitted = accepted_counts(rng, batch, spec) + 1
    rows[np.arange(spec + 1)[None, :] >= emitted[:, None]] = -1
    return rows


def rotated(pool: list[np.ndarray], rows: int, rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray,
                                                                                      np.ndarray]:
    """Tables of `rows` rows: row i is pool row pick[i] of every pool table, rotated right by shift[i]."""
    count, vocab = pool[0].shape
    pick = rng.integers(0, count, rows)
    shift = rng.integers(0, vocab, rows)
    tables = [np.empty((rows, vocab), p.dtype) for p in pool]
    for i in range(rows):
        k, s = pick[i], shift[i]
        for table, p in zip(tables, pool):
            table[i, s:] = p[k, :vocab - s]
            table[i, :s] = p[k, vocab - s:]
    return tables, pick, shift


def probability_table(rng: np.random.Generator, rows: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """(target_probs, draft ids): f32 [rows, V] normalized rows (softmax of N(0, 3^2) logits, the top
    token raised to TOP_PROB), and drafts as a greedy (EAGLE-style) drafter proposes them: the target's
    top token with probability DRAFT_TOP, else another id. About 0.7 of the drafts are accepted."""
    count = min(POOL, max(rows, 1))
    logits = rng.normal(0.0, LOGIT_SCALE, (count, vocab))
    top = np.argmax(logits, axis=1)
    logits[np.arange(count), top] = -np.inf
    peak = logits.max(axis=1)
    rest = peak + np.log(np.exp(logits - peak[:, None]).sum(axis=1))     # log-sum-exp of the other tokens
    logits[np.arange(count), top] = rest + np.log(TOP_PROB / (1 - TOP_PROB))
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    (table,), pick, shift = rotated([(e / e.sum(axis=1, keepdims=True)).astype(np.float32)], rows, rng)
    best = ((top[pick] + shift) % vocab).astype(np.int32)
    return table, matching(rng, best, vocab, DRAFT_TOP)


def inverse_noise(rng: np.random.Generator, rows: int, vocab: int) -> np.ndarray:
    """`inv_q`: f32 [rows, V] of 1 / Exp(1) draws (rows of a rotated pool)."""
    pool = (1.0 / np.maximum(rng.exponential(1.0, (min(POOL, max(rows, 1)), vocab)), 1e-30)).astype(np.float32)
    return rotated([pool], rows, rng)[0][0]


def on_grid(table: np.ndarray, bits: int = 16) -> np.ndarray:
    """Probability rows floored to multiples of 2**-bits, what flooring lost added to each row's largest
    cell: f32 rows that sum to 1 exactly, so every partial sum is exact in any order."""
    scale = 2.0**bits
    floored = np.floor(np.asarray(table, np.float64) * scale) / scale
    top = floored.argmax(-1)[..., None]
    np.put_along_axis(floored, top, np.take_along_axis(floored, top, -1) + 1 - floored.sum(-1, keepdims=True), -1)
    return floored.astype(np.float32)

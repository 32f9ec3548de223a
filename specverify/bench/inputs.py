"""Building blocks of the stages' benchmark inputs (`Stage.bench`): realistic contents, cheap to make.

Acceptance: each draft matches the target with probability ACCEPT (0.7), independently, so a request's
accepted prefix is geometric, cut at K, as engines report for EAGLE-style drafters. Probability tables
are softmax rows of random logits; a large table is made of a pool of distinct rows, each copy rotated by
its own random shift (every row differs, and generating 3 GB takes about as long as copying it).
"""
from __future__ import annotations

import numpy as np

ACCEPT = 0.7        # probability that a draft equals the target's token
POOL = 32           # distinct probability rows behind a table
LOGIT_SCALE = 3.0   # target logits ~ N(0, 3^2): peaked rows
DRAFT_NOISE = 0.5   # draft logits = target logits + N(0, 0.5^2)


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


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


def probability_tables(rng: np.random.Generator, rows: int, vocab: int,
                       greedy: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(target_probs, draft_probs, draft ids): f32 [rows, V] normalized rows, the draft's logits the
    target's plus small noise; each row's draft id sampled from its draft row, or in the rows `greedy`
    marks equal to the target row's argmax with probability ACCEPT."""
    count = min(POOL, max(rows, 1))
    logits = rng.normal(0.0, LOGIT_SCALE, (count, vocab))
    target = softmax(logits)
    draft = softmax(logits + rng.normal(0.0, DRAFT_NOISE, (count, vocab)))
    sampled = np.argmax(np.log(np.maximum(draft, 1e-30)) + rng.gumbel(size=(count, vocab)), axis=1)
    (target_t, draft_t), pick, shift = rotated([target, draft], rows, rng)
    drafts = ((sampled[pick] + shift) % vocab).astype(np.int32)
    if greedy is not None:
        best = ((np.argmax(target, axis=1)[pick] + shift) % vocab).astype(np.int32)
        drafts = np.where(greedy, matching(rng, best, vocab), drafts)
    return target_t, draft_t, drafts


def inverse_noise(rng: np.random.Generator, rows: int, vocab: int) -> np.ndarray:
    """`inv_q`: f32 [rows, V] of 1 / Exp(1) draws (rows of a rotated pool)."""
    pool = (1.0 / np.maximum(rng.exponential(1.0, (min(POOL, max(rows, 1)), vocab)), 1e-30)).astype(np.float32)
    return rotated([pool], rows, rng)[0][0]

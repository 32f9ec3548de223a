"""The fixed panels of the distribution tier: chains of target and draft rows (the same every run, from fixed
seeds), each sampled by many rows of one launch whose drafts are drawn from the draft rows; and each sampling
stage's adapter (`specverify.records.randomness.Randomness`): its example for one launch, and the tokens and
accepted counts read back from its outputs.

Every probability is a multiple of 2**-16 and every row sums to 1 exactly, so a sampler's sums are exact in any
order. No position has p_j = q_j (its residual would be all zero), and every draft row puts mass where the
target has none and the other way round, so both the acceptance and the residual draw are exercised.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.records import bench_inputs
from specverify.records.stage import Buffer, Example
from specverify.strategies import rejection, seeded, tree
from specverify.strategies.probability_tables import inverse_cdf

GRID_BITS = 16
PLACEHOLDER = -1


@dataclass(frozen=True)
class ChainPanel:
    """One chain: `target` f32 [K+1, V], `draft` f32 [K, V]."""
    name: str
    target: np.ndarray
    draft: np.ndarray

    @property
    def k(self) -> int:
        return len(self.draft)

    @property
    def vocab(self) -> int:
        return self.target.shape[-1]


@dataclass(frozen=True)
class Launch:
    """The rows of one launch of a panel: `drafts` int32 [N + 2M, K], the first N independent (the laws), then
    M pairs of rows with the same drafts (row independence); `rng` draws what else the stage's inputs need."""
    panel: ChainPanel
    drafts: np.ndarray
    independent: int
    rng: np.random.Generator

    @property
    def rows(self) -> int:
        return len(self.drafts)


def _rows(rng: np.random.Generator, count: int, vocab: int, zeros: float) -> np.ndarray:
    """`count` rows on the grid: random mass, a share `zeros` of the cells empty (never all of a row)."""
    mass = rng.random((count, vocab)) ** 3
    mass[rng.random((count, vocab)) < zeros] = 0
    mass[np.arange(count), rng.integers(0, vocab, count)] += 1e-3
    return bench_inputs.on_grid(mass / mass.sum(-1, keepdims=True), GRID_BITS)


def _panel(name: str, seed: int, k: int, vocab: int, zeros: float) -> ChainPanel:
    rng = np.random.default_rng(seed)
    while True:
        target, draft = _rows(rng, k + 1, vocab, zeros), _rows(rng, k, vocab, zeros)
        if not any(np.array_equal(target[j], draft[j]) for j in range(k)):
            return ChainPanel(name, target, draft)


PANELS = (_panel("V=4, K=2", 1, 2, 4, 0.0), _panel("V=32, K=3, sparse", 2, 3, 32, 0.4),
          _panel("V=64, K=4", 3, 4, 64, 0.1))


def residual_laws(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """[K+1, V]: the law of the token drawn at position k after a rejection there, (p_k - q_k)+ normalized (an
    all-zero residual, where p_k = q_k and rejection never happens, stays zero); row K is p_K."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    rows = np.concatenate([np.maximum(p[:len(q)] - q, 0.0), p[len(q):]])
    sums = rows.sum(-1, keepdims=True)
    return np.divide(rows, sums, out=np.zeros_like(rows), where=sums > 0)


def launch(panel: ChainPanel, independent: int, seed: int) -> Launch:
    """A launch of `independent` rows and `independent // 4` pairs, drafts drawn from the draft rows
    (reproducible from `seed`)."""
    rng = np.random.default_rng(seed)
    pairs = independent // 4
    cdf = np.cumsum(panel.draft.astype(np.float64), -1)        # every row sums to 1 exactly
    drafts = inverse_cdf(cdf[None], rng.random((independent + pairs, panel.k)), panel.vocab).astype(np.int32)
    drafts = np.concatenate([drafts[:independent], np.repeat(drafts[independent:], 2, axis=0)])
    return Launch(panel, drafts, independent, rng)


def residual_draws(launch_: Launch) -> np.ndarray:
    """int32 [rows, K+1]: per row and position, a token drawn from that position's residual law (what a stage
    that takes its recovered tokens as inputs is given), from the launch's generator."""
    laws = residual_laws(launch_.panel.target, launch_.panel.draft)
    cdf = np.cumsum(laws, -1)
    r = launch_.rng.random((launch_.rows, len(laws))) * cdf[:, -1][None, :]
    return inverse_cdf(cdf[None], r, launch_.panel.vocab).astype(np.int32)


def shaped_rows(tokens: np.ndarray, emitted: np.ndarray, drafts: np.ndarray, vocab: int, counted_by: str):
    """(tokens [N, K+1] int64, n [N]) when every row holds its first n drafts, one token in [0, V), then -1;
    else the first malformed row, in words."""
    batch, k = drafts.shape
    tokens, emitted = np.asarray(tokens, np.int64), np.asarray(emitted, np.int64)
    bad = (emitted < 0) | (emitted > k)
    if bad.any():
        b = int(np.flatnonzero(bad)[0])
        return f"row {b}: {counted_by} says {int(emitted[b])} drafts were accepted, of K = {k}"
    cols, n = np.arange(k + 1)[None, :], emitted[:, None]
    padded = np.concatenate([drafts, np.full((batch, 1), PLACEHOLDER)], axis=1)
    wrong = ((cols < n) & (tokens != padded)) | ((cols == n) & ((tokens < 0) | (tokens >= vocab))) | \
        ((cols > n) & (tokens != PLACEHOLDER))
    if wrong.any():
        b, j = (int(i) for i in np.argwhere(wrong)[0])
        return (f"row {b}: {tokens[b].tolist()} with n = {int(emitted[b])} is not its first n drafts "
                f"{drafts[b].tolist()[:int(emitted[b])]}, a token in [0, {vocab}), then -1 (position {j})")
    return tokens, emitted


def seeded_chain_launch(launch_: Launch) -> Example:
    """`seeded.chain_sampling`: every row the panel's chain with its own drafts, one seed and one offset for the
    launch (as FlashInfer's wrapper broadcasts them), the counters from 0."""
    panel, batch = launch_.panel, launch_.rows
    state = launch_.rng.integers(0, 2**63, 2, dtype=np.uint64)
    return Example("valid", inputs={
        "draft_probs": np.broadcast_to(panel.draft, (batch, panel.k, panel.vocab)).copy(),
        "draft_token_ids": launch_.drafts.astype(np.int32),
        "target_probs": np.broadcast_to(panel.target, (batch, panel.k + 1, panel.vocab)).copy(),
        "seed": seeded.as_int64([int(state[0])] * batch), "offset": seeded.as_int64([int(state[1]) % 2**40] * batch),
        "output_accepted_token_num": np.zeros(batch, np.int32),
        "output_emitted_draft_token_num": np.zeros(batch, np.int32)},
        outputs=seeded.buffers(batch, panel.k))


def seeded_chain_emitted(ex: Example, outputs: dict, written: dict):
    """n is the emitted counter (which started at 0)."""
    return shaped_rows(outputs["output_token_ids"], outputs["output_emitted_draft_token_num"],
                       ex.inputs["draft_token_ids"], ex.inputs["target_probs"].shape[-1],
                       "output_emitted_draft_token_num")


def seeded_chain_advanced(ex: Example) -> Example:
    """The next call: every request's offset advanced by K + 2 (the most one call draws), counters from 0."""
    k = ex.inputs["draft_token_ids"].shape[1]
    inputs = dict(ex.inputs, offset=seeded.as_int64(ex.inputs["offset"].view(np.uint64) + np.uint64(k + 2)),
                  output_accepted_token_num=np.zeros_like(ex.inputs["output_accepted_token_num"]),
                  output_emitted_draft_token_num=np.zeros_like(ex.inputs["output_emitted_draft_token_num"]))
    return Example("valid", inputs=inputs, outputs=ex.outputs)


def rooted(drafts: np.ndarray) -> np.ndarray:
    """int64 [N, K+1]: the drafts after a column 0 of token 0 (the previous token, or the tree's root)."""
    return np.concatenate([np.zeros((len(drafts), 1), np.int64), drafts.astype(np.int64)], axis=1)


def flat_chains(launch_: Launch) -> dict:
    """The inputs of a flat-layout stage (`rejection.random`, `rejection.sample`): K drafts per request one after
    another, their offsets, K, and the panel's rows tiled to [N*K, V]."""
    panel, batch, k = launch_.panel, launch_.rows, launch_.panel.k
    return {"draft_token_ids": launch_.drafts.reshape(-1).astype(np.int32),
            "cu_num_draft_tokens": (np.arange(1, batch + 1) * k).astype(np.int32), "max_spec_len": k,
            "draft_probs": np.tile(panel.draft, (batch, 1)), "target_probs": np.tile(panel.target[:k], (batch, 1))}


def random_launch(launch_: Launch) -> Example:
    """`rejection.random`: K drafts per request, flattened; fresh uniforms in [0, 1); recovered tokens drawn from
    each position's residual law and bonus tokens from p_K (as rejection.recovered and the sampler give them)."""
    batch, k = launch_.rows, launch_.panel.k
    recovered = residual_draws(launch_)
    return Example("valid", inputs={
        **flat_chains(launch_), "bonus_token_ids": recovered[:, k].astype(np.int64),
        "recovered_token_ids": recovered[:, :k].reshape(-1).astype(np.int32),
        "uniform_probs": launch_.rng.random(batch * k), "is_greedy": np.zeros(batch, bool)},
        outputs={"output_token_ids": Buffer((batch, k + 1), "int32")})


def random_emitted(ex: Example, outputs: dict, written: dict):
    """n + 1 cells of a row are written (its accepted drafts, then the recovered or bonus token)."""
    mask = np.asarray(written["output_token_ids"], bool)
    length = mask.sum(1)
    holes = mask != (np.arange(mask.shape[1])[None, :] < length[:, None])
    if holes.any() or (length == 0).any():
        b = int(np.flatnonzero(holes.any(1) | (length == 0))[0])
        return f"row {b}: the cells written ({np.flatnonzero(mask[b]).tolist()}) are not a prefix of one or more"
    tokens = np.where(mask, np.asarray(outputs["output_token_ids"], np.int64), PLACEHOLDER)
    drafts = ex.inputs["draft_token_ids"].reshape(len(mask), -1)
    return shaped_rows(tokens, length - 1, drafts, ex.inputs["target_probs"].shape[-1], "the written prefix")


def noise(launch_: Launch) -> np.ndarray:
    """f32 [rows, V]: 1 / exponential noise, one row per request (argmax of residual * noise samples the
    normalized residual)."""
    return (1.0 / launch_.rng.exponential(size=(launch_.rows, launch_.panel.vocab))).astype(np.float32)


def sample_launch(launch_: Launch) -> Example:
    """`rejection.sample`: every row non-greedy, K drafts each, fresh uniforms and noise, bonus tokens from p_K."""
    batch, k = launch_.rows, launch_.panel.k
    bonus = residual_draws(launch_)[:, k]
    return Example("valid", inputs={
        **flat_chains(launch_), "bonus_token_ids": bonus.astype(np.int64), "is_greedy": np.zeros(batch, bool),
        "uniform_probs": launch_.rng.random(batch * k), "inv_q": noise(launch_)},
        outputs={"output_token_ids": Buffer((batch, k + 1), "int32")})


def minus_one_padded(ex: Example, outputs: dict, written: dict):
    """Rows written whole: the emitted prefix, then -1 (n + 1 tokens before the -1s)."""
    tokens = np.asarray(outputs["output_token_ids"], np.int64)
    drafts = np.asarray(ex.inputs["draft_token_ids"]).reshape(len(tokens), -1)
    return shaped_rows(tokens, (tokens != PLACEHOLDER).sum(1) - 1, drafts, ex.inputs["target_probs"].shape[-1],
                       "the tokens before the -1s")


def sample_padded_launch(launch_: Launch) -> Example:
    """`rejection.sample_padded`: `rejection.sample`'s launch in the [B, K] layout."""
    panel, batch, k = launch_.panel, launch_.rows, launch_.panel.k
    bonus = residual_draws(launch_)[:, k]
    return Example("valid", inputs={
        "draft_token_ids": launch_.drafts.astype(np.int64),
        "draft_probs": np.broadcast_to(panel.draft, (batch, k, panel.vocab)).copy(),
        "target_probs": np.broadcast_to(panel.target[:k], (batch, k, panel.vocab)).copy(),
        "bonus_token_ids": bonus.astype(np.int64), "is_greedy": np.zeros(batch, bool),
        "uniform_probs": launch_.rng.random((batch, k)), "inv_q": noise(launch_)},
        outputs=rejection.padded_buffers(batch, k))


def chain_cdf_launch(launch_: Launch) -> Example:
    """`rejection.chain_cdf`: the previous token 0 in column 0 of the candidates, fresh f32 uniforms."""
    panel, batch, k = launch_.panel, launch_.rows, launch_.panel.k
    return Example("valid", inputs={
        "candidates": rooted(launch_.drafts),
        "target_probs": np.broadcast_to(panel.target, (batch, k + 1, panel.vocab)).copy(),
        "draft_probs": np.broadcast_to(panel.draft, (batch, k, panel.vocab)).copy(),
        "uniform_samples": launch_.rng.random((batch, k + 1), dtype=np.float32),
        "uniform_final": launch_.rng.random(batch, dtype=np.float32)},
        outputs=rejection.buffers(batch, k))


def predicts_emitted(ex: Example, outputs: dict, written: dict):
    """`rejection.chain_cdf` and `tree.sample_target_only` on chains: n is `accept_token_num`; token j is the
    `predicts` slot b*(K+1) + j (slots a row did not write read as -1)."""
    drafts = ex.inputs["candidates"][:, 1:]
    shape = ex.inputs["candidates"].shape
    tokens = np.where(np.asarray(written["predicts"], bool).reshape(shape),
                      np.asarray(outputs["predicts"], np.int64).reshape(shape), PLACEHOLDER)
    return shaped_rows(tokens, outputs["accept_token_num"], drafts, ex.inputs["target_probs"].shape[-1],
                       "accept_token_num")


def one_hot(panel: ChainPanel) -> ChainPanel:
    """The panel as a target-only sampler sees it: each draft row all its mass on one token (the target row's
    largest cell, as a greedy drafter proposes), so the drafts are those tokens, accepted with probability p_j
    there."""
    rows = np.zeros_like(panel.draft)
    rows[np.arange(panel.k), panel.target[:panel.k].argmax(-1)] = 1
    return ChainPanel(panel.name, panel.target, rows)


def target_only_launch(launch_: Launch) -> Example:
    """`tree.sample_target_only` on chains: node j's only child is node j + 1 with candidate d_j (node 0 the root,
    token 0), N = S = K + 1, slots b*N + j, lossless thresholds (1, 1), fresh f32 coins, draft_probs zero."""
    panel, batch, k = launch_.panel, launch_.rows, launch_.panel.k
    n = k + 1
    nodes = np.arange(n)
    return Example("valid", inputs={
        "candidates": rooted(launch_.drafts),
        "retrieve_index": (np.arange(batch)[:, None] * n + nodes[None, :]).astype(np.int64),
        "retrieve_next_token": np.broadcast_to(np.where(nodes < k, nodes + 1, -1), (batch, n)).astype(np.int64),
        "retrieve_next_sibling": np.full((batch, n), -1, np.int64),
        "uniform_samples": launch_.rng.random((batch, n), dtype=np.float32),
        "uniform_final": launch_.rng.random(batch, dtype=np.float32),
        "target_probs": np.broadcast_to(panel.target, (batch, n, panel.vocab)).copy(),
        "draft_probs": np.zeros((batch, n, panel.vocab), np.float32),
        "threshold_single": 1.0, "threshold_acc": 1.0},
        outputs=tree.outputs(batch, n, n))

"""Rows of rejection sampling where bugs hide: a -1 or out-of-vocabulary draft whose test a request reaches, a NaN
among finite scores ahead of a row's first maximum, and the hazard tier's damage (NaN and infinite probabilities,
zero noise, zero uniforms). Drawn by the `rejection` family's strategies (and labelled for eagle's, which share its
drafts)."""
from __future__ import annotations

import zlib

import numpy as np
from hypothesis import strategies as st

from specverify.records.stage import Example
from specverify.strategies.blocks import PLACEHOLDER, generator, label
from specverify.strategies.probability_tables import SMALL_VOCAB, Tables, acceptance_ratios, request_of_tokens


def tested(drafts: np.ndarray, counts: np.ndarray, t: Tables, u: np.ndarray) -> np.ndarray:
    """Per flattened draft: whether rejection.random's rule reaches its test (every earlier draft of its
    request accepted, with p / q >= u)."""
    can, ratio = acceptance_ratios(drafts, t)
    rejected = (~(can & (ratio >= u))).astype(np.int64)
    before = np.cumsum(rejected) - rejected
    starts = np.cumsum(counts) - counts
    return before == np.repeat(before[starts[counts > 0]], counts[counts > 0])


def label_tested_oov(drafts: np.ndarray, counts: np.ndarray, t: Tables, u: np.ndarray | None,
                     sampled: np.ndarray | None, grid: bool = False) -> None:
    """Label a -1 or out-of-vocabulary draft whose test a non-greedy request (`sampled` per request; None:
    every request) reaches, and whether V is small for the latter (vLLM's random kernel reads p and q of
    such a draft from the cells of the row before or the next rows: with a small V they often pass); `grid`:
    every request has max_spec_len drafts (kernels take such a batch as a [B, S] grid, a path of its own)."""
    if u is None or not drafts.size:
        return
    vocab = t.target.shape[1]
    rows = np.ones(len(counts), bool) if sampled is None else sampled
    reached = tested(drafts, counts, t, u) & np.repeat(rows, counts)
    if (reached & (drafts == PLACEHOLDER)).any():
        label("reached: a placeholder draft tested")
    if (reached & (drafts >= vocab)).any():
        label("reached: an out-of-vocabulary draft tested")
        if vocab <= SMALL_VOCAB:
            label(f"reached: an out-of-vocabulary draft tested, V <= {SMALL_VOCAB}")
        if grid:
            label("reached: an out-of-vocabulary draft tested, every request max_spec_len drafts")


def oov_recovery_at_last_cell(drafts: np.ndarray, counts: np.ndarray, t: Tables, u: np.ndarray | None,
                              sampled: np.ndarray) -> None:
    """Without draft probabilities, a rejected draft's recovery is the maximum of target * noise with the
    draft's own cell zeroed, and an out-of-vocabulary draft has no cell to zero. Where a non-greedy request
    (`sampled`) tests one, its row's maximum is moved to cell V - 1 (the target's and the request's noise
    columns swapped: both stay valid tables), where a kernel that takes the draft as its clamped id zeroes it.
    No Hypothesis draw: the draws of other examples stay as they were."""
    vocab = t.target.shape[1]
    if u is None or t.draft is not None or vocab < 2 or not drafts.size:
        return
    reached = tested(drafts, counts, t, u) & np.repeat(sampled, counts) & (drafts >= vocab)
    requests = request_of_tokens(counts)
    for token in np.flatnonzero(reached):
        request = requests[token]
        best = int(np.argmax(t.target[token] * t.inv_q[request]))
        for table, row in ((t.target, token), (t.inv_q, request)):
            table[row, [best, vocab - 1]] = table[row, [vocab - 1, best]]
        label("reached: an out-of-vocabulary draft rejected without draft probs, recovery maximum at V - 1")


@st.composite
def oov_first_drafts(draw, drafts: np.ndarray, counts: np.ndarray, vocab: int, is_greedy: np.ndarray | None,
                     excluded: frozenset[str] = frozenset(), always: bool = False) -> np.ndarray:
    """The int32 drafts with, in two thirds of the examples (all when V <= SMALL_VOCAB, or `always`) and unless
    the declared domain `excluded` them, the first draft of a quarter of the non-greedy requests (one at least)
    made V or V + 7: a draft its request tests. vLLM's random kernel reads such a draft's p and q from the next
    row's cells and accepts it when they pass, which with a small V they often do. Where only `always` plants,
    the choice comes from the drafts themselves, not from a Hypothesis draw: every other draw stays as it was."""
    sampled = counts > 0 if is_greedy is None else (counts > 0) & ~is_greedy
    firsts = (np.cumsum(counts) - counts)[sampled]
    if "oov" in excluded or not len(firsts):
        return drafts
    drawn = vocab <= SMALL_VOCAB or bool(draw(st.integers(0, 2)))
    if not (drawn or always):
        return drafts
    rng = draw(generator()) if drawn else np.random.default_rng([zlib.crc32(drafts.tobytes()), vocab])
    label("planted: out-of-vocabulary first drafts")
    chosen = np.append(firsts[rng.random(len(firsts)) < 0.25], rng.choice(firsts))
    drafts = drafts.copy()
    drafts[chosen] = vocab + rng.choice([0, 7], len(chosen))
    return drafts


NAN_TILE = 16     # the narrowest vocabulary tile of a Triton pick (the interpreter's); wider ones hold whole such tiles


def position_scores(x: dict) -> np.ndarray:
    """[N, V] f32: per draft position (flattened, or [B, K] row by row), the scores whose first maximum a stage
    takes: residual * inv_q as rejection.recovered defines them (noise 1 without `inv_q`), the target row
    itself for a greedy request of `sample` (every request when `is_greedy` is None and there is no noise)."""
    vocab = x["target_probs"].shape[-1]
    p = x["target_probs"].reshape(-1, vocab)
    drafts = x["draft_token_ids"].reshape(-1)
    if "cu_num_draft_tokens" in x:
        request = request_of_tokens(np.diff(x["cu_num_draft_tokens"], prepend=0))
    else:
        request = np.repeat(np.arange(x["draft_token_ids"].shape[0]), x["draft_token_ids"].shape[1])
    greedy = x.get("is_greedy")
    if x.get("inv_q") is None and "is_greedy" in x and "recovered_token_ids" not in x:
        return p.copy()                           # `sample` with is_greedy None: every row an argmax of p
    with np.errstate(all="ignore"):
        if x.get("draft_probs") is None:
            res = p.copy()
            valid = (drafts >= 0) & (drafts < vocab)
            res[np.flatnonzero(valid), drafts[valid]] = 0
        else:
            diff = p - x["draft_probs"].reshape(-1, vocab)
            res = np.where(diff < 0, np.float32(0), diff)
        scores = res if x.get("inv_q") is None else (res * x["inv_q"][request]).astype(np.float32)
    if greedy is not None and "recovered_token_ids" not in x:
        scores = np.where(greedy[request][:, None], p, scores)
    return scores


def nan_classes(scores: np.ndarray) -> list[str]:
    """The classes of NaN among finite scores the rows reach (the NaN rule: NaN never wins)."""
    nan = np.isnan(scores)
    mixed = nan.any(1) & ~nan.all(1)
    if not mixed.any():
        return []
    rows = scores[mixed]
    top = np.where(nan[mixed], -np.inf, rows).max(1)
    first = np.argmax(rows == top[:, None], 1)
    column = np.arange(scores.shape[1])
    ahead = nan[mixed] & (column < first[:, None])
    found = ["reached: a NaN among finite scores of a row"]
    if (ahead & (column // NAN_TILE == (first // NAN_TILE)[:, None])).any():
        found.append(f"reached: a NaN ahead of its row's first maximum, in its tile of {NAN_TILE}")
    if (ahead.any(1) & (top == 0)).any():
        found.append("reached: a NaN ahead of its row's first maximum 0")
    return found


def lone_nans(rng, x: dict) -> None:
    """In place: about half the positions (one at least) get one NaN target cell among finite ones, in the tile
    of NAN_TILE cells of their row's first maximum score and not after it; half of them first get a zero
    residual (every finite score 0: the NaN precedes the first 0). vLLM's tile argmax let such a NaN
    decide, and a NaN-dropping max(p - q, 0) makes it a 0 that wins."""
    vocab = x["target_probs"].shape[-1]
    p = x["target_probs"].reshape(-1, vocab)
    chosen = np.flatnonzero(rng.random(len(p)) < 0.5)
    chosen = np.append(chosen, rng.integers(0, len(p))) if len(p) else chosen
    zeroed = chosen[rng.random(len(chosen)) < 0.5]
    p[zeroed] = 0 if x.get("draft_probs") is None else x["draft_probs"].reshape(-1, vocab)[zeroed]
    scores = position_scores(x)[chosen]
    top = np.where(np.isnan(scores), -np.inf, scores).max(1, initial=-np.inf)
    first = np.argmax(scores == top[:, None], 1)
    low = first - first % NAN_TILE
    p[chosen, low + (rng.random(len(chosen)) * (first - low + 1)).astype(np.int64)] = np.nan


@st.composite
def hazards(draw, ex: Example, excluded: frozenset[str] = frozenset()) -> Example:
    """A valid example made pathological: NaN and +-inf probabilities, zero noise (inv_q = inf), NaN
    noise, zero uniforms, out-of-vocabulary drafts (unless a declared domain `excluded` them), lone NaNs
    ahead of a row's maximum (`lone_nans`, last). Non-finite values land in whole rows or single cells
    (single cells only beside lone NaNs)."""
    rng = draw(generator())
    x = dict(ex.inputs)
    kinds = draw(st.sets(st.sampled_from(["nan", "inf", "zero noise", "oov drafts", "zero uniforms", "lone nan"]),
                         min_size=1))
    for kind in sorted(kinds):
        label(f"hazard: {kind}")
    for name in ("target_probs", "draft_probs", "inv_q"):
        if x.get(name) is None or not x[name].size or not kinds & {"nan", "inf", "zero noise"}:
            continue
        a = x[name].copy()
        rate = draw(st.sampled_from([0.01, 0.3, 1.0]))
        spot = rng.random(a.shape) < (0.01 if "lone nan" in kinds else rate)    # lone NaNs need finite rows
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
    if "lone nan" in kinds and x["target_probs"].size:
        x["target_probs"] = x["target_probs"].copy()
        lone_nans(rng, x)
    if x["target_probs"].size:
        for text in nan_classes(position_scores(x)):
            label(text)
    return Example(tier="hazard", inputs=x, outputs=ex.outputs, layouts=ex.layouts)

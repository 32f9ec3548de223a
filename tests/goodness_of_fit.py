"""Goodness-of-fit helpers for the statistical tier (distributional checks of the sampling oracles).

Byte identity with an oracle says nothing about whether the oracle itself samples from the right
distribution; these helpers turn a histogram of samples into a p-value against a stated distribution.
The arithmetic is scipy's (`scipy.stats.chisquare`, `scipy.stats.binomtest`); this module only adds
the bookkeeping a histogram of a discrete sampler needs:

- cells the null gives probability 0 are not a chi-square cell: a single sample there is impossible
  under the null and makes the p-value exactly 0;
- cells with a small expected count are pooled so the chi-square approximation holds in the far tail
  the small significance levels of this tier look at.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scipy import stats     # a dependency of the package (its distribution tier)

#: Per-test significance level of the statistical tier (see tests/stages/test_rejection_statistics.py for
#: the family-wise false-alarm bound this implies).
ALPHA = 1e-4

#: Minimum expected count per chi-square cell after pooling.
MIN_EXPECTED = 10.0


@dataclass(frozen=True)
class Fit:
    """The outcome of one goodness-of-fit test."""

    pvalue: float
    statistic: float
    dof: int
    n: int
    impossible: int  # samples that fell in cells of null probability 0

    def rejects(self, alpha: float = ALPHA) -> bool:
        return self.pvalue < alpha


def histogram_fit(observed, probs, min_expected: float = MIN_EXPECTED) -> Fit:
    """Pearson chi-square test of the counts `observed[v]` against the distribution `probs[v]`
    (normalised here; float64 is used throughout). Cells of probability 0 must be empty; cells whose
    expected count is below `min_expected` are pooled (smallest first) until every cell reaches it."""
    obs = np.asarray(observed, dtype=np.int64).reshape(-1)
    prob = np.asarray(probs, dtype=np.float64).reshape(-1)
    if obs.shape != prob.shape:
        raise ValueError(f"observed has {obs.size} cells, probs {prob.size}")
    if (prob < 0).any() or not np.isfinite(prob).all() or prob.sum() <= 0:
        raise ValueError("probs must be finite, non-negative and not all zero")
    if (obs < 0).any():
        raise ValueError("observed counts must be non-negative")
    n = int(obs.sum())
    prob = prob / prob.sum()
    support = prob > 0
    impossible = int(obs[~support].sum())
    if impossible:
        return Fit(0.0, float("inf"), 0, n, impossible)
    obs, expected = obs[support], n * prob[support]
    cells_obs, cells_exp = _pool(obs, expected, min_expected)
    if n == 0 or len(cells_obs) < 2:
        return Fit(1.0, 0.0, 0, n, 0)
    result = stats.chisquare(cells_obs, cells_exp)
    return Fit(float(result.pvalue), float(result.statistic), len(cells_obs) - 1, n, 0)


def _pool(obs, expected, min_expected):
    """Merge the cells of smallest expected count until each holds at least `min_expected`."""
    order = np.argsort(expected, kind="stable")
    cells_obs, cells_exp = [], []
    acc_obs, acc_exp = 0, 0.0
    for i in order:
        acc_obs += int(obs[i])
        acc_exp += float(expected[i])
        if acc_exp >= min_expected:
            cells_obs.append(acc_obs)
            cells_exp.append(acc_exp)
            acc_obs, acc_exp = 0, 0.0
    if acc_exp > 0 or acc_obs > 0:  # a remainder too small to stand alone joins the largest cell
        if cells_obs:
            cells_obs[-1] += acc_obs
            cells_exp[-1] += acc_exp
        else:
            cells_obs.append(acc_obs)
            cells_exp.append(acc_exp)
    return np.array(cells_obs, dtype=np.float64), np.array(cells_exp, dtype=np.float64)


def binomial_fit(successes: int, trials: int, prob: float) -> Fit:
    """Exact two-sided binomial test of `successes` out of `trials` against success probability
    `prob`. With `prob` 0 or 1 any deviation is impossible under the null (p-value 0)."""
    if not 0.0 <= prob <= 1.0:
        raise ValueError(f"prob must lie in [0, 1], got {prob}")
    if not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    impossible = (prob == 0.0 and successes > 0) or (prob == 1.0 and successes < trials)
    if trials == 0:
        return Fit(1.0, 0.0, 0, 0, 0)
    if impossible:
        return Fit(0.0, float("inf"), 0, trials, successes if prob == 0.0 else trials - successes)
    pvalue = float(stats.binomtest(int(successes), int(trials), float(prob)).pvalue)
    return Fit(pvalue, float(successes), 0, trials, 0)

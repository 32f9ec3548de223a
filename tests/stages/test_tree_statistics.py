"""Statistical tier of `tree.sample_target_only`: at thresholds (1, 1) the tree rule keeps the target.

With pairwise-distinct sibling tokens and coins fresh per trial, sibling i of a node whose target row is
p is accepted with probability P(mass_{i-1} <= coin < mass_i) = p(x_i); when every sibling is rejected
the bonus comes from p with the siblings' mass removed, renormalised by the CDF pick. So the first
emitted token follows p whatever the number or order of siblings, and given an accepted node the next
token follows that node's row. Checked on the oracle and on the Torch kernel (the Triton interpreter
is too slow for these batch sizes; it is byte-identical to the oracle on the valid tier), each trial
one request of the batch, uniforms U[0, 1) in f32 (general floats, not the valid tier's grid):

- two siblings (V = 3, p = [0.5, 0.3, 0.2], tokens 0 and 1, S = 2);
- three siblings listed out of token order (V = 4, tokens 2, 0, 1);
- depth 2 (the child row's distribution among the trials that accept sibling a, about half of them);
- a star of m = N - 1 = 4 siblings (V = 5).

Decision: Pearson chi-square of the histogram against the stated row (`histogram_fit`: cells of
probability 0 must stay empty), rejected when p < ALPHA_TREES = 1e-6 (critical value 27.6 at 2 dof),
plus the total variation distance below 0.02. n = 20,000 trials per case (about 10,000 for the
conditional depth-2 histogram). Eight p-values (four cases, two implementations): the family-wise false
alarm rate is at most 8e-6 (Bonferroni); the seeds are fixed, so the outcome is deterministic.

Power. The same decision must reject two lossy sibling rules, each sibling tried with its own fresh coin
against its own unrenormalised p(x_i) (TensorRT-LLM's dynamic-tree rule, read from its source, has this
shape): with the residual reduced by the rejected siblings the first token follows [0.5, 0.15, 0.35]
in the two-sibling case (TV 0.15, chi-square non-centrality 0.1875 n = 3,750 at n = 20,000: power 1 to
many decimals; still about 1 at n = 1,000); without reducing it, [0.675, 0.255, 0.07] (TV 0.175).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from specverify.kernels.torch import tree as kernel
from specverify.oracles import tree as oracle
from specverify.strategies.tree_shapes import links
from tests.goodness_of_fit import histogram_fit

ALPHA_TREES = 1e-6
TRIALS = 20_000
TV_LIMIT = 0.02


@dataclass(frozen=True)
class Case:
    """One tree, the same in every trial: parents and tokens by node, and the target row of each node."""
    name: str
    parent: list[int]
    tokens: list[int]
    rows: list[list[float]]     # [N, V]
    spec: int
    seed: int


TWO = Case("two siblings", [-1, 0, 0], [9, 0, 1], [[.5, .3, .2]] * 3, 2, 1)
THREE = Case("three siblings out of order", [-1, 0, 0, 0], [9, 2, 0, 1], [[.4, .3, .2, .1]] * 4, 2, 2)
DEPTH2 = Case("depth 2", [-1, 0, 0, 1, 1], [9, 0, 1, 1, 2],
              [[.5, .3, .2], [.2, .5, .3], [.3, .3, .4], [1 / 3] * 3, [1 / 3] * 3], 3, 3)
STAR = Case("star of four", [-1, 0, 0, 0, 0], [9, 3, 1, 0, 2], [[.1, .2, .3, .25, .15]] * 5, 2, 4)


def inputs(case: Case, trials: int) -> dict:
    rng = np.random.default_rng(case.seed)
    parent = np.array(case.parent, np.int64)
    token, sibling = links(parent, "ascending", rng)
    n = len(parent)
    rows = np.array(case.rows, np.float32)
    return {
        "candidates": np.tile(np.array(case.tokens, np.int64), (trials, 1)),
        "retrieve_index": np.arange(trials * n, dtype=np.int64).reshape(trials, n),
        "retrieve_next_token": np.tile(token, (trials, 1)), "retrieve_next_sibling": np.tile(sibling, (trials, 1)),
        "uniform_samples": rng.random((trials, n), dtype=np.float32),
        "uniform_final": rng.random(trials, dtype=np.float32),
        "target_probs": np.ascontiguousarray(np.broadcast_to(rows, (trials, n, rows.shape[1]))),
        "draft_probs": np.zeros((trials, n, rows.shape[1]), np.float32),
        "threshold_single": 1.0, "threshold_acc": 1.0,
    }


def run(case: Case, implementation: str, trials: int = TRIALS) -> tuple[np.ndarray, np.ndarray]:
    """(accept_index, predicts) of `trials` independent requests."""
    x = inputs(case, trials)
    n = len(case.parent)
    out = {"predicts": np.zeros(trials * n, np.int32), "accept_index": np.zeros((trials, case.spec), np.int32),
           "accept_token_num": np.zeros(trials, np.int32)}
    if implementation == "oracle":
        oracle.sample_target_only(**x, **out)
    else:
        as_torch = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in {**x, **out}.items()}
        kernel.sample_target_only(**as_torch)
        out = {k: as_torch[k].numpy() for k in out}
    return out["accept_index"], out["predicts"]


def first_tokens(accept_index: np.ndarray, predicts: np.ndarray) -> np.ndarray:
    return predicts[accept_index[:, 0]]


def judged(samples: np.ndarray, row) -> tuple[float, float]:
    """(p-value, total variation distance) of the samples against the row."""
    row = np.asarray(row, np.float64)
    counts = np.bincount(samples, minlength=len(row))
    return histogram_fit(counts, row).pvalue, 0.5 * float(np.abs(counts / counts.sum() - row).sum())


@pytest.mark.parametrize("implementation", ["oracle", "torch"])
@pytest.mark.parametrize("case", [TWO, THREE, STAR], ids=lambda c: c.name)
def test_the_first_token_follows_the_target(case, implementation):
    pvalue, tv = judged(first_tokens(*run(case, implementation)), case.rows[0])
    assert pvalue >= ALPHA_TREES and tv < TV_LIMIT, (pvalue, tv)


@pytest.mark.parametrize("implementation", ["oracle", "torch"])
def test_given_an_accepted_child_the_next_token_follows_its_row(implementation):
    accept_index, predicts = run(DEPTH2, implementation)
    took_a = (accept_index[:, 1] == accept_index[:, 0] + 1) & (predicts[accept_index[:, 0]] == 0)
    assert took_a.sum() > TRIALS // 3
    pvalue, tv = judged(predicts[accept_index[took_a, 1]], DEPTH2.rows[1])
    assert pvalue >= ALPHA_TREES and tv < TV_LIMIT, (pvalue, tv)


def lossy(case: Case, trials: int, reduce_residual: bool, seed: int = 7) -> np.ndarray:
    """First tokens of the lossy sibling rule at the root: sibling i accepted when its own fresh coin is
    below p(x_i) (no renormalisation after a rejection); otherwise a CDF pick from p with the rejected
    siblings' mass removed (`reduce_residual`) or from p itself."""
    rng = np.random.default_rng(seed)
    row = np.array(case.rows[0], np.float64)
    siblings = [t for t, p in zip(case.tokens, case.parent) if p == 0]
    chosen = np.full(trials, -1)
    for token in siblings:
        hit = (chosen < 0) & (rng.random(trials) < row[token])
        chosen[hit] = token
    residual = row.copy()
    if reduce_residual:
        residual[siblings] = 0
    cdf = np.cumsum(residual) / residual.sum()
    picked = np.minimum(np.searchsorted(cdf, rng.random(trials), side="right"), len(row) - 1)
    return np.where(chosen >= 0, chosen, picked)


@pytest.mark.parametrize("reduce_residual,biased", [(True, [.5, .15, .35]), (False, [.675, .255, .07])])
def test_the_lossy_sibling_rules_are_rejected(reduce_residual, biased):
    samples = lossy(TWO, TRIALS, reduce_residual)
    assert judged(samples, biased)[0] >= ALPHA_TREES        # the sampler is the biased law it claims to be
    pvalue, tv = judged(samples, TWO.rows[0])
    assert pvalue < ALPHA_TREES and tv > 0.1, (pvalue, tv)


def test_the_lossy_rule_is_rejected_at_a_thousand_trials_too():
    assert judged(lossy(TWO, 1000, True), TWO.rows[0])[0] < ALPHA_TREES

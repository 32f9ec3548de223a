"""The laws a chain sampler's output follows, whatever random numbers it draws, and the tests that judge a
sample of them (the distribution tier, `specverify.runs.distribution`).

A chain is target rows p_0..p_K and draft rows q_0..q_{K-1} over V tokens; each sampled row draws its drafts
d_j from q_j independently. Speculative sampling then promises, with a_j = sum_v min(p_j[v], q_j[v]):
- the number n of drafts accepted before the first rejection has P(n = k) = a_0 .. a_{k-1} (1 - a_k)
  (a_K taken as 0);
- among rows that reach position j (n >= j), the draft there is accepted with probability a_j;
- among rows that reach position j, the token emitted there is distributed as p_j;
- rows of one launch, and calls made with the documented advance of the generator, are independent: two
  rows with the same drafts agree with probability `agreement` exactly.
Each test gives a p-value; a panel of tests is judged at one family-wise false-alarm rate (Bonferroni).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.strategies.panels import residual_laws

FAMILY_ALPHA = 1e-4          # the chance a correct sampler fails the whole tier, per target
SMALL_CELL = 5.0             # expected counts below this are pooled before a G-test


@dataclass(frozen=True)
class Verdict:
    """One statistical test: what it compared, in words, and its p-value."""
    test: str
    p_value: float
    detail: str


def acceptance(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """[K]: a_j = sum_v min(p_j[v], q_j[v]), the chance a draft drawn from q_j is accepted."""
    return np.minimum(np.asarray(p[:len(q)], np.float64), np.asarray(q, np.float64)).sum(-1)


def length_law(a: np.ndarray) -> np.ndarray:
    """[K+1]: P(n = k), the number of drafts accepted before the first rejection."""
    reach = np.concatenate([[1.0], np.cumprod(a)])
    return reach * np.concatenate([1.0 - a, [1.0]])


def agreement(p: np.ndarray, q: np.ndarray, drafts: np.ndarray) -> np.ndarray:
    """[N]: the chance two independent runs of the sampler on the same drafts (row i of `drafts`) emit the
    same tokens: sum_k P(n = k | drafts)^2 * sum_v r_k[v]^2."""
    p, q = np.asarray(p, np.float64), np.asarray(q, np.float64)
    k = len(q)
    cols = np.arange(k)
    pd, qd = p[cols, drafts], q[cols, drafts]                       # [N, K]
    alpha = np.minimum(1.0, np.divide(pd, qd, out=np.ones_like(pd), where=qd > 0))
    reach = np.concatenate([np.ones((len(drafts), 1)), np.cumprod(alpha, axis=1)], axis=1)
    given = reach * np.concatenate([1.0 - alpha, np.ones((len(drafts), 1))], axis=1)      # [N, K+1]
    same_token = (residual_laws(p, q) ** 2).sum(-1)                                      # [K+1]
    return (given ** 2 * same_token).sum(1)


def g_test(observed: np.ndarray, law: np.ndarray, what: str) -> Verdict:
    """The observed counts of each outcome against `law` (G-test; cells expected below SMALL_CELL pooled); an
    outcome the law gives probability 0 that was observed is a p-value of 0."""
    from scipy.stats import chi2

    observed, law = np.asarray(observed, np.float64), np.asarray(law, np.float64)
    total = observed.sum()
    impossible = (law <= 0) & (observed > 0)
    if impossible.any():
        v = int(np.flatnonzero(impossible)[0])
        return Verdict(what, 0.0, f"outcome {v} has probability 0 and was seen {int(observed[v])} time(s)")
    if total == 0:
        return Verdict(what, 1.0, "no samples")
    expected = law * total
    big = expected >= SMALL_CELL
    obs = list(observed[big]) + ([observed[~big].sum()] if (~big).any() else [])
    exp = list(expected[big]) + ([expected[~big].sum()] if (~big).any() else [])
    if len(exp) > 1 and exp[-1] < SMALL_CELL and not big.all():      # a pooled cell still small: merge it
        smallest = int(np.argmin(exp[:-1]))
        obs[smallest] += obs.pop()
        exp[smallest] += exp.pop()
    obs_a, exp_a = np.array(obs), np.array(exp)
    if len(exp_a) < 2:
        return Verdict(what, 1.0, f"one cell ({int(total)} samples)")
    seen = obs_a > 0
    g = 2.0 * float((obs_a[seen] * np.log(obs_a[seen] / exp_a[seen])).sum())
    worst = int(np.argmax(np.abs(obs_a - exp_a) / np.sqrt(exp_a)))
    return Verdict(what, float(chi2.sf(g, len(exp_a) - 1)),
                   f"G = {g:.1f} on {len(exp_a) - 1} df over {int(total)} samples; the farthest cell: "
                   f"{int(obs_a[worst])} seen, {exp_a[worst]:.1f} expected")


def binomial_test(successes: int, trials: int, chance: float, what: str) -> Verdict:
    """`successes` of `trials` against Binomial(trials, chance), two-sided (exact)."""
    from scipy.stats import binomtest

    if trials == 0:
        return Verdict(what, 1.0, "no trials")
    chance = min(max(float(chance), 0.0), 1.0)
    found = binomtest(int(successes), int(trials), chance).pvalue
    return Verdict(what, float(found), f"{successes} of {trials} ({successes / trials:.4f}), expected {chance:.4f}")


def agreement_test(agreed: np.ndarray, chances: np.ndarray, what: str) -> Verdict:
    """How many pairs agreed against the sum of independent Bernoulli(chances) (normal approximation,
    two-sided)."""
    from scipy.stats import norm

    mean = float(chances.sum())
    spread = float(np.sqrt((chances * (1 - chances)).sum()))
    seen = int(np.sum(agreed))
    if spread == 0:
        return Verdict(what, 1.0 if seen == round(mean) else 0.0,
                       f"{seen} of {len(chances)} agreed, {mean:.1f} certain")
    z = (seen - mean) / spread
    return Verdict(what, float(2 * norm.sf(abs(z))),
                   f"{seen} of {len(chances)} pairs agreed, {mean:.1f} expected (z = {z:+.2f})")


def accepted_at(emitted: np.ndarray, k: int) -> list[tuple[int, int]]:
    """Per position j < K: (rows that accepted the draft there, rows that reached it), from each row's n."""
    return [(int((emitted > j).sum()), int((emitted >= j).sum())) for j in range(k)]


def sampled_laws(p: np.ndarray, q: np.ndarray, tokens: np.ndarray, emitted: np.ndarray, label: str) -> list[Verdict]:
    """The per-launch laws of a chain's sample: `tokens` [N, K+1] the emitted tokens (-1 past the end), `emitted`
    [N] the drafts accepted before the first rejection (n). The length law, then per position the acceptance
    among rows that reach it and the emitted token's law."""
    k, vocab = len(q), p.shape[-1]
    a = acceptance(p, q)
    found = [g_test(np.bincount(emitted, minlength=k + 1)[:k + 1], length_law(a),
                    f"{label}: the accepted-length law")]
    found += [binomial_test(accepted, reached, a[j], f"{label}: acceptance at position {j} among rows reaching it")
              for j, (accepted, reached) in enumerate(accepted_at(emitted, k))]
    for j in range(k + 1):
        reached = emitted >= j
        found.append(g_test(np.bincount(tokens[reached, j], minlength=vocab)[:vocab], p[j],
                            f"{label}: the token emitted at position {j} against p_{j}"))
    return found


def failing(verdicts: list[Verdict], alpha: float = FAMILY_ALPHA) -> list[Verdict]:
    """The tests that fail at family-wise rate `alpha` over all of `verdicts` (Bonferroni), most extreme first."""
    bar = alpha / max(1, len(verdicts))
    return sorted((v for v in verdicts if v.p_value < bar), key=lambda v: v.p_value)

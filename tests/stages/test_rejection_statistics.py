"""Statistical tier of the rejection-sampling oracles: does `rejection.sample` preserve the target?

Byte identity with the oracle proves the kernels compute what the oracle computes; it cannot prove that
the oracle computes a correct sampler. This file checks speculative sampling's guarantee on the real
oracle (`specverify.oracles.rejection.sample`, i.e. `recovered` then `random`): with each draft drawn
from the draft distribution q_i and fresh noise (uniforms U[0,1) as f64, `inv_q = 1/Exp(1)` as f32, one
row per request shared by its positions),

- the token emitted at position i, among the requests that reach position i, is distributed as the
  target p_i (Pearson chi-square on the histogram, cells of p_i = 0 must stay empty, small cells pooled);
- P(accept at i | reach i) = sum_v min(p_i(v), q_i(v)) (exact two-sided binomial test). With
  `draft_probs=None` (n-gram drafts, one-hot q) it is E[p_i(d)] over the proposal of the draft d.

The same holds under each rule dialect of `rejection.random` (`strict`: f32(u * q) < p, ties reject;
`strict_q0`: the same without the range test on q): its sampler is the real `recovered` then the
dialect's own oracle (`random_strict`, `random_strict_q0`), and every test below runs under each rule.

Each chain below is K positions with their own (p_i, q_i), so the position-conditioned guarantee and the
shared noise row are exercised; a chain ending in disjoint supports is never accepted at its last step.

Sample sizes: one `rejection.sample` call per chain; B = 20 000 requests (hand-picked V=8, K=4; n-gram
V=6, K=3) or 10 000 (random V=4 K=3, V=11 K=2, V=16 K=2), so 3 700 to 20 000 requests reach each
position. The whole file takes 30 to 50 s on one shared core (38 tests: every rule).

False alarms. Every p-value is compared with ALPHA = 1e-4 (`tests/goodness_of_fit.py`). The
correctness tests compute M = 28 p-values per rule (2 per position: 8 + 6 + 4 + 4 + 6 over the five
chains), 84 over the three rules, so for correct oracles under fresh seeds the family-wise false-alarm
rate is at most 84 * ALPHA = 0.84 % (Bonferroni; the binomial tests are exact, the chi-square ones
asymptotic, with >= 10 expected per pooled cell). The seeds are fixed, so the outcome is deterministic and the file is never flaky. Over 20 fresh
seeds the 560 p-values of the real oracle were all above ALPHA (the smallest 0.0024, as expected of
560 uniform draws).

Power. The same decision (some p-value of the chain below ALPHA) must reject biased samplers, each built
by perturbing the inputs or outputs of the real `recovered` / `random` (never a re-implementation).
Fraction of 20 fresh seeds on which it rejects, on the random V=16, K=2 chain at its B = 10 000 (and,
for scale, at B = 1 000):

    emit-draft-on-reject   (no resampling: the output follows q)          20/20   (20/20)
    argmax-on-reject       (emit argmax p on a rejection)                 20/20   (20/20)
    resample-from-p        (recover from p instead of max(p - q, 0))      20/20   (20/20)
    swapped-ratio          (accept when q/p >= u)                         20/20   (20/20)
    noise-row-0-for-all    (every request reads inv_q row 0)              20/20   (20/20)
    uniform-noise-in-race  (inv_q = 1/U instead of 1/Exp(1))              20/20   ( 3/20)
    uniform-per-request    (one uniform per request, not per draft)       20/20   ( 1/20)

Run `python tests/stages/test_rejection_statistics.py [SEEDS [SCALE biased-only]]` to measure these again.
"""
from __future__ import annotations

import dataclasses
import functools
import sys
from dataclasses import dataclass

import numpy as np
import pytest

from specverify.oracles import rejection
from tests.goodness_of_fit import ALPHA, Fit, binomial_fit, histogram_fit

# ------------------------------------------------------------------------------------------------
# Chains of (p_i, q_i) and the inputs they induce


@dataclass(frozen=True)
class Chain:
    """K draft positions sharing a vocabulary: target p_i, draft q_i (None: n-gram, one-hot drafts),
    and the proposal the draft ids are drawn from (over ids -1..V-1; column 0 is the placeholder -1)."""

    name: str
    target: np.ndarray              # [K, V] f32
    draft: np.ndarray | None        # [K, V] f32
    proposal: np.ndarray            # [K, V+1] f64, rows sum to 1
    batch: int
    seed: int

    @property
    def positions(self) -> int:
        return self.target.shape[0]

    @property
    def vocab(self) -> int:
        return self.target.shape[1]


def _f32_rows(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return (rows / rows.sum(axis=1, keepdims=True)).astype(np.float32)


def _normalised(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return rows / rows.sum(axis=-1, keepdims=True)


def _with_drafts(name, target, draft, batch, seed) -> Chain:
    target, draft = _f32_rows(target), _f32_rows(draft)
    proposal = np.concatenate([np.zeros((len(draft), 1)), _normalised(draft)], axis=1)
    return Chain(name, target, draft, proposal, batch, seed)


def hand_picked_chain() -> Chain:
    """V = 8: p == q (always accepted), q zero where p is positive, p zero where q is positive, and
    disjoint supports (never accepted, so the bonus never appears)."""
    target = [[.30, .20, .15, .10, .10, .08, .05, .02],
              [.25, .25, .20, .10, .10, .05, .03, .02],
              [0, 0, 0, .40, .30, .20, .10, 0],
              [.50, .30, .20, 0, 0, 0, 0, 0]]
    draft = [[.30, .20, .15, .10, .10, .08, .05, .02],
             [.50, .30, .20, 0, 0, 0, 0, 0],
             [.20, .20, .10, .20, .10, .10, .05, .05],
             [0, 0, 0, 0, .25, .25, .25, .25]]
    return _with_drafts("hand-picked-V8", target, draft, batch=20_000, seed=101)


def random_chain(vocab, positions, batch, seed) -> Chain:
    """Dirichlet(0.7) pairs with about a quarter of the entries of each zeroed (at least one kept);
    the generator is seeded, so the pairs are fixed."""
    rng = np.random.default_rng(seed)

    def one():
        row = rng.dirichlet(np.full(vocab, 0.7))
        keep = rng.random(vocab) >= 0.25
        keep[rng.integers(vocab)] = True
        return row * keep

    pairs = [(one(), one()) for _ in range(positions)]
    return _with_drafts(f"random-V{vocab}-K{positions}", [p for p, _ in pairs], [q for _, q in pairs],
                        batch, seed)


def ngram_chain() -> Chain:
    """draft_probs=None: the draft is one-hot, so any proposal of draft ids keeps the output ~ p. The
    proposals include the placeholder -1 (always rejected) and ids where p is 0 (never accepted)."""
    target = _f32_rows([[.60, .15, .10, .10, .05, 0],
                        [.05, .05, .10, .70, .10, 0],
                        [0, .50, .25, .125, .125, 0]])
    proposal = _normalised([[.05, .70, .10, .05, .05, 0, .05],
                            [0, .05, .05, .10, .60, .10, .10],
                            [.20, .10, .30, .20, .10, .05, .05]])
    return Chain("ngram-V6", target, None, proposal, batch=20_000, seed=505)


# The random chains' seeds were picked among the first few so that every position but the last accepts
# with probability > 0.4 (later positions then still see thousands of requests).
CHAINS = [hand_picked_chain(), random_chain(4, 3, 10_000, 209), random_chain(11, 2, 10_000, 201),
          random_chain(16, 2, 10_000, 208), ngram_chain()]


def acceptance_probability(chain: Chain, i: int) -> float:
    """P(accept at i | reach i): sum_v min(p(v), q(v)); with one-hot drafts, E[p(d)] over the proposal."""
    p = _normalised(chain.target[i])
    if chain.draft is None:
        value = float(chain.proposal[i, 1:] @ p)
    else:
        value = float(np.minimum(p, _normalised(chain.draft[i])).sum())
    return min(max(value, 0.0), 1.0)


def draw_inputs(chain: Chain, seed: int) -> dict:
    """The keyword arguments of `rejection.sample` for `chain.batch` requests of `chain.positions`
    drafts each, every request random (not greedy), the output pre-filled with -1."""
    rng = np.random.default_rng(seed)
    batch, k, vocab = chain.batch, chain.positions, chain.vocab
    drafts = np.stack([rng.choice(np.arange(-1, vocab), size=batch, p=chain.proposal[i]) for i in range(k)],
                      axis=1)                                         # [B, K]
    return dict(
        draft_token_ids=drafts.reshape(-1).astype(np.int32),
        cu_num_draft_tokens=(np.arange(1, batch + 1) * k).astype(np.int32),
        max_spec_len=k,
        draft_probs=None if chain.draft is None else np.tile(chain.draft, (batch, 1)),
        target_probs=np.tile(chain.target, (batch, 1)),
        bonus_token_ids=np.full(batch, vocab, np.int64),               # out of vocabulary: recognisable
        is_greedy=np.zeros(batch, bool),
        uniform_probs=rng.random(batch * k),
        inv_q=(1.0 / rng.standard_exponential((batch, vocab))).astype(np.float32),
        output_token_ids=np.full((batch, k + 1), -1, np.int32),
    )


# rejection.random's rule and its dialects: the acceptance step of each sampler
RULES = {"record": rejection.random, "strict": rejection.random_strict, "strict_q0": rejection.random_strict_q0}


def sampler_of(rule: str):
    """The verification step under `rule`: the real `rejection.sample` for the record's rule, else the
    real `recovered` then the dialect's oracle (what `sample` does, with the dialect's acceptance test)."""
    if rule == "record":
        return rejection.sample
    return _biased()(RULES[rule])


def run(chain: Chain, sampler, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Calls `sampler` once on fresh inputs; returns (output [B, K+1], drafts [B, K])."""
    args = draw_inputs(chain, seed)
    sampler(**args)
    return args["output_token_ids"], args["draft_token_ids"].reshape(chain.batch, chain.positions)


# ------------------------------------------------------------------------------------------------
# The statistics of one run


def reached_masks(chain: Chain, out: np.ndarray) -> list[np.ndarray]:
    """reached[i]: the requests that emit something at position i (every request reaches position 0; a
    request reaches i+1 exactly when it accepted its draft at i, which includes emitting the bonus)."""
    return [out[:, i] != -1 for i in range(chain.positions + 1)]


def fits(chain: Chain, out: np.ndarray) -> list[tuple[str, Fit]]:
    """Two tests per position: the emitted-token histogram against p_i and the acceptance count."""
    reached = reached_masks(chain, out)
    results = []
    for i in range(chain.positions):
        emitted = out[reached[i], i]
        counts = np.bincount(emitted[(emitted >= 0) & (emitted < chain.vocab)], minlength=chain.vocab)
        hist = histogram_fit(counts, chain.target[i])
        outside = int(np.count_nonzero((emitted < 0) | (emitted >= chain.vocab)))
        if outside:  # an id outside [0, V) cannot come from p_i
            hist = Fit(0.0, float("inf"), 0, len(emitted), outside)
        alpha_i = acceptance_probability(chain, i)
        accepted = binomial_fit(int(np.count_nonzero(reached[i + 1])), int(np.count_nonzero(reached[i])), alpha_i)
        results.append((f"pos {i}: emitted ~ p", hist))
        results.append((f"pos {i}: P(accept) = {alpha_i:.4f}", accepted))
    return results


def rejected(results) -> list[str]:
    return [f"{label}: p={fit.pvalue:.3g} (n={fit.n}, impossible={fit.impossible})"
            for label, fit in results if fit.rejects(ALPHA)]


# ------------------------------------------------------------------------------------------------
# Correctness of the real oracle


def check_structure(chain: Chain, out: np.ndarray, drafts: np.ndarray) -> None:
    """Deterministic invariants the statistics rely on: a request's output is a prefix of emitted ids
    then -1; every emitted id is in [0, V); an accepted position emits its draft; the bonus (id V here)
    is emitted exactly after K acceptances."""
    reached = reached_masks(chain, out)
    for i in range(chain.positions):
        assert not (reached[i + 1] & ~reached[i]).any(), f"{chain.name}: position {i + 1} emitted after a gap"
        emitted = out[reached[i], i]
        assert ((emitted >= 0) & (emitted < chain.vocab)).all(), f"{chain.name}: position {i}: id outside [0, V)"
        assert (out[reached[i + 1], i] == drafts[reached[i + 1], i]).all(), \
            f"{chain.name}: position {i}: accepted but not the draft"
    assert (out[reached[chain.positions], chain.positions] == chain.vocab).all(), \
        f"{chain.name}: the last slot must hold the bonus"


@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("index", range(len(CHAINS)), ids=[c.name for c in CHAINS])
def test_target_distribution_preserved(index, rule):
    """One call of the verification step per chain and rule: the output is well formed, the token
    emitted at every position follows p_i, and the acceptance rate at every position is sum min(p_i, q_i)."""
    chain = CHAINS[index]
    out, drafts = run(chain, sampler_of(rule), chain.seed)
    check_structure(chain, out, drafts)
    failures = rejected(fits(chain, out))
    assert not failures, f"{chain.name} (alpha={ALPHA}):\n" + "\n".join(failures)


def test_goodness_of_fit_helpers():
    """The bookkeeping around scipy: empty null cells, pooling, degenerate binomials."""
    assert histogram_fit([5, 0, 5], [.5, 0, .5]).pvalue > 0.5
    impossible = histogram_fit([5, 1, 5], [.5, 0, .5])
    assert impossible.pvalue == 0.0 and impossible.impossible == 1
    pooled = histogram_fit([497, 483, 9, 7, 4], [.5, .48, .01, .006, .004])
    assert pooled.dof == 3 and pooled.pvalue > 0.5  # expected 6 and 4 pooled into one cell of 10
    assert histogram_fit([900, 100], [.5, .5]).rejects()
    assert binomial_fit(0, 100, 0.0).pvalue == 1.0 and binomial_fit(1, 100, 0.0).pvalue == 0.0
    assert binomial_fit(100, 100, 1.0).pvalue == 1.0 and binomial_fit(99, 100, 1.0).pvalue == 0.0
    assert binomial_fit(0, 0, 0.3).pvalue == 1.0 and binomial_fit(700, 1000, 0.5).rejects()


def test_hypothesis_count():
    """The Bonferroni bound in the module docstring counts 2 p-values per position of every chain."""
    assert sum(2 * c.positions for c in CHAINS) == 28


# ------------------------------------------------------------------------------------------------
# Power: biased samplers, each a perturbation of the real oracle's inputs or outputs


def _target_argmax(target_probs):
    return np.argmax(target_probs, axis=1).astype(np.int32)


def _biased(recovered_ids=None, recovered_overrides=None, random_overrides=None):
    """Given the acceptance step (`rejection.random` or a dialect's oracle): a sampler that runs the real
    `recovered` (with some inputs overridden) or takes its recovered ids from `recovered_ids(args)`, then
    that step (with some inputs overridden)."""
    return lambda verify: functools.partial(_biased_call, verify, recovered_ids, recovered_overrides,
                                            random_overrides)


def _biased_call(verify, recovered_ids, recovered_overrides, random_overrides, **args):
    rec_args = {k: args[k] for k in ("cu_num_draft_tokens", "draft_token_ids", "draft_probs", "target_probs",
                                     "inv_q")}
    if recovered_ids is not None:
        ids = recovered_ids(args)
    else:
        if recovered_overrides is not None:
            rec_args.update(recovered_overrides(args))
        ids = np.zeros(len(args["draft_token_ids"]), np.int32)
        rejection.recovered(**rec_args, recovered_token_ids=ids)
    rand_args = {k: v for k, v in args.items() if k != "inv_q"}
    if random_overrides is not None:
        rand_args.update(random_overrides(args))
    verify(**rand_args, recovered_token_ids=ids)


BIASED = {
    # on a rejection, emit the draft anyway (no resampling): the output follows q
    "emit-draft-on-reject": _biased(
        recovered_ids=lambda a: np.maximum(a["draft_token_ids"], 0).astype(np.int32)),
    # on a rejection, emit the argmax of p
    "argmax-on-reject": _biased(recovered_ids=lambda a: _target_argmax(a["target_probs"])),
    # resample from p instead of max(p - q, 0): recovered() with the draft distribution zeroed
    "resample-from-p": _biased(recovered_overrides=lambda a: {
        "draft_probs": np.zeros_like(a["target_probs"]) if a["draft_probs"] is not None else None,
        "draft_token_ids": a["draft_token_ids"] if a["draft_probs"] is not None
        else np.full_like(a["draft_token_ids"], -1)}),
    # accept when q/p >= u: random() with target and draft probabilities swapped
    "swapped-ratio": _biased(random_overrides=lambda a: {
        "target_probs": a["draft_probs"], "draft_probs": a["target_probs"]}),
    # a kernel that reads noise row 0 for every request (a stride bug): recovered ids become correlated
    "noise-row-0-for-all": _biased(recovered_overrides=lambda a: {
        "inv_q": np.ascontiguousarray(np.broadcast_to(a["inv_q"][:1], a["inv_q"].shape))}),
    # the race run with 1/U instead of 1/Exp(1) noise (U = 1 - exp(-E) is the same draw made uniform)
    "uniform-noise-in-race": _biased(recovered_overrides=lambda a: {
        "inv_q": (1.0 / -np.expm1(-1.0 / a["inv_q"].astype(np.float64))).astype(np.float32)}),
    # one uniform per request instead of one per draft (uniform_probs indexed by request): the
    # acceptances of a request become correlated, so later positions accept too often
    "uniform-per-request": _biased(random_overrides=lambda a: {
        "uniform_probs": np.repeat(a["uniform_probs"][a["cu_num_draft_tokens"] - a["max_spec_len"]],
                                   a["max_spec_len"])}),
}

#: the chain the biased samplers are run on (random-V16-K2) and its seed
POWER_CHAIN = 3
POWER_SEED = 7


@pytest.mark.parametrize("rule", sorted(RULES))
@pytest.mark.parametrize("name", sorted(BIASED))
def test_biased_sampler_is_rejected(name, rule):
    """The decision that passes the real oracle rejects each biased sampler under each rule (fixed seed)."""
    chain = CHAINS[POWER_CHAIN]
    out, _ = run(chain, BIASED[name](RULES[rule]), POWER_SEED)
    assert rejected(fits(chain, out)), f"{name} under {rule} on {chain.name} was not detected at alpha={ALPHA}"


# ------------------------------------------------------------------------------------------------
# Measuring the numbers quoted in the module docstring


def measure(seeds: int, scale: float = 1.0, oracle: bool = True) -> None:
    """Prints the smallest p-value of the real oracle over `seeds` fresh seeds and the power of each
    biased sampler (its chain's batch multiplied by `scale`)."""
    if oracle:
        pvalues = []
        for chain in CHAINS:
            for s in range(seeds):
                pvalues += [fit.pvalue for _, fit in fits(chain, run(chain, rejection.sample, 10_000 + s)[0])]
        print(f"real oracle: {len(pvalues)} p-values, min {min(pvalues):.3g}, "
              f"below alpha: {sum(p < ALPHA for p in pvalues)}")
    for name, biased in sorted(BIASED.items()):
        sampler = biased(rejection.random)
        chain = CHAINS[POWER_CHAIN]
        chain = dataclasses.replace(chain, batch=int(chain.batch * scale))
        hits, which = 0, {}
        for s in range(seeds):
            hit = [label.split(" = ")[0] for label, fit in fits(chain, run(chain, sampler, 20_000 + s)[0])
                   if fit.rejects(ALPHA)]
            hits += bool(hit)
            for test in hit:
                which[test] = which.get(test, 0) + 1
        print(f"{name} on {chain.name} (B={chain.batch}): power {hits}/{seeds}; rejections by test {which}")


if __name__ == "__main__":
    measure(int(sys.argv[1]) if len(sys.argv) > 1 else 20, float(sys.argv[2]) if len(sys.argv) > 2 else 1.0,
            oracle=len(sys.argv) <= 3)

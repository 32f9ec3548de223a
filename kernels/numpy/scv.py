"""Host production code of the `scv` family: `adaptive_k`, called once per engine step.

The history is short (a window of steps): it is summed as Python ints from one `tolist()` (exact,
never overflowing), and the target ratio is compared in integers through its exact binary fraction
(`float.as_integer_ratio`), so no rounding can move a ratio sitting on the threshold.
"""
from __future__ import annotations

from specverify.oracles.scv import check_adaptive_k


def adaptive_k(*, num_accepted_tokens, num_draft_tokens, current_k, min_k, max_k, target_ratio, window):
    """See `specverify.oracles.scv.adaptive_k`."""
    accepted, drafted = check_adaptive_k(num_accepted_tokens, num_draft_tokens, current_k, min_k, max_k,
                                         target_ratio, window)
    a, d = sum(accepted[-window:]), sum(drafted[-window:])
    numerator, denominator = target_ratio.as_integer_ratio()
    step = 0
    if d:
        if a * denominator >= numerator * d:
            step = 1
        elif 2 * a * denominator < numerator * d:
            step = -1
    return min(max(min(max(current_k, min_k), max_k) + step, min_k), max_k)

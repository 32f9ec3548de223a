"""Oracles of the `scv` family: vectorized acceptance masks, and the draft-length controller.

Loop-level and obviously correct; invalid input refused with an error naming the field. The `check_*`
functions are shared with the production versions (`values=False` skips the checks that read arrays).

Choices where STAGES.md is silent:
- `acceptance_mask`: a draft is accepted when it equals the target id at its position and is not the
  placeholder -1 (a -1 draft is never accepted, whatever the target holds). Ids are compared as
  integers at full width (int32 and int64 may be mixed). The token arrays may be longer than the
  batch's drafts (CUDA-graph padding): the mask is written False there. Ids below -1 are refused.
- `adaptive_k`: see its docstring for the controller rule.
"""
from __future__ import annotations

import math
from fractions import Fraction

from specverify.oracles.arguments import need_at_least, need_dtype, need_inclusive_offsets, need_int, need_ndim

PLACEHOLDER = -1
IDS = ("int32", "int64")


def need_sized(name: str, a, shape: tuple[int, ...], source: str) -> None:
    """A shape check that also names where the size comes from, so that of two fields disagreeing on a
    size, the error names both."""
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name}: shape must be {list(shape)} ({source}), got {list(a.shape)}")


# ---------------------------------------------------------------- scv.acceptance_mask

def check_acceptance_mask(draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted,
                          values: bool = True) -> tuple[int, int]:
    """The argument checks of `acceptance_mask`; returns (B, T) with T the length of the token arrays."""
    need_dtype("draft_token_ids", draft_token_ids, *IDS)
    need_ndim("draft_token_ids", draft_token_ids, 1)
    tokens = draft_token_ids.shape[0]
    need_dtype("target_token_ids", target_token_ids, *IDS)
    need_sized("target_token_ids", target_token_ids, (tokens,), "T = len(draft_token_ids)")
    need_dtype("cu_num_draft_tokens", cu_num_draft_tokens, "int32")
    need_ndim("cu_num_draft_tokens", cu_num_draft_tokens, 1)
    batch = cu_num_draft_tokens.shape[0]
    need_dtype("accepted_mask", accepted_mask, "bool")
    need_sized("accepted_mask", accepted_mask, (tokens,), "T = len(draft_token_ids)")
    need_dtype("num_accepted", num_accepted, "int32")
    need_sized("num_accepted", num_accepted, (batch,), "B = len(cu_num_draft_tokens)")
    if values:
        if batch:
            last = int(cu_num_draft_tokens[-1])
            if last > tokens:
                raise ValueError(f"cu_num_draft_tokens: counts {last} drafts, the token arrays hold {tokens}")
            need_inclusive_offsets("cu_num_draft_tokens", cu_num_draft_tokens, last)
        need_at_least("draft_token_ids", draft_token_ids, PLACEHOLDER)
        need_at_least("target_token_ids", target_token_ids, PLACEHOLDER)
    return batch, tokens


def acceptance_mask(*, draft_token_ids, target_token_ids, cu_num_draft_tokens, accepted_mask, num_accepted):
    """The accepted prefix of each request's drafts, as a per-token mask and a per-request count.

    Request r owns tokens [start(r), cu[r]) of the flattened arrays (inclusive offsets). Walking them
    in order, drafts are accepted while `draft == target` and the draft is not -1; the first other
    token ends the request's acceptance. `accepted_mask[t]` is True exactly for the accepted tokens
    (False for tokens past cu[B-1]); `num_accepted[r]` counts them.
    """
    batch, tokens = check_acceptance_mask(draft_token_ids, target_token_ids, cu_num_draft_tokens,
                                          accepted_mask, num_accepted)
    for t in range(tokens):
        accepted_mask[t] = False
    start = 0
    for r in range(batch):
        end = int(cu_num_draft_tokens[r])
        count = 0
        for t in range(start, end):
            draft = int(draft_token_ids[t])
            if draft == PLACEHOLDER or draft != int(target_token_ids[t]):
                break
            accepted_mask[t] = True
            count += 1
        num_accepted[r] = count
        start = end


# ---------------------------------------------------------------- scv.adaptive_k

def is_host_array(x) -> bool:
    return hasattr(x, "dtype") and hasattr(x, "shape")


def host_counts(name: str, values) -> list[int]:
    """A list, tuple, ndarray or CPU tensor of integer counts >= 0, as Python ints."""
    if is_host_array(values):
        if hasattr(values, "device") and str(values.device) != "cpu":
            raise ValueError(f"{name}: must be on the host (a list, ndarray or CPU tensor), got {values.device}")
        need_dtype(name, values, *IDS)
        need_ndim(name, values, 1)
        values = values.tolist()
    elif not isinstance(values, (list, tuple)):
        raise TypeError(f"{name}: must be a list, ndarray or tensor of counts, got {type(values).__name__}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name}: must hold Python ints, found a {type(v).__name__}")
        if v < 0:
            raise ValueError(f"{name}: counts must be >= 0, found {v}")
    return list(values)


def check_adaptive_k(num_accepted_tokens, num_draft_tokens, current_k, min_k, max_k, target_ratio,
                     window) -> tuple[list[int], list[int]]:
    """The argument checks of `adaptive_k`; returns the two histories as lists of Python ints."""
    accepted = host_counts("num_accepted_tokens", num_accepted_tokens)
    drafted = host_counts("num_draft_tokens", num_draft_tokens)
    if len(accepted) != len(drafted):
        raise ValueError(f"num_accepted_tokens: {len(accepted)} steps, num_draft_tokens has {len(drafted)}")
    for step, (a, d) in enumerate(zip(accepted, drafted)):
        if a > d:
            raise ValueError(f"num_accepted_tokens: step {step} accepts {a} of only {d} drafts")
    need_int("current_k", current_k)
    need_int("min_k", min_k)
    need_int("max_k", max_k)
    if min_k > max_k:
        raise ValueError(f"min_k: must be <= max_k = {max_k}, got {min_k}")
    if not isinstance(target_ratio, float):
        raise TypeError(f"target_ratio: must be a Python float, got {type(target_ratio).__name__}")
    if not (math.isfinite(target_ratio) and 0 < target_ratio <= 1):
        raise ValueError(f"target_ratio: must lie in (0, 1], got {target_ratio}")
    need_int("window", window, 1)
    return accepted, drafted


def adaptive_k(*, num_accepted_tokens, num_draft_tokens, current_k, min_k, max_k, target_ratio, window):
    """The draft length K of the next step: a deterministic step controller.

    Over the last `window` steps of the history (all of it when shorter), a = accepted drafts and
    d = drafted tokens, summed. K = current_k clamped to [min_k, max_k]; then, compared exactly (no
    rounding: the float target is taken at its exact binary value):
    - no drafts in the window (d = 0): K is kept, there is no evidence;
    - a >= target_ratio * d (acceptance at or above the target): K + 1;
    - 2a < target_ratio * d (below half the target): K - 1;
    - otherwise K is kept;
    and the result is clamped to [min_k, max_k] again. Returns a Python int.
    """
    accepted, drafted = check_adaptive_k(num_accepted_tokens, num_draft_tokens, current_k, min_k, max_k,
                                         target_ratio, window)
    first = max(0, len(accepted) - window)
    a = d = 0
    for step in range(first, len(accepted)):
        a += accepted[step]
        d += drafted[step]
    k = min(max(current_k, min_k), max_k)
    goal = Fraction(target_ratio) * d
    if d > 0 and a >= goal:
        k += 1
    elif d > 0 and 2 * a < goal:
        k -= 1
    return min(max(k, min_k), max_k)

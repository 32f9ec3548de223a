"""Argument checks: each raises ValueError (or TypeError for a dtype) naming the field and the rule.

Written against the array protocol NumPy and torch share (dtype, shape, comparisons, any), so the
oracles and the production kernels refuse the same inputs with the same words.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any


def dtype_name(a: Any) -> str:
    return dtype_text(a.dtype)


@lru_cache(maxsize=None)
def dtype_text(dtype: Any) -> str:
    """The name of a NumPy or torch dtype ("int32"); cached, as str() of a NumPy dtype costs microseconds."""
    return str(dtype).removeprefix("torch.")


def because(source: str) -> str:
    """Where a required size or dtype comes from, for a message: " (B = len(cu_num_draft_tokens))".
    When two fields disagree, the error raised while checking one names the other this way."""
    return f" ({source})" if source else ""


def need_dtype(name: str, a: Any, *allowed: str, source: str = "") -> None:
    if a is None or not hasattr(a, "dtype"):
        raise TypeError(f"{name}: must be an array of {'|'.join(allowed)}, got {type(a).__name__}")
    if dtype_name(a) not in allowed:
        raise TypeError(f"{name}: dtype must be {'|'.join(allowed)}{because(source)}, got {dtype_name(a)}")


def need_shape(name: str, a: Any, shape: tuple[int, ...], source: str = "") -> None:
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name}: shape must be {list(shape)}{because(source)}, got {list(a.shape)}")


def need_ndim(name: str, a: Any, ndim: int) -> None:
    if len(a.shape) != ndim:
        raise ValueError(f"{name}: must have {ndim} dimension(s), got shape {list(a.shape)}")


def need_int(name: str, x: Any, low: int = 0) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"{name}: must be a Python int, got {type(x).__name__}")
    if x < low:
        raise ValueError(f"{name}: must be >= {low}, got {x}")
    return x


def largest_count(offsets: Any, inclusive: bool) -> int:
    """The largest count that cumulative `offsets` hold (inclusive: counts from 0; else exclusive, a
    leading offset), read the same from a NumPy array and a tensor on any device; 0 for none."""
    if len(offsets) == 0:
        return 0
    steps = offsets[1:] - offsets[:-1]
    largest = int(steps.max()) if len(steps) else 0
    return max(largest, int(offsets[0])) if inclusive else largest


def need_hint(name: str, hint: Any, largest: Any, what: str) -> None:
    """A host hint: None (not given) or a Python int >= 0 that is at least `largest`, the data's value
    of it (None: not read, as a kernel that does not read the device checks only the type)."""
    if hint is None:
        return
    need_int(name, hint)
    if largest is not None and hint < largest:
        raise ValueError(f"{name}: a host hint must be at least {what} ({largest}), got {hint}")


def need_at_least(name: str, a: Any, low: int) -> None:
    if len(a.reshape(-1)) and bool((a < low).any()):
        raise ValueError(f"{name}: every value must be >= {low}, found {int(a.min())}")


def need_at_most(name: str, a: Any, high: int, why: str) -> None:
    if len(a.reshape(-1)) and bool((a > high).any()):
        raise ValueError(f"{name}: every value must be <= {high} ({why}), found {int(a.max())}")


def need_inclusive_offsets(name: str, cu: Any, total: int, source: str = "") -> None:
    """Inclusive cumulative counts: non-negative, non-decreasing, the last equal to the total."""
    if len(cu) == 0:
        if total != 0:
            raise ValueError(f"{name}: empty, but there are {total} tokens{because(source)}")
        return
    if bool((cu[:1] < 0).any()):
        raise ValueError(f"{name}: must start at a count >= 0, got {int(cu[0])}")
    if len(cu) > 1 and bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(f"{name}: must be non-decreasing (inclusive cumulative counts)")
    if int(cu[-1]) != total:
        raise ValueError(f"{name}: last value must equal the number of tokens {total}{because(source)}, "
                         f"got {int(cu[-1])}")


def need_chain_tables(target_probs: Any, draft_probs: Any, batch: int, k: int, source: str) -> int:
    """A chain's probability tables: f32 target [B, K+1, V >= 1] and draft [B, K, V] (B and K from `source`);
    returns V."""
    need_dtype("target_probs", target_probs, "float32")
    need_ndim("target_probs", target_probs, 3)
    vocab = int(target_probs.shape[-1])
    if tuple(target_probs.shape[:2]) != (batch, k + 1) or vocab < 1:
        raise ValueError(f"target_probs: shape must be [{batch}, {k + 1}, V >= 1] ({source}), "
                         f"got {list(target_probs.shape)}")
    need_dtype("draft_probs", draft_probs, "float32")
    need_shape("draft_probs", draft_probs, (batch, k, vocab), f"{source}; V = target_probs.shape[-1]")
    return vocab

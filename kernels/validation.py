"""When the production kernels check argument values, and a memo for the checks that do not.

Shape and dtype checks read only metadata and always run. Checks of array contents would make a CUDA
kernel wait for the device, so they run on CPU tensors always and on CUDA tensors only in checked mode
(`checked_mode()`, or SPECVERIFY_CHECKED=1 in the environment when this module is imported).

`validate(check, *args, values=...)` runs a check; without value checks it remembers the arguments'
signatures that passed (see `signature`), so a call like an earlier passing one costs a dict lookup.
A failing check is never remembered: bad input raises the check's own error on every call.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator

from torch import Tensor

_checked: ContextVar[bool] = ContextVar("specverify_checked", default=False)
_CHECKED_ENV = os.environ.get("SPECVERIFY_CHECKED") == "1"
MEMO_LIMIT = 4096                 # signatures kept before the memo starts over
_memo: dict[tuple, Any] = {}
_MISSING = object()
SCALAR_TYPES = frozenset((int, float, bool, str, type(None)))   # arguments signed by type and value


@contextmanager
def checked_mode(on: bool = True) -> Iterator[None]:
    token = _checked.set(on)
    try:
        yield
    finally:
        _checked.reset(token)


def checked() -> bool:
    """Whether checked mode is on (`checked_mode()`, or SPECVERIFY_CHECKED=1 at import)."""
    return _checked.get() or _CHECKED_ENV


def reads_values(tensor) -> bool:
    """Whether a kernel handed `tensor` checks argument contents (yes for anything not a device tensor,
    so a missing or host argument meets the checks that name it)."""
    return checked() or getattr(tensor, "is_cpu", True)


def signature(a: Any) -> tuple:
    """Everything a check without value checks may read of `a`: for a torch.Tensor its shape, dtype and
    device (the checks read no stride or contents; a host input's check reads its device); for a scalar or None its type and
    value; for a list, tuple or dict its type and the signatures of its items. TypeError for anything
    else (such a call is not memoized)."""
    kind = type(a)
    if kind is Tensor:
        return a.shape, a.dtype, a.device
    if kind in SCALAR_TYPES:
        return kind, a
    if kind is list or kind is tuple:
        return (kind, *map(signature, a))
    if kind is dict:
        return (kind, *((k, signature(v)) for k, v in a.items()))
    raise TypeError(f"no signature for {kind.__name__}")


def validate(check: Callable[..., Any], *args, values: bool) -> Any:
    """`check(*args, values=values)`; when `values` is False, the result of a passing check is reused
    for later arguments with the same signatures (a check without value checks is a function of them)."""
    if values:
        return check(*args, values=True)
    try:
        key = (check, *[(a.shape, a.dtype, a.device) if type(a) is Tensor else signature(a) for a in args])
        found = _memo.get(key, _MISSING)
    except TypeError:
        return check(*args, values=False)
    if found is _MISSING:
        found = check(*args, values=False)
        if len(_memo) >= MEMO_LIMIT:
            _memo.clear()
        _memo[key] = found
    return found

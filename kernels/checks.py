"""When the production kernels check argument values.

Shape and dtype checks read only metadata and always run. Checks of array contents would make a CUDA
kernel wait for the device, so they run on CPU tensors always and on CUDA tensors only in checked mode
(`checked_mode()`, or SPECVERIFY_CHECKED=1 in the environment).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Iterator

_checked: ContextVar[bool] = ContextVar("specverify_checked", default=False)


@contextmanager
def checked_mode(on: bool = True) -> Iterator[None]:
    token = _checked.set(on)
    try:
        yield
    finally:
        _checked.reset(token)


def reads_values(tensor) -> bool:
    """Whether a kernel handed `tensor` checks argument contents."""
    return _checked.get() or tensor.device.type == "cpu" or os.environ.get("SPECVERIFY_CHECKED") == "1"

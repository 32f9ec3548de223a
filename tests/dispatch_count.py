"""Counting the ATen operations a call dispatches: a CPU stand-in for counting CUDA launches.

Each operation that computes or copies (a kernel, a fill, a copy between devices) counts once; operations
that only make views or allocate (view, expand, slice, empty, ...) are free on any device and not counted.
A composite operation is counted by the operations it decomposes into, as a CUDA run would launch them.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# metadata or allocation only: no device work
FREE = frozenset({
    "view", "_unsafe_view", "reshape", "expand", "as_strided", "slice", "select", "unsqueeze", "squeeze",
    "permute", "t", "transpose", "alias", "detach", "lift_fresh", "empty", "empty_strided", "empty_like",
    "new_empty", "new_empty_strided", "unbind", "split", "split_with_sizes", "narrow", "view_as", "unfold",
    "diagonal", "movedim", "_reshape_alias", "view_as_real", "view_as_complex", "_to_copy_meta", "resize_",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size", "_local_scalar_dense_meta",
})


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name not in FREE:
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def dispatched_ops(fn, **kwargs) -> list[str]:
    """The names of the computing ATen operations `fn(**kwargs)` dispatches, in order (views and
    allocations left out)."""
    with _Recorder() as recorder:
        fn(**kwargs)
    return recorder.ops

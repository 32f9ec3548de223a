"""Counting the device activities of a Torch call on the CPU: the aten ops it dispatches.

`dispatched_ops(fn, **kwargs)` runs `fn(**kwargs)` under a TorchDispatchMode and returns the names of the
aten ops that would each be about one CUDA launch (a kernel, a copy or a fill). Ignored, because they
only make or reshape tensor metadata and launch nothing: view, _unsafe_view, reshape, expand,
as_strided, slice, select, unsqueeze, squeeze, permute, t, transpose, alias, detach, lift_fresh,
empty, empty_like, new_empty, empty_strided, unbind, split, chunk, narrow, diagonal, unfold, view_as_real /
view_as_complex, _reshape_alias (a `.to` or `.contiguous` that changes nothing dispatches no op at all).
Counted: `scalar_tensor` (a Python scalar operand of some ops, e.g. torch.where, made a tensor on the
operands' device: a fill on CUDA), and everything else (plus the extra launches CUDA makes of a 1-D cumsum, see `_cuda_extras`), fills (zeros, full, arange, fill_), dtype conversions (`_to_copy`), clones
and `_local_scalar_dense` (a host read) included. A host list made a device tensor is a copy on CUDA but no op on the CPU: the
caller adds that one launch to what this counts.
"""
from __future__ import annotations

from typing import Any, Callable

from torch.utils._python_dispatch import TorchDispatchMode

IGNORED = frozenset((
    "view", "_unsafe_view", "reshape", "expand", "as_strided", "slice", "select", "unsqueeze", "squeeze",
    "permute", "t", "transpose", "alias", "detach", "lift_fresh", "empty", "empty_like", "new_empty",
    "empty_strided", "unbind", "split", "split_with_sizes", "chunk", "narrow", "diagonal", "unfold",
    "view_as_real", "view_as_complex", "_reshape_alias",
))


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name not in IGNORED:
            self.ops.append(name)
            self.ops.extend(_cuda_extras(name, args, kwargs))
        return func(*args, **kwargs)


def _cuda_extras(name: str, args: tuple, kwargs: dict) -> list[str]:
    """Launches CUDA adds to one op that the CPU does not show: a cumsum over a whole 1-D run is cub's
    init and scan kernels, and a cumsum into a non-contiguous `out` writes a scratch copy back."""
    extras = []
    if name == "cumsum":
        src, dim = args[0], args[1]
        if src.numel() == src.shape[dim] and src.numel() > 1:
            extras.append("cumsum:cub-init")
        out = kwargs.get("out")
        if out is not None and not out.is_contiguous():
            extras.append("copy_:out-scratch")
    return extras


def dispatched_ops(fn: Callable[..., Any], **kwargs: Any) -> list[str]:
    """The aten ops `fn(**kwargs)` dispatches that each launch about one device activity, in order."""
    with _Recorder() as recorder:
        fn(**kwargs)
    return recorder.ops

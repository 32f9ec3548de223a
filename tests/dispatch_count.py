"""Counting the device activities of a Torch call on the CPU: the aten ops it dispatches.

`dispatched_ops(fn, **kwargs)` runs `fn(**kwargs)` under a TorchDispatchMode and returns the names of the
aten ops that would each be about one CUDA launch (a kernel, a copy or a fill). Ignored, because they
only make or reshape tensor metadata and launch nothing: view, _unsafe_view, reshape, expand,
as_strided, slice, select, unsqueeze, squeeze, permute, t, transpose, alias, detach, lift_fresh,
empty, empty_like, new_empty, empty_strided, unbind, split, chunk, narrow, diagonal, unfold, view_as_real /
view_as_complex, _reshape_alias (a `.to` or `.contiguous` that changes nothing dispatches no op at all).
Counted: `scalar_tensor` (a Python scalar operand of some ops, e.g. torch.where, made a tensor on the
operands' device: a fill on CUDA), and everything else: fills (zeros, full, arange, fill_), dtype
conversions (`_to_copy`), clones and `_local_scalar_dense` (a host read) included, plus what CUDA adds
to some ops (`_cuda_extras`: a 1-D cumsum's second kernel, a `cat`'s copy per input, an accumulating
`index_put_`'s sort) and the host syncs some ops make, named `sync:...` (`syncs`). A host list made a
device tensor is a copy on CUDA but no op on the CPU: the caller adds that one launch to what this counts.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from specverify.kernels.triton.prepared import METADATA_OPS as IGNORED   # the ops that launch nothing


class _Recorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        result = func(*args, **kwargs)
        if name not in IGNORED:
            self.ops.append(name)
            self.ops.extend(_cuda_extras(name, args, kwargs, result))
        return result


def _cuda_extras(name: str, args: tuple, kwargs: dict, result: Any) -> list[str]:
    """Launches (and host syncs, named `sync:...`) CUDA adds to one op that the CPU does not show:
    - a cumsum over a whole 1-D run is cub's init and scan kernels; a scan (cumsum, cumprod, cummax,
      cummin) of a non-contiguous input first makes it contiguous (a copy), and one into a non-contiguous
      `out` writes a scratch copy back;
    - a reduction (sum, prod, mean) or scan whose result dtype is not its input's first casts the input
      (`self.to(...)` inside the kernel, on the CPU too, unseen by the dispatch mode): a copy;
    - `cat` (and `stack`) is one batched kernel only when it has several inputs, all of the output's dtype,
      and at most 4 dims (strided inputs too: ATen's `cat_out_cuda`), else one copy per non-empty input;
    - `index_put_` with accumulate sorts its indices (a radix sort and its set-up: about five more);
    - `index` and `index_put_` make each int32 index tensor int64 first, and `searchsorted` of values and
      boundaries of two dtypes casts the one that differs from their common dtype: a copy each (seen on an
      H200, torch 2.11; the CPU kernels do it too, below the dispatch mode; `index_select` and `take` take
      int32 ids as they are);
    - `nonzero`, `masked_select`, a bool index to `index`/`index_put_` (a nonzero inside) and
      `repeat_interleave` without `output_size` read a count back: a sync;
    - `repeat_interleave` of counts takes a 1-D cumsum (two) before its kernel."""
    extras = []
    if name in ("sum", "prod", "mean", "nansum", "cumsum", "cumprod") and isinstance(result, torch.Tensor) \
            and result.dtype != args[0].dtype:
        extras.append("_to_copy:reduce-input")
    if name in ("cumsum", "cumprod", "cummax", "cummin"):
        src, dim = args[0], args[1]
        if name == "cumsum" and src.numel() == src.shape[dim] and src.numel() > 1:
            extras.append("cumsum:cub-init")
        if not src.is_contiguous():
            extras.append("copy_:scan-input")
        out = kwargs.get("out")
        if out is not None and not all(t.is_contiguous() for t in (out if isinstance(out, tuple) else (out,))):
            extras.append("copy_:out-scratch")
    elif name in ("cat", "stack"):   # a stack is the cat of its inputs unsqueezed
        inputs = [t for t in args[0] if not (t.dim() == 1 and t.numel() == 0)]   # skipped legacy empties
        out = kwargs.get("out")
        dtype = out.dtype if out is not None else functools.reduce(torch.promote_types, (t.dtype for t in inputs))
        batched = len(inputs) > 1 and inputs[0].dim() + (name == "stack") <= 4 and all(t.dtype == dtype for t in inputs)
        if not batched:
            extras.extend(["copy_:cat-input"] * (sum(t.numel() > 0 for t in inputs) - 1))
    elif name in ("index", "index_put_", "index_put"):
        if name != "index" and (len(args) > 3 and args[3] or kwargs.get("accumulate")):
            extras.extend(["index_put_:accumulate-sort"] * 5)
        indices = [i for i in args[1] if i is not None]
        if any(i.dtype in (torch.bool, torch.uint8) for i in indices):
            extras.append("sync:nonzero")
        extras.extend(["_to_copy:int32-index"] * sum(i.dtype == torch.int32 for i in indices))
    elif name == "searchsorted" and args[0].dtype != args[1].dtype:
        extras.append("_to_copy:search-dtype")
    elif name in ("nonzero", "masked_select"):
        extras.append(f"sync:{name}")
    elif name == "repeat_interleave":   # the overload of counts alone (the others decompose into it)
        extras.extend(["cumsum:cub-init", "cumsum:scan"])
        if kwargs.get("output_size") is None:
            extras.append("sync:repeat_interleave")
    return extras


def dispatched_ops(fn: Callable[..., Any], **kwargs: Any) -> list[str]:
    """The aten ops `fn(**kwargs)` dispatches that each launch about one device activity, in order."""
    with _Recorder() as recorder:
        fn(**kwargs)
    return recorder.ops


def syncs(ops: list[str]) -> list[str]:
    """The host syncs among `dispatched_ops`' names."""
    return [op for op in ops if op.startswith("sync:") or op == "_local_scalar_dense"]

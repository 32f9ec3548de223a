"""Handing an example to an implementation, and reading back what it did.

Every tensor argument lives in a *base* allocation: guard bytes around a strided view for inputs,
poison bytes everywhere for outputs. After the call the whole base is read back, so a write anywhere
outside the defined region (the gaps of a strided view included) shows up byte for byte.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import numpy as np

from specverify.stage import Example, Layout, Stage

POISON_A = 0xA5   # output fill for every implementation
POISON_B = 0x5A   # second fill for the oracle: bytes equal under both fills are the ones it wrote
GUARD = 0xC3      # fill of the gaps of strided inputs


@dataclass
class Placed:
    """An array as handed over: its base allocation and the view passed to the implementation."""
    base: Any          # np.ndarray or torch.Tensor
    view: Any
    layout: Layout

    def base_numpy(self) -> np.ndarray:
        base = self.base
        if not isinstance(base, np.ndarray):
            base = to_numpy(base)
        return base.copy()


def contiguous_layout(ndim: int) -> Layout:
    return Layout((1,) * ndim, (0,) * ndim)


def filled(shape: tuple[int, ...], dtype: np.dtype, byte: int) -> np.ndarray:
    count = int(np.prod(shape, dtype=np.int64))
    return np.full(count * dtype.itemsize, byte, np.uint8).view(dtype).reshape(shape)


# dtypes NumPy lacks (ml_dtypes provides them): handed across as same-width unsigned ints, bit for bit
BITS = {"bfloat16": "uint16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}


def to_torch(array: np.ndarray):
    """A CPU tensor sharing `array`'s memory; bfloat16 and fp8 arrays become tensors of the same name."""
    import torch

    name = array.dtype.name
    if name in BITS:
        return torch.from_numpy(array.view(BITS[name])).view(getattr(torch, name))
    return torch.from_numpy(array)


def to_numpy(tensor) -> np.ndarray:
    """A tensor's values as an ndarray (bfloat16 and fp8 as ml_dtypes arrays, bit for bit)."""
    import torch

    name = str(tensor.dtype).removeprefix("torch.")
    tensor = tensor.detach().cpu()
    if name in BITS:
        import ml_dtypes

        return tensor.view(getattr(torch, BITS[name])).numpy().view(getattr(ml_dtypes, name))
    return tensor.numpy()


def place(values: np.ndarray | None, shape: tuple[int, ...], dtype: np.dtype, layout: Layout | None,
          fill: int, lib: str, device: str) -> Placed:
    """Allocate the base filled with `fill`, write `values` (if any) into the view, hand it over."""
    layout = layout or contiguous_layout(len(shape))
    base = filled(layout.base_shape(shape), dtype, fill)
    index = layout.view_index(shape)
    if values is not None:
        base[index] = values
    if lib == "numpy":
        return Placed(base, base[index], layout)
    tensor = to_torch(base).to(device)
    return Placed(tensor, tensor[index], layout)


def as_container(value: np.ndarray, container: str) -> Any:
    """A host-stage argument in the container the example names."""
    if container == "list":
        return value.tolist()
    if container == "ndarray":
        return value.copy()
    if container == "tensor":
        import torch

        return torch.from_numpy(value.copy())
    raise ValueError(f"containers: unknown container {container!r} (list, ndarray or tensor)")


def scalar(value: Any) -> Any:
    """Python scalars for implementations: NumPy scalars become int, float or bool."""
    return value.item() if isinstance(value, np.generic) else value


class Call:
    """The arguments of one call of an implementation, and what it did to them."""

    def __init__(self, stage: Stage, example: Example, lib: str, device: str, fill: int = POISON_A):
        self.stage, self.example = stage, example
        self.placed_inputs: dict[str, Placed] = {}
        self.placed_outputs: dict[str, Placed] = {}
        self.other_inputs: dict[str, Any] = {}       # scalars, lists, host containers: compared by value
        self.kwargs: dict[str, Any] = {}
        for name, value in example.inputs.items():
            if stage.host and name in example.containers and value is not None:
                self.kwargs[name] = as_container(np.asarray(value), example.containers[name])
                self.other_inputs[name] = copy.deepcopy(self.kwargs[name])
            elif isinstance(value, np.ndarray):
                placed = place(value, value.shape, value.dtype, example.layouts.get(name), GUARD, lib, device)
                self.placed_inputs[name] = placed
                self.kwargs[name] = placed.view
            else:
                self.kwargs[name] = copy.deepcopy(scalar(value))
                self.other_inputs[name] = copy.deepcopy(self.kwargs[name])
        self.input_bytes = {n: p.base_numpy() for n, p in self.placed_inputs.items()}
        for name, buf in example.outputs.items():
            placed = place(None, buf.shape, np.dtype(buf.dtype), buf.layout, fill, lib, device)
            self.placed_outputs[name] = placed
            self.kwargs[name] = placed.view

    def inout_names(self) -> list[str]:
        return [f.name for f in self.stage.inputs if f.inout and f.name in self.placed_inputs]

    def changed_inputs(self) -> list[str]:
        """Inputs (other than in-place ones' views) whose bytes or values changed in the call."""
        changed = []
        inout = set(self.inout_names())
        for name, placed in self.placed_inputs.items():
            after = placed.base_numpy()
            if name in inout:  # only the gaps must hold; the view is compared as an output
                mask = ~placed.layout.view_mask(self.example.inputs[name].shape)
                if not np.array_equal(after[mask].view(np.uint8), self.input_bytes[name][mask].view(np.uint8)):
                    changed.append(name)
            elif after.tobytes() != self.input_bytes[name].tobytes():
                changed.append(name)
        for name, before in self.other_inputs.items():
            if not same_value(before, self.kwargs[name]):
                changed.append(name)
        return changed

    def output_bases(self) -> dict[str, np.ndarray]:
        """Every output's base (and every in-place input's base) as NumPy, after the call."""
        found = {n: p.base_numpy() for n, p in self.placed_outputs.items()}
        for name in self.inout_names():
            found[name] = self.placed_inputs[name].base_numpy()
        return found

    def output_views(self) -> dict[str, np.ndarray]:
        """Every output's view as NumPy, after the call (for invariants)."""
        views = {}
        for name, base in self.output_bases().items():
            placed = self.placed_outputs.get(name) or self.placed_inputs[name]
            shape = tuple(placed.view.shape)
            views[name] = base[placed.layout.view_index(shape)]
        return views

    def placed(self, name: str) -> Placed:
        return self.placed_outputs.get(name) or self.placed_inputs[name]


def same_value(a: Any, b: Any) -> bool:
    """Exact equality of host values, container types and dtypes included."""
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    if type(a).__module__.startswith("torch"):  # by bytes, so a NaN equals itself
        import torch

        return (a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
                and (a.numel() == 0 or torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    return a == b

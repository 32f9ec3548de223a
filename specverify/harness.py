"""Checking one implementation on one example against the oracle.

`verify` raises `Failure` with a full report when the implementation breaks the contract: a differing
byte in an output, a write outside the defined region, a changed input, an invalid input accepted, a
hazard invariant broken, or a crash.
"""
from __future__ import annotations

import io
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from specverify.compare import compare_buffer, element_bytes_differ
from specverify.materialize import POISON_A, POISON_B, Call, filled, same_value
from specverify.stage import Example, Stage


@dataclass(frozen=True)
class Target:
    """One implementation of one stage on one device."""
    stage: Stage
    backend: str            # "oracle", "numpy", "torch", "triton" or "impl"
    device: str             # "cpu" or "cuda"
    impl: Callable[..., Any]
    source: str             # "module:function" it was loaded from

    @property
    def lib(self) -> str:
        """How tensor arguments are handed over: NumPy arrays or torch tensors."""
        return "numpy" if self.backend in ("oracle", "numpy") else "torch"

    @property
    def label(self) -> str:
        return f"{self.stage.name} on {self.backend}/{self.device}"


class Failure(AssertionError):
    """An implementation broke the stage's contract on one example."""

    def __init__(self, headline: str, detail: str = ""):
        super().__init__(headline)
        self.headline, self.detail = headline, detail


class OracleError(Exception):
    """The oracle itself rejected an example its own strategy drew as valid: a bug in one of them."""


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


def crash(target: Target, exc: BaseException) -> Failure:
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return Failure(f"{target.label} raised {error_text(exc)}", "".join(frames[-6:]))


def synchronize(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def run_oracle(stage: Stage, example: Example, fill: int) -> tuple[Call, Any]:
    call = Call(stage, example, "numpy", "cpu", fill)
    try:
        result = stage.oracle(**call.kwargs)
    except Exception as exc:
        raise OracleError(f"the oracle of {stage.name} rejected a {example.tier}-tier example: "
                          f"{error_text(exc)}") from exc
    return call, result


def expected_buffers(stage: Stage, example: Example) -> tuple[dict, dict, dict]:
    """The oracle's output bases under poison A, which elements it defines, and the bases before the call."""
    call_a, _ = run_oracle(stage, example, POISON_A)
    call_b, _ = run_oracle(stage, example, POISON_B)
    bases_a, bases_b = call_a.output_bases(), call_b.output_bases()
    defined, before = {}, {}
    for name, base in bases_a.items():
        if name in example.outputs:
            defined[name] = ~element_bytes_differ(base, bases_b[name])
            before[name] = filled(base.shape, base.dtype, POISON_A)
        else:  # an in-place input: its whole view is defined, its gaps must keep their guard bytes
            defined[name] = call_a.placed(name).layout.view_mask(example.inputs[name].shape)
            before[name] = call_a.input_bytes[name]
    return bases_a, defined, before


def verify(target: Target, example: Example) -> None:
    """Run `target` on `example`; raise Failure if it breaks the contract."""
    if example.tier == "invalid":
        verify_rejects(target, example)
    elif target.stage.host:
        verify_host(target, example)
    else:
        verify_buffers(target, example)


def call_target(target: Target, call: Call) -> Any:
    try:
        result = target.impl(**call.kwargs)
        synchronize(target.device)
    except Exception as exc:
        raise crash(target, exc) from exc
    return result


def verify_buffers(target: Target, example: Example) -> None:
    stage = target.stage
    expected, defined, before = expected_buffers(stage, example)
    call = Call(stage, example, target.lib, target.device)
    call_target(target, call)
    changed = call.changed_inputs()
    if changed:
        raise Failure(f"{target.label} changed its input(s) {', '.join(changed)}")
    actual = call.output_bases()
    if example.tier == "hazard":
        broken = stage.invariants(example, call.output_views()) if stage.invariants else []
        if broken:
            raise Failure(f"{target.label}, hazard tier: " + "; ".join(broken))
        return
    lines = []
    for name in actual:
        placed = call.placed(name)
        diff = compare_buffer(name, expected[name], actual[name], defined[name], before[name],
                              placed.layout, tuple(placed.view.shape))
        if diff is not None:
            lines.append(diff.line())
    if lines:
        raise Failure(f"{target.label}: {lines[0]}", "\n".join(lines[1:]))


def verify_host(target: Target, example: Example) -> None:
    stage = target.stage
    _, expected = run_oracle(stage, example, POISON_A)
    call = Call(stage, example, target.lib, target.device)
    actual = call_target(target, call)
    changed = call.changed_inputs()
    if changed:
        raise Failure(f"{target.label} changed its input(s) {', '.join(changed)}")
    where = first_value_difference(expected, actual, "result")
    if where:
        raise Failure(f"{target.label}: {where}")


def first_value_difference(expected: Any, actual: Any, path: str) -> str | None:
    """Where two host values first differ, types included (None when equal)."""
    if type(expected) is not type(actual):
        return f"{path}: expected a {type(expected).__name__} ({expected!r:.60}), got a {type(actual).__name__} ({actual!r:.60})"
    if isinstance(expected, (list, tuple)):
        for i, (e, a) in enumerate(zip(expected, actual)):
            found = first_value_difference(e, a, f"{path}[{i}]")
            if found:
                return found
        if len(expected) != len(actual):
            return f"{path}: expected length {len(expected)}, got {len(actual)}"
        return None
    if isinstance(expected, dict):
        if expected.keys() != actual.keys():
            return f"{path}: expected keys {sorted(expected)}, got {sorted(actual)}"
        for k in expected:
            found = first_value_difference(expected[k], actual[k], f"{path}[{k!r}]")
            if found:
                return found
        return None
    if not same_value(expected, actual):
        return f"{path}: expected {expected!r}, got {actual!r}"
    return None


def verify_rejects(target: Target, example: Example) -> None:
    """An invalid-tier example must be refused with ValueError or TypeError naming the broken field."""
    from specverify.kernels.checks import checked_mode

    call = Call(target.stage, example, target.lib, target.device)
    field, rule = example.bad_field, example.rule
    try:
        with checked_mode():
            target.impl(**call.kwargs)
            synchronize(target.device)
    except (ValueError, TypeError) as exc:
        if field in str(exc):
            return
        raise Failure(f"{target.label} refused invalid input ({field}: {rule}) without naming "
                      f"{field!r}: {error_text(exc)}") from exc
    except Exception as exc:
        raise Failure(f"{target.label} crashed on invalid input ({field}: {rule}) instead of a clear "
                      f"ValueError or TypeError: {error_text(exc)}") from exc
    raise Failure(f"{target.label} accepted invalid input: {field}: {rule}")


def inputs_table(stage: Stage, example: Example, width: int = 110) -> str:
    """The semantic inputs as a small table (the stage's row view, or one line per field)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    if stage.rows is not None:
        headers, rows = stage.rows(example)
    else:
        headers = ["field", "value"]
        rows = [[k, describe_value(v)] for k, v in example.inputs.items()]
    table = Table(*headers, box=None, pad_edge=False, show_edge=False)
    limit = 12
    for row in rows[:limit]:
        table.add_row(*[Text(str(x)) for x in row])   # Text: "[0.5]" is a value, not rich markup
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, soft_wrap=False).print(table)
    more = f"  ... {len(rows) - limit} more rows\n" if len(rows) > limit else ""
    return out.getvalue() + more


def describe_value(value: Any, limit: int = 16) -> str:
    if isinstance(value, np.ndarray):
        flat = value.reshape(-1)[:limit].tolist()
        tail = " ..." if value.size > limit else ""
        return f"{value.dtype}{list(value.shape)} {flat}{tail}"
    return repr(value)

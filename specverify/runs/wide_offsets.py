"""`wide-offsets`: views whose element offsets pass 2**31, handed to a CUDA target (a registered check).

An engine's kernel that forms an element offset in 32 bits (a row index times a stride in int32) reads and
writes the right elements in every small test and the wrong ones once a tensor spans more than 2**31
elements. This check makes that happen without 2**31 elements of data: for each drawn example of the
valid tier, each tensor field the contract lets arrive strided (within the target's declared layouts:
none for `contiguous`, the rows axis for `rows`), and each axis of it with three or more steps, the
same call is made with that one field laid out wide (`materialize.wide_strides`: its steps along the
axis W < 2**31 elements apart, so the last one lies past 2**31; the other axes dense inside a step) and
judged as the valid tier judges. A wide storage is up to 3 * 2**30 elements (24 GiB for 8-byte ones):
one is on the device at a time on this machine (a lock every process takes), and the check is asked
only of devices with MIN_MEMORY or more. A storage that still does not fit (other processes hold the memory)
is the suite's limit: the check breaks with that reason, and the implementation is not called.
"""
from __future__ import annotations

import tempfile
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Iterator

from specverify import env
from specverify.files import cases
from specverify.judge import materialize
from specverify.judge.calls import SUITE_ERRORS
from specverify.judge.harness import clock, expect, judge
from specverify.records.backends import Target
from specverify.records.stage import Example
from specverify.runs.properties import on_cuda
from specverify.runs.protocol import Check, Context, Outcome
from specverify.runs.search import search

MIN_MEMORY = 40 << 30      # bytes of device memory the check needs (one wide storage and the rest)
LOCK = Path(tempfile.gettempdir()) / "specverify-wide-offsets"     # the folder whose lock `one_at_a_time` holds


def strided_fields(target: Target) -> list[str]:
    """The tensor fields that may arrive wide: strided in the contract, not narrowed to contiguous."""
    fields = [*target.stage.inputs, *target.stage.outputs]
    return [f.name for f in fields if f.strided and f.shape and layout_class(target, f.name) != "contiguous"]


def layout_class(target: Target, name: str) -> str:
    declared = target.domain.of("layout", name) if target.domain is not None else None
    return str(declared) if declared is not None else "any"


def applies(target: Target) -> str | None:
    reason = on_cuda(target)
    if reason is not None:
        return reason
    if not strided_fields(target):
        return "no field may arrive strided: its offsets stay within its own size"
    memory = device_memory()
    if memory < MIN_MEMORY:
        here = f"{memory / 2**30:.0f} GiB here" if memory else "no CUDA device here"
        return f"needs a CUDA device of {MIN_MEMORY >> 30} GiB or more ({here})"
    return None


@lru_cache(maxsize=None)
def device_memory() -> int:
    """Bytes of memory of the current CUDA device (0 without one)."""
    if not env.cuda_available():
        return 0
    import torch

    return torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory


def wide_calls(target: Target, plan: materialize.Plan) -> list[tuple[str, int, tuple[int, ...]]]:
    """(field, axis, the wide view's strides) of every wide call of one example, in field order."""
    found = []
    for name in strided_fields(target):
        slot = plan.slots.get(name)
        if slot is None:
            continue
        rows = layout_class(target, name) == "rows"    # unit column step: the rows axis of a matrix only
        axes = (0,) * (len(slot.shape) > 1) if rows else range(len(slot.shape))
        strides = slot.layout.strides(slot.shape)
        for axis in axes:
            wide = materialize.wide_strides(slot.shape, strides, axis)
            if wide is not None:
                found.append((name, axis, wide[0]))
    return found


@contextmanager
def one_at_a_time() -> Iterator[None]:
    """Hold this machine's wide-offsets lock: one wide storage on the devices at a time, whatever the
    process (pytest -n 8 runs eight)."""
    with cases.locked(LOCK):
        yield


def verify_wide(target: Target, example: Example, ctx: Context) -> dict:
    plan, _ = materialize.plan(target.stage, example)
    calls = wide_calls(target, plan)
    expected = expect(target.stage, example) if calls else None
    for name, axis, strides in calls:
        plan, arena = materialize.plan(target.stage, example)
        plan.slots[name] = replace(plan.slots[name], wide=strides)
        with clock("call"), one_at_a_time():
            result = ctx.caller.call(plan, arena)
        if result.error is not None and result.error.kind in SUITE_ERRORS:
            raise RuntimeError(f"{result.error.text}: the wide-offsets check needs that much free device memory")
        failure = judge(target.stage, example, expected, result,
                        f"{target.label} (`{name}` laid out with its axis {axis} steps {strides[axis]} elements "
                        f"apart, the last past {materialize.WIDE_PAST})")
        if failure is not None:
            raise failure
    return {"wide calls": len(calls)}


def planned(target: Target, profile, examples: int | None) -> int:
    """A quarter of the valid tier's examples (at least 3): an offset goes wrong only past the middle of the
    wide axis, and shows only where the elements there decide an output."""
    return max(3, profile.count("valid", examples) // 4)


def run(target: Target, ctx: Context) -> Outcome:
    return search(target, "wide-offsets", "valid", planned(target, ctx.profile, ctx.examples), verify_wide, ctx)


WIDE_OFFSETS = Check("wide-offsets", "the valid tier's bytes with one strided field's offsets past 2**31 elements",
                     38, applies, run, planned)

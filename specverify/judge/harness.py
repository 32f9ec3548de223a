"""The verdict on one call of an implementation, computed from the bytes it left behind.

`verify` runs the oracle here, has a caller (in process or isolated) run the implementation on the same
planned arena, and raises `Failure` with the first broken promise: an error, exit, crash or time-out; a
write into a guard, a gap or an input; an output byte that differs from the oracle's; a hazard invariant; an
invalid input accepted or refused without naming its field; an output that depends on bytes outside the
inputs (an out-of-bounds read, found by running again with another guard pattern).
"""
from __future__ import annotations

import re
import time
from collections import Counter
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from specverify.judge import materialize, stage_memo
from specverify.judge.calls import SUITE_ERRORS, Result, invoke
from specverify.judge.compare import compare_output, compare_untouched, element_bytes_differ, input_difference
from specverify.judge.failure_report import first_value_difference
from specverify.judge.materialize import Plan, as_container, same_value
from specverify.records.stage import Example, Stage
from specverify.records.values import GUARD_B, GUARD_BYTES, POISON_A, POISON_B

# Seconds spent per phase of a verdict ("oracle", "call", "judge", "guard": the second guard pattern's
# calls), added up while a search sets a Counter here (the outcome's `timing`).
spent: ContextVar[Counter | None] = ContextVar("spent", default=None)


@contextmanager
def clock(phase: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        total = spent.get()
        if total is not None:
            total[phase] += time.perf_counter() - started


class Failure(AssertionError):
    """An implementation broke the stage's contract on one example. `at`: the first output element it got
    wrong (field, index in the view), where known: the failure report shows the inputs that decide it."""

    def __init__(self, headline: str, detail: str = "", kind: str = "wrong",
                 at: tuple[str, tuple[int, ...]] | None = None):
        super().__init__(headline)
        self.headline, self.detail, self.kind, self.at = headline, detail, kind, at


ELEMENT = re.compile(r"^(\w+)\[(\d+(?:, *\d+)*)\]")   # "output_token_ids[2, 0]..." at the start of a message


def element_named(message: str, outputs: list[str]) -> tuple[str, tuple[int, ...]] | None:
    """The output element a hazard invariant's message starts with ("output_token_ids[2]: ..."), if any."""
    found = ELEMENT.match(message)
    if found is None or found.group(1) not in outputs:
        return None
    return found.group(1), tuple(int(i) for i in found.group(2).split(","))


class OracleError(Exception):
    """The oracle itself rejected an example its own strategy drew as valid: a bug in one of them."""


@dataclass
class Expected:
    """What the oracle does with one example."""
    plan: Plan
    before: np.ndarray                  # the arena before any call (poison A)
    after: np.ndarray                   # the arena after the oracle's call
    defined: dict[str, np.ndarray]      # per output (and in-place input) slot: the base elements it writes
    returned: Any


def run_oracle(stage: Stage, example: Example, poison: int,
               planned: tuple[Plan, np.ndarray] | None = None) -> tuple[Plan, np.ndarray, np.ndarray, Any]:
    """(plan, arena before, arena after, returned value) of the oracle's call (on `planned`: the plan and
    arena `materialize.plan` made with this poison, when the caller has them)."""
    plan, arena = planned or materialize.plan(stage, example, poison)
    before = arena.copy()
    returned, error, _, _ = invoke(stage.oracle, plan, arena, "numpy", "cpu", False, None)
    if error is not None:
        raise OracleError(f"the oracle of {stage.name} rejected a {example.tier}-tier example: {error.text}")
    return plan, before, arena, returned


def expect(stage: Stage, example: Example) -> Expected:
    """The oracle's answer on `example` (one computed earlier in this stage's scope: `stage_memo`)."""
    with clock("oracle"):
        memo = stage_memo.current.get()
        if memo is None:
            return _expect(stage, example)
        planned = materialize.plan(stage, example, POISON_A)
        key = memo.key(stage, *planned)
        found = memo.find(key, *planned)
        if found is None:
            found = _expect(stage, example, planned)
            memo.keep(key, found)
        return found


def _expect(stage: Stage, example: Example, planned: tuple[Plan, np.ndarray] | None = None) -> Expected:
    plan, before, after, returned = run_oracle(stage, example, POISON_A, planned)
    defined = {}
    outputs = [s for s in plan.slots.values() if s.role != "input"]
    if outputs:
        _, _, after_b, _ = run_oracle(stage, example, POISON_B)
        for slot in outputs:
            if slot.role == "inout":   # its whole view is defined; its gaps must keep their guard bytes
                defined[slot.name] = slot.layout.view_mask(slot.shape)
            else:
                defined[slot.name] = ~element_bytes_differ(slot.split(after)[1], slot.split(after_b)[1])
    return Expected(plan, before, after, defined, returned)


def output_views(plan: Plan, arena: np.ndarray) -> dict[str, np.ndarray]:
    """Every output's (and in-place input's) view after a call, as NumPy."""
    return {name: slot.view_of(slot.split(arena)[1]) for name, slot in plan.slots.items() if slot.role != "input"}


def changed_inputs(plan: Plan, before: np.ndarray, result: Result) -> list[str]:
    found = []
    for slot in plan.slots.values():
        if slot.role != "output":
            problem = input_difference(slot, before, result.arena)
            if problem:
                found.append(problem)
    originals = {**plan.values, **{k: as_container(v, c) for k, (c, v) in plan.containers.items()}}
    for name, value in originals.items():
        if name not in result.values or not same_value(value, result.values[name]):
            found.append(f"changed its input `{name}`")
    return found


def hazard_writable(slot, defined: np.ndarray) -> np.ndarray:
    """Hazard tier: where an implementation may write. The oracle's emitted region may legitimately
    differ on pathological inputs, so any element of a view row (first axis) the oracle writes to; never a
    gap, never a row the oracle leaves alone."""
    in_view = slot.layout.view_mask(slot.shape)
    if slot.role == "inout":
        return in_view
    if len(slot.shape) < 2:
        return defined & in_view
    rows = slot.view_of(defined).reshape(slot.shape[0], int(np.prod(slot.shape[1:]))).any(axis=1)
    writable = np.zeros(slot.base_shape, bool)
    view = slot.view_of(writable)
    view[rows] = True
    return writable


def own_writable(stage: Stage, example: Example, slot, defined: np.ndarray) -> np.ndarray:
    """Random numbers of its own: where some draw may write. The hazard tier's rows; a flat output the record lays
    out request by request (`Randomness.flat`: output -> an input whose length is B), every slot of a request it
    writes (its whole view where it is not contiguous)."""
    source = stage.randomness.flat.get(slot.name) if stage.randomness is not None else None
    if source is None:
        return hazard_writable(slot, defined)
    batch = len(example.inputs[source])
    if tuple(slot.base_shape) != tuple(slot.shape) or not batch or defined.size % batch:
        return slot.layout.view_mask(slot.shape)
    rows = defined.reshape(batch, -1).any(axis=1)
    return np.repeat(rows, defined.size // batch).reshape(defined.shape)


def judge(stage: Stage, example: Example, expected: Expected, result: Result, label: str) -> Failure | None:
    """The first broken promise of one call, or None."""
    with clock("judge"):
        return _judge(stage, example, expected, result, label)


def _judge(stage: Stage, example: Example, expected: Expected, result: Result, label: str) -> Failure | None:
    if result.error is not None:
        return Failure(f"{label} {result.error.headline()}", result.error.trace, result.error.kind)
    changed = changed_inputs(expected.plan, expected.before, result)
    if changed:
        return Failure(f"{label} {changed[0]}", "\n".join(changed[1:]))
    if stage.host:
        where = first_value_difference(expected.returned, result.returned, "result")
        return Failure(f"{label}: {where}") if where else None
    plan, lines, at = expected.plan, [], None
    outputs = [s for s in plan.slots.values() if s.role != "input"]
    if example.tier == "hazard" or stage.own_randomness:   # own random numbers: only what no draw decides
        broken = stage.invariants(example, output_views(plan, result.arena)) \
            if stage.invariants and not stage.own_randomness else []
        if broken:
            return Failure(f"{label}, hazard tier: " + "; ".join(broken),
                           at=element_named(broken[0], [s.name for s in outputs]))
        for slot in outputs:
            writable = own_writable(stage, example, slot, expected.defined[slot.name]) if stage.own_randomness \
                else hazard_writable(slot, expected.defined[slot.name])
            diff = compare_untouched(slot, result.arena, writable, expected.before)
            if diff is not None:
                lines.append(diff.line())
                at = at or ((slot.name, diff.index) if diff.index is not None else None)
    else:
        for slot in outputs:
            diff = compare_output(slot, expected.after, result.arena, expected.defined[slot.name], expected.before)
            if diff is not None:
                lines.append(diff.line())
                at = at or ((slot.name, diff.index) if diff.index is not None else None)
    if not lines:
        return None
    if result.returned is not None:
        lines.append(f"hint: it returned a {type(result.returned).__name__} instead of None: a buffer stage "
                     "writes its outputs into the buffers it is given (destination passing)")
    return Failure(f"{label}: {lines[0]}", "\n".join(lines[1:]), at=at)


def guard_bytes(plan: Plan, names: list[str]) -> np.ndarray:
    """Per arena byte: is it a guard or gap byte of one of the named input slots?"""
    mask = np.zeros(plan.size, bool)
    for name in names:
        slot = plan.slots[name]
        mask[slot.offset:slot.offset + GUARD_BYTES] = True
        mask[slot.end - GUARD_BYTES:slot.end] = True
        gaps = ~slot.layout.view_mask(slot.shape)
        start = slot.offset + GUARD_BYTES
        mask[start:start + slot.base_bytes] = np.repeat(gaps.reshape(-1), slot.itemsize)
    return mask


def out_of_bounds_read(stage: Stage, example: Example, caller, expected: Expected, first: Result,
                       label: str) -> Failure | None:
    """Run again with the inputs' guard and gap bytes changed: outputs that change, or a call that now fails
    (raises, dies, hangs), read outside an input. The input is named by changing one input's guards at a time."""
    inputs = [n for n, s in expected.plan.slots.items() if s.role != "output"]
    outputs = [s for s in expected.plan.slots.values() if s.role != "input"]
    if not inputs or not outputs:
        return None

    def written(arena: np.ndarray) -> list[bytes]:
        """Each output's bytes (an in-place input: its view only; its guards hold the guard pattern)."""
        return [(s.view_of(s.split(arena)[1]).tobytes() if s.role == "inout" else arena[s.offset:s.end].tobytes())
                for s in outputs]

    def outputs_with(names: list[str]) -> list[bytes] | str | None:
        """The outputs' bytes; the call's error in words where it failed; None where the suite could not call."""
        arena = expected.before.copy()
        arena[guard_bytes(expected.plan, names)] = GUARD_B
        result = caller.call(expected.plan, arena)
        if result.error is not None:
            return None if result.error.kind in SUITE_ERRORS else result.error.headline()
        return None if result.arena is None else written(result.arena)

    reference = written(first.arena)
    changed = outputs_with(inputs)
    if changed is None or changed == reference:
        return None
    again = outputs_with([])
    if again is None:
        return None
    if again != reference:
        how = f"failed the second time ({again})" if isinstance(again, str) else "gave different output bytes"
        return Failure(f"{label} is nondeterministic: the same call {how}", kind="wrong")
    culprits = [n for n in inputs if outputs_with([n]) not in (reference, None)] if len(inputs) > 1 else inputs
    named = ", ".join(f"`{n}`" for n in culprits) or "two or more inputs together"
    if isinstance(changed, str):
        what = f"the call failed ({changed})"
    else:
        what = ", ".join(s.name for s, a, b in zip(outputs, reference, changed) if a != b) + " changed"
    return Failure(f"{label} read outside input {named}: {what} when the bytes around the input's view changed "
                   f"(past its end, before its start or in its gaps)", kind="oob-read")


def verify(stage: Stage, example: Example, caller, label: str, guard_check: bool = False) -> None:
    """Run one example through `caller`; raise Failure if the implementation breaks the contract."""
    if example.tier == "invalid":
        verify_refusal(stage, example, caller, label)
        return
    expected = expect(stage, example)
    with clock("call"):
        plan, arena = materialize.plan(stage, example)
        result = caller.call(plan, arena)
    failure = judge(stage, example, expected, result, label)
    if result.error is None and result.arena is not None and (failure is not None or guard_check) \
            and not stage.own_randomness:     # its outputs change from call to call by design
        with clock("guard"):
            failure = out_of_bounds_read(stage, example, caller, expected, result, label) or failure
    if failure is not None:
        raise failure


def verify_refusal(stage: Stage, example: Example, caller, label: str) -> None:
    """An invalid-tier example must be refused with ValueError or TypeError naming the broken field."""
    with clock("call"):
        plan, arena = materialize.plan(stage, example)
        result = caller.call(plan, arena, checked=True)
    field, rule = example.bad_field, example.rule
    error = result.error
    if error is None:
        raise Failure(f"{label} accepted invalid input: {field}: {rule}")
    if error.kind == "raised" and ("ValueError" in error.types or "TypeError" in error.types):
        if field in error.text:
            return
        raise Failure(f"{label} refused invalid input ({field}: {rule}) without naming {field!r}: {error.text}")
    raise Failure(f"{label} crashed on invalid input ({field}: {rule}) instead of a clear ValueError or "
                  f"TypeError: {error.headline()}", error.trace, error.kind)


def oracle_outputs(stage: Stage, example: Example) -> Any:
    """What the oracle gives on a valid example: its output views (a host stage: its returned value)."""
    plan, _, after, returned = run_oracle(stage, example, POISON_A)
    return returned if stage.host else output_views(plan, after)

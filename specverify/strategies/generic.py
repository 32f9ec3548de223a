"""The invalid tier of every stage: its hand-written value rules, and the generic rules generated from
its record.

A record's fields say which dtypes each field allows, its shape in symbols ("B, S+1"), whether it may
be None; that is enough to break a valid example in ways every implementation must refuse with an
error naming the field:
- dtype: an array of a dtype outside the allowed set; for a Python scalar the wrong type (a float or a
  bool for an int); for a list of ints a float in it;
- rank: an array with an extra (trailing) axis;
- length: one more element on an axis whose size is bound elsewhere: a symbol another field passed to
  the call also uses (or an int argument of that name), a literal, or a derived expression ("S+1",
  "B*S"). A bare symbol only one field uses is free: any length is valid there;
- None: an input that is not optional.
Output buffers are fields too. A host stage's argument handed over in a container is changed only
where the container keeps the change (a list holds Python ints whatever the integer dtype).

When two fields disagree on a bound size, the error may be raised while checking the other one: its
message must then name the field the size was taken from (the checks in `oracles/arguments.py` say
"(B = len(cu_num_draft_tokens))").
"""
from __future__ import annotations

import keyword
import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from specverify.records.stage import Buffer, DrawContext, Example, Field, Layout, Stage
from specverify.strategies.blocks import label, rule_asked

# dtypes tried outside a field's allowed set, nearest misses first
ARRAY_DTYPES = ("int64", "int32", "int16", "uint8", "float32", "float64", "bool")
SYMBOL = re.compile(r"[A-Za-z_][A-Za-z_0-9']*")


def axes(shape: str) -> tuple[str, ...]:
    """The axis expressions of a record shape: "B, S+1" -> ("B", "S+1"); "" (a scalar) -> ().
    Commas inside parentheses do not split."""
    found, depth, start = [], 0, 0
    for i, ch in enumerate(shape):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            found.append(shape[start:i].strip())
            start = i + 1
    last = shape[start:].strip()
    return tuple(found + [last]) if found or last else ()


def symbols(axis: str) -> set[str]:
    """The size symbols an axis expression uses (not keywords, not function names)."""
    return {m.group() for m in SYMBOL.finditer(axis)
            if not keyword.iskeyword(m.group()) and not axis[m.end():].lstrip().startswith("(")}


def is_bare(axis: str) -> bool:
    return SYMBOL.fullmatch(axis) is not None


def allowed_dtypes(field: Field) -> tuple[str, ...]:
    return tuple(field.dtype.split("|"))


def dtype_allowed(dtype: np.dtype, field: Field) -> bool:
    """Whether an array dtype is in a field's allowed set ("int" allows every integer dtype)."""
    allowed = allowed_dtypes(field)
    return dtype.name in allowed or ("int" in allowed and dtype.kind in "iu")


def is_scalar(field: Field) -> bool:
    return axes(field.shape) == ()


@dataclass(frozen=True)
class Corruption:
    """One generic rule of one field, with the variants it can be broken in (built on demand)."""
    field: str
    kind: str                                   # "dtype", "rank", "length" or "None"
    options: tuple[Any, ...]
    build: Callable[[Any], Example]


def present(stage: Stage, ex: Example) -> list[Field]:
    """The fields handed over as arrays, lists or buffers in this example."""
    fields = [f for f in stage.inputs if not is_scalar(f) and ex.inputs.get(f.name) is not None]
    return fields + [f for f in stage.outputs if f.name in ex.outputs]


def shape_of(ex: Example, name: str) -> tuple[int, ...]:
    value = ex.outputs[name] if name in ex.outputs else ex.inputs[name]
    return tuple(value.shape) if hasattr(value, "shape") else (len(value),)


def bound_axes(stage: Stage, ex: Example, field: Field) -> list[int]:
    """The axes of `field` whose size is fixed by something else in the example (see the module doc).
    A symbol other fields use only inside expressions is bound when one more of it changes one of
    them (with B = 0, "B*S" does not move with S)."""
    fields = present(stage, ex)
    scalars = {f.name for f in stage.inputs if is_scalar(f)}
    bare_users = Counter(a for f in fields for a in set(axes(f.shape)) if is_bare(a))
    derived = [a for f in fields for a in axes(f.shape) if not is_bare(a)]
    known = {f.name: ex.inputs[f.name] for f in stage.inputs if f.name in scalars
             and isinstance(ex.inputs.get(f.name), (int, np.integer)) and not isinstance(ex.inputs[f.name], bool)}
    for f in fields:
        for a, n in zip(axes(f.shape), shape_of(ex, f.name)):
            if is_bare(a):
                known.setdefault(a, n)

    def bound(a: str) -> bool:
        if not is_bare(a) or bare_users[a] >= 2 or a in scalars:
            return True
        return any(a in symbols(d) and moves(d, a, known) for d in derived)

    return [i for i, a in enumerate(axes(field.shape)) if bound(a)]


def moves(expression: str, symbol: str, known: dict[str, int]) -> bool:
    """Whether an axis expression changes when `symbol` grows by one (True when it cannot be evaluated)."""
    try:
        before = eval(expression, {"__builtins__": {}}, dict(known))  # noqa: S307 (record shape strings)
        after = eval(expression, {"__builtins__": {}}, {**known, symbol: known[symbol] + 1})  # noqa: S307
    except Exception:  # noqa: BLE001 (an unknown symbol, a function, an unusual expression)
        return True
    return before != after


def corruptions(stage: Stage, ex: Example) -> list[Corruption]:
    """Every generic rule a valid example of `stage` can be made to break."""
    found = []
    for f in stage.inputs:
        value = ex.inputs.get(f.name)
        if value is None:
            continue
        if not f.optional:
            found.append(Corruption(f.name, "None", (None,), lambda _, n=f.name: with_input(ex, n, None, "required")))
        container = ex.containers.get(f.name) if stage.host else None
        if isinstance(value, np.ndarray):
            found += array_corruptions(stage, ex, f, value, container)
        elif isinstance(value, list):
            found += list_corruptions(stage, ex, f, value)
        else:
            wrong = wrong_scalars(value, f)
            if wrong:
                found.append(Corruption(f.name, "dtype", tuple(wrong), lambda v, n=f.name, d=f.dtype: with_input(
                    ex, n, v, f"a Python {d} ({type(v).__name__} given)")))
    for f in stage.outputs:
        if f.name in ex.outputs:
            found += buffer_corruptions(stage, ex, f, ex.outputs[f.name])
    return found


def array_corruptions(stage, ex, f: Field, value: np.ndarray, container: str | None) -> list[Corruption]:
    """dtype, rank and length rules of an array input (host containers: only what the container keeps)."""
    found = []
    if container == "list" and not value.size:   # an empty list is the same whatever its dtype or rank
        return found + length_corruption(stage, ex, f, value)
    kind = value.dtype.kind
    dtypes = tuple(d for d in ARRAY_DTYPES if not dtype_allowed(np.dtype(d), f)
                   and (container != "list" or np.dtype(d).kind not in {"i": "iu", "u": "iu"}.get(kind, kind)))
    if dtypes:
        found.append(Corruption(f.name, "dtype", dtypes, lambda d: with_input(
            ex, f.name, value.astype(d), f"dtype {f.dtype} ({d} given)")))
    found.append(Corruption(f.name, "rank", (value.ndim + 1,), lambda _: with_input(
        ex, f.name, value[..., None], f"rank {value.ndim} (an extra axis given)", extra_axis=True)))
    return found + length_corruption(stage, ex, f, value)


def length_corruption(stage, ex, f: Field, value: np.ndarray) -> list[Corruption]:
    axes_bound = bound_axes(stage, ex, f)
    if not axes_bound:
        return []
    return [Corruption(f.name, "length", tuple(axes_bound), lambda i: with_input(
        ex, f.name, lengthened(value, i), f"axis {i} of [{f.shape}]: one element too many"))]


def list_corruptions(stage, ex, f: Field, value: list) -> list[Corruption]:
    """A list of Python ints: a float in it, a nested list, one element too many."""
    if not value:
        return []
    found = [Corruption(f.name, "dtype", (float(value[0]),), lambda v: with_input(
                 ex, f.name, [v, *value[1:]], f"Python {f.dtype}s (a float given)")),
             Corruption(f.name, "rank", ([[v] for v in value],), lambda v: with_input(
                 ex, f.name, v, "a flat list (a nested list given)"))]
    if bound_axes(stage, ex, f):
        found.append(Corruption(f.name, "length", (value + value[-1:],), lambda v: with_input(
            ex, f.name, v, f"length [{f.shape}] (one element too many)")))
    return found


def buffer_corruptions(stage, ex, f: Field, buf: Buffer) -> list[Corruption]:
    found = []
    dtypes = tuple(d for d in ARRAY_DTYPES if not dtype_allowed(np.dtype(d), f))
    if dtypes:
        found.append(Corruption(f.name, "dtype", dtypes, lambda d: with_output(
            ex, f.name, replace(buf, dtype=d), f"dtype {f.dtype} ({d} given)")))
    layout = extended(buf.layout)
    found.append(Corruption(f.name, "rank", (len(buf.shape) + 1,), lambda _: with_output(
        ex, f.name, Buffer(buf.shape + (1,), buf.dtype, layout), f"rank {len(buf.shape)} (an extra axis given)")))
    axes_bound = bound_axes(stage, ex, f)
    if axes_bound:
        found.append(Corruption(f.name, "length", tuple(axes_bound), lambda i: with_output(
            ex, f.name, replace(buf, shape=tuple(n + (j == i) for j, n in enumerate(buf.shape))),
            f"axis {i} of [{f.shape}]: one element too many")))
    return found


def wrong_scalars(value: Any, f: Field) -> list[Any]:
    """Values of the wrong Python type for a scalar field: a float or a bool for an int, an int for a
    bool or a string, a bool or a string for a number."""
    allowed = allowed_dtypes(f)
    if "str" in allowed:
        return [len(value)]
    if "bool" in allowed:
        return [int(value)]
    if "float" in allowed:
        return [bool(value), str(value)]
    if "int" in allowed:
        return [float(value), bool(value)]
    return []


def lengthened(value: np.ndarray, axis: int) -> np.ndarray:
    """`value` with one more element on `axis`: a copy of the last one (keeps offsets in order), or 0."""
    tail = np.take(value, [-1], axis=axis) if value.shape[axis] else np.zeros(
        tuple(1 if j == axis else n for j, n in enumerate(value.shape)), value.dtype)
    return np.concatenate([value, tail], axis=axis)


def extended(layout: Layout | None) -> Layout | None:
    """A layout for one more (trailing) axis."""
    return None if layout is None else Layout(layout.step + (1,), layout.pad + (0,))


def with_input(ex: Example, name: str, value: Any, rule: str, extra_axis: bool = False) -> Example:
    layouts = dict(ex.layouts)
    if not isinstance(value, np.ndarray):
        layouts.pop(name, None)
    elif extra_axis and name in layouts:
        layouts[name] = extended(layouts[name])
    return replace(ex, tier="invalid", bad_field=name, rule=rule, inputs={**ex.inputs, name: value},
                   layouts=layouts)


def with_output(ex: Example, name: str, buf: Buffer, rule: str) -> Example:
    return replace(ex, tier="invalid", bad_field=name, rule=rule, outputs={**ex.outputs, name: buf})


@st.composite
def record_invalid(draw, stage: Stage, ctx: DrawContext) -> Example:
    """A valid example with one generic rule of one field broken, labelled with the rule."""
    found = corruptions(stage, draw(stage.valid(ctx)))
    assume(found)
    chosen = draw(st.sampled_from(found))
    example = chosen.build(draw(st.sampled_from(chosen.options)))
    label(f"invalid (record): {chosen.field}: {chosen.kind}")
    return example


def invalid_tier(stage: Stage, ctx: DrawContext) -> st.SearchStrategy[Example] | None:
    """The whole invalid tier of a stage: its hand-written value rules and the generated generic ones (the
    value rules alone where a search asks one of them: `blocks.rule_asked`)."""
    if not stage.inputs and not stage.outputs or rule_asked.get() is not None:
        return None if stage.invalid is None else stage.invalid(ctx)
    generated = record_invalid(stage, ctx)
    return generated if stage.invalid is None else st.one_of(stage.invalid(ctx), generated)

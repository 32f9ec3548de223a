"""A stored case checked against its stage's record, field by field, before any backend or the oracle
sees it.

Rules: every required input of the record is present (an optional one not stored is absent) and no other;
`None` only where the field is optional; an array of a dtype the field allows (`Field.dtype`,
'|'-separated; "int" allows every integer dtype) and of the rank its shape string implies ("B, S+1":
rank 2); a list (of Python ints, flat) only for a rank-1 integer field; a scalar field holds a Python
value of its type ("int" is an int and not a bool, "int|float" either, "bool", "float", "str"); output
buffers carry known names, allowed dtypes and the field's rank, and a device stage has every one of
its required outputs; host containers name inputs. An invalid-tier case breaks one rule of its
`bad_field` (a field of the stage) on purpose: that field alone is exempt. Values (offsets in order,
ids in range) are the oracle's to judge. A problem is a `RecordError` whose text names the field and
the rule.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from specverify.records.stage import Example, Field, Stage
from specverify.records.values import np_dtype
from specverify.strategies.generic import allowed_dtypes, axes, dtype_allowed

PYTHON_TYPES = {"int": (int,), "float": (float,), "bool": (bool,), "str": (str,), "int|float": (int, float)}


class RecordError(ValueError):
    """A case whose inputs or outputs do not fit its stage's record (one line: field and rule)."""


def check(stage: Stage, example: Example) -> None:
    """Raise RecordError for the first field of `example` that breaks `stage`'s record. An optional input
    the case does not store is absent (set to None): cases saved before an optional input (a host hint, say)
    was added to the record still load."""
    exempt = example.bad_field if example.tier == "invalid" else None
    fields = {f.name: f for f in stage.inputs}
    if exempt is not None and exempt not in fields and exempt not in {f.name for f in stage.outputs}:
        raise RecordError(f"bad_field `{exempt}`: not a field of the stage (an invalid case breaks one of its fields)")
    for name in example.inputs:
        if name not in fields and name != exempt:
            raise RecordError(f"input `{name}`: unknown (the stage has no such input)")
    for f in stage.inputs:
        if f.name == exempt:
            continue
        if f.name not in example.inputs and f.optional:   # a case saved before the optional input existed
            example.inputs[f.name] = None
        if f.name not in example.inputs:
            raise RecordError(f"input `{f.name}`: missing (the stage needs it)")
        problem = input_problem(f, example.inputs[f.name])
        if problem:
            raise RecordError(f"input `{f.name}`: {problem}")
    for name in example.containers:
        if name not in fields:
            raise RecordError(f"container of `{name}`: not an input of the stage")
    check_outputs(stage, example, exempt)


def input_problem(f: Field, value: Any) -> str | None:
    """What is wrong with one input value, or None."""
    rank = len(axes(f.shape))
    if value is None:
        return None if f.optional else "null, but the field is not optional"
    if rank == 0:
        types = PYTHON_TYPES.get(f.dtype, ())
        if type(value) not in types:
            return f"a {type(value).__name__}, but the field is a Python {f.dtype}"
        return None
    if isinstance(value, np.ndarray):
        if not dtype_allowed(value.dtype, f):
            return f"dtype {value.dtype} (the field allows {f.dtype})"
        if value.ndim != rank:
            return f"rank {value.ndim} (its shape [{f.shape}] has rank {rank})"
        return None
    if isinstance(value, list):
        integer = any(d.startswith(("int", "uint")) for d in allowed_dtypes(f))
        if rank != 1 or not integer:
            return f"a list (the field is an array [{f.shape}] of {f.dtype})"
        if not all(type(v) is int for v in value):
            return "a list holding something other than Python ints"
        return None
    return f"a {type(value).__name__} (the field is an array [{f.shape}] of {f.dtype})"


def check_outputs(stage: Stage, example: Example, exempt: str | None) -> None:
    fields = {f.name: f for f in stage.outputs}
    for name, buf in example.outputs.items():
        if name == exempt:
            continue
        f = fields.get(name)
        if f is None or stage.host:
            raise RecordError(f"output `{name}`: unknown (the stage has no such output buffer)")
        if not dtype_allowed(np_dtype(buf.dtype), f):
            raise RecordError(f"output `{name}`: dtype {buf.dtype} (the field allows {f.dtype})")
        rank = len(axes(f.shape))
        if len(buf.shape) != rank:
            raise RecordError(f"output `{name}`: rank {len(buf.shape)} (its shape [{f.shape}] has rank {rank})")
    if not stage.host:
        for f in stage.outputs:
            if f.name not in example.outputs and not f.optional and f.name != exempt:
                raise RecordError(f"output `{f.name}`: missing (the stage writes it)")

"""Each stage's record, its oracle's signature and its strategies agree.

For every registered stage: the oracle takes exactly the record's fields as keywords; drawn valid
examples hold exactly those fields, with dtypes, ranks, None and layouts as the record declares them;
and every invalid input generated from the record (`strategies.generic`) is refused by the oracle with
a ValueError or TypeError naming the field.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from specverify.judge.materialize import Bound, plan
from specverify.records import registry
from specverify.records.stage import Buffer, DrawContext, Example, Field, Layout, Stage
from specverify.strategies.generic import allowed_dtypes, axes, corruptions, dtype_allowed, is_scalar

STAGES = list(registry.all_stages().values())
EXAMPLES = 8
SCALAR_TYPES = {"int": (int, np.integer), "float": (float, np.floating), "bool": (bool, np.bool_), "str": (str,)}
DRAWS = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                 suppress_health_check=list(HealthCheck))


def each_stage(test):
    return pytest.mark.parametrize("stage", STAGES, ids=[s.name for s in STAGES])(test)


@each_stage
def test_oracle_takes_the_record_fields(stage: Stage):
    params = inspect.signature(stage.oracle).parameters.values()
    assert all(p.kind is p.KEYWORD_ONLY for p in params), f"{stage.name}: oracle parameters must be keyword-only"
    expected = [f.name for f in stage.inputs] + ([] if stage.host else [f.name for f in stage.outputs])
    assert sorted(p.name for p in params) == sorted(expected)


def scalar_problem(field: Field, value) -> str | None:
    kinds = [SCALAR_TYPES[d] for d in allowed_dtypes(field) if d in SCALAR_TYPES]
    is_bool = isinstance(value, (bool, np.bool_))
    if not any(isinstance(value, kind) and (is_bool == (kind[0] is bool)) for kind in kinds):
        return f"{field.name}: a {type(value).__name__}, the record says {field.dtype}"
    return None


def input_problems(stage: Stage, ex: Example) -> list[str]:
    found = []
    if sorted(ex.inputs) != sorted(f.name for f in stage.inputs):
        found.append(f"inputs {list(ex.inputs)} are not the record's {[f.name for f in stage.inputs]}")
    for f in stage.inputs:
        value, rank = ex.inputs.get(f.name), len(axes(f.shape))
        if value is None:
            if not f.optional:
                found.append(f"{f.name}: None, but the field is not optional")
        elif is_scalar(f):
            found.append(scalar_problem(f, value))
        elif isinstance(value, np.ndarray):
            if not dtype_allowed(value.dtype, f):
                found.append(f"{f.name}: dtype {value.dtype.name}, the record allows {f.dtype}")
            if value.ndim != rank:
                found.append(f"{f.name}: rank {value.ndim}, the record's shape is [{f.shape}]")
        elif isinstance(value, list):
            if rank != 1 or not all(scalar_problem(f, v) is None for v in value):
                found.append(f"{f.name}: a list, but not of {f.dtype} with shape [{f.shape}]")
        else:
            found.append(f"{f.name}: a {type(value).__name__}, neither an array, a list nor a scalar")
    return [p for p in found if p]


def output_problems(stage: Stage, ex: Example) -> list[str]:
    if stage.host:
        return [] if not ex.outputs else [f"a host stage draws no output buffers, got {list(ex.outputs)}"]
    found = []
    if sorted(ex.outputs) != sorted(f.name for f in stage.outputs):
        found.append(f"buffers {sorted(ex.outputs)} are not the record's outputs")
    for f in stage.outputs:
        buf = ex.outputs.get(f.name)
        if buf is None:
            continue
        if buf.dtype not in allowed_dtypes(f):
            found.append(f"{f.name}: buffer dtype {buf.dtype}, the record allows {f.dtype}")
        if len(buf.shape) != len(axes(f.shape)):
            found.append(f"{f.name}: buffer rank {len(buf.shape)}, the record's shape is [{f.shape}]")
        found += layout_problems(f, buf.layout, len(buf.shape))
    return found


def layout_problems(f: Field, layout: Layout | None, ndim: int) -> list[str]:
    if layout is None:
        return []
    if not f.strided:
        return [f"{f.name}: drawn strided, but the record does not mark it strided"]
    if len(layout.step) != ndim or len(layout.pad) != ndim or min(layout.step, default=1) < 1:
        return [f"{f.name}: layout {layout} does not fit rank {ndim}"]
    return []


def example_problems(stage: Stage, ex: Example) -> list[str]:
    found = input_problems(stage, ex) + output_problems(stage, ex)
    fields = {f.name: f for f in stage.inputs}
    for name, layout in ex.layouts.items():
        value = ex.inputs.get(name)
        if not isinstance(value, np.ndarray):
            found.append(f"{name}: a layout for something that is not an array input")
        else:
            found += layout_problems(fields[name], layout, value.ndim)
    for name, container in ex.containers.items():
        if not stage.host or name not in fields or container not in ("list", "ndarray", "tensor"):
            found.append(f"{name}: container {container!r} (host stages' inputs only: list, ndarray, tensor)")
    return found


def oracle_arguments(stage: Stage, ex: Example) -> dict:
    """The oracle's keyword arguments for `ex`, made as the harness makes them."""
    return Bound(*plan(stage, ex), "numpy", "cpu").kwargs


def refusal_problem(stage: Stage, bad: Example) -> str | None:
    """None when the oracle refuses `bad` with a ValueError or TypeError naming its field."""
    where = f"{bad.bad_field} ({bad.rule})"
    try:
        stage.oracle(**oracle_arguments(stage, bad))
    except (ValueError, TypeError) as exc:
        return None if bad.bad_field in str(exc) else f"{where}: refused without naming the field: {exc}"
    except Exception as exc:  # noqa: BLE001 (any other exception is the finding)
        return f"{where}: {type(exc).__name__} instead of ValueError/TypeError: {exc}"
    return f"{where}: accepted"


@each_stage
def test_valid_draws_follow_the_record(stage: Stage):
    @DRAWS
    @given(st.data())
    def check(data):
        ex = data.draw(stage.valid(DrawContext(small=True)), label="valid example")
        assert ex.tier == "valid"
        assert example_problems(stage, ex) == []

    check()


@each_stage
def test_generated_invalid_inputs_are_refused(stage: Stage):
    seen: set[tuple[str, str]] = set()

    @DRAWS
    @given(st.data())
    def check(data):
        ex = data.draw(stage.valid(DrawContext(small=True)), label="valid example")
        problems = []
        for corruption in corruptions(stage, ex):
            seen.add((corruption.field, corruption.kind))
            for option in corruption.options:
                bad = corruption.build(option)
                assert bad.tier == "invalid" and bad.bad_field == corruption.field
                problems.append(refusal_problem(stage, bad))
        assert [p for p in problems if p] == []

    check()
    fields = {f.name for f in stage.inputs + stage.outputs if not is_scalar(f)}
    assert {(name, "dtype") for name in fields} & seen, f"{stage.name}: no dtype rule was generated"


STRIDED = [(stage, field) for stage in STAGES for field in stage.inputs + stage.outputs if field.strided]


def layout_of(ex: Example, name: str) -> Layout | None:
    return ex.layouts.get(name) if name in ex.inputs else getattr(ex.outputs.get(name), "layout", None)


@pytest.mark.parametrize("stage,field", STRIDED, ids=[f"{s.name}:{f.name}" for s, f in STRIDED])
def test_strided_fields_are_drawn_strided_on_every_axis(stage: Stage, field: Field):
    """A field the record marks strided is drawn with a column step above 1, and (2-D and up) with rows
    further apart than their length."""
    search = settings(max_examples=300, derandomize=True, database=None, phases=[Phase.generate],
                      suppress_health_check=list(HealthCheck))
    wanted = {"a column step > 1": lambda layout: layout.step[-1] > 1}
    if len(axes(field.shape)) > 1:
        wanted["a row stride > the row"] = lambda layout: layout.step[0] > 1 or any(layout.pad[1:])
    for what, holds in wanted.items():
        def strided(ex: Example) -> bool:
            layout = layout_of(ex, field.name)
            return layout is not None and holds(layout)
        try:
            find(stage.valid(DrawContext(small=True)), strided, settings=search)
        except Exception as exc:  # noqa: BLE001 (hypothesis.errors.NoSuchExample)
            pytest.fail(f"{stage.name}: {field.name} is never drawn with {what} ({type(exc).__name__})")


def test_shape_strings_parse():
    assert axes("") == ()
    assert axes("T") == ("T",)
    assert axes("B, S+1") == ("B", "S+1")
    assert axes("B*S, k+1") == ("B*S", "k+1")
    assert axes("N + B*P - (B if shift)") == ("N + B*P - (B if shift)",)
    assert axes("num_blocks, H, block_size, D") == ("num_blocks", "H", "block_size", "D")


def test_bound_and_free_axes():
    """A symbol one field alone uses is free; shared symbols, int arguments of the same name, literals
    and derived expressions are bound."""
    from specverify.records.stage import I, O
    from specverify.strategies.generic import bound_axes

    stage = Stage(name="t.t", inputs=(I("a", "int32", "B, NB"), I("b", "int32", "B+1"), I("n", "int"),
                                      I("c", "int32", "n, 3")),
                  outputs=(O("out", "int32", "D"),), oracle=lambda **_: None, valid=None, impls={})
    ex = Example("valid", {"a": np.zeros((2, 4), np.int32), "b": np.zeros(3, np.int32), "n": 5,
                           "c": np.zeros((5, 3), np.int32)}, outputs={"out": Buffer((7,), "int32")})
    fields = {f.name: f for f in stage.inputs + stage.outputs}
    assert bound_axes(stage, ex, fields["a"]) == [0]
    assert bound_axes(stage, ex, fields["b"]) == [0]
    assert bound_axes(stage, ex, fields["c"]) == [0, 1]
    assert bound_axes(stage, ex, fields["out"]) == []
    kinds = {(c.field, c.kind) for c in corruptions(stage, ex)}
    assert ("out", "length") not in kinds and ("a", "length") in kinds and ("n", "dtype") in kinds
    assert ("a", "None") in kinds and ("out", "None") not in kinds

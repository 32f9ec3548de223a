"""The declarative record of a stage, and the drawn example it is checked on.

A stage is one frozen `Stage`: its fields, its oracle, its strategies and its implementations by backend.
A drawn `Example` is plain data (NumPy arrays and Python scalars) so it can be stored as a case file and
handed to any backend.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

TIERS = ("valid", "hazard", "invalid")
BENCH_SPEC = 5   # draft tokens per request in a benchmark input (`Stage.bench`): the engines' common K


@dataclass(frozen=True)
class Field:
    name: str                # keyword the implementation receives: the STAGES.md name
    dtype: str               # allowed dtypes, '|'-separated ("int32|int64"); "int" for a Python int scalar
    shape: str = ""          # symbolic shape as in STAGES.md ("B, S+1"); "" for a scalar
    optional: bool = False   # may be None
    strided: bool = False    # may arrive as a non-contiguous view
    inout: bool = False      # an input the stage updates in place (checked like an output)
    doc: str = ""            # one line on what the field holds


def I(name: str, dtype: str, shape: str = "", **kw: Any) -> Field:  # noqa: E743 (reads like STAGES.md)
    """An input field."""
    return Field(name, dtype, shape, **kw)


def O(name: str, dtype: str, shape: str = "", **kw: Any) -> Field:  # noqa: E743
    """An output field: a destination buffer (device stages) or a part of the returned value (host stages)."""
    return Field(name, dtype, shape, **kw)


@dataclass(frozen=True)
class Layout:
    """Strided storage of an array. The base is allocated in memory order: base axis i holds view axis
    `order[i]` (identity when None; (1, 0) stores a matrix transposed), with extent
    `n * step[i] + pad[i]`; the array is the view `base[0 : n*step[i] : step[i], ...]`, axes put back
    in view order. pad on the last base axis makes the row stride exceed the row."""
    step: tuple[int, ...]
    pad: tuple[int, ...]
    order: tuple[int, ...] | None = None

    def axes(self, ndim: int) -> tuple[int, ...]:
        return self.order if self.order is not None else tuple(range(ndim))

    def base_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape[a] * s + p for a, s, p in zip(self.axes(len(shape)), self.step, self.pad))

    def view_index(self, shape: tuple[int, ...]) -> tuple[slice, ...]:
        """The slice of the base (in base axis order) that holds the view's elements."""
        return tuple(slice(0, shape[a] * s, s) for a, s in zip(self.axes(len(shape)), self.step))

    def to_view(self, sliced):
        """The sliced base (NumPy or torch) with its axes put back in view order."""
        axes = self.axes(sliced.ndim)
        if list(axes) == sorted(axes):
            return sliced
        return sliced.permute(*inverse(axes)) if hasattr(sliced, "permute") else sliced.transpose(inverse(axes))

    def view_mask(self, shape: tuple[int, ...]) -> np.ndarray:
        """Per element of the base: is it inside the view?"""
        mask = np.zeros(self.base_shape(shape), bool)
        mask[self.view_index(shape)] = True
        return mask

    def view_position(self, base_index: tuple[int, ...]) -> tuple[int, ...]:
        """The view index of a base element inside the view."""
        axes = self.axes(len(base_index))
        position = [0] * len(base_index)
        for i, (a, s) in enumerate(zip(axes, self.step)):
            position[a] = base_index[i] // s
        return tuple(position)

    def strides(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """Element strides of the view (what `tensor.stride()` reports)."""
        base = self.base_shape(shape)
        axes = self.axes(len(shape))
        base_strides = [int(np.prod(base[i + 1:], dtype=np.int64)) for i in range(len(base))]
        found = [0] * len(shape)
        for i, a in enumerate(axes):
            found[a] = base_strides[i] * self.step[i]
        return tuple(found)

    def to_json(self) -> dict:
        found = {"step": list(self.step), "pad": list(self.pad)}
        if self.order is not None:
            found["order"] = list(self.order)
        return found

    @staticmethod
    def from_json(d: dict) -> "Layout":
        order = d.get("order")
        return Layout(tuple(int(x) for x in d["step"]), tuple(int(x) for x in d["pad"]),
                      tuple(int(x) for x in order) if order is not None else None)


def inverse(axes: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation that undoes `axes`."""
    found = [0] * len(axes)
    for i, a in enumerate(axes):
        found[a] = i
    return tuple(found)


@dataclass(frozen=True)
class Buffer:
    """An output allocation the harness makes before the call (filled with poison)."""
    shape: tuple[int, ...]
    dtype: str
    layout: Layout | None = None


@dataclass
class Example:
    """One drawn call of a stage."""
    tier: str                                   # "valid", "hazard" or "invalid"
    inputs: dict[str, Any]                      # by input field: np.ndarray, Python scalar, list or None
    outputs: dict[str, Buffer] = field(default_factory=dict)  # device stages: the destination buffers
    layouts: dict[str, Layout] = field(default_factory=dict)  # strided storage of tensor inputs
    containers: dict[str, str] = field(default_factory=dict)  # host stages: "list" | "ndarray" | "tensor"
    bad_field: str | None = None                # invalid tier: the field the error must name
    rule: str = ""                              # invalid tier: the rule the input breaks (for reports)

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise ValueError(f"tier: must be one of {TIERS}, got {self.tier!r}")
        if self.tier == "invalid" and not self.bad_field:
            raise ValueError("bad_field: an invalid-tier example must name the field it breaks")

    def __repr__(self) -> str:  # Hypothesis prints this for a falsifying example: keep it short
        parts = []
        for k, v in self.inputs.items():
            if isinstance(v, np.ndarray):
                parts.append(f"{k}={v.dtype}{list(v.shape)}")
            else:
                parts.append(f"{k}={v!r}")
        return f"Example({self.tier}: {', '.join(parts)})"


@dataclass(frozen=True)
class DrawContext:
    """What a strategy may assume about the backend it draws for."""
    small: bool = False     # the backend is slow (Triton interpreter): keep shapes small, with rare large ones
    domain: Any = None      # the target's declared domain (specverify.records.domain.Domain): bounds the blocks honour

    def excludes(self, klass: str) -> bool:
        """Whether the declared domain excludes the input class `klass` (a name in `Stage.classes`)."""
        return self.domain is not None and self.domain.of("excludes", klass) is not None

    def excluded_kinds(self, name: str) -> frozenset[str]:
        """The kinds of value ("oov", "placeholder", "true") the declared domain excludes from input `name`."""
        if self.domain is None:
            return frozenset()
        return frozenset(r.value[1] for r in self.domain.restrictions if r.kind == "excludes" and r.value[0] == name)

    def limits(self, name: str, low: int, high: int) -> tuple[int, int]:
        """[low, high] for a drawn size or scalar `name`, narrowed to the declared domain's bound on it."""
        return (low, high) if self.domain is None else self.domain.limits(name, low, high)

    def values(self, name: str, contract: tuple) -> tuple:
        """The values of scalar `name` (a name in `Stage.choices`) to draw from: the `contract`'s, in its
        order, narrowed to the declared domain's set (unchanged without one: a seed draws what it drew)."""
        allowed = None if self.domain is None else self.domain.of("values", name)
        return contract if allowed is None else tuple(v for v in contract if v in allowed)

    def given(self, name: str) -> bool | None:
        """The declared domain's presence of optional input `name`: True always given, False always None,
        None drawn either way."""
        return None if self.domain is None else self.domain.of("given", name)

    def dtype(self, name: str, drawn: str, candidates: tuple[str, ...] = ()) -> str:
        """The drawn dtype of field `name` mapped into the declared domain: `drawn` where the domain allows
        it, else the first of `candidates` it allows (`drawn` where it allows none of them), else its first
        allowed dtype. A draw of the whole
        contract is unchanged (a seed finds what it found)."""
        allowed = None if self.domain is None else self.domain.of("dtypes", name)
        if not allowed or drawn in allowed:
            return drawn
        return next((c for c in candidates if c in allowed), drawn if candidates else allowed[0])

    @property
    def max_batch(self) -> int:
        return self.limits("B", 0, 64 if self.small else 1024)[1]

    @property
    def max_tokens(self) -> int:
        return 1024 if self.small else 16384


Strategy = Callable[[DrawContext], Any]  # returns a hypothesis SearchStrategy[Example]


@dataclass(frozen=True)
class Dialect:
    """A named variant of a stage's rule: the same fields, another rule that keeps the contract's promise
    (an engine's acceptance test, an arithmetic the hardware does). A target judged by it is checked
    against its oracle and drawn from its strategies (the record's where it has none)."""
    doc: str                                    # one line: what differs from the record's rule
    rule: str                                   # the rule in prose, exact for the stage's dtypes
    oracle: Callable[..., Any]                  # its loop-level NumPy reference
    worked: Callable[[], Example]               # a small valid example `specverify show` runs on its oracle
    words: str                                  # how a report names it ("ties reject", ...)
    impls: Mapping[str, str] = field(default_factory=dict)  # our implementations that follow it, by backend
    valid: Strategy | None = None               # valid-tier draws (e.g. that reach its ties)
    hazard: Strategy | None = None              # hazard-tier draws
    invariants: Callable[[Example, dict], list[str]] | None = None  # its hazard tier's judge (else the record's)
    pooled: bool = False                        # a request's outputs may depend on other requests (no `twin`)
    # a stored valid-tier case on which this dialect's verdict is not exact: the reason (None: it is exact)
    inexact: Callable[[Example], str | None] | None = None


@dataclass(frozen=True)
class Floor:
    """An input class that matters for a stage (its contract or a shipped bug names it): the strategy label that
    marks it, the tier that draws it, and the fewest draws of it the ci budget must hold on each of the seeds
    0-3 (`specverify.runs.reach`); `interpreted`: the Triton interpreter's smaller draws must hold it too."""
    label: str
    least: int
    why: str
    tier: str = "valid"
    interpreted: bool = False


@dataclass(frozen=True)
class Stage:
    name: str                                   # "family.stage", as in STAGES.md
    inputs: tuple[Field, ...]                   # keyword arguments, in STAGES.md order
    outputs: tuple[Field, ...]                  # destination buffers, or the parts of a host stage's result
    oracle: Callable[..., Any]                  # loop-level NumPy reference: the contract in code
    valid: Strategy                             # draws valid-tier examples (byte identity required)
    impls: Mapping[str, str]                    # backend name -> "module:function" (imported lazily)
    invalid: Strategy | None = None             # draws invalid-tier examples (a clear error required)
    hazard: Strategy | None = None              # draws hazard-tier examples (invariants required)
    invariants: Callable[[Example, dict], list[str]] | None = None  # hazard tier: violated invariants
    rows: Callable[[Example], tuple[list[str], list[list[Any]]]] | None = None  # semantic row table
    # the failing request (a row of `rows`) of the first wrong output element (field, view index; None: not
    # located), and lines showing the inputs that decide it which `rows` leaves out (probability, noise rows)
    deciding: Callable[[Example, Any], tuple[int | None, list[str]]] | None = None
    host: bool = False                          # host stage: returns Python values, writes no buffers
    doc: str = ""                               # one line: what the stage does
    semantics: str = ""                         # the contract in prose: what is computed, what is written
    tiers: Mapping[str, str] = field(default_factory=dict)  # tier -> what its draws hold (for readers)
    worked: Callable[[], Example] | None = None  # a small valid example `specverify show` runs and prints
    # backend -> most device launches per call on CUDA (the `launches` check). Torch bounds: the most an H200
    # (torch 2.11) launched over the ci profile's draws, plus about a fifth for layouts and dtypes not drawn
    launches: Mapping[str, int] = field(default_factory=dict)
    # `specverify bench` input: (B, V, rng) -> a valid example of B requests with BENCH_SPEC drafts each, vocabulary V
    # where the stage reads one (else V is the vocab_size scalar), realistic contents, every array contiguous
    bench: Callable[[int, int, np.random.Generator], Example] | None = None
    dialects: Mapping[str, Dialect] = field(default_factory=dict)  # name -> a rule variant (see Dialect)
    dialect: str = ""                           # the dialect this record is judged by (`dialects.judged`)
    # names a declared domain may bound besides B, V and vocab_size (which the shared blocks draw): a shape
    # symbol or an int scalar this stage's strategies draw within `DrawContext.limits`, with the contract's
    # lowest value of it; None: a default name this stage's strategies do not draw through the blocks
    bounded: Mapping[str, int | None] = field(default_factory=dict)
    # optional inputs whose presence follows from other inputs: a declared domain cannot make them always None
    presence_follows: tuple[str, ...] = ()
    # field -> the field whose dtype it must have: a declared domain names the dtypes of the latter only
    dtype_follows: Mapping[str, str] = field(default_factory=dict)
    # input classes a declared domain may exclude, each (field, kind) with kind "oov" (a value >= V, from the
    # vocab_size input or the symbol V), "placeholder" (a -1) or "true" (a True entry); its strategies draw
    # none when excluded
    classes: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # int scalars a declared domain may restrict to a set of values, each with every value the contract allows;
    # its strategies draw from `DrawContext.values`
    choices: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    # names in `bounded` that no field carries, each read from an example by its function (a most over the
    # requests, say; None where the example lacks what it is read from); a declared domain may bound them from
    # above only
    measured: Mapping[str, Callable[[Example], int | None]] = field(default_factory=dict)
    # why a declared domain (given in a DrawContext) leaves no call of the contract, "" when it leaves some: the
    # restrictions its draws combine that `specverify.records.domain.parse` cannot judge one by one
    domain_problem: Callable[[DrawContext], str] | None = None
    # host hints: optional int inputs giving a bound a kernel may size its launch by on the host instead of
    # reading the device; a declared `given = true` on one matters to the no-sync check (specverify.runs.beyond_domain)
    hints: tuple[str, ...] = ()
    # sampling stages: where their random numbers come from and their distribution-tier panels
    # (`specverify.records.randomness`); `own_randomness`: judged as an implementation that declared its own
    randomness: Any = None
    own_randomness: bool = False
    # requests independent of each other: (the example with one request's inputs changed, that request), or None
    # where the example has no other request; the `independent` check requires every other request's outputs to
    # keep their bytes (`specverify.runs.independence`)
    twin: Callable[[Example], tuple[Example, int] | None] | None = None
    # the input classes that matter (see Floor): a check of the draws fails when one is drawn under its floor
    floors: tuple[Floor, ...] = ()

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def bounds(self) -> dict[str, int]:
        """Every name a declared domain may bound, with the contract's lowest value of it."""
        symbols = {name for f in self.inputs + self.outputs for name in re.findall(r"[A-Za-z_]\w*", f.shape)}
        scalars = {f.name for f in self.inputs if f.dtype == "int"}
        found = {"B": 0} if "B" in symbols else {}
        found.update({"V": 1} if "V" in symbols else {})
        found.update({"vocab_size": 1} if "vocab_size" in scalars else {})
        found.update(self.bounded)
        return {name: low for name, low in found.items() if low is not None}

    def strategy(self, tier: str) -> Strategy | None:
        return {"valid": self.valid, "hazard": self.hazard, "invalid": self.invalid}[tier]

"""A declared domain: the part of a stage's contract an outside implementation says it supports.

A declaration (the `domain` table of a vendor's stage entry, or a `--declare` TOML file) is plain JSON-safe
data, checked against the stage's record by `parse`:

    {"fields": {"sampled_token_ids": {"layout": "rows", "reason": "..."},
                "draft_probs": {"given": false, "reason": "..."}},
     "bounds": {"B <= 8": "...", "pad_query_len >= 1": "..."},
     "values": {"tree_mask_mode": {"in": [0, 1], "reason": "..."}},
     "excludes": {"discarded_rows": "..."}}

What may be declared comes from the record (`declarable`): a layout class for a field that may be strided
(`contiguous`; `rows`, rows strided with unit column step), a proper subset of the dtypes of a field whose
record allows several, `given = false` (always None) or `given = true` (always given) for an optional
input, a bound on a name in `Stage.bounds` (a shape symbol or an int scalar its strategies draw within the
context's limits, or a measure of the example in `Stage.measured`, from above only) by an integer
expression, a proper subset of the values of an int scalar in `Stage.choices`, and an input class in
`Stage.classes` the implementation never receives. Every restriction carries its reason (the engine's call
site that guarantees it). A name
the record lacks, a value it does not allow, a bound that widens the contract or leaves it as it is, or a
restriction without a reason is a DomainError (one line, exit status 2).

The domain is a parameter of drawing: the strategies read the bounds, value sets, dtypes, presences and
excluded classes from `DrawContext` (a drawn choice mapped into the domain, never a rejected draw), and `project`
maps every drawn example onto its layouts, its absent optional inputs and its integer dtypes (values
unchanged). `outside` says why a stored case lies outside the domain (the corpus check counts it, not
replays it).
"""
from __future__ import annotations

import ast
import math
import operator
import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from specverify import bounded
from specverify.records.backends import Target
from specverify.records.stage import DrawContext, Example, Layout, Stage
from specverify.usage import did_you_mean

LAYOUTS = ("contiguous", "rows", "any")
LAYOUT_TEXT = {"contiguous": "contiguous", "rows": "unit column step", "any": "any strides"}
BOUND = re.compile(r"^\s*([A-Za-z_]\w*)\s*(<=|<|>=|>)\s*(.+?)\s*$")
ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
              ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow}
FIELD_KEYS = {"layout", "dtypes", "given", "reason"}
SCALAR_DTYPES = {"int", "float", "bool"}   # Python scalars: their type is no dtype a domain may narrow
TOP_KEYS = ("fields", "bounds", "values", "excludes")
VALUES_KEYS = ("in", "reason")
DECLARATION_KEYS = ("impl", "domain", "dialect", "validates", "interpreted", "randomness")
DECLARED_INTERPRETED = "its declaration says its kernels run in Triton's interpreter"
MAX_DECLARATION = 1 << 16     # bytes of a --declare file
LARGEST = 1 << 64             # no value in a bound's expression may pass this (a declaration cannot stall the judge)


class DomainError(LookupError):
    """A declaration the stage's record does not allow (bad usage)."""


@dataclass(frozen=True)
class Restriction:
    kind: str          # "layout", "dtypes", "given", "bound", "values", "excludes"
    subject: str       # the field, the bounded or restricted name, or the excluded input class
    value: object      # layout class; dtypes tuple; bool (given); (low, high), None where unbounded; values tuple;
                       # (field, kind)
    reason: str        # the engine's call site that guarantees it

    @property
    def short(self) -> str:
        """The restriction without its reason: "`sampled_token_ids` unit column step", "`B <= 8`"."""
        if self.kind == "layout":
            return f"`{self.subject}` {LAYOUT_TEXT[str(self.value)]}"
        if self.kind == "excludes":
            return f"no `{self.subject}`"
        if self.kind == "dtypes":
            return f"`{self.subject}` {' or '.join(self.value)}"
        if self.kind == "given":
            return f"`{self.subject}` always given" if self.value else f"`{self.subject}` always None"
        if self.kind == "values":
            return f"`{self.subject}` in {{{', '.join(str(v) for v in self.value)}}}"
        low, high = self.value
        parts = ([f"{self.subject} >= {low}"] if low is not None else []) + \
                ([f"{self.subject} <= {high}"] if high is not None else [])
        return "; ".join(f"`{p}`" for p in parts)

    @property
    def text(self) -> str:
        return f"{self.short} ({self.reason})"


@dataclass(frozen=True)
class Domain:
    """The declared part of one stage's contract (no restriction: the whole contract)."""
    stage: str
    restrictions: tuple[Restriction, ...] = ()
    validates: bool = False        # the implementation refuses invalid arguments: the invalid tier is asked

    def texts(self) -> list[str]:
        return [r.text for r in self.restrictions]

    def summary(self) -> str:
        return "; ".join(r.short for r in self.restrictions)

    def of(self, kind: str, subject: str):
        for r in self.restrictions:
            if r.kind == kind and r.subject == subject:
                return r.value
        return None

    def limits(self, name: str, low: int, high: int) -> tuple[int, int]:
        """[low, high] narrowed to the declared bound on `name`."""
        bound = self.of("bound", name)
        if bound is None:
            return low, high
        lo, hi = bound
        return (max(low, lo) if lo is not None else low), (min(high, hi) if hi is not None else high)

    def project(self, example: Example) -> Example:
        """The same call within the declared layouts and optional inputs (values unchanged). An optional
        input an invalid-tier example breaks is left as drawn."""
        inputs, layouts, outputs = dict(example.inputs), dict(example.layouts), dict(example.outputs)
        for r in self.restrictions:
            name = r.subject
            if r.kind == "layout":
                if name in layouts:
                    layouts[name] = narrowed(layouts[name], str(r.value))
                    if layouts[name] is None:
                        del layouts[name]
                elif name in outputs and outputs[name].layout is not None:
                    outputs[name] = replace(outputs[name], layout=narrowed(outputs[name].layout, str(r.value)))
            elif r.kind == "given" and not r.value and name != example.bad_field:
                inputs[name] = None
                layouts.pop(name, None)
            elif r.kind == "dtypes" and name != example.bad_field:
                self.project_dtype(stage_of(self.stage), name, r.value, inputs, outputs)
        return replace(example, inputs=inputs, layouts=layouts, outputs=outputs)

    @staticmethod
    def project_dtype(stage: Stage, name: str, allowed: tuple[str, ...], inputs: dict, outputs: dict) -> None:
        """Field `name` (an integer input cast where every value fits, or an output buffer) and the fields
        whose dtype follows it, in the first allowed dtype, where the drawn one is not allowed."""
        if name in outputs:
            dtype = outputs[name].dtype
        elif isinstance(inputs.get(name), np.ndarray):
            inputs[name] = within_dtypes(inputs[name], allowed)
            dtype = inputs[name].dtype.name
        else:
            return
        if dtype not in allowed:
            dtype = allowed[0]
            if name in outputs:
                outputs[name] = replace(outputs[name], dtype=dtype)
        for follower, leader in stage.dtype_follows.items():
            if leader != name:
                continue
            if follower in outputs:
                outputs[follower] = replace(outputs[follower], dtype=dtype)
            elif isinstance(inputs.get(follower), np.ndarray) and inputs[follower].dtype.kind in "iu":
                inputs[follower] = within_dtypes(inputs[follower], (dtype,))

    def outside(self, stage: Stage, example: Example) -> list[str]:
        """The restrictions a stored case lies outside (none: it is inside the domain); the field an
        invalid-tier case breaks is not asked."""
        found = []
        sizes = symbol_values(stage, example)
        measured = {name: measure(example) for name, measure in stage.measured.items()}
        sizes.update({name: value for name, value in measured.items() if value is not None})
        for r in self.restrictions:
            name = r.subject
            if name == example.bad_field:
                continue
            value = example.inputs.get(name)
            if r.kind == "layout":
                lay = example.layouts.get(name) or (example.outputs[name].layout if name in example.outputs else None)
                if lay is not None and narrowed(lay, str(r.value)) != lay:
                    found.append(r.short)
            elif r.kind == "given":
                if (value is not None) != r.value:
                    found.append(r.short)
            elif r.kind == "dtypes":
                dtype = example.outputs[name].dtype if name in example.outputs else \
                    value.dtype.name if isinstance(value, np.ndarray) else None
                if dtype is not None and dtype not in r.value:
                    found.append(r.short)
            elif r.kind == "excludes":
                if in_class(example, sizes, *r.value):
                    found.append(r.short)
            elif r.kind == "values":
                if isinstance(value, int) and value not in r.value:
                    found.append(r.short)
            else:
                drawn = sizes.get(name, value if isinstance(value, int) else None)
                low, high = r.value
                if drawn is not None and ((low is not None and drawn < low) or (high is not None and drawn > high)):
                    found.append(r.short)
        return found


def stage_of(name: str) -> Stage:
    from specverify.records import registry

    return registry.all_stages()[name]


def within_dtypes(values: np.ndarray, allowed: tuple[str, ...]) -> np.ndarray:
    """`values` in the first of the `allowed` integer dtypes that holds every value exactly (the drawn
    array where none does, or where the dtypes are not integers: the draw sites map those)."""
    if values.dtype.name in allowed or values.dtype.kind not in "iu":
        return values
    for dtype in allowed:
        if np.dtype(dtype).kind in "iu":
            info = np.iinfo(dtype)
            if not values.size or (int(values.min()) >= info.min and int(values.max()) <= info.max):
                return values.astype(dtype)
    return values


def narrowed(layout: Layout | None, klass: str) -> Layout | None:
    """A layout within `klass`: contiguous drops it; rows keeps the row strides with unit column step in
    memory order (None where that is contiguous after all)."""
    if layout is None or klass == "any":
        return layout
    if klass == "contiguous":
        return None
    step = layout.step[:-1] + (1,)
    if all(s == 1 for s in step) and not any(layout.pad[1:]):
        return None
    return Layout(step, layout.pad, None)


def in_class(example: Example, sizes: dict[str, int], name: str, kind: str) -> bool:
    """Whether input `name` of `example` holds a member of an input class of `kind` ("oov": a value
    >= V; "placeholder": a -1; "true": a True entry)."""
    values = example.inputs.get(name)
    if not isinstance(values, np.ndarray) or not values.size or name == example.bad_field:
        return False
    if kind == "true":
        return bool(values.any())
    if kind == "placeholder":
        return bool((values == -1).any())
    vocab = example.inputs.get("vocab_size", sizes.get("V"))
    return isinstance(vocab, int) and bool((values >= vocab).any())


def symbol_values(stage: Stage, example: Example) -> dict[str, int]:
    """Shape symbols read from the example's arrays (an axis whose symbol is a bare name), except the
    field an invalid-tier example breaks."""
    found: dict[str, int] = {}
    for f in stage.inputs + stage.outputs:
        if f.name == example.bad_field:
            continue
        value = example.inputs.get(f.name)
        shape = value.shape if isinstance(value, np.ndarray) else \
            (example.outputs[f.name].shape if f.name in example.outputs else None)
        axes = [a.strip() for a in f.shape.split(",")] if f.shape else []
        if shape is None or len(shape) != len(axes):
            continue
        for axis, size in zip(axes, shape):
            if axis.isidentifier():
                found.setdefault(axis, int(size))
    return found


def declarable(stage: Stage) -> dict[str, dict]:
    """What a declaration of `stage` may say, per field: its layout classes and whether `given` may be
    declared; the names it may bound, with the contract's own lowest value (those of `measured` from above
    only); the scalars it may restrict to a set, with the contract's values; the input classes it may exclude."""
    fields = {}
    for f in stage.inputs + stage.outputs:
        dtypes = tuple(f.dtype.split("|"))
        fields[f.name] = {"layouts": LAYOUTS if f.strided else (),
                          "dtypes": dtypes if len(dtypes) > 1 and not SCALAR_DTYPES & set(dtypes) else (),
                          "dtype_follows": stage.dtype_follows.get(f.name),
                          "optional": f.optional and f in stage.inputs and f.name not in stage.presence_follows}
    return {"fields": fields, "bounds": dict(stage.bounds), "measured": tuple(stage.measured),
            "values": dict(stage.choices), "classes": dict(stage.classes)}


def parse(stage: Stage, declared: object, where: str) -> Domain:
    """The Domain of a declaration, checked against `stage`'s record; `where` names the declaration in
    errors ("--declare d.toml", "vendor acme")."""
    prefix = f"{where}: {stage.name}"
    if not isinstance(declared, dict):
        raise DomainError(f"{prefix}: the domain must be a table, not {type(declared).__name__}")
    only_known_keys(prefix, declared, TOP_KEYS, "domain key")
    allowed = declarable(stage)
    found: list[Restriction] = []
    fields = declared.get("fields", {})
    if not isinstance(fields, dict):
        raise DomainError(f"{prefix}: domain.fields must be a table of field names")
    for name, entry in fields.items():
        found += field_restrictions(prefix, allowed["fields"], name, entry)
    bounds = declared.get("bounds", {})
    if not isinstance(bounds, dict):
        raise DomainError(f"{prefix}: domain.bounds must be a table of 'NAME <= VALUE' = reason")
    merged: dict[str, list] = {}
    for text, reason in bounds.items():
        name, low, high = bound(prefix, allowed["bounds"], text)
        if low is not None and name in allowed["measured"]:
            raise DomainError(f"{prefix}: bound {text!r}: {name} is a most over the example: "
                              f"only an upper bound ('{name} <= VALUE') may be declared")
        lo, hi = merged.setdefault(name, [None, None, []])[:2]
        merged[name][0] = low if low is not None else lo
        merged[name][1] = high if high is not None else hi
        merged[name][2].append(need_reason(f"{prefix}: bound {text!r}", reason))
    for name, (low, high, reasons) in merged.items():
        contract_low = allowed["bounds"][name]
        if high is not None and high < max(contract_low, low if low is not None else contract_low, 1):
            raise DomainError(f"{prefix}: bounds on {name} leave no call with {name} >= 1 "
                              f"(the contract allows {name} >= {contract_low})")
        found.append(Restriction("bound", name, (low, high), "; ".join(dict.fromkeys(reasons))))
    values = declared.get("values", {})
    if not isinstance(values, dict):
        raise DomainError(f"{prefix}: domain.values must be a table of scalar names")
    for name, entry in values.items():
        found.append(value_restriction(prefix, allowed["values"], name, entry))
    excludes = declared.get("excludes", {})
    if not isinstance(excludes, dict):
        raise DomainError(f"{prefix}: domain.excludes must be a table of 'CLASS' = reason")
    for klass, reason in excludes.items():
        if klass not in allowed["classes"]:
            raise DomainError(f"{prefix}: excludes {klass!r}: not an input class of this stage's record "
                              f"({', '.join(allowed['classes']) or 'none'})")
        found.append(Restriction("excludes", klass, tuple(allowed["classes"][klass]),
                                 need_reason(f"{prefix}: excludes {klass!r}", reason)))
    domain = Domain(stage.name, tuple(found))
    problem = stage.domain_problem(DrawContext(domain=domain)) if stage.domain_problem else ""
    if problem:
        raise DomainError(f"{prefix}: the domain leaves no call: {problem}")
    return domain


def value_restriction(prefix: str, choices: dict[str, tuple], name: str, entry: object) -> Restriction:
    """The restriction of `{"in": [...], "reason": ...}` on scalar `name`: a non-empty proper subset of the
    record's values, in the record's order."""
    where = f"{prefix}: domain.values.{name}"
    if name not in choices:
        raise DomainError(f"{where}: {name} is not a scalar whose values this stage's record lets a domain "
                          f"restrict ({', '.join(choices) or 'none'}){did_you_mean(name, list(choices))}")
    if not isinstance(entry, dict):
        raise DomainError(f"{where} must be a table (in, reason)")
    only_known_keys(where, entry, VALUES_KEYS)
    reason = need_reason(where, entry.get("reason"))
    return Restriction("values", name, proper_subset(f"{where}: 'in'", choices[name], entry.get("in"), int), reason)


def field_restrictions(prefix: str, fields: dict, name: str, entry: object) -> list[Restriction]:
    if name not in fields:
        raise DomainError(f"{prefix}: the record has no field {name!r} (fields: {', '.join(fields)})")
    if not isinstance(entry, dict):
        raise DomainError(f"{prefix}: domain.fields.{name} must be a table (layout, dtypes, given, reason)")
    only_known_keys(f"{prefix}: domain.fields.{name}", entry, sorted(FIELD_KEYS))
    reason = need_reason(f"{prefix}: domain.fields.{name}", entry.get("reason"))
    record, found = fields[name], []
    if "layout" in entry:
        klass = entry["layout"]
        if not record["layouts"]:
            raise DomainError(f"{prefix}: {name} is never strided in the contract: no layout to declare")
        if klass not in LAYOUTS:
            raise DomainError(f"{prefix}: {name}: unknown layout {klass!r} (known: {', '.join(LAYOUTS)})")
        if klass == "any":
            raise DomainError(f"{prefix}: {name}: layout 'any' is the whole contract: it restricts nothing")
        found.append(Restriction("layout", name, klass, reason))
    if "dtypes" in entry:
        if record["dtype_follows"]:
            raise DomainError(f"{prefix}: {name} has the dtype of {record['dtype_follows']} by the contract: "
                              f"declare the dtypes of {record['dtype_follows']}")
        found.append(Restriction("dtypes", name, dtype_subset(prefix, name, record["dtypes"], entry["dtypes"]),
                                 reason))
    if "given" in entry:
        if not record["optional"]:
            raise DomainError(f"{prefix}: {name} is not an optional input whose presence a domain may fix: "
                              f"'given' does not apply")
        if not isinstance(entry["given"], bool):
            raise DomainError(f"{prefix}: {name}: given must be true or false")
        found.append(Restriction("given", name, entry["given"], reason))
    if not found:
        raise DomainError(f"{prefix}: domain.fields.{name} restricts nothing (say layout, dtypes or given)")
    return found


def dtype_subset(prefix: str, name: str, record: tuple[str, ...], declared: object) -> tuple[str, ...]:
    """The declared dtypes of field `name`: a non-empty proper subset of the record's, in the record's order."""
    if not record:
        raise DomainError(f"{prefix}: {name} has one dtype in the contract: no dtypes to declare")
    return proper_subset(f"{prefix}: {name}: dtypes", record, declared, str)


def proper_subset(where: str, record: tuple, declared: object, kind: type) -> tuple:
    """`declared` (a list of `kind`) as a non-empty proper subset of the record's `record`, in the record's
    order; DomainError naming `where` otherwise."""
    if not isinstance(declared, list) or not declared or not all(type(v) is kind for v in declared):
        raise DomainError(f"{where} must be a non-empty list of {'names' if kind is str else 'integers'}")
    shown = repr if kind is str else str
    unknown = [v for v in declared if v not in record]
    if unknown:
        raise DomainError(f"{where}: {shown(unknown[0])} is not one the contract allows "
                          f"({', '.join(str(v) for v in record)})")
    if set(declared) == set(record):
        raise DomainError(f"{where}: {', '.join(str(v) for v in record)} are every one the contract allows: "
                          f"they restrict nothing")
    return tuple(v for v in record if v in declared)


def only_known_keys(where: str, table: dict, known, what: str = "key") -> None:
    """DomainError naming the first key of `table` that is not in `known` (with "did you mean")."""
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise DomainError(f"{where}: unknown {what} {unknown[0]!r} (known: {', '.join(known)})"
                          f"{did_you_mean(unknown[0], list(known))}")


def need_reason(where: str, reason: object) -> str:
    if not isinstance(reason, str) or not reason.strip():
        raise DomainError(f"{where}: every restriction needs its reason (the engine's call site that guarantees it)")
    return " ".join(reason.split())


def bound(prefix: str, names: dict[str, int], text: object) -> tuple[str, int | None, int | None]:
    """(name, low, high) of "NAME <= EXPR" (also <, >=, >; EXPR integer arithmetic of + - * / // **)."""
    matched = BOUND.match(text) if isinstance(text, str) else None
    if not matched:
        raise DomainError(f"{prefix}: bound {text!r}: expected 'NAME <= VALUE' (or <, >=, >)")
    name, op, expression = matched.groups()
    if name not in names:
        raise DomainError(f"{prefix}: bound {text!r}: {name} is not a name this stage's draws can bound "
                          f"({', '.join(names) or 'none'}){did_you_mean(name, list(names))}")
    value = evaluate(prefix, text, expression)
    contract_low = names[name]
    if op in ("<=", "<"):
        high = math.floor(value) if op == "<=" else math.ceil(value) - 1
        return name, None, high
    low = math.ceil(value) if op == ">=" else math.floor(value) + 1
    if low <= contract_low:
        raise DomainError(f"{prefix}: bound {text!r} widens the contract or restates it "
                          f"(the contract allows {name} >= {contract_low})")
    return name, low, None


def evaluate(prefix: str, text: str, expression: str) -> float:
    try:
        tree = ast.parse(expression, mode="eval").body
    except SyntaxError:
        raise DomainError(f"{prefix}: bound {text!r}: {expression!r} is not an integer expression") from None

    def value(node):
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in ARITHMETIC:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and (right < 0 or right > 64):
                raise DomainError(f"{prefix}: bound {text!r}: exponents are 0 to 64")
            if isinstance(node.op, (ast.Div, ast.FloorDiv)) and right == 0:
                raise DomainError(f"{prefix}: bound {text!r}: division by zero")
            found = ARITHMETIC[type(node.op)](left, right)
            if abs(found) > LARGEST:
                raise DomainError(f"{prefix}: bound {text!r}: a value past 2**64 on the way")
            return found
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        raise DomainError(f"{prefix}: bound {text!r}: only integers and + - * / // ** (no names: "
                          f"a bound is a number)")
    return value(tree)


def declared(target: Target, entry: dict, where: str) -> Target:
    """`target` with the declaration `entry` ({"domain", "dialect", "validates", "interpreted", "randomness"};
    "impl" is read by the caller) applied: its Domain (None when it declares neither a domain nor validation), its
    dialect, `interpreted = true` (its kernels run in Triton's interpreter: it is drawn small shapes) and where
    its random numbers come from (`specverify.records.randomness`)."""
    only_known_keys(f"{where}: {target.stage.name}", entry, DECLARATION_KEYS)
    dialect, validates = entry.get("dialect", ""), entry.get("validates", False)
    interpreted = entry.get("interpreted", False)
    if not isinstance(interpreted, bool):
        raise DomainError(f"{where}: {target.stage.name}: interpreted must be true or false")
    if not isinstance(dialect, str):
        raise DomainError(f"{where}: {target.stage.name}: dialect must be a name")
    if not isinstance(validates, bool):
        raise DomainError(f"{where}: {target.stage.name}: validates must be true or false")
    domain = parse(target.stage, entry["domain"], where) if "domain" in entry else Domain(target.stage.name)
    domain = replace(domain, validates=validates)
    empty = not domain.restrictions and not domain.validates
    record = target.stage
    if dialect:
        from specverify.records import dialects

        if dialects.problem(record, dialect):
            raise DomainError(f"{where}: {dialects.problem(record, dialect)}")
        record = dialects.judged(record, dialect)
    if "randomness" in entry:
        from specverify.records import randomness

        record = randomness.declared(record, entry["randomness"], where, DomainError)
    return replace(target, stage=record, dialect=dialect, domain=None if empty else domain,
                   interpreted=DECLARED_INTERPRETED if interpreted else target.interpreted)


def load(path: Path) -> dict:
    """The declaration in a --declare TOML file (keys domain, dialect, validates, interpreted, randomness);
    DomainError when it cannot be read or is not TOML."""
    where = f"--declare {path}"
    data = bounded.read_data(Path(path), MAX_DECLARATION, "toml", where, DomainError)
    if "impl" in data:
        raise DomainError(f"{where}: 'impl' is given by --impl, not by the declaration")
    return data

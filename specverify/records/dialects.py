"""Rule dialects: a stage record judged by one of its named variants (`Stage.dialects`).

`judged(stage, name)` is the record as that dialect judges it: its oracle, its strategies where it has
them, its worked example and its implementations, with `Stage.dialect` set to the name. Everything that
reads a target's record (the harness, the searches, the corpus check, the property checks) then follows
the dialect with no further change. "" names the record's own rule.
"""
from __future__ import annotations

from dataclasses import replace

from specverify.records.stage import Stage

SEPARATOR = ":"   # "rejection.random:strict" names a stage judged by a dialect (generated test ids)


class UnknownDialect(LookupError):
    """A dialect the stage's record does not have (a usage error: one line, exit status 2)."""


def dialect_names(stage: Stage) -> list[str]:
    """The record's dialects, in the order it lists them."""
    return list(stage.dialects)


def problem(stage: Stage, name: str) -> str | None:
    """None when `name` is "" or one of the stage's dialects, else the one line that says why not."""
    if not name or name in stage.dialects:
        return None
    known = dialect_names(stage)
    has = f"its dialects are {', '.join(known)}" if known else "it has no dialects"
    return f"dialect {name!r}: {stage.name} has no such dialect ({has}; '' is the record's rule)"


def judged(stage: Stage, name: str) -> Stage:
    """The record as dialect `name` judges it; raises UnknownDialect with `problem`'s line."""
    if name == stage.dialect:
        return stage
    why = problem(stage, name)
    if why:
        raise UnknownDialect(why)
    if stage.dialect:
        raise UnknownDialect(f"dialect {name!r}: {stage.name} is already judged by {stage.dialect!r}")
    d = stage.dialects[name]
    return replace(stage, oracle=d.oracle, valid=d.valid or stage.valid, hazard=d.hazard or stage.hazard,
                   invariants=d.invariants or stage.invariants, twin=None if d.pooled else stage.twin,
                   worked=d.worked, impls=dict(d.impls), dialect=name)


def views(stage: Stage) -> list[Stage]:
    """The record under its own rule, then under each dialect that has implementations of ours (a
    record already judged by a dialect: itself)."""
    if stage.dialect:
        return [stage]
    return [stage] + [judged(stage, n) for n, d in stage.dialects.items() if d.impls]


def qualified(stage: Stage) -> str:
    """"family.stage" or "family.stage:dialect"."""
    return f"{stage.name}{SEPARATOR}{stage.dialect}" if stage.dialect else stage.name


def resolve(name: str, stages: dict[str, Stage]) -> Stage:
    """The record a `qualified` name stands for (KeyError for an unknown stage, UnknownDialect)."""
    base, _, dialect = name.partition(SEPARATOR)
    return judged(stages[base], dialect)


def words(stage: Stage, name: str) -> str:
    """How a report names the rule a verdict is for: "" for the record's rule, else
    "dialect NAME (its words)"."""
    if not name:
        return ""
    d = stage.dialects.get(name)
    return f"dialect {name} ({d.words})" if d is not None else f"dialect {name}"


def inexact(stage: Stage, example) -> str | None:
    """Why the dialect `stage` is judged by cannot judge the stored valid-tier `example` byte for byte
    (None where it can, or where the record's own rule judges)."""
    d = stage.dialects.get(stage.dialect) if stage.dialect else None
    if d is None or d.inexact is None or example.tier != "valid":
        return None
    return d.inexact(example)

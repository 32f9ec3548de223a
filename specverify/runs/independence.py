"""The `independent` check: no information flows between requests.

For a stage whose record says its requests are independent (`Stage.twin`; a pooled dialect says they are not),
each drawn valid example is called twice: as drawn, and with one request's inputs changed (the record's twin).
Every other request's outputs must keep their bytes, whatever rule the implementation follows: a rule-free
property, so it judges an outside kernel under any dialect, and the search shrinks a failure like any other.
"""
from __future__ import annotations

import numpy as np

from specverify.judge import materialize
from specverify.judge.compare import element_bytes_differ
from specverify.judge.harness import Failure, output_views
from specverify.records.backends import Target
from specverify.records.stage import Example
from specverify.records.values import output_values
from specverify.runs.protocol import Check, Context, Outcome
from specverify.runs.search import search
from specverify.strategies.blocks import label


def applies(target: Target) -> str | None:
    if target.stage.host:
        return "a host stage"
    if target.stage.twin is None:
        return ("its rule pools the requests (a request's outputs may depend on another's inputs)"
                if target.stage.dialect else "the record does not say its requests are independent")
    return None


def outputs_of(target: Target, example: Example, ctx: Context, which: str) -> dict[str, np.ndarray]:
    plan, arena = materialize.plan(target.stage, example)
    result = ctx.caller.call(plan, arena)
    if result.error is not None:
        raise Failure(f"{target.label} {result.error.headline()} ({which})", result.error.trace, result.error.kind)
    return output_views(plan, result.arena)


def verify_independent(target: Target, example: Example, ctx: Context) -> dict:
    """Raises Failure when changing one request's inputs changes another request's outputs."""
    twin = target.stage.twin(example)
    if twin is None:
        label("independent: one request or none (nothing to compare)")
        return {}
    changed, r = twin
    label("independent: compared")
    first = outputs_of(target, example, ctx, "the drawn inputs")
    second = outputs_of(target, changed, ctx, f"request {r}'s inputs changed")
    for name, view in first.items():
        differs = element_bytes_differ(view, second[name]).reshape(len(view), -1).any(axis=1)
        differs[r] = False
        if differs.any():
            j = int(np.argmax(differs))
            raise Failure(f"{target.label}: changing request {r}'s inputs changed request {j}'s {name}: "
                          f"{output_values(view[j])}, then {output_values(second[name][j])}",
                          "no information may flow between requests: each request's outputs are a function of "
                          "its own inputs (and the shared scalars)")
    return {}


def run(target: Target, ctx: Context) -> Outcome:
    return search(target, "independent", "valid", ctx.profile.count("hazard", ctx.examples), verify_independent, ctx)


INDEPENDENT = Check("independent", "one request's inputs changed: every other request's outputs keep their bytes", 25,
                    applies, run, lambda target, profile, examples: profile.count("hazard", examples))

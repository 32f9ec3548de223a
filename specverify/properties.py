"""Properties of a production call beyond its output bytes, checked on CUDA targets (registered checks).

- `no-sync`: the call never synchronizes the device with the host (CUDA's sync debug mode as an error);
- `launches`: how many device activities (kernels, copies, fills) one call launches, at most the bound
  the stage's record gives its backend (`Stage.launches`); the largest count seen is reported either way;
- `graph-replay`: the call captured in a CUDA graph and replayed gives the bytes the contract requires
  (not asked of a stage that takes host lists: their copy to the device cannot be captured).
Each draws a tenth of the valid tier's examples (at least 3), the same inputs as that tier's start.
"""
from __future__ import annotations

from specverify import materialize
from specverify.backends import Target
from specverify.checks import Check, Context, Outcome, register
from specverify.harness import Failure, expect, judge
from specverify.stage import Example


def on_cuda(target: Target) -> str | None:
    if target.device != "cuda":
        return "a device property: checked on CUDA targets"
    if target.stage.host or target.backend.name == "oracle":
        return "host code"
    return None


def capturable(target: Target) -> str | None:
    """Graph replay needs every array argument on the device: a stage that takes host lists cannot be
    captured (its call copies them to the device)."""
    lists = [f.name for f in target.stage.inputs if f.dtype == "int" and f.shape]
    if lists:
        return f"takes host lists ({', '.join(lists)}): a CUDA graph cannot capture their copy to the device"
    return on_cuda(target)


def planned(target: Target, profile, examples: int | None) -> int:
    return max(3, profile.count("valid", examples) // 10)


def call_with(probe: str, target: Target, example: Example, ctx: Context):
    plan, arena = materialize.plan(target.stage, example)
    return ctx.caller.call(plan, arena, probe=probe)


def verify_no_sync(target: Target, example: Example, ctx: Context) -> dict:
    result = call_with("no_sync", target, example, ctx)
    if result.error is not None:
        words = "synchronized the device with the host inside the call" if "synchroniz" in result.error.text \
            else result.error.headline()
        raise Failure(f"{target.label} {words}: {result.error.text}", result.error.trace, "sync")
    return {}


def verify_launches(target: Target, example: Example, ctx: Context) -> dict:
    result = call_with("launches", target, example, ctx)
    if result.error is not None:
        raise Failure(f"{target.label} {result.error.headline()}", result.error.trace, result.error.kind)
    count = int(result.measures.get("launches", 0))
    bound = target.stage.launches.get(target.backend.name)
    if bound is not None and count > bound:
        kernels = ", ".join(map(str, result.measures.get("kernels", [])))
        raise Failure(f"{target.label} launched {count} device activities in one call (its record allows "
                      f"{bound}): {kernels}", kind="launches")
    return {"launches": count}


def verify_graph_replay(target: Target, example: Example, ctx: Context) -> dict:
    expected = expect(target.stage, example)
    result = call_with("graph_replay", target, example, ctx)
    failure = judge(target.stage, example, expected, result, f"{target.label} (captured in a CUDA graph, replayed)")
    if failure is not None:
        raise failure
    return {}


def property_check(name: str, doc: str, order: int, verify, applies=on_cuda) -> Check:
    def run(target: Target, ctx: Context) -> Outcome:
        from specverify.search import search

        return search(target, name, "valid", planned(target, ctx.profile, ctx.examples), verify, ctx)

    return Check(name, doc, order, applies, run, planned)


NO_SYNC = register(property_check("no-sync", "no device-to-host synchronization inside the call", 40,
                                  verify_no_sync))
LAUNCHES = register(property_check("launches", "device launches per call, within the record's bound", 41,
                                   verify_launches))
GRAPH_REPLAY = register(property_check("graph-replay", "a CUDA-graph capture replays to the same bytes", 42,
                                       verify_graph_replay, capturable))

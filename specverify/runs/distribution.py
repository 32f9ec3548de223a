"""The `distribution` check: a sampler judged by the laws its output must follow (`specverify.judge.laws`),
not by its bytes. Asked by default of an implementation that declares its random numbers its own
(`specverify.records.randomness`), and on request (`--check distribution`) of any target of a stage with
random numbers, ours included: a cross-check of a replayed declaration.

For each fixed panel (`specverify.strategies.panels.PANELS`) the stage's adapter builds one launch of
`Profile.distribution_rows` independent rows plus a quarter as many pairs of rows with the same drafts, and:
1. calls it, judging by bytes what no draw decides (inputs unchanged, nothing written outside the rows the
   contract writes, guards and gaps intact), and reads each row's tokens and accepted count (a malformed row
   fails at once);
2. tests the length law, the acceptance and the emitted token's law at every position, and that the pairs
   agree as often as independent rows do;
3. calls it again with the generator advanced as the contract documents (fresh uniforms where they are inputs)
   and tests that each row agrees with its first call as often as independent draws do;
4. where a seed and offset key the generator, calls the first launch again: the same bytes are required.
All the tests of a target share one family-wise false-alarm rate (`laws.FAMILY_ALPHA`, Bonferroni); the panels'
seeds follow the run's seed, so a verdict replays. Every outcome gives per position the expected acceptance
sum_v min(p, q) beside the rate the implementation showed, and the tier's measured power against planted bugs.
"""
from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from specverify.judge import laws, materialize
from specverify.judge.compare import element_bytes_differ
from specverify.judge.harness import Failure, expect, judge, output_views
from specverify.records.backends import Target
from specverify.runs.profiles import seed_for
from specverify.runs.protocol import Check, Context, Outcome
from specverify.strategies import panels

INTERPRETED_SHARE = 100      # Triton's interpreter: about 25 ms a row (seeded.chain_sampling), a hundredth of the rows
POWER_TABLE = Path(__file__).with_name("distribution_power.json")


def applies(target: Target) -> str | None:
    return None if target.stage.randomness is not None else "the stage draws no random numbers"


def rows_for(target: Target, ctx: Context) -> int:
    rows = ctx.profile.distribution_rows
    return max(200, rows // INTERPRETED_SHARE) if target.slow else rows


def planned(target: Target, profile, examples: int | None) -> int:
    """Calls it makes: two per panel, three where a seed keys the generator."""
    keyed = target.stage.randomness is not None and target.stage.randomness.advanced is not None
    return len(panels.PANELS) * (3 if keyed else 2)


def call(target: Target, example, ctx: Context, judged: bool) -> tuple[dict, dict, bytes]:
    """Call `example`; (its output views, which of their elements it wrote, the bytes of its slots). `judged`:
    the bytes no draw decides are judged too."""
    stage = replace(target.stage, own_randomness=True)
    plan, arena = materialize.plan(stage, example)
    before = arena.copy()
    result = ctx.caller.call(plan, arena)
    if judged:
        failure = judge(stage, example, expect(stage, example), result, target.label)
    elif result.error is not None:
        failure = Failure(f"{target.label} {result.error.headline()}", result.error.trace, result.error.kind)
    else:
        failure = None
    if failure is not None:
        raise failure
    written = {name: slot.view_of(element_bytes_differ(slot.split(before)[1], slot.split(result.arena)[1]))
               for name, slot in plan.slots.items() if slot.role != "input"}
    return (output_views(plan, result.arena), written,
            b"".join(result.arena[s.offset:s.end].tobytes() for s in plan.slots.values()))


def read(target: Target, example, called: tuple, what: str) -> tuple[np.ndarray, np.ndarray]:
    found = target.stage.randomness.emitted(example, *called[:2])
    if isinstance(found, str):
        raise Failure(f"{target.label} emitted a malformed row ({what}): {found}", kind="wrong")
    return found


def panel_tests(target: Target, ctx: Context, panel, rows: int, outcome: Outcome) -> list[laws.Verdict]:
    """The tests of one panel (steps 1 to 4); the calls counted in `outcome.examples`."""
    source = target.stage.randomness
    panel = panels.one_hot(panel) if source.one_hot else panel
    first = panels.launch(panel, rows, seed_for(ctx.run_seed, target.stage.name, f"distribution:{panel.name}"))
    example = source.launch_inputs(first)
    called = call(target, example, ctx, judged=True)
    outcome.examples += 1
    tokens, n = read(target, example, called, f"panel {panel.name}")
    p, q, drafts = panel.target, panel.draft, first.drafts
    found = laws.sampled_laws(p, q, tokens[:rows], n[:rows], f"panel {panel.name}")
    pairs = slice(rows, None)
    a, b = tokens[pairs][0::2], tokens[pairs][1::2]
    found.append(laws.agreement_test((a == b).all(1), laws.agreement(p, q, drafts[pairs][0::2]),
                                     f"panel {panel.name}: rows with the same drafts in one launch agree as often "
                                     f"as independent rows"))
    again = source.advanced(example) if source.advanced is not None else \
        source.launch_inputs(replace(first, rng=np.random.default_rng(first.rng.integers(2**63))))
    tokens2, _ = read(target, again, call(target, again, ctx, judged=False), f"panel {panel.name}, the next call")
    outcome.examples += 1
    found.append(laws.agreement_test((tokens[:rows] == tokens2[:rows]).all(1), laws.agreement(p, q, drafts[:rows]),
                                     f"panel {panel.name}: a row agrees with itself in the next call (the generator "
                                     f"advanced as documented) as often as independent draws"))
    if source.advanced is not None:
        outcome.examples += 1
        if call(target, example, ctx, judged=False)[2] != called[2]:
            raise Failure(f"{target.label}: the same seed and offset gave other bytes (panel {panel.name}, the first "
                          f"launch called twice)", kind="wrong")
    shown = [accepted / reached if reached else float("nan")
             for accepted, reached in laws.accepted_at(n[:rows], panel.k)]
    outcome.acceptance[panel.name] = {
        "expected": [round(float(x), 6) for x in laws.acceptance(p, q)], "shown": [round(x, 6) for x in shown]}
    return found


def rerun(target: Target, ctx: Context) -> str:
    """The command that draws the same panels again (their seeds follow the run's seed)."""
    which = f"--backend {target.backend.name}" if target.backend.trusted else f"--impl {target.source}"
    declared = " --declare FILE (its declaration)" if not target.backend.trusted else ""
    return (f"rerun: specverify check --stage {target.stage.name} {which}{declared} --device {target.device} "
            f"--check distribution --profile {ctx.profile.name} --seed {ctx.run_seed}")


def power_lines() -> list[str]:
    """The tier's measured power against planted bugs, from the committed table (bench/distribution_power.py)."""
    try:
        table = json.loads(POWER_TABLE.read_text())
    except (OSError, ValueError):
        return ["power against planted bugs: not measured (no distribution_power.json)"]
    found = ", ".join(f"{bug} {row['failed']}/{row['runs']}" for bug, row in table["bugs"].items())
    return [f"power against planted bugs ({table['stage']}, {table['rows']} rows per panel, the runs that failed): "
            f"{found}; an honest sampler failed {table['honest']['failed']}/{table['honest']['runs']}"]


def run(target: Target, ctx: Context) -> Outcome:
    outcome = Outcome(target.stage.name, target.backend.name, target.device, "distribution",
                      planned=planned(target, ctx.profile, ctx.examples))
    started = time.perf_counter()
    rows = rows_for(target, ctx)
    verdicts: list[laws.Verdict] = []
    try:
        for panel in panels.PANELS:
            verdicts += panel_tests(target, ctx, panel, rows, outcome)
    except Failure as exc:
        outcome.status, outcome.kind, outcome.headline = "failed", exc.kind or "wrong", exc.headline
        outcome.report = "\n".join([exc.headline, exc.detail or "", rerun(target, ctx)]).strip()
    else:
        bad = laws.failing(verdicts)
        bar = laws.FAMILY_ALPHA / len(verdicts)
        if bad:
            outcome.status, outcome.kind = "failed", "distribution"
            worst = bad[0]
            outcome.headline = (f"{target.label} does not sample the law: {worst.test}: p = {worst.p_value:.2g} < "
                                f"{bar:.2g} ({worst.detail})")
            outcome.report = "\n".join([outcome.headline, f"{len(bad)} of {len(verdicts)} tests failed at a "
                                        f"family-wise false-alarm rate of {laws.FAMILY_ALPHA:g}:"] +
                                       [f"  {v.test}: p = {v.p_value:.3g} ({v.detail})" for v in bad] +
                                       [rerun(target, ctx)])
        outcome.notes.append(f"{len(verdicts)} tests over {len(panels.PANELS)} panels of {rows} rows, family-wise "
                             f"false-alarm rate {laws.FAMILY_ALPHA:g}; the smallest p-value "
                             f"{min(v.p_value for v in verdicts):.3g}")
    for name, table in outcome.acceptance.items():
        pairs = ", ".join(f"{e:.4f}/{s:.4f}" for e, s in zip(table["expected"], table["shown"]))
        outcome.notes.append(f"acceptance per position, panel {name} (expected sum min(p, q) / shown): {pairs}")
    if target.slow:
        outcome.notes.append(f"{rows} rows per panel, a hundredth of the profile's, for Triton's interpreter (a "
                             f"program per row, tens of milliseconds each): a sanity check with little power; on "
                             f"the GPU the profile's rows")
    outcome.notes += power_lines()
    outcome.seconds = time.perf_counter() - started
    return outcome


DISTRIBUTION = Check("distribution", "the laws a sampler's output follows (for random numbers of its own)", 15,
                     applies, run, planned, by_default=lambda target: target.stage.own_randomness)

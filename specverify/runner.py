"""Hypothesis-driven search for an input on which one implementation breaks its stage's contract.

`check` runs each tier the stage draws (valid, hazard, invalid) as its own Hypothesis search; the first
failure is shrunk, written as a case file, and reported with its replay command.
"""
from __future__ import annotations

import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from hypothesis import errors as hypothesis_errors
from hypothesis import given, seed as hypothesis_seed

from specverify import cases, env
from specverify.harness import Failure, OracleError, Target, error_text, inputs_table, verify
from specverify.profiles import Profile, seed_for
from specverify.stage import TIERS, DrawContext, Example
from specverify.strategies.blocks import coverage
from specverify.strategies.generic import invalid_tier


@dataclass
class Outcome:
    stage: str
    backend: str
    device: str
    status: str = "passed"                 # "passed", "failed" or "error" (the search itself broke)
    examples: Counter = field(default_factory=Counter)   # calls per tier, shrinking included
    seconds: float = 0.0
    found_after: int | None = None          # examples drawn until the first failure (before shrinking)
    report: str = ""                        # the full failure report
    headline: str = ""                      # its first line
    case: Path | None = None
    coverage: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.examples.values())


def draw_context(target: Target) -> DrawContext:
    return DrawContext(small=target.backend == "triton" and target.device == "cpu")


def replay_command(path: Path, target: Target) -> str:
    backend = f"--impl {target.source}" if target.backend == "impl" else f"--backend {target.backend}"
    return f"specverify replay {path} {backend} --device {target.device}"


def failure_report(target: Target, example: Example, exc: BaseException, command: str | None) -> str:
    headline = exc.headline if isinstance(exc, Failure) else str(exc)
    lines = [f"FAILED {headline}", f"  tier: {example.tier}" + (f" ({example.bad_field}: {example.rule})"
                                                                if example.tier == "invalid" else "")]
    detail = getattr(exc, "detail", "")
    if detail:
        lines += ["  " + line for line in detail.rstrip().splitlines()]
    lines.append("  inputs:")
    lines += ["    " + line for line in inputs_table(target.stage, example).rstrip().splitlines()]
    if command:
        lines.append(f"  replay: {command}")
    return "\n".join(lines)


def check(target: Target, profile: Profile, examples: int | None = None, run_seed: int = 0,
          cases_dir: Path | None = None, progress: Callable[[int], None] | None = None) -> Outcome:
    """Search every tier of target's stage; stop at the first failure."""
    env.prepare()
    outcome = Outcome(target.stage.name, target.backend, target.device)
    started = time.perf_counter()
    seen = Counter()
    token = coverage.set(seen)
    try:
        for tier in TIERS:
            make = (partial(invalid_tier, target.stage) if tier == "invalid"   # hand-written and record rules
                    else target.stage.strategy(tier))
            if make is None or (tier == "invalid" and target.backend == "impl"):
                continue  # outside implementations are not required to validate their arguments
            if not search(target, tier, make(draw_context(target)), profile, examples, run_seed,
                          cases_dir, outcome, progress):
                break
    finally:
        coverage.reset(token)
    outcome.coverage = seen
    outcome.seconds = time.perf_counter() - started
    return outcome


def search(target, tier, strategy, profile, examples, run_seed, cases_dir, outcome, progress) -> bool:
    """One Hypothesis search of one tier; False when it found a failure (recorded in outcome)."""
    failing: list[Example] = []

    def probe(example: Example) -> None:
        outcome.examples[tier] += 1
        if progress:
            progress(outcome.total)
        try:
            verify(target, example)
        except (Failure, OracleError):
            if outcome.found_after is None:
                outcome.found_after = outcome.total
            failing.append(example)
            raise

    test = hypothesis_seed(seed_for(run_seed, target.stage.name, tier))(
        profile.hypothesis_settings(profile.count(tier, examples))(given(strategy)(probe)))
    try:
        test()
        return True
    except (Failure, OracleError, hypothesis_errors.Flaky) as exc:
        if isinstance(exc, hypothesis_errors.Flaky):
            if not failing:
                raise
            exc = Failure(f"{target.label} is nondeterministic: it failed on an input, then passed on it "
                          f"({type(exc).__name__})")
        example = failing[-1]          # Hypothesis re-runs the shrunk example last
        path = None
        if cases_dir is not None:
            record = {"backend": target.backend, "device": target.device, "source": target.source,
                      "seed": run_seed, "profile": profile.name, "tier": tier, "versions": env.versions(),
                      "failure": getattr(exc, "headline", str(exc))}
            path = cases.save(cases_dir, target.stage.name, example, record)
        outcome.status = "failed" if isinstance(exc, Failure) else "error"
        outcome.case = path
        outcome.headline = getattr(exc, "headline", str(exc))
        outcome.report = failure_report(target, example, exc, replay_command(path, target) if path else None)
        return False
    except Exception as exc:  # a strategy, the oracle's inputs or the harness broke, not the target
        outcome.status = "error"
        outcome.headline = f"the search for {target.label} ({tier} tier) broke: {error_text(exc)}"
        frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
        outcome.report = outcome.headline + "\n" + "".join(frames[-4:])
        return False

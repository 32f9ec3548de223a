"""Hypothesis profiles: how many examples each tier draws, and whether runs are reproducible.

- ci: derandomized (a fixed seed per stage and tier), fixed counts sized for a 2-core machine, deadline
  off, no example database: the same inputs on every run.
- nightly: a fresh seed per run (printed, so a run can be replayed), ten times the examples, the example
  database on, Hypothesis' targeting phase steering towards the boundary metrics strategies report.
- conformance: derandomized, database off, every implementation in a worker process, every example run
  twice with two guard patterns (an out-of-bounds read shows).

Outside implementations always run in worker processes, whatever the profile. Time limits: per call, and
per target (all its checks together); in this process the per-call limit interrupts Python code only.
"""
from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, Verbosity, settings


@dataclass(frozen=True)
class Profile:
    name: str
    examples: dict[str, int]     # per tier, for one stage on one backend
    randomized: bool             # a fresh seed per run (else seed 0)
    database: bool               # keep Hypothesis' example database (.hypothesis/)
    isolated: bool = False       # every implementation in a worker process
    guard_check: bool = False    # every example twice, with two guard patterns
    guard_every: int = 0         # without guard_check: the 1st, (N+1)th, (2N+1)th... example of a search twice
    example_timeout: float | None = 300.0   # seconds per call
    target_timeout: float | None = None     # seconds per target, all its checks
    worker_memory: int | None = 8 << 30    # bytes of address space a CPU worker may map (RLIMIT_AS)
    distribution_rows: int = 20_000         # the distribution tier: independent rows per panel launch

    def count(self, tier: str, examples: int | None = None) -> int:
        """Examples for a tier; `examples` (--examples) sets the valid tier, the others scale with it."""
        if examples is None:
            return self.examples[tier]
        return examples if tier == "valid" else max(1, examples // 4)

    def run_seed(self, seed: int | None) -> int:
        """The user-level seed of a run: given, else 0 (derandomized) or fresh (randomized)."""
        if seed is not None:
            return seed
        return secrets.randbits(32) if self.randomized else 0

    def hypothesis_settings(self, count: int) -> settings:
        return settings(
            max_examples=count,
            deadline=None,
            database=settings.default.database if self.database else None,
            derandomize=False,   # reproducibility comes from the explicit seed instead (see seed_for)
            phases=tuple(Phase) if self.randomized else tuple(p for p in Phase if p not in (Phase.explain, Phase.target)),
            suppress_health_check=list(HealthCheck),
            report_multiple_bugs=False,
            print_blob=False,
            verbosity=Verbosity.quiet,
        )


PROFILES = {
    "ci": Profile("ci", {"valid": 100, "hazard": 25, "invalid": 25}, randomized=False, database=False,
                  guard_every=4, target_timeout=900.0),
    "nightly": Profile("nightly", {"valid": 1000, "hazard": 250, "invalid": 250}, randomized=True, database=True,
                       guard_every=4, distribution_rows=200_000),
    "conformance": Profile("conformance", {"valid": 200, "hazard": 50, "invalid": 50}, randomized=False,
                           database=False, isolated=True, guard_check=True, example_timeout=120.0,
                           target_timeout=1800.0),
}


def seed_for(run_seed: int, stage: str, tier: str) -> int:
    """The Hypothesis seed of one stage and tier: every backend of a run sees the same draws."""
    digest = hashlib.sha256(f"{run_seed}:{stage}:{tier}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def keep_draws_to_the_seed() -> None:
    """Hypothesis (6.131 and later) also draws literal constants it finds in the source of every module loaded
    in the process that is not installed in site-packages: the draws then depend on which modules happen to be
    loaded (the command line and pytest load different ones, a vendor's kernels add theirs) and on where
    specverify is installed. A run's draws must depend on its seed, stage and tier only, so that pool stays
    empty here (Hypothesis's own constants remain)."""
    try:
        from hypothesis.internal.conjecture import providers
    except ImportError:  # pragma: no cover - a Hypothesis without the provider module
        return
    if hasattr(providers, "_get_local_constants"):
        empty = providers.Constants()
        providers._get_local_constants = lambda: empty


keep_draws_to_the_seed()
for _profile in PROFILES.values():  # also usable as `pytest --hypothesis-profile NAME`
    settings.register_profile(_profile.name, _profile.hypothesis_settings(_profile.examples["valid"]))

"""The distribution tier's power, measured: `specverify check --check distribution` run on each planted sampler
of `specverify.mutation.planted_samplers` (declared `randomness = "own"`) under RUNS run seeds, at the ci profile's
rows; the share of runs that failed is written to specverify/runs/distribution_power.json, which every
distribution-tier report quotes.

    python bench/distribution_power.py [RUNS]
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

from specverify.cli import main
from specverify.mutation import planted_samplers
from specverify.runs import distribution
from specverify.runs.profiles import PROFILES

STAGE = "seeded.chain_sampling"


def failed_runs(function: str, runs: int, folder: Path) -> int:
    """How many of `runs` seeds fail the distribution check of planted sampler `function`."""
    declare = folder / "own.toml"
    declare.write_text('randomness = "own"\n')
    failed = 0
    for seed in range(runs):
        report = folder / f"{function}-{seed}.json"
        main(["check", "--stage", STAGE, "--impl", f"specverify.mutation.planted_samplers:{function}", "--declare",
              str(declare), "--check", "distribution", "--device", "cpu", "--seed", str(seed), "--json", str(report)])
        outcome = json.loads(report.read_text())["outcomes"][0]
        if outcome["status"] not in ("passed", "failed"):
            raise SystemExit(f"{function} seed {seed}: {outcome['status']}: {outcome['headline']}")
        failed += outcome["status"] == "failed"
    return failed


def measure(runs: int) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        bugs = {bug: {"failed": failed_runs(f.__name__, runs, Path(folder)), "runs": runs}
                for bug, f in planted_samplers.BUGS.items()}
        honest = {"failed": failed_runs("honest", runs, Path(folder)), "runs": runs}
    return {"stage": STAGE, "rows": PROFILES["ci"].distribution_rows, "bugs": bugs, "honest": honest,
            "command": f"python bench/distribution_power.py {runs}"}


if __name__ == "__main__":
    table = measure(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
    tmp = distribution.POWER_TABLE.with_suffix(".tmp")
    tmp.write_text(json.dumps(table, indent=1) + "\n")
    os.replace(tmp, distribution.POWER_TABLE)
    print(json.dumps(table, indent=1))

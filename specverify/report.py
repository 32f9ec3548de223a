"""Machine-readable reports of a check run (JSON), and outcomes to and from JSON."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from specverify import env
from specverify.cases import write_atomic
from specverify.runner import Outcome


def outcome_to_json(o: Outcome) -> dict:
    return {"stage": o.stage, "backend": o.backend, "device": o.device, "status": o.status,
            "examples": dict(o.examples), "found_after": o.found_after, "seconds": round(o.seconds, 3),
            "headline": o.headline,
            "report": o.report, "case": str(o.case) if o.case else None, "coverage": dict(o.coverage)}


def outcome_from_json(d: dict) -> Outcome:
    return Outcome(d["stage"], d["backend"], d["device"], status=d["status"], examples=Counter(d["examples"]),
                   found_after=d["found_after"],
                   seconds=d["seconds"], report=d["report"], headline=d["headline"],
                   case=Path(d["case"]) if d["case"] else None, coverage=Counter(d["coverage"]))


def write_json_report(path: Path, outcomes: list[Outcome], profile: str, run_seed: int) -> None:
    report = {"versions": env.versions(), "profile": profile, "seed": run_seed,
              "outcomes": [outcome_to_json(o) for o in outcomes]}
    write_atomic(Path(path), json.dumps(report, indent=1).encode())

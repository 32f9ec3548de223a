"""A planted kernel (tests/planted_*.py) checked as a user checks one: `specverify check --impl`, on the CPU, at
the ci budget and seed 0; it must fail."""
from __future__ import annotations

import json
from pathlib import Path

from specverify.cli import main
from specverify.files import cases


def planted_outcomes(tmp_path, capsys, stage: str, impl: str, *extra: str) -> dict[str, dict]:
    """Each check's outcome (report JSON) of the run of `impl` ("module:function") on `stage`."""
    report = tmp_path / "r.json"
    status = main(["check", "--stage", stage, "--impl", impl, "--device", "cpu", "--json", str(report),
                   "--findings", str(tmp_path / "f"), *extra])
    capsys.readouterr()
    outcomes = {o["check"]: o for o in json.loads(report.read_text())["outcomes"]}
    assert status == 1, outcomes
    return outcomes


def caught(tmp_path, capsys, stage: str, impl: str, check: str = "valid", within: int = 100, *extra: str):
    """(the outcome, the shrunk case's Example) of `check`, which must fail within `within` examples."""
    outcome = planted_outcomes(tmp_path, capsys, stage, impl, "--check", check, *extra)[check]
    assert outcome["status"] == "failed" and outcome["found_after"] <= within, outcome
    return outcome, cases.load(Path(outcome["case"]))[1]

"""The mutation gate: a fixed sample of mutants of our own kernels (`tests/mutant_gate.json`), one or two per
family and backend, that the suite must kill at the ci budget, each within twice the examples it took when
recorded (plus SLACK): a weaker strategy shows up here as a survivor or a slower kill.

The whole nightly measurement is `specverify mutate --backend torch|triton` (README); this file is the slice
CI can afford. Re-record after a deliberate change of a strategy or a kernel with
`SPECVERIFY_RECORD_GATE=1 pytest tests/mutation/test_mutant_gate.py -n 0` (one test at a time: each rewrites its
entry's counts in the JSON; a mutant whose id no longer exists must be replaced by hand)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from specverify.mutation import mutants
from specverify.mutation import mutation_run as mutate
from specverify.records import registry

GATE = Path(__file__).resolve().parents[1] / "mutant_gate.json"
SLACK = 2                     # examples a kill may take beyond twice the recorded count
RECORD = os.environ.get("SPECVERIFY_RECORD_GATE") == "1"
ENTRIES = json.loads(GATE.read_text())["mutants"]


def options(tmp_path: Path) -> mutate.Options:
    gate = json.loads(GATE.read_text())
    return mutate.Options(profile=gate["profile"], seed=gate["seed"], out=tmp_path)


def test_the_gate_samples_every_family_on_both_backends():
    families = {s.family for s in registry.all_stages().values()}
    covered = {(registry.all_stages()[e["stage"]].family, e["backend"]) for e in ENTRIES}
    assert {(f, b) for f in families for b in ("torch", "triton")} <= covered


@pytest.mark.parametrize("entry", ENTRIES, ids=[f"{e['backend']}-{e['id']}" for e in ENTRIES])
def test_a_gate_mutant_is_killed_within_its_recorded_examples(entry, tmp_path):
    impl = registry.all_stages()[entry["stage"]].impls[entry["backend"]]
    found = {m.id: m for m in mutants.mutants(impl)}
    assert entry["id"] in found, f"gate mutant {entry['id']} is no longer a mutant of {impl}: pick another"
    result = mutate.run_mutant(mutate.Subject(entry["stage"], impl), found[entry["id"]], options(tmp_path),
                               deadline=600.0)
    if RECORD:
        entry.update(check=result.check, examples=result.examples, outcome=result.outcome)
        gate = json.loads(GATE.read_text())
        gate["mutants"] = [entry if e["id"] == entry["id"] and e["backend"] == entry["backend"] else e
                           for e in gate["mutants"]]
        tmp = GATE.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(gate, indent=1) + "\n")
        tmp.replace(GATE)
    assert result.outcome == "killed", f"{entry['id']}: {result.outcome} ({result.headline or 'every check passed'})"
    assert result.check == entry["check"], f"{entry['id']}: killed by {result.check}, recorded {entry['check']}"
    assert result.examples <= 2 * entry["examples"] + SLACK, (
        f"{entry['id']}: killed after {result.examples} examples, recorded {entry['examples']}: a weaker search")


def test_the_equivalence_file_names_live_mutants():
    """tests/mutant_equivalent.toml (survivors we judged equivalent) parses and names mutants that exist."""
    judged = mutate.load_equivalent(GATE.with_name("mutant_equivalent.toml"))
    impls = {s.impls[b] for s in registry.all_stages().values() for b in ("torch", "triton") if b in s.impls}
    known = {m.id for impl in sorted(impls) for m in mutants.mutants(impl)}
    assert mutate.stale(judged, known) == []

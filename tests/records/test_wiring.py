"""Records wire themselves from the naming scheme (`specverify.records.wiring`), and the lists of stages
people read agree with the registry.

A test-only stage `toy.count_ones` is added the way a real one is: an oracle, two kernels, the strategies and a
worked example, each named after the stage in its family's module, and a record that names none of them.
"""
from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
from hypothesis import strategies as st

from specverify.records import registry
from specverify.records.stage import Example, I, O
from specverify.records.wiring import WiringError, sources_exist, unused_pieces, wired

README = Path(__file__).resolve().parents[2] / "README.md"


def toy_family(monkeypatch, drop: str = "") -> dict[str, types.ModuleType]:
    """Modules of family `toy` in the oracles, kernels, strategies and stages packages, every piece of stage
    `count_ones` in them but the one named `drop` ("module:attribute")."""
    def ones(*, bits, out):
        out[0] = int(bits.sum())

    pieces = {
        "specverify.oracles.toy": {"count_ones": ones},
        "specverify.kernels.torch.toy": {"count_ones": ones},
        "specverify.kernels.triton.toy": {"count_ones": ones},
        "specverify.strategies.toy": {f"count_ones_{suffix}": (lambda context: st.nothing())
                                      for suffix in ("valid", "hazard", "invalid", "invariants", "table")},
        "specverify.stages.toy": {"count_ones_worked": lambda: Example("valid", inputs={})},
    }
    modules = {}
    for name, attributes in pieces.items():
        module = types.ModuleType(name)
        for attribute, value in attributes.items():
            if f"{name}:{attribute}" != drop:
                setattr(module, attribute, value)
        monkeypatch.setitem(sys.modules, name, module)
        modules[name] = module
    return modules


def toy_record(**fields):
    return wired(name="toy.count_ones", inputs=(I("bits", "bool", "N"),), outputs=(O("out", "int32", "1"),),
                 **fields)


def test_a_record_finds_every_piece_by_the_stage_name(monkeypatch):
    modules = toy_family(monkeypatch)
    stage = toy_record()
    assert stage.oracle is modules["specverify.oracles.toy"].count_ones
    strategies = modules["specverify.strategies.toy"]
    assert (stage.valid, stage.hazard, stage.invalid, stage.invariants, stage.rows) == (
        strategies.count_ones_valid, strategies.count_ones_hazard, strategies.count_ones_invalid,
        strategies.count_ones_invariants, strategies.count_ones_table)
    assert stage.worked is modules["specverify.stages.toy"].count_ones_worked
    assert dict(stage.impls) == {"torch": "specverify.kernels.torch.toy:count_ones",
                                 "triton": "specverify.kernels.triton.toy:count_ones"}


def test_a_given_field_overrides_its_piece_and_none_says_the_stage_has_none(monkeypatch):
    toy_family(monkeypatch, drop="specverify.strategies.toy:count_ones_hazard")
    stage = toy_record(hazard=None, invariants=None, impls={"numpy": "specverify.kernels.torch.toy:count_ones"})
    assert stage.hazard is None and stage.invariants is None and list(stage.impls) == ["numpy"]


def test_a_host_stage_gets_the_numpy_backend():
    stage = registry.all_stages()["scv.adaptive_k"]
    assert dict(stage.impls) == {"numpy": "specverify.kernels.numpy.scv:adaptive_k"}


@pytest.mark.parametrize("drop, words", [
    ("specverify.oracles.toy:count_ones", "no oracle specverify.oracles.toy:count_ones"),
    ("specverify.strategies.toy:count_ones_invalid", "no invalid strategy specverify.strategies.toy:count_ones_invalid"),
    ("specverify.strategies.toy:count_ones_table", "no table strategy"),
    ("specverify.stages.toy:count_ones_worked", "no worked example specverify.stages.toy:count_ones_worked"),
    ("specverify.kernels.triton.toy:count_ones", "no triton kernel specverify.kernels.triton.toy:count_ones"),
])
def test_a_missing_piece_names_the_stage_and_the_piece(monkeypatch, drop, words):
    toy_family(monkeypatch, drop=drop)
    with pytest.raises(WiringError, match="stage toy.count_ones \\(module toy\\): " + re.escape(words)):
        toy_record()


def test_sources_are_checked_without_importing_the_kernel_module():
    assert sources_exist("specverify.kernels.triton.tree:pack_mask")
    assert not sources_exist("specverify.kernels.triton.tree:pack_masks")
    assert not sources_exist("specverify.kernels.triton.no_such_module:pack_mask")


def readme_stage_table() -> dict[str, tuple[set[str], set[str]]]:
    """The README's "Stages" table: family -> (stage names, backends named), its rows merged by family; a
    parenthesis in a cell is a remark, not a stage."""
    text = README.read_text().split("\n## Stages\n", 1)[1].strip().split("\n\n", 1)[0]
    found: dict[str, tuple[set[str], set[str]]] = {}
    for row in text.splitlines()[2:]:
        family, stages, backends = (cell.strip() for cell in row.strip("|").split("|"))
        while re.search(r"\([^()]*\)", stages):
            stages = re.sub(r"\([^()]*\)", "", stages)
        names, named = found.setdefault(re.match(r"`(\w+)`", family).group(1), (set(), set()))
        names.update(re.findall(r"`(\w+)`", stages))
        named.update(set(re.findall(r"\b(torch|triton|numpy)\b", backends)))
    return found


def test_the_readme_stage_table_lists_every_stage_and_its_backends():
    expected: dict[str, tuple[set[str], set[str]]] = {}
    for stage in registry.all_stages().values():
        names, backends = expected.setdefault(stage.family, (set(), set()))
        names.add(stage.name.split(".", 1)[1])
        backends.update(stage.impls)
    assert readme_stage_table() == expected


def test_a_piece_no_record_uses_is_an_error(monkeypatch):
    """A strategy left behind by a renamed stage fails the registry's load, naming it; helpers named otherwise
    pass."""
    from specverify.strategies import rejection

    assert unused_pieces(registry.all_stages().values()) == []

    def greedy_old_valid(draw, ctx):      # named like a piece of a stage that no longer exists
        raise AssertionError("never drawn")

    greedy_old_valid.__module__ = rejection.__name__
    monkeypatch.setattr(rejection, "greedy_old_valid", greedy_old_valid, raising=False)
    assert unused_pieces(registry.all_stages().values()) == [
        "specverify.strategies.rejection:greedy_old_valid"]
    registry.all_stages.cache_clear()
    try:
        with pytest.raises(WiringError, match="strategies.rejection:greedy_old_valid is named like a piece"):
            registry.all_stages()
    finally:
        monkeypatch.undo()
        registry.all_stages.cache_clear()

"""The contracts a reader sees: every record is complete, `specverify show` prints it, docs/stages.md is
current, and every worked example passes on every backend that runs here."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from specverify import __version__, backends, contract, registry
from specverify.cli import main
from specverify.session import verify_example as verify
from specverify.stage import TIERS, Example

STAGES = list(registry.all_stages().values())


def test_docs_are_current():
    expected = contract.render_all()
    found = contract.DOCS.read_text() if contract.DOCS.exists() else ""
    assert found == expected, (f"docs/stages.md is out of date with the stage records: regenerate it with "
                               f"`{contract.REGENERATE}` and commit it")


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_record_is_complete(stage):
    missing = [f.name for f in stage.inputs + stage.outputs if not f.doc.strip()]
    assert not missing, f"{stage.name}: fields without a doc: {', '.join(missing)}"
    assert stage.doc.strip(), f"{stage.name}: no doc line"
    assert stage.semantics.strip(), f"{stage.name}: no semantics"
    drawn = {t for t in TIERS if stage.strategy(t) is not None}
    assert set(stage.tiers) <= set(TIERS), f"{stage.name}: unknown tiers {set(stage.tiers) - set(TIERS)}"
    undescribed = [t for t in TIERS if t in drawn and not stage.tiers.get(t, "").strip()]
    assert not undescribed, f"{stage.name}: tiers drawn but not described: {', '.join(undescribed)}"
    assert stage.worked is not None, f"{stage.name}: no worked example"
    example = stage.worked()
    assert isinstance(example, Example) and example.tier == "valid"
    assert set(example.inputs) == {f.name for f in stage.inputs}, f"{stage.name}: worked example's inputs"
    if not stage.host:
        assert set(example.outputs) == {f.name for f in stage.outputs}, f"{stage.name}: worked example's outputs"


WORKED_TARGETS = [(stage, backend, device) for stage, backend, device, why in backends.matrix(STAGES)
                  if why is None and stage.worked is not None]


@pytest.mark.parametrize("stage,backend,device", WORKED_TARGETS,
                         ids=lambda x: getattr(x, "name", x))
def test_worked_example_passes(stage, backend, device):
    verify(backends.target(stage, backend, device), stage.worked())


def test_show_prints_the_contract(capsys):
    assert main(["show", "rejection.greedy"]) == 0
    out = capsys.readouterr().out
    greedy = registry.all_stages()["rejection.greedy"]
    for f in greedy.inputs + greedy.outputs:
        assert f"| `{f.name}` |" in out and f.doc in out
    assert "### Contract" in out and "### Worked example" in out and "- **valid**" in out
    # the worked example, with the outputs the oracle computed and the untouched slots marked
    assert "[0] [5, 7, 9, -]" in out and "[1] [4, 3, -, -]" in out and "[3] [-, -, -, -]" in out
    assert "docs/stages.md" in out


def test_show_selects_by_glob_and_refuses_unknown_stages(capsys):
    assert main(["show", "eagle.*", "rejection.greedy"]) == 0
    out = capsys.readouterr().out
    names = [s.name for s in STAGES if s.family == "eagle"] + ["rejection.greedy"]
    assert [line[3:] for line in out.splitlines() if line.startswith("## ")] == names
    assert main(["show", "rejection.nope"]) == 2
    err = capsys.readouterr().out.strip()
    assert len(err.splitlines()) == 1 and "rejection.nope" in err


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"specverify {__version__}"


def test_render_takes_any_record():
    """A record with nothing but the required fields still renders (new families fill in the rest)."""
    bare = dataclasses.replace(STAGES[0], doc="", semantics="", tiers={}, worked=None)
    text = contract.render(bare)
    assert text.startswith(f"## {bare.name}") and "(not written yet)" in text and "(none yet)" in text


def test_values_read_as_written():
    assert contract.number(np.float32(0.1)) == "0.1"
    assert contract.number(np.float32(-0.0)) == "-0.0"
    assert contract.number(np.float64(float(np.float32(0.8)))) == "0.800000011920929"
    assert contract.number(np.float32(np.nan)) == "nan" and contract.number(np.float32(-np.inf)) == "-inf"
    assert contract.number(np.float32(1e-30)) == "1.0e-30"
    lines = contract.array_lines(np.arange(6).reshape(2, 3), np.array([[False] * 3, [False, True, True]]))
    assert lines == ["[0] [0, 1, 2]", "[1] [3, -, -]"]


def test_regenerate_check(tmp_path, capsys):
    path = tmp_path / "stages.md"
    assert contract.main(["--check", "--path", str(path)]) == 1
    assert contract.REGENERATE in capsys.readouterr().err
    assert contract.main(["--path", str(path)]) == 0
    assert contract.main(["--check", "--path", str(path)]) == 0


def test_prose_opens_no_stray_markdown_blocks():
    """A wrapped line of prose must not start with what Markdown reads as a list item or a quote."""
    inside_code, previous, found = False, "", []
    for line in contract.render_all().splitlines():
        if line.startswith("```"):
            inside_code = not inside_code
        elif (not inside_code and previous.strip() and not previous.startswith(("|", "#"))
              and not line.startswith("- ") and contract.RISKY.match(line.lstrip())):
            found.append(line)
        previous = line
    assert not found, f"lines that would open a Markdown list or quote: {found[:3]}"

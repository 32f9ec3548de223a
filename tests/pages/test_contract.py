"""The contracts a reader sees: every record is complete, `specverify show` prints it (for a terminal,
fast, without torch; or as Markdown), docs/stages.md and the packaged contracts are current, the text
names nothing internal, and every worked example passes on every backend that runs here."""
from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from specverify import __version__
from specverify.cli import main
from specverify.pages import contract_data, contract_terminal, contract_text
from specverify.records import backends, registry
from specverify.records.stage import TIERS, Example
from specverify.runs.session import verify_example as verify

STAGES = list(registry.all_stages().values())
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data() -> dict:
    return contract_data.contract_data()


def test_docs_are_current(data):
    expected = contract_text.all_markdown(data)
    found = contract_data.DOCS.read_text() if contract_data.DOCS.exists() else ""
    assert found == expected, (f"docs/stages.md is out of date with the stage records: regenerate it with "
                               f"`{contract_data.REGENERATE}` and commit it")


def test_packaged_contracts_are_current(data):
    """What `show` prints is the records' contract: the packaged file is regenerated with them."""
    found = contract_text.PACKAGED.read_text() if contract_text.PACKAGED.exists() else ""
    assert found == contract_data.packaged_text(data), (f"{contract_text.PACKAGED.name} is out of date with the stage "
                                                   f"records: regenerate it with `{contract_data.REGENERATE}`")


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


def words(text: str) -> str:
    return " ".join(text.split())


def test_show_prints_the_contract_for_people(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["show", "rejection.greedy"]) == 0
    out = capsys.readouterr().out
    greedy = registry.all_stages()["rejection.greedy"]
    assert out.startswith("rejection.greedy\n================\n") and "```" not in out and "| --- |" not in out
    for f in greedy.inputs + greedy.outputs:
        assert re.search(rf"^  {f.name} +(in|out)", out, re.M) and words(f.doc) in words(out)
    for heading in ("Fields", "Contract", "Input tiers", "Worked example"):
        assert f"\n{heading}\n" in out
    assert "\n  - valid: " in out
    # the worked example, with the outputs the oracle computed and the untouched slots marked
    assert "[0] [5, 7, 9, -]" in out and "[1] [4, 3, -, -]" in out and "[3] [-, -, -, -]" in out
    assert "docs/stages.md" in out


def test_show_markdown_prints_what_docs_stages_holds(capsys):
    assert main(["show", "--markdown", "rejection.greedy"]) == 0
    out = capsys.readouterr().out
    section = contract_data.DOCS.read_text().split("## rejection.greedy\n")[1].split("\n## ")[0]
    assert out.startswith("## rejection.greedy\n\n") and section.strip() in out and "docs/stages.md" in out
    assert main(["show", "--markdown"]) == 0
    assert capsys.readouterr().out == contract_data.DOCS.read_text()


@pytest.mark.parametrize("width", [40, 80, 132])
def test_show_fits_the_width(capsys, monkeypatch, width):
    """Every line of `show`, every stage and the conventions, within COLUMNS (at most MAX_WIDTH)."""
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["show"]) == 0
    lines = capsys.readouterr().out.splitlines()
    limit = min(width, contract_terminal.MAX_WIDTH)
    assert max(map(len, lines)) == limit
    assert not [line for line in lines if len(line) > limit]
    assert sum(line.startswith("Fields") for line in lines) == len(STAGES)


def test_show_selects_by_glob_and_refuses_unknown_stages(capsys):
    assert main(["show", "--markdown", "eagle.*", "rejection.greedy"]) == 0
    out = capsys.readouterr().out
    names = [s.name for s in STAGES if s.family == "eagle"] + ["rejection.greedy"]
    assert [line[3:] for line in out.splitlines() if line.startswith("## ")] == names
    families = ", ".join(sorted({s.family for s in STAGES}))
    for typo, words_ in (("nope", f"matches no stage (families: {families}; 'FAMILY.*' selects one)"),
                         ("rejection.nope", "matches no stage (rejection has greedy, random, recovered, "),
                         ("rejetion.random", "did you mean rejection.random?"),
                         ("kv", "is a family, not a stage; 'kv.*' selects its stages (commit_draft, "),
                         ("rejection.randm", "did you mean rejection.random?"),
                         ("random", "did you mean rejection.random?"),
                         ("eagle.prepare_input", "did you mean eagle.prepare_inputs or ")):
        assert main(["show", typo]) == 2
        err = capsys.readouterr().out.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"specverify show: error: {typo!r} "), err
        assert words_ in err and "kv.commit_draft" not in err, err


def test_show_without_its_packaged_contracts_is_one_line(tmp_path, capsys, monkeypatch):
    for name, text in (("missing.json", None), ("damaged.json", "{not json"), ("other.json", '{"stages": 1}'), ("list.json", "[]")):
        if text is not None:
            (tmp_path / name).write_text(text)
        monkeypatch.setattr(contract_text, "PACKAGED", tmp_path / name)
        assert main(["show", "rejection.greedy"]) == 2
        out = capsys.readouterr().out
        assert out.count("\n") == 1 and out.startswith(f"specverify show: error: the packaged contracts "
                                                         f"{tmp_path / name} could not be read ("), out


def test_show_loads_neither_torch_nor_the_records():
    """`show` in a fresh interpreter: what it imports (`-X importtime`) holds no torch, no stage record,
    strategy or oracle: it prints the packaged text."""
    env = {**os.environ, "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "specverify", "show", "rejection.random"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "specverify.pages.contract_terminal" in imported and "rejection.random" in done.stdout
    loaded = sorted(m for m in imported if m.split(".")[0] in ("torch", "triton", "ml_dtypes") or m.startswith(
        ("specverify.stages", "specverify.strategies", "specverify.oracles", "specverify.kernels")))
    assert not loaded, f"show imported {loaded[:8]}"


ENGINE_NAMES = {"FULL_MASK", "QLEN_ONLY", "QLEN_ONLY_BITPACKING"}   # SGLang's tree mask modes, named as it names them


def internal_names() -> set[str]:
    """Names a vendor cannot look up: module-level constants of the records, strategies and oracles, and
    the strategy modules that hold no family's records (our kernels' import paths name those that do)."""
    found: set[str] = set()
    modules = {package: [info.name for info in pkgutil.iter_modules(importlib.import_module(package).__path__)]
               for package in ("specverify.stages", "specverify.strategies", "specverify.oracles")}
    for package, names in modules.items():
        for name in names:
            module = importlib.import_module(f"{package}.{name}")
            found |= {c for c in vars(module) if re.fullmatch(r"[A-Z][A-Z0-9]*_[A-Z0-9_]+", c)} - ENGINE_NAMES
    return found | {name for name in modules["specverify.strategies"]
                    if "_" in name and name not in modules["specverify.stages"]}


def test_the_contract_names_nothing_internal(data):
    text = contract_text.all_markdown(data)
    internal = internal_names()
    assert "APPROX_DIV_STEPS" in internal and "tree_shapes" in internal     # the test sees what it looks for
    named = sorted({w for w in re.findall(r"\b\w+\b", text) if w in internal})
    assert not named, f"the contract text names internal {named}: say what they mean instead"
    assert not re.findall(r"\b[a-z_]+\.[A-Z][A-Z0-9_]{2,}\b", text)


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"specverify {__version__}"


def test_render_takes_any_record():
    """A record with nothing but the required fields still renders (new families fill in the rest)."""
    bare = dataclasses.replace(STAGES[0], doc="", semantics="", tiers={}, worked=None, dialects={})
    text = contract_data.render(bare)
    assert text.startswith(f"## {bare.name}") and "(not written yet)" in text and "(none yet)" in text
    shown = contract_terminal.terminal_text({}, [contract_data.stage_data(bare)], 80).plain
    assert shown.startswith(f"{bare.name}\n{'=' * len(bare.name)}\nCall")
    assert "(not written yet)" in shown and "(none yet)" in shown


def test_terminal_text_drops_markup_but_not_arithmetic():
    shown = contract_terminal.inline("**Offsets.** `cu[r]` and ``a`b``, 2**31 - 1 or 2**31, b*N + i, *valid*")
    assert shown.plain == "Offsets. cu[r] and a`b, 2**31 - 1 or 2**31, b*N + i, valid"
    assert [shown.plain[s.start:s.end] for s in shown.spans] == ["Offsets.", "cu[r]", "a`b", "valid"]


def test_values_read_as_written():
    assert contract_data.number(np.float32(0.1)) == "0.1"
    assert contract_data.number(np.float32(-0.0)) == "-0.0"
    assert contract_data.number(np.float64(float(np.float32(0.8)))) == "0.800000011920929"
    assert contract_data.number(np.float32(np.nan)) == "nan" and contract_data.number(np.float32(-np.inf)) == "-inf"
    assert contract_data.number(np.float32(1e-30)) == "1.0e-30"
    lines = contract_data.array_lines(np.arange(6).reshape(2, 3), np.array([[False] * 3, [False, True, True]]))
    assert lines == ["[0] [0, 1, 2]", "[1] [3, -, -]"]


def test_regenerate_check(tmp_path, capsys):
    paths = ["--path", str(tmp_path / "stages.md"), "--packaged", str(tmp_path / "contracts.json")]
    assert contract_data.main(["--check", *paths]) == 1
    assert capsys.readouterr().err.count(contract_data.REGENERATE) == 2
    assert contract_data.main(paths) == 0
    assert contract_data.main(["--check", *paths]) == 0
    written = contract_text.load(tmp_path / "contracts.json")
    assert [s["name"] for s in contract_text.select(written, ["kv.*"])] == [s.name for s in STAGES if s.family == "kv"]


def test_arithmetic_in_the_prose_is_no_emphasis():
    """docs/stages.md rendered as CommonMark: bold and italics only where the records mean them (b*N and
    2**31 stay arithmetic)."""
    from markdown_it import MarkdownIt

    page = MarkdownIt("commonmark").enable("table").render(contract_data.DOCS.read_text())
    marked = set(re.findall(r"<(?:strong|em)>(.*?)</(?:strong|em)>", page))
    assert marked == {"Byte identity.", "Calling convention (destination passing).", "Defined region.", "Guard bytes.",
                      "Input tiers.", "Names.", "Offsets.", "Strides.", "Token ids.", "valid", "hazard", "invalid",
                      "strided"}
    assert "2**31 - 1" in re.sub(r"<[^>]+>", "", page) and "b*N + i" in page


def test_prose_opens_no_stray_markdown_blocks():
    """A wrapped line of prose must not start with what Markdown reads as a list item or a quote."""
    inside_code, previous, found = False, "", []
    for line in contract_data.DOCS.read_text().splitlines():
        if line.startswith("```"):
            inside_code = not inside_code
        elif (not inside_code and previous.strip() and not previous.startswith(("|", "#"))
              and not line.startswith("- ") and contract_text.RISKY.match(line.lstrip())):
            found.append(line)
        previous = line
    assert not found, f"lines that would open a Markdown list or quote: {found[:3]}"

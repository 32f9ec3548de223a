"""The mutant operators of `specverify mutate` (specverify.mutation.mutants): on the sample package
tests/mutant_sample (parsed, never run) and on every production kernel entry point (each mutant parses)."""
from __future__ import annotations

import ast
import collections
import importlib
import importlib.util
import shutil
import sys
from pathlib import Path

import libcst
import pytest

from specverify.mutation.mutants import DOMAIN, OPERATORS, Mutant, mutants, sources

SAMPLE = Path(__file__).resolve().parents[1] / "mutant_sample"
ENTRY = "mutant_sample.main:entry"

# (operator, module, line, before, after) of every mutant of ENTRY, by operator, in order
EXPECTED = {
    "compare-flip": [
        ("main", 15, "x.numel() == 0", "x.numel() != 0"),
        ("main", 18, "rows >= 0", "rows > 0"),
        ("main", 22, "rows.argmax(-1) > 2", "rows.argmax(-1) >= 2"),
        ("helpers", 22, "offs < n", "offs <= n"),
        ("helpers", 24, "x == 7", "x != 7"),
        ("helpers", 25, "(x != PLACEHOLDER)", "(x == PLACEHOLDER)")],
    "off-by-one": [
        ("main", 15, "x.numel() == 0", "x.numel() == 1"),
        ("main", 15, "x.numel() == 0", "x.numel() == -1"),
        ("main", 18, "rows >= 0", "rows >= 1"),                 # rows >= -1 is placeholder-valid's
        ("main", 20, "range(n)", "range(n + 1)"),
        ("main", 20, "range(n)", "range(n - 1)"),
        ("main", 21, "out[i] += 1", "out[i] += 2"),
        ("main", 21, "out[i] += 1", "out[i] += 0"),
        ("main", 22, "rows.argmax(-1) > 2", "rows.argmax(-1) > 3"),
        ("main", 22, "rows.argmax(-1) > 2", "rows.argmax(-1) > 1"),
        ("main", 22, "x[:-1]", "x[:0]"),
        ("main", 22, "x[:-1]", "x[:-2]"),
        ("helpers", 11, "(a + b - 1)", "(a + b - 2)"),
        ("helpers", 11, "(a + b - 1)", "(a + b - 0)"),
        ("helpers", 21, "tl.arange(0, BLOCK)", "tl.arange(1, BLOCK)"),
        ("helpers", 21, "tl.arange(0, BLOCK)", "tl.arange(-1, BLOCK)"),
        ("helpers", 24, "x == 7", "x == 8"),
        ("helpers", 24, "x == 7", "x == 6")],
    "mask-drop": [
        ("helpers", 23, "tl.load(x_ptr + offs * x_stride, mask=live, other=0)", "tl.load(x_ptr + offs * x_stride, other=0)"),
        ("helpers", 26, "tl.store(out_ptr + offs.to(tl.int64), tl.maximum(y, first), mask=live)",
         "tl.store(out_ptr + offs.to(tl.int64), tl.maximum(y, first))")],
    "mask-true": [
        ("main", 18, "out[rows >= 0] = next_power_of_2(4)", "out[:] = next_power_of_2(4)"),
        ("main", 22, "torch.where(rows.argmax(-1) > 2, x.long(), x.clamp(min=0))", "x.long()"),
        ("helpers", 23, "tl.load(x_ptr + offs * x_stride, mask=live, other=0)",
         "tl.load(x_ptr + offs * x_stride, mask=True, other=0)"),
        ("helpers", 24, "tl.where(x == 7, offs, BLOCK)", "offs"),
        ("helpers", 25, "tl.where((x != PLACEHOLDER) & live, x, 0)", "x")],
    "stride-one": [("main", 11, "x.stride(0)", "1"), ("helpers", 23, "x_stride", "1")],
    "and-or": [
        ("main", 22, "torch.where(rows.argmax(-1) > 2, x.long(), x.clamp(min=0)) and x[:-1]",
         "torch.where(rows.argmax(-1) > 2, x.long(), x.clamp(min=0)) or x[:-1]"),
        ("helpers", 25, "(x != PLACEHOLDER) & live", "(x != PLACEHOLDER) | live")],
    "min-max": [
        ("main", 22, "rows.argmax(-1)", "rows.argmin(-1)"),
        ("main", 22, "x.clamp(min=0)", "x.clamp(max=0)"),
        ("helpers", 24, "tl.min(tl.where(x == 7, offs, BLOCK), axis=0)", "tl.max(tl.where(x == 7, offs, BLOCK), axis=0)"),
        ("helpers", 26, "tl.maximum(y, first)", "tl.minimum(y, first)")],
    "where-swap": [
        ("main", 22, "torch.where(rows.argmax(-1) > 2, x.long(), x.clamp(min=0))",
         "torch.where(rows.argmax(-1) > 2, x.clamp(min=0), x.long())"),
        ("helpers", 24, "tl.where(x == 7, offs, BLOCK)", "tl.where(x == 7, BLOCK, offs)"),
        ("helpers", 25, "tl.where((x != PLACEHOLDER) & live, x, 0)", "tl.where((x != PLACEHOLDER) & live, 0, x)")],
    "int32-offset": [("main", 22, "x.long()", "x.int()"), ("helpers", 26, "tl.int64", "tl.int32")],
    "delete-store": [
        ("main", 11, "copy_kernel[(helpers.cdiv(x.numel(), BLOCK),)](out, x, x.numel(), x.stride(0), BLOCK=BLOCK)", "pass"),
        ("main", 17, "launch(out, x)", "pass"),                  # launch() launches copy_kernel
        ("main", 18, "out[rows >= 0] = next_power_of_2(4)", "pass"),
        ("main", 21, "out[i] += 1", "pass"),
        ("helpers", 26, "tl.store(out_ptr + offs.to(tl.int64), tl.maximum(y, first), mask=live)", "pass")],
    "tie-high": [
        ("main", 22, "rows.argmax(-1)", "(rows.shape[-1] - 1 - rows.flip(-1).argmax(-1))"),
        ("helpers", 24, "tl.min(tl.where(x == 7, offs, BLOCK), axis=0)", "tl.max(tl.where(x == 7, offs, -1), axis=0)")],
    "placeholder-valid": [("main", 18, "rows >= 0", "rows >= -1"), ("helpers", 25, "(x != PLACEHOLDER)", "(x == x)")],
    "padding-written": [
        ("helpers", 25, "live", "(live | True)"),
        ("helpers", 26, "tl.store(out_ptr + offs.to(tl.int64), tl.maximum(y, first), mask=live)",
         "tl.store(out_ptr + offs.to(tl.int64), tl.maximum(y, first), mask=True)")],   # also mask-true's: kept once
}


@pytest.fixture
def sample(monkeypatch):
    monkeypatch.syspath_prepend(str(SAMPLE.parent))
    return mutants(ENTRY)


def fresh_copy(tmp_path, monkeypatch, edit=None) -> Path:
    """A copy of the sample package importable as `mutant_sample` (main.py edited by `edit`)."""
    root = tmp_path / "copy"
    shutil.copytree(SAMPLE, root / "mutant_sample", ignore=shutil.ignore_patterns("__pycache__"))
    if edit is not None:
        main = root / "mutant_sample" / "main.py"
        main.write_text(edit(main.read_text()))
    for name in [n for n in sys.modules if n == "mutant_sample" or n.startswith("mutant_sample.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    return root


def test_every_operator_has_its_exact_edits(sample):
    assert set(EXPECTED) == set(OPERATORS) and DOMAIN <= set(OPERATORS)
    got = collections.defaultdict(list)
    for m in sample:
        got[m.operator].append((m.module.rsplit(".", 1)[1], m.line, m.before, m.after))
    for op in OPERATORS:
        assert got[op] == EXPECTED[op], op


def test_mutant_fields_and_ids(sample):
    assert all(isinstance(m, Mutant) for m in sample)
    assert len({m.id for m in sample}) == len(sample)
    by_id = {m.id: m for m in sample}
    greedy = by_id["mutant_sample.helpers:copy_kernel:tie-high:tl.min(tl.where(x == 7, offs, BLOCK), axis=0)#0"]
    assert (greedy.scope, greedy.col, greedy.path) == ("copy_kernel", 12, str(SAMPLE / "helpers.py"))
    assert "mutant_sample.main:entry:off-by-one:x.numel() == 0#1" in by_id          # the second edit of one site
    assert "mutant_sample.main:entry:mask-true:torch.where(rows.argmax(-1) > 2, x.lon~94be5d32#0" in by_id   # long: hashed
    original = (SAMPLE / "helpers.py").read_text()
    diff = greedy.diff(original)
    assert "-    first = tl.min(tl.where(x == 7, offs, BLOCK), axis=0)" in diff
    assert "+    first = tl.max(tl.where(x == 7, offs, -1), axis=0)" in diff
    for m in sample:
        original = Path(m.path).read_text()
        assert m.source != original
        start = sum(len(line) for line in original.splitlines(keepends=True)[:m.line - 1]) + m.col
        assert original[start:].startswith(m.before)


def test_only_reachable_code_of_the_package_is_mutated(sample):
    assert {m.scope for m in sample} == {"launch", "entry", "cdiv", "copy_kernel"}    # not other_stage, unused_helper
    assert {m.module for m in sample} == {"mutant_sample.main", "mutant_sample.helpers"}   # specverify's launch not
    assert not [m for m in sample if "UNUSED" in m.before or "PLACEHOLDER = " in m.before]


def test_sources_follow_the_package_only(monkeypatch):
    monkeypatch.syspath_prepend(str(SAMPLE.parent))
    assert [name for name, _ in sources(ENTRY)] == ["mutant_sample.main", "mutant_sample", "mutant_sample.helpers"]
    assert sources(ENTRY)[0][1] == SAMPLE / "main.py"
    inside = [name for name, _ in sources("specverify.kernels.triton.rejection:greedy")]
    assert inside[0] == "specverify.kernels.triton.rejection" and "specverify.kernels.triton.launch" in inside
    assert all(name.startswith("specverify.kernels") for name in inside)               # no oracles


@pytest.mark.parametrize("impl, message", [
    ("mutant_sample.main", "expected MODULE:FUNC"),
    ("mutant_sample.nope:entry", "cannot import module 'mutant_sample.nope'"),
    ("mutant_sample.main:nope", "has no function 'nope'"),
    ("mutant_sample.main:BLOCK", "has no function 'BLOCK'"),
])
def test_bad_impls_are_named(monkeypatch, impl, message):
    monkeypatch.syspath_prepend(str(SAMPLE.parent))
    with pytest.raises(ValueError, match="impl .*" + message.replace("(", r"\(")):
        sources(impl)
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        mutants(impl)


def test_operators_are_selected_by_name(sample, monkeypatch):
    monkeypatch.syspath_prepend(str(SAMPLE.parent))
    flips = mutants(ENTRY, ["compare-flip", "tie-high"])
    assert flips == [m for m in sample if m.operator in ("compare-flip", "tie-high")]
    with pytest.raises(ValueError, match="unknown swap-all"):
        mutants(ENTRY, ["compare-flip", "swap-all"])


def test_ids_are_stable_when_code_is_added_above(sample, tmp_path, monkeypatch):
    added = "def added(y):\n    return y[0:2] < 1\n\n\ndef entry("
    fresh_copy(tmp_path, monkeypatch, lambda text: text.replace("def entry(", added, 1))
    moved = {m.id: m for m in mutants(ENTRY)}
    assert set(moved) == {m.id for m in sample}                 # `added` is unreachable: not mutated
    for m in sample:
        twin = moved[m.id]
        assert (twin.before, twin.after) == (m.before, m.after)
        assert twin.line == m.line + (4 if m.module.endswith("main") and m.line > 12 else 0)


def test_an_edit_elsewhere_in_a_scope_keeps_earlier_ids(sample, tmp_path, monkeypatch):
    fresh_copy(tmp_path, monkeypatch, lambda text: text.replace("and x[:-1]", "and x[:-1] and (n == 0)"))
    moved = {m.id for m in mutants(ENTRY)}
    assert {m.id for m in sample} <= moved
    assert "mutant_sample.main:entry:compare-flip:n == 0#0" in moved


def test_duplicates_are_dropped_domain_faults_first(sample):
    sources_seen = collections.Counter((m.module, m.source) for m in sample)
    assert max(sources_seen.values()) == 1
    at_18 = [(m.operator, m.after) for m in sample if m.line == 18 and m.before == "rows >= 0"]
    assert ("placeholder-valid", "rows >= -1") in at_18 and ("off-by-one", "rows >= -1") not in at_18
    store = [m.operator for m in sample if m.after.endswith("mask=True)") and m.before.startswith("tl.store")]
    assert store == ["padding-written"]


def test_docstrings_comments_messages_and_decorators_stay(sample):
    for m in sample:
        original = Path(m.path).read_text()
        kept = [line for line in original.splitlines()
                if '"""' in line or "#" in line or "raise" in line or line.startswith(("@", "import", "from"))
                or "tl.constexpr" in line]
        for line in kept:
            if "#" in line and line.split("#")[0].strip():
                line = "#" + line.split("#", 1)[1]                # the code before a comment may change
            assert line in m.source, (m.id, line)


def registry_impls(backends=("torch", "triton")) -> list[str]:
    from specverify.records.registry import all_stages
    return sorted({impl for stage in all_stages().values() for backend, impl in stage.impls.items()
                   if backend in backends})


def check_all_parse(impls) -> dict[str, collections.Counter]:
    """Enumerates each impl's mutants; every one compiles (libcst parses one per module and operator).
    Returns the operator counts of each impl."""
    counts, done, parsed = {}, set(), set()
    for impl in impls:
        found = mutants(impl)
        assert found and len({m.id for m in found}) == len(found), impl
        counts[impl] = collections.Counter(m.operator for m in found)
        for m in found:
            if (m.module, m.source) in done:
                continue
            done.add((m.module, m.source))
            ast.parse(m.source, m.path)
            if (m.module, m.operator) not in parsed:
                parsed.add((m.module, m.operator))
                libcst.parse_module(m.source)
    return counts


def test_every_mutant_of_the_production_kernels_parses():
    counts = check_all_parse(registry_impls())
    for backend in ("torch", "triton"):
        total = sum((c for impl, c in counts.items() if f".kernels.{backend}." in impl), collections.Counter())
        print(backend, sum(total.values()), dict(total))
    # one stage's mutants stay in its own code: rejection.expand reaches none of the verify kernels
    assert not [m for m in mutants("specverify.kernels.triton.rejection:expand") if m.scope == "verify_kernel"]


def test_every_mutant_of_the_vendor_demo_parses():
    if importlib.util.find_spec("vendor_demo") is None:
        pytest.skip("examples/vendor_demo is not installed")
    from vendor_demo.specverify_vendor import IMPLEMENTATIONS
    counts = check_all_parse(sorted(IMPLEMENTATIONS.values()))
    assert all(sum(c.values()) > 0 for c in counts.values())
    print({impl: sum(c.values()) for impl, c in counts.items()})

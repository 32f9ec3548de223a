"""Backends are data: what a caller needs of a backend is a field of its record (`specverify.records.backends`),
never its name, and what lists backends (`specverify list`'s columns, the pytest markers) reads the records."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specverify.records import backends
from specverify.records.backends import BACKENDS, Backend
from tests.installed import ROOT, modules

DEFINITION = ROOT / "specverify" / "records" / "backends.py"
# what a compared value is called where it holds a backend's name: `.name`, `.backend`, a variable `backend`
# or `name`, `x["backend"]`, `x.get("backend")`
BACKEND_WORDS = ("name", "backend")


def sources() -> list[Path]:
    """The installed packages' modules (`tests.installed.modules`) and the checkout's conftest.py."""
    return sorted(set(modules().values()) | {ROOT / "conftest.py"})


def backend_names(node: ast.expr) -> list[str]:
    """The backend names a compared operand spells out: a string literal, or a tuple, list or set of them."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and i.value in BACKENDS]


def holds_backend(node: ast.expr) -> bool:
    """Whether an operand reads like a backend's name (see BACKEND_WORDS)."""
    if isinstance(node, ast.Attribute):
        word = node.attr
    elif isinstance(node, ast.Name):
        word = node.id
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        word = node.slice.value
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
          and node.args and isinstance(node.args[0], ast.Constant)):
        word = node.args[0].value
    else:
        return False
    return isinstance(word, str) and (word in BACKEND_WORDS or word.endswith("backend"))


def comparisons_by_name(source: str) -> list[str]:
    """Every comparison in `source` of a backend's name with a backend name written out, as "line: code"."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(backend_names(o) for o in operands) and any(holds_backend(o) for o in operands):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


@pytest.mark.parametrize("code", ['target.backend.name == "oracle"', 'backend.name != "impl"', 'backend == "triton"',
                                  'name in ("torch", "triton")', 'verdict["backend"] == "impl"',
                                  'f.get("backend") == "impl"', '"oracle" == self.backend'])
def test_a_comparison_by_backend_name_is_found(code):
    assert len(comparisons_by_name(code)) == 1


@pytest.mark.parametrize("code", ['target.backend.reference', 'self.lib == "numpy"', '"impl" in value',
                                  '"triton" not in sys.modules', 'stage.name == "rejection.expand"'])
def test_other_comparisons_are_not_found(code):
    assert comparisons_by_name(code) == []


def test_no_backend_is_compared_by_name_outside_its_record():
    paths = sources()
    assert DEFINITION in paths and ROOT / "specverify" / "pytest_plugin.py" in paths
    assert ROOT / "kernels" / "torch" / "rejection.py" in paths     # subpackages of a mapped package too
    found = [f"{path.relative_to(ROOT)}:{where}" for path in paths if path != DEFINITION
             for where in comparisons_by_name(path.read_text())]
    assert not found, "backends compared by name (read a field of their record instead):\n" + "\n".join(found)


def test_the_fields_callers_read():
    assert [b.name for b in BACKENDS.values() if b.reference] == ["oracle"]
    assert [b.name for b in BACKENDS.values() if b.host_only] == ["oracle", "numpy"]
    assert backends.BUILT_IN == ("oracle", "numpy", "torch", "triton")
    assert [name for name in BACKENDS if backends.outside(name)] == ["impl"]
    assert not backends.outside("no-such-backend")       # a report from another version names what it names
    assert not backends.outside(["impl"])                # nor does a damaged case file's sidecar crash it
    assert [b.pytest_marker for b in BACKENDS.values()] == ["oracle", "numpy", "torch", "triton", "vendor"]


@pytest.fixture
def extra_backend(monkeypatch):
    """One more backend of ours, on CUDA only."""
    extra = Backend("extra", "torch", ("cuda",), validates=True)
    monkeypatch.setattr(backends, "BACKENDS", {**BACKENDS, "extra": extra})
    monkeypatch.setattr(backends, "BUILT_IN", (*backends.BUILT_IN, "extra"))
    return extra


def test_list_columns_come_from_the_records(extra_backend):
    from specverify.cli import listing

    assert listing.columns() == [("oracle", "cpu"), ("numpy", "cpu"), ("torch", "cpu"), ("torch", "cuda"),
                                 ("triton", "cpu"), ("triton", "cuda"), ("extra", "cuda")]


def test_pytest_markers_come_from_the_records(extra_backend):
    from specverify import pytest_plugin
    from specverify.runs.catalogue import CHECKS

    class Config:
        def __init__(self):
            self.lines = []

        def addinivalue_line(self, name, line):
            assert name == "markers"
            self.lines.append(line.partition(":")[0])

    config = Config()
    pytest_plugin.pytest_configure(config)
    assert config.lines == ["oracle", "numpy", "torch", "triton", "vendor", "extra", "cpu", "cuda", *CHECKS]


def test_the_markers_are_registered(pytestconfig):
    registered = {line.partition(":")[0] for line in pytestconfig.getini("markers")}
    assert {b.pytest_marker for b in BACKENDS.values()} | set(backends.DEVICES) <= registered


def test_the_device_properties_pass_over_host_code():
    from specverify.records import registry
    from specverify.runs import properties

    greedy = registry.all_stages()["rejection.greedy"]
    assert properties.on_cuda(backends.target(greedy, "oracle", "cuda")) == "host code"
    assert properties.on_devices(backends.target(greedy, "oracle", "cuda")) == "host code"
    assert properties.on_cuda(backends.target(greedy, "torch", "cuda")) is None

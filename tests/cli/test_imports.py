"""The package's imports form no circle and go one way: no module imports one that imports it back,
directly or around a loop, and no wing imports a wing listed after it in `WINGS` (the README's Layout).
Every import counts, wherever it stands (module level, inside a function, `importlib.import_module` of a
literal name); the graph is read from the source, so a circle is found even where the order of imports
happens to hide it at run time. Every package folder is also one the install lists."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.installed import ROOT, folders, modules

# the wings, lowest first: a module may import its own wing and those before it
WINGS = (("base", ("specverify", "specverify.env", "specverify.usage", "specverify.interrupts", "specverify.bounded",
                   "specverify.extras")),
         ("kernels", ("specverify.oracles", "specverify.kernels")),
         ("records", ("specverify.records", "specverify.stages", "specverify.strategies", "specverify.suite_cases")),
         ("judge", ("specverify.judge",)),
         ("files", ("specverify.files",)),
         ("runs", ("specverify.runs",)),
         ("tools", ("specverify.mutation", "specverify.bench")),
         ("pages", ("specverify.pages",)),
         ("front", ("specverify.cli", "specverify.pytest_plugin", "specverify.__main__")))


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The package's modules that module `name` imports, anywhere in its source."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
              and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    found = set()
    for imported_name in names:
        while imported_name and imported_name not in known:      # `import a.b.c` imports a.b.c, not a.b's name
            imported_name = imported_name.rpartition(".")[0]
        if imported_name and imported_name != name:
            found.add(imported_name)
    return found


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the package's modules it imports. A package's __init__ is the package's own name; importing
    a submodule imports its packages' __init__ too, which counts only where that __init__ imports back."""
    table = modules(root)
    return {name: imported(name, path, set(table)) for name, path in table.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for node in sorted(edges):
            if node not in index:
                visit(node)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_module_imports_itself_around_a_loop():
    assert circles(graph()) == []


def wing(module: str) -> int:
    """The index in WINGS of the wing that holds `module` (its longest matching prefix)."""
    best = max(((len(prefix), i) for i, (_, prefixes) in enumerate(WINGS) for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), default=None)
    assert best is not None, f"{module} is in no wing of WINGS"
    return best[1]


def test_imports_go_down_the_wings():
    upward = [f"{module} ({WINGS[wing(module)][0]}) imports {other} ({WINGS[wing(other)][0]})"
              for module, imports in sorted(graph().items()) for other in sorted(imports) if wing(other) > wing(module)]
    assert upward == []


def test_a_planted_circle_is_found(tmp_path):
    """A scratch copy of the package layout where two modules import each other, one lazily through
    importlib.import_module, one with a relative import."""
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools]\npackages = ["pkg", "pkg.sub"]\n')
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    import importlib\n    return importlib.import_module('pkg.sub.b')\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_text("from .. import a\n")
    (tmp_path / "pkg" / "c.py").write_text("from pkg.sub import b\n")
    assert circles(graph(tmp_path)) == [["pkg.a", "pkg.sub.b"]]


def test_every_package_folder_is_installed():
    """A folder of the package with an __init__.py that pyproject.toml does not list would be missing from
    a wheel (the editable install finds it anyway)."""
    listed = {path.resolve() for path in folders().values()}
    for top in ("specverify", "oracles", "kernels"):
        for init in (ROOT / top).rglob("__init__.py"):
            assert init.parent.resolve() in listed, f"{init.parent.relative_to(ROOT)} is not in pyproject.toml's packages"

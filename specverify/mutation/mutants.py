"""First-order mutants of an implementation's source: what one is (`Mutant`), which files are the
implementation (`sources`), and the operators that rewrite its code (`OPERATORS`, `mutants`).

A mutant is one edit of one module's source: the worker that runs it loads the module from `source`
instead of its file (see `specverify.mutation.mutation_run`). Edits are made on the text with libcst: Triton re-reads a
`@triton.jit` body from source, so bytecode mutation never reaches it.

- `sources("MODULE:FUNC")`: [(module, path)], FUNC's module first, then the modules it imports (directly
  or transitively) from its own top-level package (inside specverify: from `specverify.kernels` only).
- `mutants(impl, operators)`: every first-order mutant of the code reachable by name from FUNC: its
  function and the top-level functions, kernels, classes and constants of `sources(impl)` it refers to,
  transitively (through imported names and `module.name` too; decorators are not followed). No other
  code of those files is mutated, nor docstrings, comments, strings, decorators, annotations, imports
  or `raise` statements. Order: module, position, operator. Id `module:scope:operator:code#k`: the
  site's code normalized (hashed when long), k its occurrence among equal (scope, operator, code). A
  mutant equal to the original or to an earlier one is dropped; a domain fault (`DOMAIN`) wins over a
  generic operator that gives the same source.
"""
from __future__ import annotations

import ast
import difflib
import hashlib
import importlib
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from specverify.extras import missing

try:                         # the `mutate` extra
    import libcst as cst
    import libcst.matchers as match
    from libcst._nodes.internal import CodegenState  # code_for_node at a given indentation (see _Source.code)
    from libcst.metadata import (ExpressionContext, ExpressionContextProvider, MetadataWrapper, ParentNodeProvider,
                                 PositionProvider, ScopeProvider)
except ImportError as exc:
    raise missing(exc, "libcst", "mutate", "mutation runs") from None

OPERATORS: dict[str, str] = {
    "compare-flip": "a comparison flipped: < and <=, > and >=, == and !=",
    "off-by-one": "an integer bound or offset moved by one: range/tl.arange limits, slice bounds, "
                  "+/- and comparisons with an int literal",
    "mask-drop": "the mask= of a tl.load, tl.store or tl.atomic_* removed",
    "mask-true": "a mask made all-true: mask=True, where(c, a, b) -> a, x[m] = v -> x[:] = v",
    "stride-one": "a stride (a name containing 'stride', or x.stride(i)) replaced by 1",
    "and-or": "& and |, `and` and `or` swapped",
    "min-max": "min and max swapped: min/max, minimum/maximum, argmin/argmax, amin/amax, clamp bounds",
    "where-swap": "the branches of where(c, a, b) swapped",
    "int32-offset": "a 64-bit integer dtype made 32-bit: tl.int64, torch.int64/long, .long()",
    "delete-store": "a store, launch, launching call, in-place or out= call, or x[...] = v replaced by pass",
    "tie-high": "a lowest-index tie rule made highest-index: tl.min over where(c, offs, BIG), argmax/argmin",
    "placeholder-valid": "a test that excludes the placeholder id -1 weakened so that -1 passes",
    "padding-written": "a store's mask, or a write/live/valid guard, forced true: padding rows written",
}
DOMAIN = frozenset({"tie-high", "placeholder-valid", "padding-written"})   # the suite's bug classes
_ORDER = {name: i for i, name in enumerate(OPERATORS)}
_LABEL_MAX = 48     # longer normalized codes are cut and hashed in ids


@dataclass(frozen=True)
class Mutant:
    """One edit of module `module` (file `path`): `operator` rewrote `before` into `after` at `line`,
    `col` (1-based line, 0-based column) inside `scope` (the enclosing function, "" at module level).
    `id` is stable across edits elsewhere in the file: it names the module, the scope, the operator, the
    original code and its occurrence among equal ones in that scope. `source` is the whole mutated module."""
    id: str
    module: str
    path: str
    line: int
    col: int
    scope: str
    operator: str
    before: str
    after: str
    source: str

    def diff(self, original: str) -> str:
        """The unified diff from `original` (the module's source) to this mutant's source."""
        return "".join(difflib.unified_diff(original.splitlines(keepends=True), self.source.splitlines(keepends=True),
                                            fromfile=self.path, tofile=f"{self.path} ({self.id})", n=2))


# ---------------------------------------------------------------------------------------------- sources

def _split(impl: str) -> tuple[str, str]:
    module, sep, func = impl.partition(":")
    if not sep or not module or not func or "." in func:
        raise ValueError(f"impl {impl!r}: expected MODULE:FUNC (e.g. pkg.module:function)")
    return module, func


def _file(name: str) -> Path | None:
    """The source file of module `name`, None when it has none (or no such module)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _dotted(node) -> str | None:
    """`a.b.c` for a Name or an Attribute chain of Names, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr.value}" if base else None
    return None


@lru_cache(maxsize=256)
def _scan(module: str, is_package: bool, text: str) -> tuple[tuple[str, ...], tuple[tuple, ...]]:
    """(every module name an import of `text` may load, at any depth, in source order; the top-level
    import bindings as (bound name, module, imported name or None for the module itself))."""
    package = module if is_package else module.rpartition(".")[0]
    loads: list[str] = []
    binds: list[tuple] = []
    tree = ast.parse(text)
    tops = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        top = id(node) in tops
        if isinstance(node, ast.Import):
            loads.extend(alias.name for alias in node.names)
            binds.extend((a.asname or a.name, a.name, None) for a in node.names if top)
        elif isinstance(node, ast.ImportFrom):
            try:
                base = importlib.util.resolve_name("." * node.level + (node.module or ""), package)
            except (ImportError, ValueError):
                continue
            loads.extend([base, *(f"{base}.{a.name}" for a in node.names if a.name != "*")])
            binds.extend((a.asname or a.name, base, a.name) for a in node.names if top and a.name != "*")
    return tuple(loads), tuple(binds)


def sources(impl: str) -> list[tuple[str, Path]]:
    """[(module, path)]: FUNC's module first, then the modules it imports (transitively) from its own
    top-level package (for the suite's own code: under `specverify.kernels`). See the module docstring."""
    module, func = _split(impl)
    try:
        loaded = importlib.import_module(module)
    except ImportError as e:
        raise ValueError(f"impl {impl!r}: cannot import module {module!r} ({e})") from e
    if not callable(getattr(loaded, func, None)):
        raise ValueError(f"impl {impl!r}: module {module!r} has no function {func!r}")
    path = getattr(loaded, "__file__", None)
    if not path or not path.endswith(".py"):
        raise ValueError(f"impl {impl!r}: module {module!r} has no Python source file (found {path!r})")
    top = module.split(".")[0]
    prefix = "specverify.kernels" if top == "specverify" else top      # the suite's own: its kernels only
    found = {module: Path(path)}
    queue = [module]
    while queue:
        name = queue.pop(0)
        file = found[name]
        for dep in _scan(name, file.name == "__init__.py", file.read_text())[0]:
            if dep not in found and (dep == prefix or dep.startswith(prefix + ".")) and (dep_file := _file(dep)):
                found[dep] = dep_file
                queue.append(dep)
    return list(found.items())


# ----------------------------------------------------------------------------------------- reachability

class _Source:
    """One parsed module: its top-level definitions and imports, and the global names each top-level
    statement refers to (libcst's scope analysis, so local variables never count)."""

    def __init__(self, name: str, path: Path, text: str):
        self.name, self.path, self.text = name, path, text
        wrapper = MetadataWrapper(cst.parse_module(text))
        self.tree = wrapper.module
        self.pos = wrapper.resolve(PositionProvider)
        self.parent = wrapper.resolve(ParentNodeProvider)
        self.context = wrapper.resolve(ExpressionContextProvider)
        self.line_starts = [0]
        for line in text.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.defs: dict[str, list[cst.CSTNode]] = {}
        for stmt in self.tree.body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                self.defs.setdefault(stmt.name.value, []).append(stmt)
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    for target in _targets(small):
                        self.defs.setdefault(target, []).append(stmt)
        self.refs: dict[cst.CSTNode, list[tuple[str, cst.CSTNode]]] = {}
        self._launches: dict[cst.CSTNode, bool] = {}
        for assignment in wrapper.resolve(ScopeProvider)[self.tree].assignments:
            for access in assignment.references:
                top = self._top(access.node)
                if top is not None:
                    self.refs.setdefault(top, []).append((assignment.name, access.node))

    def _top(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """The top-level statement holding `node`; None inside a decorator or an annotation."""
        while True:
            parent = self.parent[node]
            if isinstance(node, (cst.Decorator, cst.Annotation)):
                return None
            if parent is self.tree:
                return node
            node = parent

    def chain(self, node: cst.CSTNode) -> list[str]:
        """The dotted name `node` starts: `m.f` for the Name `m` in `m.f(...)`."""
        parts = (_dotted(node) or "").split(".")
        while isinstance(parent := self.parent.get(node), cst.Attribute) and parent.value is node:
            parts.append(parent.attr.value)
            node = parent
        return parts

    def code(self, node: cst.CSTNode, site: cst.CSTNode) -> str:
        """The code of `node` standing where `site` stands: libcst indents the continuation lines of a
        node by the blocks around it, which `Module.code_for_node` does not know."""
        stmt = site
        while not isinstance(stmt, cst.BaseStatement):
            stmt = self.parent[stmt]
        line = self.text[self.line_starts[self.pos[stmt].start.line - 1]:]
        state = CodegenState(default_indent=self.tree.default_indent, default_newline=self.tree.default_newline,
                             indent_tokens=[line[:len(line) - len(line.lstrip(" \t"))]])
        node._codegen(state)
        return "".join(state.tokens)

    def launches(self, stmt: cst.CSTNode) -> bool:
        """Whether top-level `stmt` holds a Triton launch `kernel[grid](...)`."""
        if stmt not in self._launches:
            self._launches[stmt] = bool(match.findall(stmt, match.Call(func=match.Subscript())))
        return self._launches[stmt]

    def offset(self, node: cst.CSTNode) -> int:
        """Where the code of `node` starts in the text (its position leaves out its parentheses)."""
        start = self.pos[node].start
        parens = "".join(self.tree.code_for_node(p) for p in getattr(node, "lpar", ()))
        return self.line_starts[start.line - 1] + start.column - len(parens)


def _targets(small: cst.BaseSmallStatement) -> list[str]:
    """Names a module-level assignment binds."""
    nodes = [t.target for t in small.targets] if isinstance(small, cst.Assign) else \
        [small.target] if isinstance(small, (cst.AnnAssign, cst.AugAssign)) else []
    elements = [e.value for n in nodes for e in (n.elements if isinstance(n, (cst.Tuple, cst.List)) else [n])]
    return [e.value for e in elements if isinstance(e, cst.Name)]


@lru_cache(maxsize=64)
def _parsed(name: str, path: str, text: str) -> _Source:
    return _Source(name, Path(path), text)


class _Package:
    """The implementation's modules, with the imports of each resolved to (module) or (module, name)."""

    def __init__(self, impl: str):
        self.mods = {name: _parsed(name, str(path), path.read_text()) for name, path in sources(impl)}
        self.imports: dict[str, dict[str, tuple]] = {}     # module -> bound name -> ("module", m) | ("name", m, n)
        for m in self.mods.values():
            binds = self.imports[m.name] = {}
            for bound, base, name in _scan(m.name, m.path.name == "__init__.py", m.text)[1]:
                if name is None or f"{base}.{name}" in self.mods:
                    binds[bound] = ("module", base if name is None else f"{base}.{name}")
                elif base in self.mods:
                    binds[bound] = ("name", base, name)

    def target(self, module: str, ref: str, node: cst.CSTNode) -> tuple[str, str] | None:
        """The (module, top-level name) that `ref` (accessed at `node` in `module`) stands for, if ours."""
        m = self.mods[module]
        if ref in m.defs:
            return module, ref
        bind = self.imports[module].get(ref)
        if bind is None:
            return None
        if bind[0] == "name":
            return bind[1], bind[2]
        full = bind[1].split(".") + m.chain(node)[len(ref.split(".")):]
        for i in range(len(full) - 1, 0, -1):
            if ".".join(full[:i]) in self.mods:
                return ".".join(full[:i]), full[i]
        return None

    def reach(self, module: str, func: str) -> dict[str, set[cst.CSTNode]]:
        """Per module, the top-level statements reachable by name from `module.func`, and sets
        `self.launchers`: the reached (module, name) whose code launches a kernel, directly or not."""
        reached: dict[str, set[cst.CSTNode]] = {name: set() for name in self.mods}
        uses: dict[tuple[str, str], set[tuple[str, str]]] = {}
        todo, seen = [(module, func)], set()
        while todo:
            key = todo.pop()
            if key in seen or key[0] not in self.mods:
                continue
            seen.add(key)
            m, name = self.mods[key[0]], key[1]
            bind = self.imports[m.name].get(name)
            if name not in m.defs and bind is not None and bind[0] == "name":
                todo.append((bind[1], bind[2]))
                uses[key] = {(bind[1], bind[2])}
            for stmt in m.defs.get(name, ()):
                reached[m.name].add(stmt)
                for ref, node in m.refs.get(stmt, ()):
                    if (hit := self.target(m.name, ref, node)) is not None:
                        todo.append(hit)
                        uses.setdefault(key, set()).add(hit)
        self.launchers = {key for key in seen if any(self.mods[key[0]].launches(stmt)
                                                     for stmt in self.mods[key[0]].defs.get(key[1], ()))}
        while grown := {key for key, used in uses.items() if used & self.launchers} - self.launchers:
            self.launchers |= grown
        return reached


# -------------------------------------------------------------------------------------------- operators

_FLIP = {cst.LessThan: cst.LessThanEqual, cst.LessThanEqual: cst.LessThan, cst.GreaterThan: cst.GreaterThanEqual,
         cst.GreaterThanEqual: cst.GreaterThan, cst.Equal: cst.NotEqual, cst.NotEqual: cst.Equal}
_SWAP = {"min": "max", "minimum": "maximum", "argmin": "argmax", "amin": "amax", "clamp_min": "clamp_max",
         "clamp_min_": "clamp_max_", "cummin": "cummax", "fmin": "fmax"}
_SWAP.update({v: k for k, v in _SWAP.items()})
_INT64 = {"tl.int64", "triton.language.int64", "torch.int64", "torch.long", "np.int64", "numpy.int64"}
_GUARDS = {"write", "writes", "written", "live", "valid"}
_MODULES = {"tl", "triton", "torch", "np", "numpy", "math"}


def _tl(name: str | None) -> str | None:
    """`load` for `tl.load` (or `triton.language.load`), else None."""
    for prefix in ("tl.", "triton.language."):
        if name and name.startswith(prefix) and "." not in name[len(prefix):]:
            return name[len(prefix):]
    return None


def _int(node) -> int | None:
    """The value of an int literal (`3`, `-1`, `0x7F`), else None."""
    if isinstance(node, cst.Integer):
        return node.evaluated_value
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus) and isinstance(
            node.expression, cst.Integer):
        return -node.expression.evaluated_value
    return None


_expr = cst.parse_expression


def _moved(node, names: bool = False) -> list[cst.BaseExpression]:
    """`node` moved by +1 and -1: an int literal's value, or (when `names`) a name or attribute + 1, - 1."""
    if (v := _int(node)) is not None:
        return [_expr(str(v + 1)), _expr(str(v - 1))]
    if names and isinstance(node, (cst.Name, cst.Attribute)):
        return [_expr(f"{cst.Module([]).code_for_node(node)} {sign} 1") for sign in "+-"]
    return []


def _grouped(node: cst.BaseExpression) -> cst.BaseExpression:
    """`node` in parentheses unless it is atomic (so it can stand where a larger expression stood)."""
    atomic = (cst.Name, cst.Attribute, cst.Call, cst.Subscript)
    if isinstance(node, atomic) or node.lpar:
        return node
    return node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def _keywords(call: cst.Call) -> dict[str, cst.Arg]:
    return {a.keyword.value: a for a in call.args if a.keyword is not None}


def _with_value(call: cst.Call, arg: cst.Arg, value: cst.BaseExpression) -> cst.Call:
    return call.with_changes(args=[a.with_changes(value=value) if a is arg else a for a in call.args])


def _without(call: cst.Call, arg: cst.Arg) -> cst.Call:
    args = [a for a in call.args if a is not arg]
    if args and call.args[-1] is arg:
        args[-1] = args[-1].with_changes(comma=arg.comma)
    return call.with_changes(args=args)


def _with_keyword(call: cst.Call, keyword: str, value: str) -> cst.Call:
    args = list(call.args)
    if args and args[-1].comma is cst.MaybeSentinel.DEFAULT:
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    equal = cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace(""))
    return call.with_changes(args=[*args, cst.Arg(keyword=cst.Name(keyword), value=_expr(value), equal=equal)])


def _operator(kind, old):
    return kind(whitespace_before=old.whitespace_before, whitespace_after=old.whitespace_after)


class _Collector(cst.CSTVisitor):
    """Walks reached top-level statements of one module and records each candidate edit as
    (operator, scope, site, replacement of the site, label for the id or None for the site's code)."""

    def __init__(self, package: _Package, m: _Source):
        self.package, self.m = package, m
        self.code = m.tree.code_for_node
        self.scope: list[str] = []
        self.found: list[tuple] = []
        self.skip_names: set[int] = set()      # ids of Names that are not values of their own
        self.masks: set[int] = set()           # ids of mask= values of loads and stores

    def add(self, op: str, site: cst.CSTNode, new: cst.CSTNode, label: str | None = None) -> None:
        self.found.append((op, ".".join(self.scope), site, new, label))

    def short(self, call: cst.Call) -> str:
        """A readable label for a call: `f(first, ...)`."""
        first = [self.code(a.value) for a in _positional(call)[:1]]
        if not first or len(first[0]) > 24:
            return f"{self.code(call.func)}(...)"
        return f"{self.code(call.func)}({first[0]}{', ...' * (len(call.args) > 1)})"

    def skip(self, node) -> bool:
        return False

    # never mutated: decorators, annotations, raise statements (their messages), f-strings, imports
    visit_Decorator = visit_Annotation = visit_Raise = visit_FormattedString = visit_Import = visit_ImportFrom = skip

    def enter(self, node: cst.FunctionDef | cst.ClassDef) -> None:
        self.scope.append(node.name.value)

    def leave(self, node: cst.FunctionDef | cst.ClassDef) -> None:
        self.scope.pop()

    visit_FunctionDef = visit_ClassDef = enter
    leave_FunctionDef = leave_ClassDef = leave

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.skip_names.add(id(node.keyword))

    # operators by node kind
    def visit_Comparison(self, node: cst.Comparison) -> None:
        for i, target in enumerate(node.comparisons):
            kind = _FLIP.get(type(target.operator))
            if kind is not None:
                flipped = target.with_changes(operator=_operator(kind, target.operator))
                self.add("compare-flip", node, node.with_changes(
                    comparisons=[flipped if t is target else t for t in node.comparisons]))
        for new in _moved(node.left):
            self.add("off-by-one", node, node.with_changes(left=new))
        for target in node.comparisons:
            for new in _moved(target.comparator):
                self.add("off-by-one", node, node.with_changes(comparisons=[
                    target.with_changes(comparator=new) if c is target else c for c in node.comparisons]))
        if len(node.comparisons) == 1:
            self.placeholder(node)

    def placeholder(self, node: cst.Comparison) -> None:
        """placeholder-valid: `x >= 0`, `x > -1`, `x < 0`, `x <= -1` moved past -1; `x != -1` made
        always true and `x == -1` never (-1 or a PLACEHOLDER-named constant; either side)."""
        target = node.comparisons[0]
        op, left, right = type(target.operator), node.left, target.comparator

        def is_placeholder(e) -> bool:
            return _int(e) == -1 or "PLACEHOLDER" in (_dotted(e) or "").rpartition(".")[2].upper()

        moves = {(cst.GreaterThanEqual, 0): -1, (cst.GreaterThan, -1): -2, (cst.LessThan, 0): -1,
                 (cst.LessThanEqual, -1): -2}
        mirror = {cst.GreaterThanEqual: cst.LessThanEqual, cst.GreaterThan: cst.LessThan,
                  cst.LessThan: cst.GreaterThan, cst.LessThanEqual: cst.GreaterThanEqual}
        if (new := moves.get((op, _int(right)))) is not None:
            self.add("placeholder-valid", node, node.with_changes(comparisons=[target.with_changes(comparator=_expr(str(new)))]))
        elif op in mirror and (new := moves.get((mirror[op], _int(left)))) is not None:
            self.add("placeholder-valid", node, node.with_changes(left=_expr(str(new))))
        elif op in (cst.NotEqual, cst.Equal) and (is_placeholder(left) or is_placeholder(right)):
            other = left if is_placeholder(right) else right
            kind = cst.Equal if op is cst.NotEqual else cst.NotEqual
            self.add("placeholder-valid", node, node.with_changes(left=other, comparisons=[
                target.with_changes(operator=_operator(kind, target.operator), comparator=other)]))

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        swap = {cst.BitAnd: cst.BitOr, cst.BitOr: cst.BitAnd}.get(type(node.operator))
        if swap is not None:
            self.add("and-or", node, node.with_changes(operator=_operator(swap, node.operator)))
        for new in _moved(node.right) if isinstance(node.operator, (cst.Add, cst.Subtract)) else ():
            self.add("off-by-one", node, node.with_changes(right=new))

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        swap = cst.Or if isinstance(node.operator, cst.And) else cst.And
        self.add("and-or", node, node.with_changes(operator=_operator(swap, node.operator)))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        for new in _moved(node.value) if isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)) else ():
            self.add("off-by-one", node, node.with_changes(value=new))
        swap = {cst.BitAndAssign: cst.BitOrAssign, cst.BitOrAssign: cst.BitAndAssign}.get(type(node.operator))
        if swap is not None:
            self.add("and-or", node, node.with_changes(operator=_operator(swap, node.operator)))
        if isinstance(node.target, cst.Subscript):
            self.add("delete-store", node, cst.Pass(semicolon=node.semicolon), f"{self.code(node.target)} op= ...")

    def visit_Subscript(self, node: cst.Subscript) -> None:
        for element in node.slice:
            if not isinstance(element.slice, cst.Slice):
                continue
            for field in ("lower", "upper"):
                for new in _moved(getattr(element.slice, field), names=True):
                    moved = element.with_changes(slice=element.slice.with_changes(**{field: new}))
                    self.add("off-by-one", node, node.with_changes(
                        slice=[moved if e is element else e for e in node.slice]))

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if _dotted(node) in _INT64:
            self.add("int32-offset", node, node.with_changes(attr=cst.Name("int32")))

    def visit_Name(self, node: cst.Name) -> None:
        if self.m.context.get(node) is not ExpressionContext.LOAD or id(node) in self.skip_names:
            return
        parent = self.m.parent.get(node)
        if isinstance(parent, cst.Call) and parent.func is node:
            return
        if "stride" in node.value.lower():
            self.add("stride-one", node, cst.Integer("1"))
        if _GUARDS & set(node.value.lower().split("_")) and id(node) not in self.masks:
            self.add("padding-written", node, _expr(f"({node.value} | True)"))

    def visit_Call(self, node: cst.Call) -> None:
        func, name = node.func, _dotted(node.func)
        attr = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else None
        method = isinstance(func, cst.Attribute) and (name is None or name.split(".")[0] not in _MODULES)
        tl_fn, pos, kws = _tl(name), _positional(node), _keywords(node)
        if name == "range" or tl_fn == "arange":
            for arg in pos[:2] if len(pos) > 1 else pos:        # not the step
                for new in _moved(arg.value, names=name == "range"):
                    self.add("off-by-one", node, _with_value(node, arg, new))
        store = tl_fn is not None and (tl_fn == "store" or tl_fn.startswith("atomic_"))
        if (store or tl_fn == "load") and "mask" in kws:
            mask = kws["mask"]
            self.masks.add(id(mask.value))
            label = f"{name}(mask={self.code(mask.value)})"
            self.add("mask-drop", node, _without(node, mask), label)
            self.add("mask-true", node, _with_value(node, mask, cst.Name("True")), label)
            if store:
                self.add("padding-written", node, _with_value(node, mask, cst.Name("True")), label)
        if attr == "where" and len(pos) == 3 and len(node.args) == 3 + ("out" in kws):
            self.add("where-swap", node, node.with_changes(args=[
                pos[1].with_changes(value=pos[2].value) if a is pos[1] else
                pos[2].with_changes(value=pos[1].value) if a is pos[2] else a for a in node.args]))
            if "out" not in kws:
                self.add("mask-true", node, _grouped(pos[1].value))
        if attr in _SWAP and (isinstance(func, cst.Attribute) or attr in ("min", "max")):
            new_func = func.with_changes(attr=cst.Name(_SWAP[attr])) if isinstance(func, cst.Attribute) \
                else cst.Name(_SWAP[attr])
            self.add("min-max", node, node.with_changes(func=new_func))
        if attr in ("clamp", "clamp_", "clip", "clip_"):
            if {"min", "max"} & set(kws):
                self.add("min-max", node, node.with_changes(args=[
                    a.with_changes(keyword=cst.Name("max" if a.keyword.value == "min" else "min"))
                    if a.keyword is not None and a.keyword.value in ("min", "max") else a for a in node.args]))
            elif method and len(pos) == 2:
                self.add("min-max", node, node.with_changes(args=[
                    pos[0].with_changes(value=pos[1].value), pos[1].with_changes(value=pos[0].value)]))
        self.tie_high(node, name, attr, method, tl_fn, pos, kws)
        if attr == "stride" and isinstance(func, cst.Attribute) and len(node.args) == 1:
            self.add("stride-one", node, cst.Integer("1"))
        if attr == "long" and method and not node.args:
            self.add("int32-offset", node, node.with_changes(func=func.with_changes(attr=cst.Name("int"))))

    def tie_high(self, node, name, attr, method, tl_fn, pos, kws) -> None:
        """tl.min(tl.where(c, offs, BIG)) -> tl.max(tl.where(c, offs, -1)); tl.argmax/argmin with
        tie_break_left=False; a Torch argmax/argmin over dim d -> the last extreme, through flip(d)."""
        inner = pos[0].value if pos else None
        if tl_fn == "min" and isinstance(inner, cst.Call) and _tl(_dotted(inner.func)) == "where" \
                and len(_positional(inner)) == 3:
            where = _with_value(inner, _positional(inner)[2], _expr("-1"))
            self.add("tie-high", node, _with_value(node, pos[0], where).with_changes(
                func=node.func.with_changes(attr=cst.Name("max"))))
        if tl_fn in ("argmax", "argmin") and "tie_break_left" not in kws:
            self.add("tie-high", node, _with_keyword(node, "tie_break_left", "False"))
        if tl_fn is None and attr in ("argmax", "argmin") and "keepdim" not in kws:
            if method:
                source, rest = self.code(node.func.value), pos
            elif name in (f"torch.{attr}", f"np.{attr}", f"numpy.{attr}") and pos:
                source, rest = self.code(pos[0].value), pos[1:]
            else:
                return
            dims = [_int(a.value) for a in rest[:1]] + [_int(a.value) for k, a in kws.items() if k in ("dim", "axis")]
            if len(dims) == 1 and dims[0] is not None and len(rest) + len(kws) == 1:
                d, x = dims[0], f"({source})" if "\n" in source else source
                self.add("tie-high", node, _expr(f"({x}.shape[{d}] - 1 - {x}.flip({d}).{attr}({d}))"))

    def visit_Expr(self, node: cst.Expr) -> None:
        call = node.value
        if not isinstance(call, cst.Call):
            return
        name, func = _dotted(call.func), call.func
        tl_fn = _tl(name)
        in_place = isinstance(func, cst.Attribute) and func.attr.value.endswith("_") \
            and not func.attr.value.startswith("_")
        launch = isinstance(func, cst.Subscript)
        root = func
        while isinstance(root, cst.Attribute):
            root = root.value
        ours = self.package.target(self.m.name, root.value, root) if isinstance(root, cst.Name) else None
        if (tl_fn is not None and (tl_fn == "store" or tl_fn.startswith("atomic_"))) or launch or in_place \
                or "out" in _keywords(call) or (ours is not None and ours in self.package.launchers):
            label = f"{self.code(func.value)}[...](...)" if launch else self.short(call)
            self.add("delete-store", node, cst.Pass(semicolon=node.semicolon), label)

    def visit_Assign(self, node: cst.Assign) -> None:
        subscripts = [t for t in node.targets if isinstance(t.target, cst.Subscript)]
        if subscripts:
            label = " = ".join(self.code(t.target) for t in node.targets) + " = ..."
            self.add("delete-store", node, cst.Pass(semicolon=node.semicolon), label)
        if len(node.targets) == 1 and subscripts:
            target = subscripts[0].target
            index = target.slice[0].slice if len(target.slice) == 1 else None
            if isinstance(index, cst.Index) and _int(index.value) is None and not isinstance(
                    index.value, (cst.Tuple, cst.Ellipsis, cst.SimpleString)):
                whole = target.with_changes(slice=[cst.SubscriptElement(slice=cst.Slice(lower=None, upper=None))])
                self.add("mask-true", node, node.with_changes(targets=[subscripts[0].with_changes(target=whole)]))


# ---------------------------------------------------------------------------------------------- mutants

def _label(code: str) -> str:
    text = " ".join(code.split())
    if len(text) <= _LABEL_MAX:
        return text
    return f"{text[:_LABEL_MAX - 10]}~{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def mutants(impl: str, operators: Iterable[str] | None = None) -> list[Mutant]:
    """Every first-order mutant of the code reachable from FUNC (see the module docstring), by the
    named operators (all for None)."""
    wanted = set(OPERATORS) if operators is None else set(operators)
    unknown = sorted(wanted - set(OPERATORS))
    if unknown:
        raise ValueError(f"operators: unknown {', '.join(unknown)} (known: {', '.join(OPERATORS)})")
    module, func = _split(impl)
    package = _Package(impl)
    reached = package.reach(module, func)
    found: list[tuple[tuple, Mutant]] = []
    for index, m in enumerate(package.mods.values()):
        collector = _Collector(package, m)
        for stmt in m.tree.body:
            if stmt in reached[m.name]:
                stmt.visit(collector)
        seen: dict[tuple[str, str, str], int] = {}
        for op, scope, site, new, label in collector.found:
            before, after = m.code(site, site), m.code(new, site)
            if before == after:
                continue
            name = _label(label or collector.code(site.with_changes(lpar=[], rpar=[]) if getattr(site, "lpar", ()) else site))
            k = seen[(scope, op, name)] = seen.get((scope, op, name), -1) + 1
            if op not in wanted:
                continue
            start = m.offset(site)
            if m.text[start:start + len(before)] != before:
                raise RuntimeError(f"{m.name}: the code of a {op} site does not sit at its position {m.pos[site].start}")
            source = m.text[:start] + after + m.text[start + len(before):]
            line = m.pos[site].start.line
            col = start - m.line_starts[line - 1]
            found.append(((index, line, col, _ORDER[op]), Mutant(
                id=f"{m.name}:{scope}:{op}:{name}#{k}", module=m.name, path=str(m.path), line=line, col=col,
                scope=scope, operator=op, before=before, after=after, source=source)))
    found.sort(key=lambda item: item[0])
    kept: dict[tuple[str, str], Mutant] = {}
    for _, mutant in found:
        key = (mutant.module, mutant.source)
        if mutant.source == package.mods[mutant.module].text:
            continue
        if key not in kept or (mutant.operator in DOMAIN and kept[key].operator not in DOMAIN):
            kept[key] = mutant
    chosen = {id(m) for m in kept.values()}
    return [mutant for _, mutant in found if id(mutant) in chosen]

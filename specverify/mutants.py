"""First-order mutants of an implementation's source: what one is (`Mutant`), which files are the
implementation (`sources`), and the operators that rewrite its code (`OPERATORS`, `mutants`).

A mutant is one edit of one module's source: the module is loaded from `source` instead of its file in
the worker that runs the mutant (see `specverify.mutate`); everything else is the original. Edits are made
on the source text with libcst (Triton re-reads a `@triton.jit` body from source, so bytecode mutation
never reaches it).

Contracts:
- `sources("MODULE:FUNC")`: [(module, path)], FUNC's module first, then the modules it imports (directly
  or transitively) from its own top-level package (inside specverify: from `specverify.kernels` only).
- `mutants(impl, operators)`: every first-order mutant of the code reachable by name from FUNC: its
  function, and the top-level functions, kernels, classes and constants of `sources(impl)` it refers to,
  transitively (names imported from those modules, and `module.name` through an imported module, count;
  decorators are not followed). Other code in the same files is never mutated, nor are docstrings,
  comments, strings, decorators, annotations, imports or `raise` statements. Order: module, position,
  operator. Id: `module:scope:operator:code#k`, code the edited site normalized (hashed when long) and k
  its occurrence among equal (scope, operator, code) in source order, so an edit elsewhere leaves it be.
  A mutant equal to the original, or to an earlier mutant, is dropped; a domain fault (`DOMAIN`) wins
  over a generic operator that gives the same source.
"""
from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Iterable

import libcst as cst
import libcst.matchers as match
from libcst._nodes.internal import CodegenState     # code_for_node at a given indentation (see _Source.code)
from libcst.metadata import (ExpressionContext, ExpressionContextProvider, MetadataWrapper, ParentNodeProvider,
                             PositionProvider, ScopeProvider)

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


def _prefix(module: str) -> str:
    """The package whose modules are the implementation (the suite's own: its kernels only)."""
    top = module.split(".")[0]
    return "specverify.kernels" if top == "specverify" else top


def _inside(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


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


def _from_base(node: cst.ImportFrom, module: str, is_package: bool) -> str | None:
    """The absolute module name a `from X import ...` reads from."""
    name = _dotted(node.module) if node.module is not None else ""
    if not node.relative:
        return name
    package = module if is_package else module.rpartition(".")[0]
    try:
        return importlib.util.resolve_name("." * len(node.relative) + (name or ""), package)
    except (ImportError, ValueError):
        return None


def _imported(tree: cst.Module, module: str, is_package: bool) -> list[str]:
    """Every module name an import statement of `tree` (at any depth) may load, in source order."""
    found: list[str] = []
    for node in match.findall(tree, match.Import() | match.ImportFrom()):
        if isinstance(node, cst.Import):
            found.extend(_dotted(alias.name) for alias in node.names)
        elif (base := _from_base(node, module, is_package)) is not None:
            found.append(base)
            if not isinstance(node.names, cst.ImportStar):
                found.extend(f"{base}.{alias.name.value}" for alias in node.names)
    return found


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
    prefix = _prefix(module)
    found = {module: Path(path)}
    queue = [module]
    while queue:
        name = queue.pop(0)
        file = found[name]
        for dep in _imported(cst.parse_module(file.read_text()), name, file.name == "__init__.py"):
            if dep not in found and _inside(dep, prefix) and (dep_file := _file(dep)) is not None:
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
        self.import_stmts: list[cst.Import | cst.ImportFrom] = []     # at top level
        for stmt in self.tree.body:
            if isinstance(stmt, (cst.FunctionDef, cst.ClassDef)):
                self.defs.setdefault(stmt.name.value, []).append(stmt)
            elif isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    for target in _targets(small):
                        self.defs.setdefault(target, []).append(stmt)
                    if isinstance(small, (cst.Import, cst.ImportFrom)):
                        self.import_stmts.append(small)
        self.refs: dict[cst.CSTNode, list[tuple[str, cst.CSTNode]]] = {}
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

    def offset(self, node: cst.CSTNode) -> int:
        """Where the code of `node` starts in the text (its position leaves out its parentheses)."""
        start = self.pos[node].start
        parens = "".join(self.tree.code_for_node(p) for p in getattr(node, "lpar", ()))
        return self.line_starts[start.line - 1] + start.column - len(parens)


def _targets(small: cst.BaseSmallStatement) -> list[str]:
    """Names a module-level assignment binds."""
    if isinstance(small, cst.Assign):
        nodes = [t.target for t in small.targets]
    elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
        nodes = [small.target]
    else:
        return []
    names = []
    for node in nodes:
        elements = [e.value for e in node.elements] if isinstance(node, (cst.Tuple, cst.List)) else [node]
        names.extend(e.value for e in elements if isinstance(e, cst.Name))
    return names


@lru_cache(maxsize=64)
def _parsed(name: str, path: str, text: str) -> _Source:
    return _Source(name, Path(path), text)


class _Package:
    """The implementation's modules, with the imports of each resolved to (module) or (module, name)."""

    def __init__(self, impl: str):
        self.mods = {name: _parsed(name, str(path), path.read_text()) for name, path in sources(impl)}
        self.imports: dict[str, dict[str, tuple]] = {}
        for m in self.mods.values():
            binds: dict[str, tuple] = {}
            for stmt in m.import_stmts:
                if isinstance(stmt, cst.Import):
                    for alias in stmt.names:
                        full = _dotted(alias.name)
                        bound = alias.asname.name.value if alias.asname else full
                        binds[bound] = ("module", full)
                    continue
                base = _from_base(stmt, m.name, m.path.name == "__init__.py")
                if base is None or isinstance(stmt.names, cst.ImportStar):
                    continue
                for alias in stmt.names:
                    bound = alias.asname.name.value if alias.asname else alias.name.value
                    if f"{base}.{alias.name.value}" in self.mods:
                        binds[bound] = ("module", f"{base}.{alias.name.value}")
                    elif base in self.mods:
                        binds[bound] = ("name", base, alias.name.value)
            self.imports[m.name] = binds

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
        self.launchers = {key for key in seen
                          if any(_launches(stmt) for stmt in self.mods[key[0]].defs.get(key[1], ()))}
        grew = True
        while grew:
            before = len(self.launchers)
            self.launchers |= {key for key, used in uses.items() if used & self.launchers}
            grew = len(self.launchers) > before
        return reached


def _launches(stmt: cst.CSTNode) -> bool:
    """Whether `stmt` holds a Triton launch `kernel[grid](...)`."""
    return bool(match.findall(stmt, match.Call(func=match.Subscript())))


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


def _expr(code: str) -> cst.BaseExpression:
    return cst.parse_expression(code)


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
    visit_Decorator = visit_Annotation = visit_Raise = visit_FormattedString = visit_Import = skip
    visit_ImportFrom = skip

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scope.append(node.name.value)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scope.pop()

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scope.append(node.name.value)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self.scope.pop()

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
        for v, edit in self.comparison_literals(node):
            for step in (1, -1):
                self.add("off-by-one", node, edit(_expr(str(v + step))))
        if len(node.comparisons) == 1:
            self.placeholder(node)

    def comparison_literals(self, node: cst.Comparison):
        """(value, edit) per int-literal operand: edit(new) puts `new` in its place."""
        if (v := _int(node.left)) is not None:
            yield v, lambda new: node.with_changes(left=new)
        for target in node.comparisons:
            if (v := _int(target.comparator)) is not None:
                yield v, lambda new, t=target: node.with_changes(comparisons=[
                    t.with_changes(comparator=new) if c is t else c for c in node.comparisons])

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
        if isinstance(node.operator, (cst.Add, cst.Subtract)) and (v := _int(node.right)) is not None:
            for step in (1, -1):
                self.add("off-by-one", node, node.with_changes(right=_expr(str(v + step))))

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        swap = cst.Or if isinstance(node.operator, cst.And) else cst.And
        self.add("and-or", node, node.with_changes(operator=_operator(swap, node.operator)))

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, (cst.AddAssign, cst.SubtractAssign)) and (v := _int(node.value)) is not None:
            for step in (1, -1):
                self.add("off-by-one", node, node.with_changes(value=_expr(str(v + step))))
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
                bound = getattr(element.slice, field)
                if bound is None:
                    continue
                if (v := _int(bound)) is not None:
                    news = [_expr(str(v + 1)), _expr(str(v - 1))]
                elif isinstance(bound, (cst.Name, cst.Attribute)):
                    news = [_expr(f"{self.code(bound)} + 1"), _expr(f"{self.code(bound)} - 1")]
                else:
                    continue
                for new in news:
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
            for arg in pos[:2] if len(pos) > 1 else pos:
                if (v := _int(arg.value)) is not None:
                    news = [_expr(str(v + 1)), _expr(str(v - 1))]
                elif name == "range" and isinstance(arg.value, (cst.Name, cst.Attribute)):
                    news = [_expr(f"{self.code(arg.value)} + 1"), _expr(f"{self.code(arg.value)} - 1")]
                else:
                    continue
                for new in news:
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
            name = _label(label or collector.code(site.with_changes(lpar=[], rpar=[]) if getattr(site, "lpar", None)
                                                  else site))
            k = seen[(scope, op, name)] = seen.get((scope, op, name), -1) + 1
            if op not in wanted:
                continue
            start = m.offset(site)
            if m.text[start:start + len(before)] != before:
                raise RuntimeError(f"{m.name}: the code of a {op} site does not sit at its position {m.pos[site].start}")
            source = m.text[:start] + after + m.text[start + len(before):]
            where = m.pos[site].start
            found.append(((index, where.line, where.column, _ORDER[op]), Mutant(
                id=f"{m.name}:{scope}:{op}:{name}#{k}", module=m.name, path=str(m.path), line=where.line,
                col=where.column, scope=scope, operator=op, before=before, after=after, source=source)))
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

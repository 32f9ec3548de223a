"""First-order mutants of an implementation's source: what one is (`Mutant`).

A mutant is one edit of one module's source: the module is loaded from `source` instead of its file in
the worker that runs the mutant (see `specverify.mutate`); everything else is the original.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass


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

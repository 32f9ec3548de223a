"""Optional dependencies: what a command needs beyond `specverify check`'s install (the extras in
pyproject.toml: mutate, bench, ray, test), and the one line it says when that is missing."""
from __future__ import annotations


class MissingExtra(LookupError):
    """An optional dependency is not installed (bad usage: the CLI reports it in one line, exit 2)."""


def missing(error: ImportError, module: str, extra: str, purpose: str) -> ImportError | MissingExtra:
    """What to raise for `error`, met importing `module`: MissingExtra naming the extra that installs it
    when `module` itself is absent, else `error` (a broken install is not a missing one)."""
    if (error.name or "").partition(".")[0] != module:
        return error
    return MissingExtra(f"{module} is not installed ({purpose} need it): pip install 'specverify[{extra}]'")

"""What every front end reports the same way: the exit statuses (`specverify.cli`'s docstring says when
each is given), bad usage (`UsageError`: one line, exit status 2) and the "did you mean" of a near miss.
Imports nothing of the suite: every wing may use it."""
from __future__ import annotations

import difflib
from typing import Sequence

PASSED, FAILED, USAGE, NOTHING_CHECKED, INCOMPLETE = 0, 1, 2, 3, 4


class UsageError(Exception):
    """Bad usage: reported in one line, exit status 2 (pytest: a usage error)."""


def did_you_mean(word: str, known: Sequence[str]) -> str:
    """ "; did you mean 'x'?" for a near miss among `known` ("" when there is none)."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def unknown(kind: str, word: str, known: Sequence[str]) -> str:
    """The one line for a name that is not among `known`: "not a backend (known: ...); did you mean ...?"."""
    return f"{word!r} is not a {kind} (known: {', '.join(known)}){did_you_mean(word, known)}"

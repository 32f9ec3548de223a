"""Bounded reading of files the suite is handed (case files, waiver and declaration files, reports): before
anything is parsed (`read_data` reads and parses a JSON or TOML one, each problem one line).

`open_regular` refuses what is not a regular file (a device such as /dev/zero, a pipe, a folder) from
its `stat`, before it is opened, and a file over a size limit; it opens without blocking and checks the
opened file is the one that was looked at. `nesting` is how deep brackets nest in JSON or TOML text,
strings and comments left out, so a parser that recurses is never handed more than a bounded depth.
"""
from __future__ import annotations

import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO, Callable

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

import numpy as np

MAX_NESTING = 32      # brackets inside brackets in a case header or a waiver file

# what a bracket inside does not count in: strings (and, in TOML, comments), leftmost first. Every
# alternative matches once it starts (an unterminated string runs to the end of the text or line), so
# the scan never backtracks and takes linear time
JSON_SKIPPED = re.compile(rb'"(?:[^"\\]|\\.?)*"?', re.S)
TOML_SKIPPED = re.compile(rb'"""(?:[^\\]|\\.?)*?(?:"{3,5}|\Z)|\'\'\'.*?(?:\'{3,5}|\Z)'
                          rb'|"(?:[^"\\\n]|\\.?)*"?|\'[^\'\n]*\'?|#[^\n]*', re.S)
OPENING, CLOSING = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)

KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
         (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket"))


class FileProblem(ValueError):
    """A file that is not read: not a regular file, or too large (the text says which, without the path)."""


def kind_of(mode: int) -> str:
    return next((name for test, name in KINDS if test(mode)), "not a regular file")


def open_regular(path: Path, limit: int) -> BinaryIO:
    """The regular file `path` opened for reading; FileProblem when it is something else or over `limit`
    bytes, OSError when it cannot be looked at or opened."""
    found = os.stat(path)
    if not stat.S_ISREG(found.st_mode):
        raise FileProblem(f"not a regular file ({kind_of(found.st_mode)})")
    if found.st_size > limit:
        raise FileProblem(f"{found.st_size} bytes (at most {limit})")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    opened = os.fstat(fd)
    if not stat.S_ISREG(opened.st_mode) or (opened.st_dev, opened.st_ino) != (found.st_dev, found.st_ino):
        os.close(fd)
        raise FileProblem("changed while it was opened")
    return os.fdopen(fd, "rb")


def read_regular(path: Path, limit: int) -> bytes:
    """The whole content of a regular file of at most `limit` bytes (see `open_regular`)."""
    with open_regular(path, limit) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileProblem(f"more than {limit} bytes")
    return data


def read_nested(path: Path, limit: int, skipped: re.Pattern) -> bytes:
    """`read_regular`, then the nesting bound: FileProblem when brackets nest deeper than MAX_NESTING."""
    text = read_regular(path, limit)
    if nesting(text, skipped) > MAX_NESTING:
        raise FileProblem(f"nested deeper than {MAX_NESTING}")
    return text


def read_data(path: Path, limit: int, kind: str, where: str, error: type[Exception],
              unparsed: Callable[[Exception], str] | None = None) -> Any:
    """The data of a JSON or TOML file (`kind` "json" or "toml") handed to the suite, read within `limit`
    bytes and the nesting bound, then parsed; anything else is `error` with one line starting with `where`:
    "cannot be read (...)", "not read: ..." (see `read_nested`), or `unparsed(exc)` (default "not valid
    JSON/TOML (...)")."""
    try:
        text = read_nested(path, limit, JSON_SKIPPED if kind == "json" else TOML_SKIPPED)
    except OSError as exc:
        raise error(f"{where}: cannot be read ({exc.strerror or exc})") from None
    except FileProblem as exc:
        raise error(f"{where}: not read: {exc}") from None
    try:
        return json.loads(text.decode()) if kind == "json" else tomllib.loads(text.decode())
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:   # TOMLDecodeError is a ValueError
        words = unparsed(exc) if unparsed is not None else f"not valid {kind.upper()} ({exc})"
        raise error(f"{where}: {words}") from None


def nesting(text: bytes, skipped: re.Pattern) -> int:
    """How deep [ and { nest in `text` outside what `skipped` matches (strings, comments)."""
    bare = np.frombuffer(skipped.sub(b"", text), np.uint8)
    steps = np.isin(bare, OPENING).astype(np.int64) - np.isin(bare, CLOSING)
    return int(np.cumsum(steps).max(initial=0))

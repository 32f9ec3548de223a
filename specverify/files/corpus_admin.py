"""Growing and listing a regression corpus: `specverify corpus add | list`.

A run never writes into the suite's corpus (`corpus.suite_corpus()`): the cases it finds go to its
findings folder (`cases.findings_dir`). A maintainer grows the corpus explicitly, case by case: `add`
validates a case file (`cases.load`) and copies it, with its sidecar of failure records, to
`<corpus>/<stage>/<content-hash>.npz` (written whole, under the folder's lock, as `cases.save` does). A
case already there under that name is left as it is. The suite's corpus is written only where it is a
checkout's `cases/` folder that this user may write; an installed package's copy is not.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from specverify.files import cases
from specverify.files.cases import suite_corpus


class CorpusError(Exception):
    """The corpus folder cannot be written (bad usage)."""


@dataclass(frozen=True)
class Added:
    path: Path          # where the case is in the corpus
    stage: str
    new: bool           # False: the corpus already held it (nothing was written)


def writable_suite_corpus() -> Path:
    """The suite's corpus folder when it is a checkout's `cases/` this user may write, else CorpusError."""
    suite = suite_corpus()
    if suite is None or suite.name != "cases":
        where = f"{suite} is an installed package's copy" if suite is not None else "this installation has none"
        raise CorpusError(f"the suite's corpus is not a checkout folder ({where}): run from a clone, "
                          f"or name a corpus folder with --to DIR")
    if not os.access(suite, os.W_OK):
        raise CorpusError(f"the suite's corpus {suite} is not writable by this user: name a folder with --to DIR")
    return suite


def add(path: Path, corpus: Path) -> Added:
    """Copy the case file `path` (and its sidecar's failure records) into `corpus`; raises cases.CaseError
    for a file that is not a readable case."""
    stage, example = cases.load(path)
    data = Path(path).read_bytes()
    meta, arrays = cases.to_meta(stage, example)
    folder = Path(corpus) / stage
    target = folder / f"{cases.content_hash(meta, arrays)}.npz"
    with cases.locked(folder):
        if target.exists():
            return Added(target, stage, new=False)
        sidecar = {"stage": stage, "failures": cases.failures_of(path)}
        cases.write_atomic(target.with_suffix(".json"), json.dumps(sidecar, indent=1).encode())
        cases.write_atomic(target, data)
    return Added(target, stage, new=True)


def listing(corpus: Path) -> list[tuple[str, str | None]]:
    """(line, problem) per case file of `corpus`, by stage and name: the tier and who failed on it, or why
    the file cannot be read (`problem`, None for a readable case)."""
    lines = []
    for path in sorted(Path(corpus).glob("*/*.npz")):
        name = f"{path.parent.name}/{path.name}"
        try:
            stage, example = cases.load(path)
        except cases.CaseError as exc:
            lines.append((f"{name}  unreadable: {exc}", str(exc)))
            continue
        failed = sorted({f"{f.get('backend', '?')}/{f.get('device', '?')}" for f in cases.failures_of(path)})
        lines.append((f"{name}  {example.tier} tier  failed on: {', '.join(failed) or 'no record'}", None))
    return lines

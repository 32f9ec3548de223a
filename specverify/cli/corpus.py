"""`specverify corpus add CASE... [--to DIR]` and `specverify corpus list [--from DIR]`: the regression corpus."""
from __future__ import annotations

from pathlib import Path

from specverify.cli.output import say
from specverify.files import cases, corpus_admin
from specverify.usage import PASSED, USAGE, UsageError


def run(args) -> int:
    """`corpus add`: copy validated case files into a corpus folder; `corpus list`: its cases, one line each."""
    if args.action == "list":
        folder = args.source or corpus_admin.suite_corpus()
        if folder is None or not Path(folder).is_dir():
            raise UsageError(f"--from {folder}: not a folder" if args.source
                             else "this installation has no suite corpus")
        found = corpus_admin.listing(folder)
        say(f"corpus {folder}: {len(found)} case(s)")
        for line, _ in found:
            say(f"  {line}")
        return USAGE if any(problem for _, problem in found) else PASSED
    try:
        folder = args.to or corpus_admin.writable_suite_corpus()
        for path in args.case:   # every file validated before any is copied
            cases.load(path)
    except (corpus_admin.CorpusError, cases.CaseError) as exc:
        raise UsageError(str(exc)) from None
    for path in args.case:
        added = corpus_admin.add(path, folder)
        say(f"added {path} as {added.path}" if added.new else
            f"already there: {added.path} (from {path}): nothing written")
    return PASSED

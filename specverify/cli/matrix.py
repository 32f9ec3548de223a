"""`specverify matrix REPORT.json... --out DIR`: reports side by side, DIR/matrix.html and DIR/matrix.md."""
from __future__ import annotations

from specverify.cli.output import say
from specverify.files import cases
from specverify.pages import matrix, matrix_page
from specverify.usage import PASSED, UsageError


def run(args) -> int:
    """Read every report (each checked first), then write DIR/matrix.html and DIR/matrix.md whole."""
    try:
        found = matrix.build([matrix.load(path) for path in args.report])
    except matrix.ReportError as exc:
        raise UsageError(str(exc)) from None
    for name, text in (("matrix.html", matrix_page.html(found)), ("matrix.md", matrix_page.markdown(found))):
        try:
            cases.write_atomic(args.out / name, text.encode())
        except OSError as exc:
            raise UsageError(f"--out {args.out}: {name} could not be written: {exc.strerror or exc}") from None
        say(f"wrote {args.out / name}")
    words = "" if found.comparable else "; NOT COMPARABLE: they differ in suite version or oracles"
    say(f"{len(found.rows)} implementation(s) x {len(found.stages)} stage(s){words}")
    return PASSED

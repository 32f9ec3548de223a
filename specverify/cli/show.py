"""`specverify show [STAGE...]`: stage contracts, rendered for the terminal (Markdown with --raw)."""
from __future__ import annotations

import sys

from specverify.cli.output import console
from specverify.conformance import PASSED


def run(args) -> int:
    """Print the contracts of the selected stages (Markdown; rendered when stdout is a terminal)."""
    from rich.markdown import Markdown

    from specverify import contract, selection

    text = contract.show_text(selection.stages(args.stage) if args.stage else [])
    if console.is_terminal and not args.raw:
        console.print(Markdown(text))
    else:
        sys.stdout.write(text)
    return PASSED

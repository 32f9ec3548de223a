"""`specverify show [STAGE...]`: stage contracts from the packaged text (no records, no torch), laid out for
people and wrapped to the terminal's width, or as Markdown (--markdown)."""
from __future__ import annotations

import sys

from specverify.usage import PASSED, UsageError


def run(args) -> int:
    """Print the contracts of the selected stages (all, with the conventions, for none)."""
    from specverify.pages import contract_text

    try:
        data = contract_text.load()
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
        raise UsageError(f"the packaged contracts {contract_text.PACKAGED} could not be read ({why}): "
                         "reinstall specverify, or run `python -m specverify.pages.contract_data` in a checkout") from None
    try:
        stages = contract_text.select(data, args.stage)
    except LookupError as exc:
        raise UsageError(exc.args[0] if exc.args else str(exc)) from None
    if args.markdown:
        sys.stdout.write(contract_text.show_markdown(stages) if stages else contract_text.all_markdown(data))
    else:
        from specverify.pages.contract_terminal import show

        show(data, stages)
    return PASSED

"""`specverify list`: stages x backends x devices, with what runs here and why not where not."""
from __future__ import annotations

from rich.table import Table

from specverify import env
from specverify.cli.output import console, say
from specverify.records import backends, registry
from specverify.usage import PASSED


def columns() -> list[tuple[str, str]]:
    """(backend, device) of every column: each of our backends on each device it can run on, in the
    records' order."""
    return [(b, d) for b in backends.BUILT_IN for d in backends.DEVICES if d in backends.BACKENDS[b].devices]


def run(args) -> int:
    env.prepare()
    table = Table("stage", *[f"{b}/{d}" for b, d in columns()], title="stages x backends x devices")
    reasons: dict[str, str] = {}
    for stage in registry.all_stages().values():
        cells = []
        for backend, device in columns():
            if backend not in backends.stage_backends(stage):
                cells.append("")
                continue
            why = backends.unavailable(backend, device)
            if why is None:
                cells.append("yes")
            else:
                key = reasons.setdefault(why, f"[{len(reasons) + 1}]")
                cells.append(f"no {key}")
        table.add_row(stage.name, *cells)
    console.print(table)
    for why, key in reasons.items():
        say(f"{key} {why}")
    return PASSED

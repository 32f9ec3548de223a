"""The stage registry: every module in `specverify.stages` declares a `STAGES` tuple of records.

Adding a family means adding its module there; nothing else is edited. Each record is built by
`specverify.records.wiring.wired`, which checks the pieces it finds by name; loading the registry checks the
sources of every dialect's implementations too (a `WiringError` naming the stage and the missing source), and that
no piece is left that no record uses (`wiring.unused_pieces`).
"""
from __future__ import annotations

import fnmatch
import importlib
import pkgutil
from functools import lru_cache

from specverify.records.stage import Stage
from specverify.records.wiring import WiringError, sources_exist, unused_pieces


@lru_cache(maxsize=1)
def all_stages() -> dict[str, Stage]:
    import specverify.stages as pkg

    found: dict[str, Stage] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{pkg.__name__}.{info.name}")
        for stage in getattr(module, "STAGES", ()):
            if stage.name in found:
                raise RuntimeError(f"stage {stage.name!r} is declared twice")
            for dialect, rule in stage.dialects.items():
                missing = [source for source in rule.impls.values() if not sources_exist(source)]
                if missing:
                    raise WiringError(f"stage {stage.name}, dialect {dialect}: no implementation {missing[0]}")
            found[stage.name] = stage
    unused = unused_pieces(found.values())
    if unused:
        raise WiringError(f"{unused[0]} is named like a piece of a stage, but no record or dialect uses it "
                          f"(a stage renamed or dropped? a helper takes another name)")
    return found


def select(patterns: list[str] | None) -> list[Stage]:
    """Stages whose names match any of the names or glob patterns (all stages for none)."""
    stages = all_stages()
    if not patterns:
        return list(stages.values())
    chosen: dict[str, Stage] = {}
    for pattern in patterns:
        matched = [s for name, s in stages.items() if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            raise LookupError(f"--stage {pattern!r} matches no stage (known: {', '.join(stages)})")
        for s in matched:
            chosen[s.name] = s
    return list(chosen.values())

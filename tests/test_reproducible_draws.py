"""A run's draws depend on its seed, stage and tier only: not on which other modules the process has loaded
(the command line, pytest and a vendor's kernels load different ones), nor on where specverify is installed."""
import importlib
import sys

from hypothesis import given, seed, settings

from specverify import cases, registry
from specverify.profiles import PROFILES, seed_for
from specverify.stage import DrawContext


def drawn(stage_name: str, count: int = 60) -> list[str]:
    stage = registry.all_stages()[stage_name]
    found = []

    @seed(seed_for(0, stage_name, "valid"))
    @settings(PROFILES["ci"].hypothesis_settings(count))
    @given(stage.strategy("valid")(DrawContext()))
    def draw(example):
        found.append(cases.content_hash(*cases.to_meta(stage_name, example)))

    draw()
    return found


def test_draws_do_not_depend_on_the_modules_loaded(tmp_path, monkeypatch):
    before = {name: drawn(name) for name in ("rejection.random", "eagle.next_token_padded")}
    (tmp_path / "many_constants.py").write_text(
        "VALUES = [" + ", ".join(str(v) for v in range(-300, 300, 3)) + ", 2**31 - 1, 8191, 8193, 151936]\n"
        "FLOATS = [" + ", ".join(f"{v / 7:.6f}" for v in range(200)) + "]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("many_constants")
    try:
        after = {name: drawn(name) for name in before}
    finally:
        sys.modules.pop("many_constants", None)
    assert after == before

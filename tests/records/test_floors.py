"""Every input class a record names is drawn at least its floor's times at the ci budget, on seeds 0-3, in the
draws of the fast backends and, where the floor says so, of the Triton interpreter (`specverify.runs.reach`)."""
from __future__ import annotations

import pytest

from specverify.records.registry import all_stages
from specverify.runs.reach import shortfalls

FLOORED = [name for name, stage in all_stages().items() if stage.floors]


def test_every_stage_names_the_classes_that_matter():
    assert set(FLOORED) == set(all_stages())


@pytest.mark.parametrize("name", FLOORED)
def test_every_named_class_is_drawn_up_to_its_floor(name):
    short = shortfalls(all_stages()[name])
    assert not short, "\n".join(map(str, short))


def test_a_class_drawn_under_its_floor_is_named_with_its_count():
    from dataclasses import replace

    from specverify.records.stage import Floor

    stage = all_stages()["rejection.expand"]
    floors = (Floor("batch: B=1", 1, "one request"), Floor("batch: B=1", 101, "more than the budget"),
              Floor("no strategy draws this", 1, "a label no strategy records", interpreted=True))
    short = shortfalls(replace(stage, floors=floors), seeds=(0,))
    assert [(s.floor.least, s.small, s.count) for s in short] == [(101, False, short[0].count), (1, False, 0),
                                                                   (1, True, 0)]
    assert 0 < short[0].count <= 100 and "under its floor 101" in str(short[0])


def test_the_coverage_table_marks_a_named_class_under_its_floor():
    from collections import Counter
    from dataclasses import replace

    from rich.console import Console

    from specverify.pages.terminal import coverage_tables
    from specverify.records.stage import Floor
    from specverify.runs.protocol import Outcome

    stage = replace(all_stages()["rejection.expand"], floors=(Floor("batch: B=1", 5, "one request"),))
    outcomes = [Outcome("rejection.expand", backend, "cpu", "valid", coverage=Counter({"batch: B=1": n, "x": 1}))
                for backend, n in (("torch", 9), ("triton", 3))]
    console = Console(width=200, record=True)
    for table in coverage_tables(outcomes, {stage.name: stage}):
        console.print(table)
    text = console.export_text()
    assert "5 (valid)" in text and "3 (under)" in text and "│ 12 " in text

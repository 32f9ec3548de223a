import os
import random

import pytest


@pytest.fixture(autouse=True)
def findings_in_scratch(tmp_path_factory, monkeypatch):
    """The cases the tests' own runs find go to this session's scratch folder, not ./specverify-findings
    of the checkout (a test that needs the default unsets SPECVERIFY_FINDINGS)."""
    monkeypatch.setenv("SPECVERIFY_FINDINGS", str(tmp_path_factory.getbasetemp() / "findings"))


def pytest_collection_modifyitems(config, items):
    """SPECVERIFY_TEST_ORDER=reverse or shuffle:SEED runs the suite in another order (the same on every
    xdist worker), so that a verdict depending on what ran before it in the process shows."""
    order = os.environ.get("SPECVERIFY_TEST_ORDER", "")
    if order == "reverse":
        items.reverse()
    elif order.startswith("shuffle:"):
        random.Random(order.partition(":")[2]).shuffle(items)
    elif order:
        raise pytest.UsageError(f"SPECVERIFY_TEST_ORDER={order!r}: expected reverse or shuffle:SEED")

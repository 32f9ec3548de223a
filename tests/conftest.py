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


@pytest.fixture
def wide_cuda():
    """The CUDA device, for a test whose tensors pass 2**31 elements: skipped under the wide-offsets check's
    memory minimum, and held alone (that check's lock) for the test's length."""
    from specverify.runs.wide_offsets import MIN_MEMORY, device_memory, one_at_a_time

    if device_memory() < MIN_MEMORY:
        pytest.skip(f"needs a CUDA device of {MIN_MEMORY >> 30} GiB or more")
    import torch

    with one_at_a_time():
        yield torch.device("cuda")

"""The probability-reading Torch kernels stay within their full-table passes (`bench/torch_passes.py`, the
CPU bytes model: bytes read and written of V-wide tensors over one table): a change that adds a pass over
a [T, V] table shows here before it shows on a GPU."""
from __future__ import annotations

import numpy as np
import pytest

from tests.bench_scripts import bench_script

PASSES = {   # as measured; the Triton kernels read 1 + (draft probs) + 1/K, chain_cdf 2 rows twice
    "recovered uniform no draft": 6.2, "recovered uniform draft": 11.2,
    "recovered ragged no draft": 8.2, "recovered ragged draft": 13.2,
    "sample uniform no draft": 6.6, "sample uniform draft": 13.6,
    "sample ragged no draft": 8.6, "sample ragged draft": 15.6,
    "sample_padded padded no draft": 6.6, "sample_padded padded draft": 13.6,
    "chain_cdf padded": 20.0,
}


MODEL = bench_script("torch_passes")
VOCAB = 1024    # the few [T]-sized reads of V-wide tables (at the drafts) weigh 1 / V pass each
CASES = {label: case for label, *case in MODEL.cases(8, VOCAB, np.random.default_rng(0))}


@pytest.mark.parametrize("label", sorted(PASSES))
def test_passes_within_budget(label):
    stage, inputs, outputs, _, unit = CASES[label]
    traffic = MODEL.measure(stage, inputs, outputs, VOCAB)
    passes = sum(r + w for _, r, w in traffic.ops) / unit
    assert passes <= PASSES[label] + 0.02, f"{label}: {passes:.2f} passes > {PASSES[label]}: {traffic.ops}"


def test_every_case_has_a_budget():
    assert set(CASES) == set(PASSES)

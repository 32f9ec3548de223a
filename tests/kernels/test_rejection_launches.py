"""Each `rejection` stage's Torch kernel dispatches at most its record's `launches["torch"]` computing ATen
operations per call after a warm-up call (a CPU stand-in for the CUDA `launches` check), on its worked
example and variants: with draft probabilities, and with `is_greedy` None where optional."""
from __future__ import annotations

import importlib
from unittest import mock

import numpy as np
import pytest
import torch

from specverify.stages.rejection import STAGES
from tests.dispatch_count import dispatched_ops


def variants(stage):
    base = stage.worked()
    yield "worked", dict(base.inputs), base.outputs
    if "draft_probs" in base.inputs and base.inputs["draft_probs"] is None:
        target = base.inputs["target_probs"]
        yield "draft probs", dict(base.inputs, draft_probs=np.flip(target, -1).copy()), base.outputs
    if "inv_q" in base.inputs and "is_greedy" in base.inputs:
        yield "all greedy", dict(base.inputs, is_greedy=None, uniform_probs=None, inv_q=None), base.outputs


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_torch_dispatches_within_bound(stage):
    module_name, function = stage.impls["torch"].split(":")
    module = importlib.import_module(module_name)
    bound = stage.launches["torch"]
    for label, inputs, outputs in variants(stage):
        def arguments():
            kw = {k: torch.from_numpy(v.copy()) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
            kw.update({k: torch.full(b.shape, -9, dtype=getattr(torch, b.dtype)) for k, b in outputs.items()})
            return kw
        # as on CUDA outside checked mode: the value checks (host reads) do not run; a warm-up call first
        # builds the cached device constants, as one must precede CUDA graph capture
        with mock.patch.object(module, "reads_values", lambda tensor: False):
            getattr(module, function)(**arguments())
            ops = dispatched_ops(getattr(module, function), **arguments())
        assert len(ops) <= bound, f"{stage.name} ({label}): {len(ops)} ops > {bound}: {ops}"

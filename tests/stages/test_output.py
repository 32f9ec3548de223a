"""Fixed cases of the `output` family: the STAGES.md worked example, every container type, empty and
all-discarded batches, both filtering paths of the host `parse`, and every invalid rule."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from specverify.judge.materialize import Bound, plan
from specverify.kernels.numpy.output import SMALL
from specverify.records import backends, registry
from specverify.records.backends import BACKENDS, Target
from specverify.records.stage import Buffer, Example
from specverify.runs.session import verify_example as verify
from specverify.strategies.generic import corruptions
from specverify.strategies.output import parse_corruptions, spec_metadata_corruptions

PARSE = registry.all_stages()["output.parse"]
SPEC = registry.all_stages()["output.spec_metadata"]


def targets(stage):
    return [backends.target(stage, b, "cpu") for _, b, d, why in backends.matrix([stage], devices=["cpu"])
            if why is None]


def run(target: Target, example: Example):
    """The value a host implementation returns on `example` (inputs in the example's containers)."""
    call = Bound(*plan(target.stage, example), target.backend.lib, target.device)
    return target.load()(**call.kwargs)


# --- output.spec_metadata ------------------------------------------------------------------------------

WORKED = {"cu_num_draft_tokens": [3, 3, 5, 5, 6], "cu_num_sampled_tokens": [4, 5, 8, 9, 11],
          "logits_indices": [0, 1, 2, 3, 103, 104, 105, 106, 206, 207, 208],
          "target_logits_indices": [0, 1, 2, 5, 6, 9], "bonus_logits_indices": [3, 4, 7, 8, 10],
          "draft_token_ids": [1001, 1002, 1003, 1105, 1106, 1208]}


def worked_example(id_dtype: str = "int32") -> Example:
    return Example(tier="valid",
                   inputs={"num_draft_tokens": [3, 0, 2, 0, 1],
                           "cu_num_scheduled_tokens": np.array([4, 104, 107, 207, 209], np.int32),
                           "input_ids": (np.arange(256) + 1000).astype(id_dtype)},
                   outputs={name: Buffer((len(v),), id_dtype if name == "draft_token_ids" else "int32")
                            for name, v in WORKED.items()})


def test_spec_metadata_worked_example_oracle():
    ex = worked_example()
    outs = {name: np.zeros(buf.shape, buf.dtype) for name, buf in ex.outputs.items()}
    SPEC.oracle(**ex.inputs, **outs)
    assert {k: v.tolist() for k, v in outs.items()} == WORKED


@pytest.mark.parametrize("id_dtype", ["int32", "int64"])
@pytest.mark.parametrize("target", targets(SPEC), ids=lambda t: t.backend)
def test_spec_metadata_worked_example(target, id_dtype):
    verify(target, worked_example(id_dtype))


def generated(stage, ex) -> list:
    """Every invalid variant of `ex` generated from the record (dtype, rank, length, None)."""
    return [c.build(option) for c in corruptions(stage, ex) for option in c.options]


@pytest.mark.parametrize("target", targets(SPEC), ids=lambda t: t.backend)
def test_spec_metadata_refuses_every_invalid_rule(target):
    ex = worked_example()
    for r in range(5):
        for bad in spec_metadata_corruptions(ex, r):
            verify(target, bad)
    for bad in generated(SPEC, ex):
        verify(target, bad)


# --- output.parse --------------------------------------------------------------------------------------

V = 100
IDS = np.array([[5, 7, -1, -1],      # an emitted prefix
                [V, 3, V + 7, 9],   # out-of-vocabulary ids mid-row are dropped, the rest kept
                [1, 2, 3, 4],       # discarded below
                [-1, -1, -1, -1]], np.int32)
EXPECTED = [[5, 7], [3, 9], [], []]


def parse_example(ids=IDS, discard=(2,), containers=("ndarray", "list"), logprobs=None, k=1) -> Example:
    inputs = {"output_token_ids": ids, "vocab_size": V, "discard_req_indices": np.array(discard, np.int64),
              "token_ids": None, "logprobs": None, "ranks": None}
    names = {"output_token_ids": containers[0], "discard_req_indices": containers[1]}
    if logprobs:
        n = ids.size
        inputs.update(token_ids=np.arange(n * (k + 1), dtype=np.int32).reshape(n, k + 1),
                      logprobs=-np.arange(n * (k + 1), dtype=np.float32).reshape(n, k + 1) / 4,
                      ranks=np.arange(n, dtype=np.int64) + 1)
        names.update(dict.fromkeys(("token_ids", "logprobs", "ranks"), logprobs))
    return Example(tier="valid", inputs=inputs, containers=names)


CONTAINERS = list(itertools.product(["ndarray", "tensor"], ["list", "ndarray", "tensor"]))


@pytest.mark.parametrize("containers", CONTAINERS, ids="-".join)
@pytest.mark.parametrize("target", targets(PARSE), ids=lambda t: t.backend)
def test_parse_every_container(target, containers):
    ex = parse_example(containers=containers)
    tokens, lp = run(target, ex)
    assert tokens == EXPECTED and lp is None
    assert all(type(t) is int for row in tokens for t in row)
    verify(target, ex)


@pytest.mark.parametrize("container", ["ndarray", "tensor"])
@pytest.mark.parametrize("target", targets(PARSE), ids=lambda t: t.backend)
def test_parse_logprobs_cover_the_returned_tokens(target, container):
    tokens, (top, lps, ranks, cu) = run(target, parse_example(logprobs=container))
    positions = [0, 1, 5, 7]            # flattened r * S + j of 5, 7, 3, 9
    assert tokens == EXPECTED
    assert top == [[2 * p, 2 * p + 1] for p in positions]
    assert lps == [[-2 * p / 4, -(2 * p + 1) / 4] for p in positions]
    assert ranks == [p + 1 for p in positions] and cu == [0, 2, 4, 4, 4]
    assert all(type(x) is float for row in lps for x in row)


@pytest.mark.parametrize("containers", CONTAINERS, ids="-".join)
@pytest.mark.parametrize("target", targets(PARSE), ids=lambda t: t.backend)
def test_parse_empty_and_all_discarded(target, containers):
    assert run(target, parse_example(np.zeros((0, 5), np.int32), (), containers)) == ([], None)
    assert run(target, parse_example(IDS, (), containers))[0] == [[5, 7], [3, 9], [1, 2, 3, 4], []]
    every = parse_example(IDS, (3, 0, 1, 2, 0), containers, logprobs="tensor")   # duplicates allowed
    assert run(target, every) == ([[], [], [], []], ([], [], [], [0, 0, 0, 0, 0]))


@pytest.mark.parametrize("target", targets(PARSE), ids=lambda t: t.backend)
def test_parse_large_batch_matches_a_plain_filter(target):
    rng = np.random.default_rng(1)
    ids = rng.integers(-1, V + 3, (SMALL, 9)).astype(np.int32)
    discard = (0, 17, 17, SMALL - 1)
    tokens, _ = run(target, parse_example(ids, discard, ("tensor", "tensor"), logprobs="ndarray"))
    assert tokens == [[] if r in discard else [int(t) for t in row if 0 <= t < V] for r, row in enumerate(ids)]
    verify(target, parse_example(ids, discard, ("tensor", "tensor"), logprobs="ndarray"))


@pytest.mark.parametrize("containers", CONTAINERS, ids="-".join)
@pytest.mark.parametrize("target", targets(PARSE), ids=lambda t: t.backend)
def test_parse_refuses_every_invalid_rule(target, containers):
    for ids in (IDS, np.tile(IDS, (SMALL, 1))):     # both filtering paths
        ex = parse_example(ids, (2,), containers, logprobs=containers[0])
        for bad in parse_corruptions(ex) + generated(PARSE, ex):
            verify(target, bad)


def test_parse_outside_implementation_gets_host_containers():
    """`--impl` hands a host stage's inputs in the example's containers, like every backend."""
    impl = Target(PARSE, BACKENDS["impl"], "cpu", PARSE.impls["numpy"])
    verify(impl, parse_example(containers=("tensor", "tensor"), logprobs="tensor"))

"""bench/engine_shapes.py: each engine-shaped reference leaves the bytes our kernel leaves, on small bench
inputs, in Triton's interpreter (on a GPU the script compares them itself before timing)."""
from __future__ import annotations

import numpy as np
import pytest

from specverify import env
from tests.bench_scripts import bench_script

env.prepare()
pytestmark = pytest.mark.skipif(not env.triton_interpreted() or env.triton_import_error() is not None,
                                reason="Triton is not running in its interpreter here")


@pytest.fixture(scope="module")
def script():
    return bench_script("engine_shapes")


KEYS = ["rejection.expand", "eagle.step_slot_mapping", "eagle.copy_and_expand_inputs", "graph.dsa_indexer_metadata",
        "rejection.sample:all_greedy"]


def test_every_case_is_checked(script):
    assert sorted(script.CASES) == sorted(KEYS)


@pytest.mark.parametrize("batch", [1, 3, 8])
@pytest.mark.parametrize("key", KEYS)
def test_reference_leaves_our_bytes(script, key, batch):
    from specverify.judge.materialize import plan
    from specverify.records.registry import all_stages

    case = script.CASES[key]
    stage = all_stages()[script.stage_of(key)]
    call_plan, arena = plan(stage, script.bench_example(stage, batch, case))
    ours = script.arena_after(call_plan, arena, lambda kw: lambda: case[0](**kw), "cpu")
    reference = script.arena_after(call_plan, arena, case[1], "cpu")
    assert not np.array_equal(ours, arena), "our kernel wrote nothing: the comparison would be empty"
    assert np.array_equal(reference, ours), f"{key} at B = {batch}: the reference's bytes differ from ours"
    assert script.byte_equal(call_plan, arena, case[0], case[1], "cpu")


def test_all_greedy_example_has_no_noise(script):
    from specverify.records.registry import all_stages

    stage = all_stages()["rejection.sample"]
    example = script.bench_example(stage, 2, script.CASES["rejection.sample:all_greedy"], vocab=64)
    assert all(example.inputs[name] is None for name in ("is_greedy", "uniform_probs", "inv_q"))
    assert stage.bench(2, 64, np.random.default_rng(0)).inputs["is_greedy"] is not None


@pytest.fixture(scope="module")
def variants():
    return bench_script("chain_variants")


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("key", ["graph.dsa_indexer_metadata", "rejection.expand"])
def test_every_candidate_launch_leaves_the_references_bytes(variants, key, batch):
    """bench/chain_variants.py's candidates (expand's one-row tiles, dsa's requests per program) on small bench
    inputs, against the engine-shaped reference."""
    from specverify.judge.materialize import plan
    from specverify.records.registry import all_stages

    case = variants.CASES[key]
    stage = all_stages()[key]
    call_plan, arena = plan(stage, variants.engine_shapes.bench_example(stage, batch, case))
    reference = variants.engine_shapes.arena_after(call_plan, arena, case[1], "cpu")
    for label, candidate in variants.VARIANTS[key].items():
        mine = variants.engine_shapes.arena_after(call_plan, arena, lambda kw: lambda: candidate(**kw), "cpu")
        assert np.array_equal(mine, reference), f"{key} {label} at B = {batch}"

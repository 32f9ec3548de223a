"""Fixed cases of tree verification: the worked examples by hand on the oracle and every backend, and
the rules a random draw meets only by luck (list order, no backtracking, placeholders and int32
aliases, coin ties, the fallbacks of the pick, coins indexed by node, unread candidates, refused links), and a
planted bug below the first level caught and shrunk."""
from __future__ import annotations

import numpy as np
import pytest

from specverify.judge.harness import oracle_outputs
from specverify.oracles import tree as oracle
from specverify.records import backends, dialects
from specverify.records.stage import Example
from specverify.records.values import POISON_A, filled
from specverify.runs.session import verify_example as verify
from specverify.stages import tree as records
from specverify.strategies import tree as draw
from specverify.strategies.tree_shapes import SHAPES, depths, links, parents
from tests.planted_runs import caught

GREEDY, SAMPLE = records.VERIFY_GREEDY, records.SAMPLE_TARGET_ONLY
i64, f32 = np.int64, np.float32
POISON = int(filled((1,), np.dtype("int32"), POISON_A)[0])


def targets(stage, dialect=""):
    """Every target of the stage (under `dialect`) that runs here."""
    found = []
    for view, backend, device, why in backends.matrix([stage], only_dialect=dialect):
        if why is None:
            found.append(backends.target(view, backend, device))
    return found


def outputs_everywhere(stage, example: Example, dialect: str = "") -> dict:
    """Every backend must match the oracle on `example`; the oracle's outputs (poison shows as None)."""
    judged = dialects.judged(stage, dialect) if dialect else stage
    for target in targets(stage, dialect):
        verify(target, example)
    views = oracle_outputs(judged, example)
    return {k: [None if v == POISON else v for v in views[k].reshape(-1).tolist()] if v.dtype == np.int32
            else views[k] for k, v in views.items()}


def tree_example(candidates, next_token, next_sibling, predict, spec) -> Example:
    """One greedy request from plain lists (retrieve_index the identity)."""
    n = len(candidates)
    return Example("valid", inputs={
        "candidates": np.array([candidates], i64), "retrieve_index": np.arange(n, dtype=i64)[None],
        "retrieve_next_token": np.array([next_token], i64), "retrieve_next_sibling": np.array([next_sibling], i64),
        "target_predict": np.array([predict], i64)}, outputs=draw.outputs(1, n, spec))


def test_greedy_worked_example():
    found = outputs_everywhere(GREEDY, records.verify_greedy_worked())
    assert found["predicts"] == [7, 5, None, None, None, None, 5, None, None, None, None, 0]
    assert found["accept_index"] == [0, 1, None, None, 6, 11, None, None]
    assert found["accept_token_num"] == [1, 1]


def test_longest_path_worked_example():
    found = outputs_everywhere(GREEDY, records.verify_greedy_longest_path_worked(), "longest_path")
    assert found["accept_index"][:4] == [0, 2, 4, 5] and found["accept_token_num"] == [3, 1]
    assert [found["predicts"][i] for i in (0, 2, 4, 5)] == [7, 5, 3, 6]


def test_greedy_takes_the_first_match_in_list_order_not_in_node_order():
    # root's list is 3 then 1; both carry the prediction 4
    ex = tree_example([0, 4, 9, 4], [3, -1, -1, -1], [-1, -1, -1, 1], [4, 0, 0, 0], 2)
    assert outputs_everywhere(GREEDY, ex)["accept_index"] == [0, 3]


def test_longest_path_prefers_the_first_of_equally_deep_paths_and_caps_at_s_minus_1():
    # 0 -> {1, 2}, 1 -> 3, 2 -> 4 -> 5: every step matches; with S = 3 both 0-1-3 and 0-2-4 reach the cap
    ex = tree_example([0, 1, 1, 2, 2, 3], [1, 3, 4, -1, 5, -1], [-1, 2, -1, -1, -1, -1], [1, 2, 2, 0, 3, 0], 3)
    assert outputs_everywhere(GREEDY, ex, "longest_path")["accept_index"] == [0, 1, 3]
    ex = tree_example([0, 1, 1, 2, 2, 3], [1, 3, 4, -1, 5, -1], [-1, 2, -1, -1, -1, -1], [1, 2, 2, 0, 3, 0], 4)
    assert outputs_everywhere(GREEDY, ex, "longest_path")["accept_index"] == [0, 2, 4, 5]


def test_placeholders_and_int32_aliases_never_match():
    alias = 5 + 2**32
    ex = tree_example([0, -1, alias, 5], [1, -1, -1, -1], [-1, 2, 3, -1], [5, 0, 0, 0], 2)
    assert outputs_everywhere(GREEDY, ex)["accept_index"] == [0, 3]


def test_s_of_one_walks_no_level():
    ex = tree_example([0, 5], [1, -1], [-1, -1], [5, 0], 1)
    found = outputs_everywhere(GREEDY, ex)
    assert found["accept_index"] == [0] and found["predicts"] == [5, None] and found["accept_token_num"] == [0]


@pytest.mark.parametrize("n", [64, 65, 100])
@pytest.mark.parametrize("shape", ["chain", "star", "irregular"])
def test_greedy_walks_agree_either_side_of_a_tile_of_64_nodes(shape, n):
    """The Triton greedy walk keeps up to 64 nodes in registers and walks larger trees from memory: both
    ways the path to the deepest node is accepted (a chain of N - 1 matches, an irregular tree), and a star
    is matched at its last listed sibling."""
    rng = np.random.default_rng(n)
    parent = parents(shape, n, rng, 3)
    token, sibling = links(parent, "shuffled", rng)
    predict = rng.integers(0, 50, n)
    on_path, node = np.zeros(n, bool), int(np.argmax(depths(parent)))
    if shape == "star":    # the last child in list order
        node = oracle.child_list(token[None], sibling[None], 0, 0)[-1]
    while node > 0:
        on_path[node], node = True, int(parent[node])
    candidates = np.where(on_path, predict[np.maximum(parent, 0)], predict[np.maximum(parent, 0)] + 1)
    want = int(on_path.sum())
    found = outputs_everywhere(GREEDY, tree_example(candidates.tolist(), token.tolist(), sibling.tolist(),
                                                     predict.tolist(), want + 1))
    assert found["accept_token_num"] == [want]


@pytest.mark.parametrize("field,value,words", [
    ("retrieve_next_sibling", [[0, -1, -1]], "cycle"),
    ("retrieve_next_token", [[1, 0, -1]], "cycle"),
    ("retrieve_next_token", [[1, -1, 1]], "two links"),
    ("retrieve_next_token", [[3, -1, -1]], "[0, N)"),
])
def test_broken_links_are_refused_by_name(field, value, words):
    ex = tree_example([0, 1, 2], [1, -1, -1], [-1, -1, -1], [1, 0, 0], 2)
    ex.inputs[field] = np.array(value, i64)
    with pytest.raises(ValueError, match=field) as raised:
        oracle.verify_greedy(**ex.inputs, predicts=np.zeros(3, np.int32), accept_index=np.zeros((1, 2), np.int32),
                             accept_token_num=np.zeros(1, np.int32))
    assert words in str(raised.value)
    ex.tier, ex.bad_field, ex.rule = "invalid", field, words
    for target in targets(GREEDY):
        verify(target, ex)


def sample_case(tokens, next_token, next_sibling, rows, coins, final, spec, single=1.0, acc=1.0) -> Example:
    """One sample_target_only request from plain lists: rows[i] the target row of node i."""
    n = len(tokens)
    probs = np.array([rows], f32)
    return Example("valid", inputs={
        "candidates": np.array([tokens], i64), "retrieve_index": np.arange(n, dtype=i64)[None],
        "retrieve_next_token": np.array([next_token], i64), "retrieve_next_sibling": np.array([next_sibling], i64),
        "uniform_samples": np.array([coins], f32), "uniform_final": np.array([final], f32), "target_probs": probs,
        "draft_probs": np.zeros_like(probs), "threshold_single": single, "threshold_acc": acc},
        outputs=draw.outputs(1, n, spec))


def test_sample_worked_example():
    found = outputs_everywhere(SAMPLE, records.sample_target_only_worked())
    assert found["predicts"] == [3, None, None, None, 1, None, 1, None]
    assert found["accept_index"] == [0, None, None, 4, 6, None] and found["accept_token_num"] == [0, 1]
    assert found["draft_probs"][:, 0].tolist() == [[0, .25, .5, 0], [0, 0, .5, 0]]


def test_le_worked_example():
    found = outputs_everywhere(SAMPLE, records.sample_target_only_le_worked(), "le")
    assert found["predicts"][4:] == [2, 0, None, 0] and found["accept_index"][3:] == [4, 5, 7]


QUARTERS = [.25, .25, .25, .25]


def test_a_coin_equal_to_the_mass_rejects_and_p_equal_to_threshold_single_accepts():
    rows = [[.25, .5, .125, .125]] + [QUARTERS] * 2
    ex = sample_case([9, 0, 1], [1, -1, -1], [-1, 2, -1], rows, [.25, 0, 0], 0, 2)
    assert outputs_everywhere(SAMPLE, ex)["accept_index"] == [0, 2]
    ex = sample_case([9, 0, 1], [1, -1, -1], [-1, 2, -1], rows, [.875, 0, 0], 0, 2, single=.25)
    assert outputs_everywhere(SAMPLE, ex)["accept_index"] == [0, 1]


def test_a_zero_mass_sibling_is_rejected_even_at_coin_zero():
    rows = [[0, .5, .25, .25]] + [QUARTERS] * 2
    ex = sample_case([9, 0, 1], [1, -1, -1], [-1, 2, -1], rows, [0, 0, 0], 0, 2)
    found = outputs_everywhere(SAMPLE, ex)
    assert found["accept_index"] == [0, 2]
    assert outputs_everywhere(SAMPLE, ex, "le")["accept_index"] == [0, 1]


def test_an_all_zero_residual_gives_v_minus_1_and_t_at_the_total_the_largest_positive():
    rows = [[.5, .5, 0, 0]] + [QUARTERS] * 2
    ex = sample_case([9, 0, 1], [1, -1, -1], [-1, 2, -1], rows, [1.0, 0, 0], .5, 2)
    assert outputs_everywhere(SAMPLE, ex)["predicts"][0] == 3            # both siblings removed their mass
    rows = [[.25, .5, .25, 0]] + [QUARTERS] * 2
    ex = sample_case([9, 3, 3], [1, -1, -1], [-1, 2, -1], rows, [.99, 0, 0], 1.0, 2)
    assert outputs_everywhere(SAMPLE, ex)["predicts"][0] == 2            # t = total: no running sum passes it


def test_coins_are_indexed_by_node_not_by_depth():
    # 0 -> 2 -> 1: after accepting node 2 the coin is u[2] (0.875: rejects), not u[1] (depth 1, 0: accepts)
    rows = [[.5, .5, 0, 0], QUARTERS, [0, .5, .5, 0]]
    ex = sample_case([9, 1, 0], [2, -1, 1], [-1, -1, -1], rows, [0, 0, .875], 0, 3)
    found = outputs_everywhere(SAMPLE, ex)
    assert found["accept_index"] == [0, 2, None] and found["accept_token_num"] == [1]


def test_tokens_outside_the_vocabulary_are_rejected_unread():
    rows = [[.25, .25, .25, .25]] * 3
    ex = sample_case([9, -1, 4], [1, -1, -1], [-1, 2, -1], rows, [.99, 0, 0], 0, 2)
    found = outputs_everywhere(SAMPLE, ex)
    assert found["accept_token_num"] == [0] and not found["draft_probs"].any()


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_is_a_forest_with_the_parents_it_claims(shape):
    rng = np.random.default_rng(1)
    for n in (1, 2, 7, 16):
        parent = parents(shape, n, rng, 3)
        token, sibling = links(parent, "shuffled", rng)
        assert oracle.link_problem(token[None], sibling[None]) is None
        for p in range(n):
            assert sorted(oracle.child_list(token[None], sibling[None], 0, p)) == np.flatnonzero(parent == p).tolist()
        assert (depths(parent)[parent >= 0] >= -1).all()


def test_a_planted_root_prediction_bug_is_caught_below_the_first_level(tmp_path, capsys):
    """tests/planted_tree_kv.py: every level matched against the root's prediction. The ci budget on seed 0
    catches it (the old strategy walked past one level in 3 of 100 draws there, and first failed at 95)."""
    valid, shrunk = caught(tmp_path, capsys, "tree.verify_greedy", "tests.planted_tree_kv:verify_greedy_root_prediction",
                           within=10)
    assert oracle_outputs(GREEDY, shrunk)["accept_token_num"].max() >= 2, valid["headline"]

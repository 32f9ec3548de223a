"""Fixed examples of the `eagle` family: hand-computed outputs (STAGES.md's worked example among them),
checked on the oracle and then on every backend that runs here; a planted bug the strategies catch."""

import numpy as np
import pytest

from specverify.judge.harness import oracle_outputs
from specverify.records import backends
from specverify.records.stage import Buffer, Example, Layout
from specverify.runs.session import verify_example
from specverify.stages import eagle
from tests.planted_runs import caught

i32, i64 = np.int32, np.int64


def outputs_everywhere(stage, example: Example) -> dict[str, np.ndarray]:
    """The oracle's outputs (views, in-place inputs included); every available backend must match them."""
    for _, backend, device, why in backends.matrix([stage]):
        if why is None:
            verify_example(backends.target(stage, backend, device), example)
    return oracle_outputs(stage, example)


def test_prepare_inputs_worked_example():
    # STAGES.md: q = [4, 7, 5], rejected = [1, 3, 2] gives [0, 1, 2, 4, 5, 6, 7, 11, 12, 13]
    ex = Example("valid", inputs={"query_start_loc": np.array([0, 4, 11, 16], i32),
                                  "seq_lens": np.array([10, 20, 30], i32),
                                  "num_draft_tokens": np.array([3, 6, 4], i32),
                                  "num_sampled": np.array([3, 4, 3], i32)},
                 outputs={"new_query_start_loc": Buffer((4,), "int32"), "token_indices": Buffer((10,), "int32"),
                          "new_seq_lens": Buffer((3,), "int32")})
    out = outputs_everywhere(eagle.PREPARE_INPUTS, ex)
    assert out["token_indices"].tolist() == [0, 1, 2, 4, 5, 6, 7, 11, 12, 13]
    assert out["new_query_start_loc"].tolist() == [0, 3, 7, 10]
    assert out["new_seq_lens"].tolist() == [9, 17, 28]


def test_next_token_takes_the_last_valid_id_of_a_strided_row():
    vocab = 100
    sampled = np.array([[5, -1, 7, vocab], [-1, vocab + 7, -1, -1], [1, 2, 3, 4]], i32)
    ex = Example("valid", inputs={"sampled_token_ids": sampled, "discard_mask": np.array([False, False, True]),
                                  "backup_next_token_ids": np.array([40, 41, 42], i32), "vocab_size": vocab},
                 outputs={"next_token_ids": Buffer((3,), "int32"),
                          "valid_sampled_tokens_count": Buffer((3,), "int32")},
                 layouts={"sampled_token_ids": Layout((1, 1), (0, 3))})
    out = outputs_everywhere(eagle.NEXT_TOKEN_PADDED, ex)
    assert out["next_token_ids"].tolist() == [7, 41, 42]
    assert out["valid_sampled_tokens_count"].tolist() == [2, 0, 0]


def test_prepare_inputs_padded_leaves_rows_past_num_reqs():
    ex = Example("valid", inputs={"cu_num_draft_tokens": np.array([2, 2, 5, 99], i32),
                                  "valid_sampled_tokens_count": np.array([1, 1, 4, -3], i32),
                                  "query_start_loc": np.array([0, 3, 4, 8, 1], i64), "num_reqs": 3},
                 outputs={"token_indices_to_sample": Buffer((4,), "int64"),
                          "num_rejected_tokens": Buffer((4,), "int32")})
    out = outputs_everywhere(eagle.PREPARE_INPUTS_PADDED, ex)
    assert out["num_rejected_tokens"][:3].tolist() == [2, 0, 0]
    assert out["token_indices_to_sample"][:3].tolist() == [0, 3, 7]


@pytest.mark.parametrize("shift", [False, True])
def test_copy_and_expand_parallel_slots(shift):
    size = 5 + 2 * 2 - (2 if shift else 0)
    ex = Example("valid", inputs={"target_token_ids": np.array([10, 11, 12, 13, 14], i32),
                                  "target_positions": np.array([100, 101, 102, 200, 201], i64),
                                  "next_token_ids": np.array([50, 60], i32),
                                  "query_start_loc": np.array([0, 3, 5], i32), "query_end_loc": np.array([1, 4], i32),
                                  "padding_token_id": -1, "parallel_drafting_token_id": 99, "P": 2,
                                  "shift_input_ids": shift},
                 outputs={"out_input_ids": Buffer((size,), "int32"), "out_positions": Buffer((size,), "int64"),
                          "out_is_rejected_token_mask": Buffer((size,), "bool"),
                          "out_is_masked_token_mask": Buffer((size,), "bool"),
                          "out_new_token_indices": Buffer((4,), "int32"),
                          "out_hidden_state_mapping": Buffer((5,), "int32")})
    out = outputs_everywhere(eagle.COPY_AND_EXPAND_INPUTS, ex)
    if shift:
        assert out["out_input_ids"].tolist() == [11, 50, 99, -1, 14, 60, 99]
        assert out["out_positions"].tolist() == [100, 101, 102, 0, 200, 201, 202]
        assert out["out_new_token_indices"].tolist() == [1, 2, 5, 6]
        assert out["out_hidden_state_mapping"].tolist() == [0, 1, 2, 4, 5]
    else:
        assert out["out_input_ids"].tolist() == [10, 11, 50, 99, -1, 13, 14, 60, 99]
        assert out["out_positions"].tolist() == [100, 101, 102, 103, 0, 200, 201, 202, 203]
        assert out["out_is_rejected_token_mask"].tolist() == [False] * 4 + [True] + [False] * 4
        assert out["out_is_masked_token_mask"].tolist() == [False] * 3 + [True] + [False] * 4 + [True]
        assert out["out_new_token_indices"].tolist() == [2, 3, 7, 8]


def test_step_slot_mapping_padded_rows_and_the_length_limit():
    table = np.array([[3, 4], [5, 6], [7, 8]], i32)
    ex = Example("valid", inputs={"positions": np.array([2, 9, 5], i64), "block_table": table,
                                  "seq_lens": np.array([3, 10, 6], i32), "block_size": 4, "max_model_len": 10,
                                  "batch_size": 2, "input_batch_size": 4},
                 outputs={"clamped_positions": Buffer((3,), "int64"), "slot_mapping": Buffer((4,), "int64")},
                 layouts={"block_table": Layout((2, 1), (0, 3))})
    out = outputs_everywhere(eagle.STEP_SLOT_MAPPING, ex)
    assert out["slot_mapping"].tolist() == [3 * 4 + 3, -1, -1, -1]
    assert out["clamped_positions"][:2].tolist() == [3, 0]
    assert out["seq_lens"].tolist() == [4, 1, 6]


def test_step_slot_mapping_one_position_past_the_table():
    # max_model_len is one beyond the table's 2 * 4 slots: row 0 advances to position 8 (room left), past
    # the table, and takes its last block (id 6); row 1 stays inside the table
    ex = Example("valid", inputs={"positions": np.array([7, 2], i32), "block_table": np.array([[5, 6], [7, 8]], i32),
                                  "seq_lens": np.array([8, 3], i32), "block_size": 4, "max_model_len": 9,
                                  "batch_size": 2, "input_batch_size": 2},
                 outputs={"clamped_positions": Buffer((2,), "int32"), "slot_mapping": Buffer((2,), "int64")})
    out = outputs_everywhere(eagle.STEP_SLOT_MAPPING, ex)
    assert out["slot_mapping"].tolist() == [6 * 4 + 0, 7 * 4 + 3]
    assert out["clamped_positions"].tolist() == [8, 3]
    assert out["seq_lens"].tolist() == [9, 4]


def test_verify_and_prepare_worked_example():
    # row 0 rejects its second draft, row 1 takes its bonus, row 2 (no drafts) is discarded, row 3 is
    # not greedy (its row kept as the caller left it), row 4 is past num_reqs
    out = outputs_everywhere(eagle.VERIFY_AND_PREPARE_PADDED, eagle.verify_and_prepare_padded_worked())
    assert out["output_token_ids"].tolist() == [[5, 9, -1], [3, 4, 12], [13, -1, -1], [7, -1, -1], [15, -1, -1]]
    assert out["next_token_ids"].tolist() == [9, 12, 42, 7, 15]
    assert out["valid_sampled_tokens_count"].tolist() == [2, 3, 0, 1, 1]
    assert out["num_rejected_tokens"][:4].tolist() == [1, 0, 0, 1]
    assert out["token_indices_to_sample"][:4].tolist() == [1, 5, 6, 7]


def test_verify_and_prepare_reads_back_the_callers_slots_of_a_strided_row():
    # greedy row 0 emits 1 token; the junk 8 the caller left at slot 2 is the row's last valid id
    ex = Example("valid", inputs={
        "draft_token_ids": np.array([1, 2], i32), "target_argmax": np.array([3, 2], i64),
        "bonus_token_ids": np.array([6], i64), "cu_num_draft_tokens": np.array([2], i32), "is_greedy": None,
        "max_spec_len": 2, "output_token_ids": np.array([[-1, 100, 8]], i32), "discard_mask": np.array([False]),
        "backup_next_token_ids": np.array([40], i32), "vocab_size": 100,
        "query_start_loc": np.array([0, 3], i64), "num_reqs": 1},
        outputs={"next_token_ids": Buffer((1,), "int32"), "valid_sampled_tokens_count": Buffer((1,), "int32"),
                 "token_indices_to_sample": Buffer((1,), "int64"), "num_rejected_tokens": Buffer((1,), "int32")},
        layouts={"output_token_ids": Layout((1, 2), (0, 1))})
    out = outputs_everywhere(eagle.VERIFY_AND_PREPARE_PADDED, ex)
    assert out["output_token_ids"].tolist() == [[3, 100, 8]]
    assert out["next_token_ids"].tolist() == [8]
    assert out["valid_sampled_tokens_count"].tolist() == [2]
    assert out["num_rejected_tokens"].tolist() == [1]
    assert out["token_indices_to_sample"].tolist() == [1]


def test_verify_and_prepare_bench_input_is_a_valid_all_greedy_step():
    ex = eagle.VERIFY_AND_PREPARE_PADDED.bench(64, 1000, np.random.default_rng(1))
    assert ex.tier == "valid" and not ex.layouts and ex.inputs["is_greedy"] is None
    assert np.diff(ex.inputs["cu_num_draft_tokens"], prepend=0).tolist() == [5] * 64
    out = outputs_everywhere(eagle.VERIFY_AND_PREPARE_PADDED, ex)
    count = out["valid_sampled_tokens_count"]
    assert count.min() >= 1 and count.max() <= 6 and len(set(count.tolist())) > 1
    assert (out["num_rejected_tokens"] == 6 - count).all()


def test_a_planted_block_clamp_off_by_one_is_caught_and_shrunk(tmp_path, capsys):
    # the clamp of the block into the table skipped when max_model_len is just one past the table's capacity
    valid, shrunk = caught(tmp_path, capsys, "eagle.step_slot_mapping", "tests.planted_eagle:block_clamp_off_by_one")
    x = shrunk.inputs
    assert x["max_model_len"] == x["block_size"] * x["block_table"].shape[1] + 1, valid["headline"]

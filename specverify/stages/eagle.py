"""Stage records of the `eagle` family (STAGES.md: eagle.*). Index dtypes: see `specverify.oracles.eagle`."""
from __future__ import annotations

from specverify.oracles import eagle as oracle
from specverify.stage import I, O, Stage, kernels
from specverify.strategies import eagle as draw

IDX = "int32|int64"


NEXT_TOKEN_PADDED = Stage(
    name="eagle.next_token_padded",
    doc="per row: the count of valid sampled ids and the last valid one (the backup when none or discarded)",
    inputs=(
        I("sampled_token_ids", "int32", "B, S", strided=True, doc="row stride may exceed S"),
        I("discard_mask", "bool", "B"),
        I("backup_next_token_ids", "int32", "B"),
        I("vocab_size", "int"),
    ),
    outputs=(O("next_token_ids", "int32", "B"), O("valid_sampled_tokens_count", "int32", "B")),
    oracle=oracle.next_token_padded,
    valid=draw.next_token_valid,
    invalid=draw.next_token_invalid,
    rows=draw.next_token_table,
    impls=kernels("eagle", "next_token_padded"),
)

PREPARE_INPUTS_PADDED = Stage(
    name="eagle.prepare_inputs_padded",
    doc="rejected tokens and the index to sample of each of the first num_reqs requests",
    inputs=(
        I("cu_num_draft_tokens", "int32", "B", doc="inclusive cumulative draft counts"),
        I("valid_sampled_tokens_count", "int32", "B"),
        I("query_start_loc", IDX, "B+1"),
        I("num_reqs", "int", doc="<= B; later rows are neither read nor written"),
    ),
    outputs=(O("token_indices_to_sample", IDX, "B", doc="dtype of query_start_loc"),
             O("num_rejected_tokens", "int32", "B")),
    oracle=oracle.prepare_inputs_padded,
    valid=draw.prepare_padded_valid,
    invalid=draw.prepare_padded_invalid,
    rows=draw.prepare_padded_table,
    impls=kernels("eagle", "prepare_inputs_padded"),
)

PREPARE_INPUTS = Stage(
    name="eagle.prepare_inputs",
    doc="drop rejected tokens from each query: new offsets, kept token indices, shorter sequences",
    inputs=(
        I("query_start_loc", IDX, "B+1"),
        I("seq_lens", IDX, "B"),
        I("num_draft_tokens", IDX, "B"),
        I("num_sampled", IDX, "B", doc="accepted + 1, or 0"),
    ),
    outputs=(O("new_query_start_loc", IDX, "B+1", doc="dtype of query_start_loc"),
             O("token_indices", IDX, "sum(q')", doc="dtype of query_start_loc"),
             O("new_seq_lens", IDX, "B", doc="dtype of seq_lens")),
    oracle=oracle.prepare_inputs,
    valid=draw.prepare_valid,
    invalid=draw.prepare_invalid,
    rows=draw.prepare_table,
    impls=kernels("eagle", "prepare_inputs"),
)

COPY_AND_EXPAND_INPUTS = Stage(
    name="eagle.copy_and_expand_inputs",
    doc="lay out each request's drafting input: kept ids, next token, parallel slots, rejected padding",
    inputs=(
        I("target_token_ids", IDX, "N"),
        I("target_positions", IDX, "N"),
        I("next_token_ids", IDX, "B", doc="dtype of target_token_ids"),
        I("query_start_loc", IDX, "B+1"),
        I("query_end_loc", IDX, "B", doc="dtype of query_start_loc"),
        I("padding_token_id", "int"),
        I("parallel_drafting_token_id", "int"),
        I("P", "int", doc="slots per request, >= 1"),
        I("shift_input_ids", "bool"),
    ),
    outputs=(
        O("out_input_ids", IDX, "N + B*P - (B if shift)", doc="dtype of target_token_ids"),
        O("out_positions", IDX, "N + B*P - (B if shift)", doc="dtype of target_positions"),
        O("out_is_rejected_token_mask", "bool", "N + B*P - (B if shift)"),
        O("out_is_masked_token_mask", "bool", "N + B*P - (B if shift)"),
        O("out_new_token_indices", "int32", "B*P"),
        O("out_hidden_state_mapping", "int32", "N", doc="written only when shifting"),
    ),
    oracle=oracle.copy_and_expand_inputs,
    valid=draw.copy_expand_valid,
    invalid=draw.copy_expand_invalid,
    rows=draw.copy_expand_table,
    impls=kernels("eagle", "copy_and_expand_inputs"),
)

EXTEND_QUERIES = Stage(
    name="eagle.extend_queries",
    doc="every query grows by N tokens: shifted offsets, longer sequences",
    inputs=(I("query_start_loc", IDX, "B+1"), I("seq_lens", IDX, "B"), I("N", "int")),
    outputs=(O("new_query_start_loc", IDX, "B+1", doc="dtype of query_start_loc"),
             O("new_seq_lens", IDX, "B", doc="dtype of seq_lens")),
    oracle=oracle.extend_queries,
    valid=draw.extend_valid,
    invalid=draw.extend_invalid,
    impls=kernels("eagle", "extend_queries"),
)

STEP_SLOT_MAPPING = Stage(
    name="eagle.step_slot_mapping",
    doc="one drafting step: next positions (clamped past max_model_len), their KV slots, longer sequences",
    inputs=(
        I("positions", IDX, "B"),
        I("block_table", IDX, "B, NB", strided=True, doc="row stride given"),
        I("seq_lens", IDX, "B", inout=True, doc="updated in place for the real rows"),
        I("block_size", "int"),
        I("max_model_len", "int"),
        I("batch_size", "int", doc="real rows; <= input_batch_size and <= B"),
        I("input_batch_size", "int", doc="CUDA-graph padded batch"),
    ),
    outputs=(O("clamped_positions", IDX, "B", doc="dtype of positions; real rows only"),
             O("slot_mapping", "int64", "input_batch_size", doc="-1 for padded rows")),
    oracle=oracle.step_slot_mapping,
    valid=draw.step_valid,
    invalid=draw.step_invalid,
    rows=draw.step_table,
    impls=kernels("eagle", "step_slot_mapping"),
)

STAGES = (NEXT_TOKEN_PADDED, PREPARE_INPUTS_PADDED, PREPARE_INPUTS, COPY_AND_EXPAND_INPUTS, EXTEND_QUERIES,
          STEP_SLOT_MAPPING)

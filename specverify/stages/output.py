"""Stage records of the `output` family (STAGES.md: output.*)."""
from __future__ import annotations

from specverify.oracles import output as oracle
from specverify.stage import I, O, Stage, kernels
from specverify.strategies import output as draw

HOST = "specverify.kernels.host.output"

PARSE = Stage(
    name="output.parse",
    doc="the valid ids of each request's row as Python lists ([] when discarded), with their logprobs",
    host=True,
    inputs=(
        I("output_token_ids", "int32", "B, S", doc="ndarray or CPU tensor; -1 and ids >= V are dropped"),
        I("vocab_size", "int"),
        I("discard_req_indices", "int", "D", doc="list, ndarray or tensor of rows in [0, B); duplicates allowed"),
        I("token_ids", "int32|int64", "B*S, k+1", optional=True, doc="logprobs: candidate ids per position"),
        I("logprobs", "float32", "B*S, k+1", optional=True, doc="logprobs: their log-probabilities"),
        I("ranks", "int32|int64", "B*S", optional=True, doc="logprobs: rank of each position's token"),
    ),
    outputs=(
        O("tokens", "list[list[int]]", "B", doc="returned first: the valid ids per row"),
        O("logprobs_lists", "tuple", "4", optional=True,
          doc="returned second: (token_ids, logprobs, ranks, cu_num_tokens[B+1]) of the returned tokens"),
    ),
    oracle=oracle.parse,
    valid=draw.parse_valid,
    invalid=draw.parse_invalid,
    rows=draw.parse_table,
    impls={"numpy": f"{HOST}:parse"},
)

SPEC_METADATA = Stage(
    name="output.spec_metadata",
    doc="logits positions of each request's drafts and bonus, and the draft ids they verify",
    inputs=(
        I("num_draft_tokens", "int", "B", doc="a list of Python ints, zeros allowed"),
        I("cu_num_scheduled_tokens", "int32", "B", doc="inclusive offsets of the scheduled tokens"),
        I("input_ids", "int32|int64", "N", doc="the scheduled token ids; N may exceed the scheduled total"),
    ),
    outputs=(
        O("cu_num_draft_tokens", "int32", "B", doc="inclusive cumsum of n"),
        O("cu_num_sampled_tokens", "int32", "B", doc="inclusive cumsum of n + 1"),
        O("logits_indices", "int32", "T+B", doc="every request's last n + 1 scheduled positions"),
        O("target_logits_indices", "int32", "T", doc="index into logits_indices of each draft's logits"),
        O("bonus_logits_indices", "int32", "B", doc="index into logits_indices of each bonus's logits"),
        O("draft_token_ids", "int32|int64", "T", doc="the draft ids, dtype of input_ids"),
    ),
    oracle=oracle.spec_metadata,
    valid=draw.spec_metadata_valid,
    invalid=draw.spec_metadata_invalid,
    rows=draw.spec_metadata_table,
    impls=kernels("output", "spec_metadata"),
)

STAGES = (PARSE, SPEC_METADATA)

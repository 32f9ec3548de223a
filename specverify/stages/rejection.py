"""Stage records of the `rejection` family (STAGES.md: rejection.*)."""
from __future__ import annotations

from specverify.oracles import rejection as oracle
from specverify.stage import I, O, Stage
from specverify.strategies import rejection as draw

TORCH = "specverify.kernels.torch.rejection"
TRITON = "specverify.kernels.triton.rejection"

GREEDY = Stage(
    name="rejection.greedy",
    doc="emit target argmaxes up to the first mismatching draft; the bonus after a fully accepted row",
    inputs=(
        I("draft_token_ids", "int32", "T"),
        I("target_argmax", "int64", "T"),
        I("bonus_token_ids", "int64", "B"),
        I("cu_num_draft_tokens", "int32", "B", doc="inclusive cumulative draft counts"),
        I("is_greedy", "bool", "B", optional=True, doc="None: every row greedy"),
        I("max_spec_len", "int"),
    ),
    outputs=(O("output_token_ids", "int32", "B, S+1", doc="only the emitted prefix of greedy rows"),),
    oracle=oracle.greedy,
    valid=draw.greedy_valid,
    invalid=draw.greedy_invalid,
    rows=draw.greedy_table,
    impls={"torch": f"{TORCH}:greedy", "triton": f"{TRITON}:greedy"},
)

STAGES = (GREEDY,)

"""Candidate launches of our Triton kernels timed beside the engine's shape (bench/engine_shapes.py's
references), for the chain rows above it at B = 1 (issue 31): `graph.dsa_indexer_metadata` with 1 or 2 requests
per program and 1 or 4 warps (`r*_w*`; `_loop`: the block columns through a loop even when one step covers them,
the kernel before ONE_STEP); `rejection.expand` with R requests per program, a tile of T tokens and W
warps (`r*_t*_w*`; T = "n": the next power of two of num_tokens, which bounds every span; `_loop`: the span
through a loop even when one tile covers it, the kernel before ONE_STEP). "ours" is the wrapper's choice;
r32_t8_w4 is expand's launch before the one-row path. A/A controls (the reference timed in our column)
show the method's own bias. Each variant's outputs are compared byte for byte with the reference's before timing
(`byte_equal`). A split of a dsa request's tokens over programs was measured (tree/chain_variants_h100_b81fa1c.json)
and dropped.

    OUT=/tmp/out PYTHONPATH=. python bench/chain_variants.py

Writes $OUT/chain_variants.json and prints one JSON row per (stage, B, variant). Needs a CUDA device."""
import sys

sys.path.insert(0, "bench")

import engine_shapes
from specverify.kernels.triton import graph, rejection
from specverify.kernels.triton.launch import cdiv


def dsa_variant(rows, warps, loop=False):
    def call(**kw):
        q, table = kw["q_seqlens"], kw["block_offsets"]
        batch, blocks, n = len(q), table.shape[1], kw["N"]
        columns, span = graph.dsa_tile(batch, blocks, n)
        graph.dsa_kernel[(cdiv(batch, rows),)](
            q, q.stride(0), kw["kv_seqlens"], kw["kv_seqlens"].stride(0), kw["cu_q"], kw["cu_q"].stride(0), table,
            table.stride(0), table.stride(1), kw["indexer_kv_lens"], kw["expanded_block_table"], batch, blocks, n,
            DCP_SIZE=kw["dcp_size"], DCP_RANK=kw["dcp_rank"], BLOCK_R=rows, BLOCK_W=span, BLOCK_C=columns,
            ONE_STEP=not loop and blocks <= columns, num_warps=warps)
    return call


def expand_variant(rows, tokens, warps, loop=False):
    def call(**kw):
        x, cu = kw["x"], kw["cu_num_tokens"]
        value_from, value_to = engine_shapes.scalar(kw["replace_from"]), engine_shapes.scalar(kw["replace_to"])
        block = rejection.one_row_tile(kw["num_tokens"]) if tokens == "n" else tokens
        rejection.expand_kernel[(cdiv(len(x), rows),)](kw["expanded"], x, cu, len(x), value_from, value_to,
                                                        ROWS=rows, BLOCK=block, num_warps=warps,
                                                        ONE_STEP=not loop and rows == 1 and kw["num_tokens"] <= block)
    return call


CASES = engine_shapes.CASES
VARIANTS = {
    "graph.dsa_indexer_metadata": {
        "ours": graph.dsa_indexer_metadata,
        **{f"r{r}_w{w}": dsa_variant(r, w) for r, w in ((1, 1), (1, 4), (2, 4))},
        "r1_w4_loop": dsa_variant(1, 4, loop=True),
        "aa_control": engine_shapes.same_as_reference(CASES["graph.dsa_indexer_metadata"][1]),
    },
    "rejection.expand": {
        "ours": rejection.expand,
        **{f"r{r}_t{t}_w{w}": expand_variant(r, t, w)
           for r, t, w in ((1, "n", 1), (1, "n", 4), (1, 8, 1), (8, 8, 1), (32, 8, 1), (32, 8, 4))},
        "r1_tn_w4_loop": expand_variant(1, "n", 4, loop=True),
        "aa_control": engine_shapes.same_as_reference(CASES["rejection.expand"][1]),
    },
}


if __name__ == "__main__":
    sys.exit(engine_shapes.sweep(VARIANTS, CASES, "chain_variants"))

"""Candidate launches of our Triton `graph.dsa_indexer_metadata` timed beside the engine's shape
(bench/engine_shapes.py's references), for the chain rows still above it (issue 31): 1, 2 or 4 requests per
program with 1, 2 or 4 warps. A/A controls (the reference timed in our column) show the method's own bias for
dsa, the all-greedy rejection.sample and expand. Each variant's outputs are compared byte for byte with the
reference's before timing (`byte_equal`).

    OUT=/tmp/out PYTHONPATH=. python bench/chain_variants.py

Writes $OUT/chain_variants.json and prints one JSON row per (stage, B, variant). Needs a CUDA device."""
import sys

sys.path.insert(0, "bench")

import engine_shapes
from specverify.kernels.triton import graph, rejection
from specverify.kernels.triton.launch import cdiv


def dsa_variant(rows, warps):
    def call(**kw):
        q, table = kw["q_seqlens"], kw["block_offsets"]
        batch, blocks, n = len(q), table.shape[1], kw["N"]
        columns, span = graph.dsa_tile(batch, blocks, n)
        graph.dsa_kernel[(cdiv(batch, rows),)](
            q, q.stride(0), kw["kv_seqlens"], kw["kv_seqlens"].stride(0), kw["cu_q"], kw["cu_q"].stride(0), table,
            table.stride(0), table.stride(1), kw["indexer_kv_lens"], kw["expanded_block_table"], batch, blocks, n,
            DCP_SIZE=kw["dcp_size"], DCP_RANK=kw["dcp_rank"], BLOCK_R=rows, BLOCK_W=span, BLOCK_C=columns,
            num_warps=warps)
    return call


CASES = engine_shapes.CASES
VARIANTS = {
    "graph.dsa_indexer_metadata": {
        "ours": graph.dsa_indexer_metadata,
        **{f"r{r}_w{w}": dsa_variant(r, w) for r in (1, 2, 4) for w in (1, 2, 4)},
        "aa_control": engine_shapes.same_as_reference(CASES["graph.dsa_indexer_metadata"][1]),
    },
    "rejection.sample:all_greedy": {
        "ours": rejection.sample,
        "aa_control": engine_shapes.same_as_reference(CASES["rejection.sample:all_greedy"][1]),
    },
    "rejection.expand": {
        "ours": rejection.expand,
        "aa_control": engine_shapes.same_as_reference(CASES["rejection.expand"][1]),
    },
}


if __name__ == "__main__":
    sys.exit(engine_shapes.sweep(VARIANTS, CASES, "chain_variants"))

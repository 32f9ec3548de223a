"""Device time of the padded EAGLE post-verification path on one GPU: the three Triton stages one after
another (rejection.greedy, eagle.next_token_padded, eagle.prepare_inputs_padded) against the fused
eagle.verify_and_prepare_padded, the launch floor (an empty Triton kernel), and the single-launch
metadata stages whose grids were reworked (eagle.next_token_padded, eagle.prepare_inputs,
stop.spec_stopping) with eagle.prepare_inputs_padded beside them.

    OUT=/tmp/out PYTHONPATH=. python bench/post_verify.py

Each case: 20 calls captured in one CUDA graph, the graph replayed (after one warm-up replay) between CUDA
events, microseconds per call; the median of 5 replays (`specverify.judge.timing.graph_us`, as `specverify
bench` times). B in (1, 16, 64, 256, 512, 1024), K = 5, V = 151936, inputs from the fused stage's `bench`
function. The outputs of the three stages and of the fused launch are compared byte for byte (every output,
output_token_ids included) before timing. Writes $OUT/post_verify.json and prints a table; exits 1 when an
output differs.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
import triton
from rich.console import Console
from rich.table import Table

from specverify.judge import timing
from specverify.kernels.triton import eagle, rejection, stop
from specverify.records.stage import BENCH_SPEC
from specverify.stages.eagle import VERIFY_AND_PREPARE_PADDED

BATCHES = (1, 16, 64, 256, 512, 1024)
VOCAB = 151936
CALLS = 20        # calls captured per graph
REPEATS = 5       # graph replays timed; the median is reported
SETTINGS = timing.Settings(calls=CALLS, replays=REPEATS)


def tensors(example) -> tuple[dict, dict]:
    """(inputs, fresh outputs) on the GPU; outputs start as -7 so an unwritten entry shows."""
    inputs = {k: torch.from_numpy(v).cuda() if isinstance(v, np.ndarray) else v for k, v in example.inputs.items()}
    outputs = {k: torch.full(b.shape, -7, dtype=getattr(torch, b.dtype), device="cuda")
               for k, b in example.outputs.items()}
    return inputs, outputs


def three(x: dict, out: dict) -> None:
    """The engine's three launches."""
    rejection.greedy(draft_token_ids=x["draft_token_ids"], target_argmax=x["target_argmax"],
                     bonus_token_ids=x["bonus_token_ids"], cu_num_draft_tokens=x["cu_num_draft_tokens"],
                     is_greedy=x["is_greedy"], max_spec_len=x["max_spec_len"], output_token_ids=x["output_token_ids"])
    eagle.next_token_padded(sampled_token_ids=x["output_token_ids"], discard_mask=x["discard_mask"],
                            backup_next_token_ids=x["backup_next_token_ids"], vocab_size=x["vocab_size"],
                            next_token_ids=out["next_token_ids"],
                            valid_sampled_tokens_count=out["valid_sampled_tokens_count"])
    eagle.prepare_inputs_padded(cu_num_draft_tokens=x["cu_num_draft_tokens"],
                                valid_sampled_tokens_count=out["valid_sampled_tokens_count"],
                                query_start_loc=x["query_start_loc"], num_reqs=x["num_reqs"],
                                token_indices_to_sample=out["token_indices_to_sample"],
                                num_rejected_tokens=out["num_rejected_tokens"])


def fused(x: dict, out: dict) -> None:
    eagle.verify_and_prepare_padded(**x, **out)


def same_bytes(example) -> list[str]:
    """Fields whose bytes differ between the three launches and the fused one (fresh buffers each)."""
    x3, o3 = tensors(example)
    xf, of = tensors(example)
    three(x3, o3)
    fused(xf, of)
    torch.cuda.synchronize()
    found = {**o3, "output_token_ids": x3["output_token_ids"]}, {**of, "output_token_ids": xf["output_token_ids"]}
    return [k for k in found[0] if not torch.equal(found[0][k].view(torch.uint8), found[1][k].view(torch.uint8))]


def metadata_stages(x: dict, out: dict, batch: int) -> dict:
    """Closures of the single-launch metadata stages on this step's data."""
    k = BENCH_SPEC
    sampled = x["output_token_ids"]
    count = out["valid_sampled_tokens_count"]
    qsl = x["query_start_loc"]
    seq_lens = torch.arange(batch, device="cuda", dtype=torch.int32) + 100
    drafts = torch.full((batch,), k, device="cuda", dtype=torch.int32)
    kept = int((torch.diff(qsl) - torch.where(drafts > 0, drafts + 1 - count, 0)).sum())
    new_qsl, new_seq = torch.empty_like(qsl), torch.empty_like(seq_lens)
    indices = torch.empty(kept, device="cuda", dtype=qsl.dtype)
    rejected = (k + 1 - count).to(torch.int32)
    budget = torch.full((batch,), 64, device="cuda", dtype=torch.int32)
    stop_ids = torch.randint(0, VOCAB, (batch, 2), device="cuda", dtype=torch.int32)
    stop_pos = torch.empty(batch, device="cuda", dtype=torch.int32)
    stopped = torch.empty(batch, device="cuda", dtype=torch.bool)
    left = torch.empty_like(budget)
    return {
        "eagle.next_token_padded": lambda: eagle.next_token_padded(
            sampled_token_ids=sampled, discard_mask=x["discard_mask"], backup_next_token_ids=x["backup_next_token_ids"],
            vocab_size=x["vocab_size"], next_token_ids=out["next_token_ids"], valid_sampled_tokens_count=count),
        "eagle.prepare_inputs_padded": lambda: eagle.prepare_inputs_padded(
            cu_num_draft_tokens=x["cu_num_draft_tokens"], valid_sampled_tokens_count=count, query_start_loc=qsl,
            num_reqs=batch, token_indices_to_sample=out["token_indices_to_sample"],
            num_rejected_tokens=out["num_rejected_tokens"]),
        "eagle.prepare_inputs": lambda: eagle.prepare_inputs(
            query_start_loc=qsl, seq_lens=seq_lens, num_draft_tokens=drafts, num_sampled=count,
            new_query_start_loc=new_qsl, token_indices=indices, new_seq_lens=new_seq),
        "stop.spec_stopping": lambda: stop.spec_stopping(
            output_token_ids=sampled, num_rejected_tokens=rejected, num_appendable=budget, stop_ids=stop_ids,
            stop_pos=stop_pos, stopped=stopped, new_num_appendable=left),
    }


def main() -> int:
    out_dir = Path(os.environ.get("OUT", "."))
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    empty = timing.empty_kernel()
    results, bad = [], []
    for batch in BATCHES:
        example = VERIFY_AND_PREPARE_PADDED.bench(batch, VOCAB, rng)
        differing = same_bytes(example)
        if differing:
            bad.append((batch, differing))
        x3, o3 = tensors(example)
        xf, of = tensors(example)
        three(x3, o3)
        torch.cuda.synchronize()
        row = {"B": batch, "K": BENCH_SPEC, "byte_equal": not differing,
               "three_us": timing.graph_us(lambda: three(x3, o3), SETTINGS),
               "fused_us": timing.graph_us(lambda: fused(xf, of), SETTINGS),
               "floor_us": timing.graph_us(lambda: empty[(1,)](), SETTINGS)}
        for name, fn in metadata_stages(x3, o3, batch).items():
            row[name + "_us"] = timing.graph_us(fn, SETTINGS)
        results.append(row)
    device = torch.cuda.get_device_name()
    (out_dir / "post_verify.json").write_text(json.dumps(
        {"device": device, "torch": torch.__version__, "triton": triton.__version__, "calls_per_graph": CALLS,
         "repeats": REPEATS, "vocab": VOCAB, "rows": results}, indent=1))
    table = Table(title=f"post-verification path, device us per call (graph replay, {device})")
    columns = [k for k in results[0] if k.endswith("_us")]
    for name in ["B", "byte_equal", *columns, "fused/floor", "worst stage/floor"]:
        table.add_column(name.removesuffix("_us"), justify="right")
    for row in results:
        stages = [row[c] for c in columns if c not in ("three_us", "floor_us")]
        table.add_row(str(row["B"]), str(row["byte_equal"]), *[f"{row[c]:.2f}" for c in columns],
                      f"{row['fused_us'] / row['floor_us']:.2f}", f"{max(stages) / row['floor_us']:.2f}")
    Console(width=200, emoji=False).print(table)
    for batch, fields in bad:
        print(f"B={batch}: outputs differ between the three stages and the fused launch: {fields}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

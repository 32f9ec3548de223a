"""Benchmark of the metadata stages' Torch kernels against their Triton kernels on a CUDA device.

    PYTHONPATH=. python bench/torch_metadata.py [--calls 50]     # writes $OUT/torch_metadata.json

For each stage and B in 1..1024 (K = 5 drafts per request, realistic contents built here): microseconds
per call, after a warm-up call, as `specverify bench` times eager calls (`timing.events_us`: CUDA events
around 5 blocks of `--calls` / 5 calls, the median block), and the device activities one Torch call
launches (`specverify.judge.probes.launches`). Prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from specverify.records import backends, registry
from specverify.judge import timing
from specverify.judge.probes import launches

K = 5
BATCHES = (1, 16, 64, 256, 512, 1024)
V = 151936
DEVICE = "cuda"
i32, i64 = np.int32, np.int64


def prefix_rows(rng, batch: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """[B, width] ids: an emitted prefix of 1..width ids, then -1; and the -1 count per row."""
    ids = rng.integers(0, V, (batch, width)).astype(i32)
    emitted = rng.integers(1, width + 1, batch)
    ids[np.arange(width)[None, :] >= emitted[:, None]] = -1
    return ids, (width - emitted).astype(i32)


def build(name: str, b: int, rng) -> tuple[dict, dict]:
    """(inputs, outputs as (shape, dtype)) of one call of stage `name` at batch b."""
    q = K + 1
    qsl = (np.arange(b + 1) * q).astype(i32)
    n_tok = b * q
    accepted = rng.integers(0, K + 1, b)
    if name == "eagle.next_token_padded":
        ids, _ = prefix_rows(rng, b, q)
        return ({"sampled_token_ids": ids, "discard_mask": rng.random(b) < 0.05,
                 "backup_next_token_ids": rng.integers(0, V, b).astype(i32), "vocab_size": V},
                {"next_token_ids": ((b,), i32), "valid_sampled_tokens_count": ((b,), i32)})
    if name == "eagle.prepare_inputs_padded":
        return ({"cu_num_draft_tokens": (np.arange(1, b + 1) * K).astype(i32),
                 "valid_sampled_tokens_count": (accepted + 1).astype(i32), "query_start_loc": qsl.astype(i64),
                 "num_reqs": b}, {"token_indices_to_sample": ((b,), i64), "num_rejected_tokens": ((b,), i32)})
    if name == "eagle.prepare_inputs":
        kept = int((accepted + 1).sum())
        return ({"query_start_loc": qsl, "seq_lens": rng.integers(q, 4096, b).astype(i32),
                 "num_draft_tokens": np.full(b, K, i32), "num_sampled": (accepted + 1).astype(i32)},
                {"new_query_start_loc": ((b + 1,), i32), "token_indices": ((kept,), i32),
                 "new_seq_lens": ((b,), i32)})
    if name == "eagle.copy_and_expand_inputs":
        size = n_tok + b * 4 - b
        return ({"target_token_ids": rng.integers(0, V, n_tok).astype(i32),
                 "target_positions": rng.integers(0, 4096, n_tok).astype(i32),
                 "next_token_ids": rng.integers(0, V, b).astype(i32), "query_start_loc": qsl,
                 "query_end_loc": (qsl[:-1] + accepted).astype(i32), "padding_token_id": 0,
                 "parallel_drafting_token_id": V - 1, "P": 4, "shift_input_ids": True},
                {"out_input_ids": ((size,), i32), "out_positions": ((size,), i32),
                 "out_is_rejected_token_mask": ((size,), np.bool_), "out_is_masked_token_mask": ((size,), np.bool_),
                 "out_new_token_indices": ((b * 4,), i32), "out_hidden_state_mapping": ((n_tok,), i32)})
    if name == "eagle.extend_queries":
        return ({"query_start_loc": qsl, "seq_lens": rng.integers(1, 4096, b).astype(i32), "N": 1},
                {"new_query_start_loc": ((b + 1,), i32), "new_seq_lens": ((b,), i32)})
    if name == "eagle.step_slot_mapping":
        return ({"positions": rng.integers(0, 1000, b).astype(i64),
                 "block_table": rng.integers(0, 10000, (b, 64)).astype(i32),
                 "seq_lens": rng.integers(1, 1000, b).astype(i32), "block_size": 16, "max_model_len": 1024,
                 "batch_size": b, "input_batch_size": b},
                {"clamped_positions": ((b,), i64), "slot_mapping": ((b,), i64)})
    lengths = np.full(b, q, i32)
    history = rng.integers(0, 4096, b).astype(i32)
    if name == "graph.fill_common_inputs":
        cap, tokens = b + 8, n_tok + 64
        return ({"input_ids": rng.integers(0, V, n_tok), "position_ids": rng.integers(0, 4096, n_tok),
                 "block_offsets": rng.integers(0, 10000, (b, 64)).astype(i32), "q_start_loc": qsl[:-1],
                 "q_seqlens": lengths, "kv_seqlens": history + q, "pad_ids": rng.integers(0, V, tokens),
                 "pad_query_len": 1},
                {"graph_input_ids": ((tokens,), i64), "graph_position_ids": ((tokens,), i64),
                 "graph_block_offsets": ((cap, 64), i32), "graph_qkv_lens": ((3, cap), i32),
                 "graph_cu_seqlens": ((2, cap + 1), i32)})
    if name == "graph.step_context":
        return ({"q_seqlens": lengths, "history_lengths": history, "num_ignored_history": np.zeros(b, i32),
                 "uniform_layout": False},
                {"q_start_loc": ((b,), i32), "kv_seqlens": ((b,), i32), "position_ids": ((n_tok,), i64),
                 "cu_seqlens": ((2, b + 1), i32)})
    if name == "graph.dsa_indexer_metadata":
        return ({"q_seqlens": lengths, "kv_seqlens": history + q, "cu_q": qsl,
                 "block_offsets": rng.integers(0, 10000, (b, 64)).astype(i32), "N": n_tok, "dcp_size": 1,
                 "dcp_rank": 0},
                {"indexer_kv_lens": ((n_tok,), i32), "expanded_block_table": ((n_tok, 64), i32)})
    if name == "stop.spec_stopping":
        ids, rejected = prefix_rows(rng, b, q)
        stop_ids = rng.integers(0, V, (b, 4)).astype(i32)
        stop_ids[:, 0] = ids[:, 0]
        return ({"output_token_ids": ids, "num_rejected_tokens": rejected,
                 "num_appendable": rng.integers(-2, 64, b).astype(i32), "stop_ids": stop_ids},
                {"stop_pos": ((b,), i32), "stopped": ((b,), np.bool_), "new_num_appendable": ((b,), i32)})
    if name == "scv.acceptance_mask":
        draft = rng.integers(0, 8, b * K).astype(i32)
        return ({"draft_token_ids": draft, "target_token_ids": np.where(rng.random(b * K) < 0.8, draft, 9),
                 "cu_num_draft_tokens": (np.arange(1, b + 1) * K).astype(i32)},
                {"accepted_mask": ((b * K,), np.bool_), "num_accepted": ((b,), i32)})
    if name == "kv.commit_draft":
        blocks = n_tok // 16 + 8
        return ({"key": rng.standard_normal((n_tok, 8, 128)).astype(np.float32),
                 "value": rng.standard_normal((n_tok, 8, 128)).astype(np.float32),
                 "slot_mapping": rng.permutation(blocks * 16)[:n_tok].astype(i64),
                 "accepted_mask": rng.random(n_tok) < 0.7, "layout": "NHD", "k_scale": None, "v_scale": None},
                {"key_cache": ((blocks, 16, 8, 128), "bfloat16"), "value_cache": ((blocks, 16, 8, 128), "bfloat16")})
    if name == "output.spec_metadata":
        return ({"num_draft_tokens": [K] * b, "cu_num_scheduled_tokens": np.cumsum(lengths).astype(i32),
                 "input_ids": rng.integers(0, V, n_tok).astype(i32)},
                {"cu_num_draft_tokens": ((b,), i32), "cu_num_sampled_tokens": ((b,), i32),
                 "logits_indices": ((b * q,), i32), "target_logits_indices": ((b * K,), i32),
                 "bonus_logits_indices": ((b,), i32), "draft_token_ids": ((b * K,), i32)})
    raise KeyError(name)


def on_device(inputs: dict, outputs: dict) -> dict:
    kwargs = {}
    for key, value in inputs.items():
        kwargs[key] = torch.from_numpy(np.ascontiguousarray(value)).to(DEVICE) if isinstance(value, np.ndarray) else value
    if kwargs.get("key") is not None and "key_cache" in outputs:     # kv: bfloat16 sources
        kwargs["key"], kwargs["value"] = kwargs["key"].bfloat16(), kwargs["value"].bfloat16()
    for key, (shape, dtype) in outputs.items():
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else torch.from_numpy(np.zeros(0, dtype)).dtype
        kwargs[key] = torch.zeros(shape, dtype=dtype, device=DEVICE)
    return kwargs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    stages = registry.all_stages()
    names = ["eagle.next_token_padded", "eagle.prepare_inputs_padded", "eagle.prepare_inputs",
             "eagle.copy_and_expand_inputs", "eagle.extend_queries", "eagle.step_slot_mapping",
             "graph.fill_common_inputs", "graph.step_context", "graph.dsa_indexer_metadata", "stop.spec_stopping",
             "scv.acceptance_mask", "kv.commit_draft", "output.spec_metadata"]
    rng = np.random.default_rng(0)
    rows = []
    settings = timing.Settings(calls=max(1, args.calls // 5))   # 5 timed blocks of calls
    table = Table(title=f"metadata stages, K = {K}: median µs per call (torch launches)")
    for column in ("stage", "B", "torch µs", "triton µs", "torch / triton", "torch launches"):
        table.add_column(column, justify="left" if column == "stage" else "right")
    for name in names:
        stage = stages[name]
        for b in BATCHES:
            inputs, outputs = build(name, b, rng)
            result = {"stage": name, "B": b, "K": K}
            for backend in ("torch", "triton"):
                impl = backends.load(stage.impls[backend])
                kwargs = on_device(inputs, outputs)
                call = lambda: impl(**kwargs)
                call()   # warm-up: compiles, fills cached constants
                result[f"{backend}_us"] = timing.events_us(call, settings)
                if backend == "torch":
                    result["torch_launches"] = launches(call, None, DEVICE)[1]["launches"]
            rows.append(result)
            table.add_row(name, str(b), f"{result['torch_us']:.1f}", f"{result['triton_us']:.1f}",
                          f"{result['torch_us'] / result['triton_us']:.2f}", str(result["torch_launches"]))
    Console(emoji=False).print(table)
    out = Path(os.environ.get("OUT", "out"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "torch_metadata.json").write_text(json.dumps({"device": torch.cuda.get_device_name(), "K": K,
                                                         "torch": torch.__version__, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

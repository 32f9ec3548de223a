"""Device time of our Triton kernels beside kernels of the engines' shape, in one run on one GPU: the
chain stages named as device-time laggards (issue 20: expand, step_slot_mapping, copy_and_expand_inputs;
since: dsa_indexer_metadata at B = 1, all-greedy rejection.sample at B = 1024), each against a reference
written here in the shape the engines launch it:

- expand: one program per request, one tile of next_power_of_2(longest span) tokens, no loop;
- step_slot_mapping: one program per slot, scalar code, block_size and max_model_len compile-time
  constants (the engine specializes on both);
- copy_and_expand_inputs: our kernel with one request per program (the engine's grid);
- dsa_indexer_metadata: lmdeploy's `_fill_dsa_indexer_metadata_kernel` (pytorch/kernels/cuda/
  step_metadata/): grid (B, cdiv(max_q * NB, TILE)), TILE = min(256, next_power_of_2(max_q * NB)) flat
  (token, column) elements per program, no loop, int32 lengths; max_q, NB, dcp_size and dcp_rank
  compile-time constants, 4 warps;
- rejection.sample:all_greedy (the bench input with is_greedy None): vLLM's all-greedy path
  (v1/sample/rejection_sampler.py): the output filled with -1, Torch's argmax of target_probs, then
  `rejection_greedy_sample_kernel`'s shape: one program per request, a scalar loop over its drafts that
  stops storing at the first reject, the bonus after none; max_spec_len not specialized.

    OUT=/tmp/out PYTHONPATH=. python bench/engine_shapes.py [--batch 1 512 1024] [--rounds 7] [--stage ...]

Inputs: each stage's `bench` function (K = 5), adjusted by a case's optional third entry. Every case is
timed as `specverify bench` times a call (20 calls in one CUDA graph, replayed between events:
`timing.graph_us`), the cases of one stage and B interleaved round by round (`--rounds`, median; each round
starts with the next case), so that a drift of the GPU's clocks falls on all of them. Ours is the stage's
wrapper as a user calls it. Before timing, each reference's outputs are compared byte for byte with ours on
the same input (tests/bench/test_engine_shapes.py does so on the CPU, in Triton's interpreter). Writes
$OUT/engine_shapes.json and prints a table; exits 1 when an output differs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import replace

import numpy as np
import torch
import triton
import triton.language as tl

from specverify.judge import timing
from specverify.kernels.triton import eagle, graph, rejection
from specverify.kernels.triton.launch import next_power_of_2
from specverify.judge.materialize import Bound, plan
from specverify.records.registry import all_stages

VOCAB = 151936


@triton.jit
def expand_per_request(out_ptr, x_ptr, cu_ptr, replace_from, replace_to, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    start = tl.load(cu_ptr + r - 1, mask=r > 0, other=0)
    end = tl.load(cu_ptr + r)
    x = tl.load(x_ptr + r)
    value = tl.broadcast_to(tl.where(x == replace_from, replace_to, x).to(out_ptr.dtype.element_ty), [BLOCK])
    offs = start + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, value, mask=offs < end)


@triton.jit
def step_per_slot(pos_ptr, table_ptr, row_stride, seq_ptr, clamped_ptr, slot_ptr, blocks, batch_size,
                  block_size: tl.constexpr, max_model_len: tl.constexpr):
    r = tl.program_id(0)
    if r >= batch_size:
        tl.store(slot_ptr + r, -1)
    else:
        p = tl.load(pos_ptr + r) + 1
        exceeded = p >= max_model_len
        cp = tl.where(exceeded, 0, p)
        entry = tl.load(table_ptr + r * row_stride + tl.minimum(cp // block_size, blocks - 1))
        tl.store(slot_ptr + r, tl.where(exceeded, -1, entry.to(tl.int64) * block_size + cp % block_size))
        tl.store(clamped_ptr + r, cp.to(clamped_ptr.dtype.element_ty))
        seq = tl.load(seq_ptr + r)
        tl.store(seq_ptr + r, tl.minimum(tl.where(exceeded, 1, seq + 1), max_model_len).to(seq_ptr.dtype.element_ty))


@triton.jit
def dsa_per_request_tile(q_ptr, q_stride, kv_ptr, kv_stride, cu_ptr, cu_stride, table_ptr, table_rows, table_cols,
                         lens_ptr, out_ptr, out_rows, out_cols, MAX_Q: tl.constexpr, NB: tl.constexpr,
                         TILE: tl.constexpr, DCP_SIZE: tl.constexpr, DCP_RANK: tl.constexpr):
    b = tl.program_id(0)
    e = tl.program_id(1) * TILE + tl.arange(0, TILE)      # flat (token, column) of request b's rows
    q = tl.load(q_ptr + b * q_stride).to(tl.int32)
    kv = tl.load(kv_ptr + b * kv_stride).to(tl.int32)
    start = tl.load(cu_ptr + b * cu_stride).to(tl.int32)
    share = (kv - q + e + 1 + DCP_SIZE - 1 - DCP_RANK) // DCP_SIZE
    tl.store(lens_ptr + start + e, tl.maximum(share, 0), mask=e < q)
    token, column = e // NB, e % NB
    live = token < q
    entry = tl.load(table_ptr + b * table_rows + column * table_cols, mask=live)
    tl.store(out_ptr + (start + token) * out_rows + column * out_cols, entry, mask=live)


@triton.jit(do_not_specialize=["max_spec_len"])
def greedy_per_request(out_ptr, cu_ptr, draft_ptr, argmax_ptr, bonus_ptr, max_spec_len):
    r = tl.program_id(0)
    start = tl.load(cu_ptr + r - 1, mask=r > 0, other=0)
    count = tl.load(cu_ptr + r) - start
    row = out_ptr + r * (max_spec_len + 1)
    rejected = False
    for pos in range(count):
        if not rejected:
            best = tl.load(argmax_ptr + start + pos)
            tl.store(row + pos, best)
            if tl.load(draft_ptr + start + pos) != best:
                rejected = True
    if not rejected:
        tl.store(row + count, tl.load(bonus_ptr + r))


def scalar(value):
    return value.item() if isinstance(value, torch.Tensor) else value


def expand_reference(kw):
    x, cu, out = kw["x"], kw["cu_num_tokens"], kw["expanded"]
    spans = torch.diff(cu, prepend=cu.new_zeros(1))
    block = next_power_of_2(max(int(spans.max()), 1))
    frm, to = scalar(kw["replace_from"]), scalar(kw["replace_to"])
    return lambda: expand_per_request[(len(x),)](out, x, cu, frm, to, BLOCK=block)


def step_reference(kw):
    table = kw["block_table"]
    assert table.stride(1) == 1, "the engine's kernel reads a row-major table"
    args = (kw["positions"], table, table.stride(0), kw["seq_lens"], kw["clamped_positions"], kw["slot_mapping"],
            table.shape[1], kw["batch_size"])
    return lambda: step_per_slot[(kw["input_batch_size"],)](*args, block_size=kw["block_size"],
                                                             max_model_len=kw["max_model_len"])


def copy_reference(kw):
    rows = eagle.COPY_ROWS

    def call():
        eagle.COPY_ROWS = 1
        try:
            eagle.copy_and_expand_inputs.__wrapped__(**kw)
        finally:
            eagle.COPY_ROWS = rows
    return call


def dsa_reference(kw):
    q, table, out = kw["q_seqlens"], kw["block_offsets"], kw["expanded_block_table"]
    longest, blocks = max(int(q.max()), 1), table.shape[1]
    tile = min(256, next_power_of_2(longest * blocks))
    args = (q, q.stride(0), kw["kv_seqlens"], kw["kv_seqlens"].stride(0), kw["cu_q"], kw["cu_q"].stride(0), table,
            table.stride(0), table.stride(1), kw["indexer_kv_lens"], out, out.stride(0), out.stride(1))
    grid = (len(q), triton.cdiv(longest * blocks, tile))
    return lambda: dsa_per_request_tile[grid](*args, MAX_Q=longest, NB=blocks, TILE=tile, DCP_SIZE=kw["dcp_size"],
                                              DCP_RANK=kw["dcp_rank"], num_warps=4)


def all_greedy(example):
    """The example with every row greedy: is_greedy None, no uniforms or noise (vLLM's all_greedy)."""
    return replace(example, inputs={**example.inputs, "is_greedy": None, "uniform_probs": None, "inv_q": None})


def greedy_reference(kw):
    out, drafts, cu, spec = kw["output_token_ids"], kw["draft_token_ids"], kw["cu_num_draft_tokens"], kw["max_spec_len"]
    target, bonus = kw["target_probs"], kw["bonus_token_ids"]
    assert kw["is_greedy"] is None and out.is_contiguous() and out.shape[1] == spec + 1, "vLLM's all-greedy layout"

    def call():
        out.fill_(-1)
        greedy_per_request[(len(cu),)](out, cu, drafts, target.argmax(dim=-1), bonus, spec)
    return call


CASES = {"rejection.expand": (rejection.expand, expand_reference),
         "eagle.step_slot_mapping": (eagle.step_slot_mapping, step_reference),
         "eagle.copy_and_expand_inputs": (eagle.copy_and_expand_inputs, copy_reference),
         "graph.dsa_indexer_metadata": (graph.dsa_indexer_metadata, dsa_reference),
         "rejection.sample:all_greedy": (rejection.sample, greedy_reference, all_greedy)}


def same_as_reference(reference):
    """The reference in our column (an A/A control of the method: its ratio should be 1); the reference's
    call is made once per set of arguments, outside any capture, as `measure` makes it for the reference."""
    made = {}

    def call(**kw):
        key = tuple(map(id, kw.values()))
        if key not in made:
            made[key] = reference(kw)
        made[key]()
    return call


def stage_of(key: str) -> str:
    """The stage a case key names: "stage" or "stage:variant"."""
    return key.partition(":")[0]


def bench_example(stage, batch: int, case: tuple, vocab: int = VOCAB):
    """The stage's bench example at B, adjusted by the case's optional third entry."""
    example = stage.bench(batch, vocab, np.random.default_rng([0, batch, vocab]))
    return case[2](example) if len(case) > 2 else example


def arena_after(call_plan, arena, make_call, device: str = "cuda") -> np.ndarray:
    """The arena after one call (made by `make_call(kwargs)`) on a fresh copy of it, on `device`."""
    bound = Bound(call_plan, arena.copy(), "torch", device)
    make_call(bound.kwargs)()
    if device != "cpu":
        torch.cuda.synchronize()
    bound.read_back()
    return bound.arena


def byte_equal(call_plan, arena, ours, reference, device: str = "cuda") -> bool:
    """Whether ours and the reference leave the same arena after one call each (on copies of it)."""
    return np.array_equal(arena_after(call_plan, arena, lambda kw: lambda: ours(**kw), device),
                          arena_after(call_plan, arena, reference, device))


def measure(stage, batch: int, rounds: int, settings, cases: dict, key: str | None = None) -> dict:
    key = key or stage.name
    ours, reference = cases[key][:2]
    call_plan, arena = plan(stage, bench_example(stage, batch, cases[key]))
    same = byte_equal(call_plan, arena, ours, reference)
    calls = {}
    for name, make in (("ours", lambda kw: lambda: ours(**kw)), ("engine_shape", reference)):
        kwargs = Bound(call_plan, arena.copy(), "torch", "cuda").kwargs
        calls[name] = make(kwargs)
        for _ in range(3):
            calls[name]()
    floor = timing.empty_kernel()
    calls["floor"] = lambda: floor[(1,)]()
    torch.cuda.synchronize()
    samples = {name: [] for name in calls}
    names = list(calls)
    for i in range(rounds):                 # each round starts with the next case: no case always goes first
        for name in names[i % len(names):] + names[:i % len(names)]:
            samples[name].append(timing.graph_us(calls[name], settings))
    row = {"stage": key, "B": batch, "byte_equal": bool(same)}
    row.update({f"{name}_us": statistics.median(values) for name, values in samples.items()})
    row["ours_x_engine_shape"] = row["ours_us"] / row["engine_shape_us"]
    return row


def sweep(variants: dict, cases: dict, name: str, batches=(1, 64, 1024), rounds: int = 7) -> int:
    """Time each candidate of `variants` (case key -> {variant name -> a callable in our column}) beside
    `cases`' reference for that key at each B; print a JSON row each, write $OUT/<name>.json; 1 when an
    output differs, 2 without a GPU. A variant that does not build is a row with its error."""
    if not torch.cuda.is_available():
        print(f"{name}: no CUDA device; nothing measured", file=sys.stderr)
        return 2
    settings = timing.Settings()
    stages = all_stages()
    rows = []
    for key, candidates in variants.items():
        for batch in batches:
            for label, fn in candidates.items():
                try:
                    row = measure(stages[stage_of(key)], batch, rounds, settings, {key: (fn, *cases[key][1:])}, key)
                except Exception as exc:      # a row, not the end of the sweep
                    row = {"stage": key, "B": batch, "error": repr(exc)[:300]}
                row["variant"] = label
                rows.append(row)
                print(json.dumps(row), flush=True)
    out = os.environ.get("OUT", ".")
    with open(os.path.join(out, f"{name}.json.tmp"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "rows": rows}, f, indent=1)
    os.replace(os.path.join(out, f"{name}.json.tmp"), os.path.join(out, f"{name}.json"))
    return 0 if all(r.get("byte_equal") for r in rows) else 1


def run(cases: dict, name: str, batches: list[int], reference: str) -> int:
    """Time each case of `cases` ("stage" or "stage:variant" -> (our wrapper, a maker of the reference's call[,
    an adjuster of the bench example])) at each B, write $OUT/<name>.json and print the table; 1 when an
    output differs, 2 without a GPU."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=batches)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--stage", nargs="+", default=list(cases), choices=list(cases))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print(f"{name}: no CUDA device; nothing measured", file=sys.stderr)
        return 2
    settings = timing.Settings()
    stages = all_stages()
    rows = [measure(stages[stage_of(key)], batch, args.rounds, settings, cases, key) for key in args.stage
            for batch in args.batch]
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "calls": settings.calls, "replays": settings.replays, "rounds": args.rounds, "rows": rows}
    out = os.environ.get("OUT", ".")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{name}.json.tmp"), "w") as f:
        json.dump(result, f, indent=1)
    os.replace(os.path.join(out, f"{name}.json.tmp"), os.path.join(out, f"{name}.json"))
    print(f"{result['device']}, torch {torch.__version__}, triton {triton.__version__}; device µs per call, "
          f"{settings.calls}-call graphs, median of {args.rounds} interleaved rounds")
    print(f"{'stage':30} {'B':>5} {'ours':>6} {reference:>13} {'ratio':>6} {'floor':>6}")
    for r in rows:
        print(f"{r['stage']:30} {r['B']:5} {r['ours_us']:6.2f} {r['engine_shape_us']:13.2f} "
              f"{r['ours_x_engine_shape']:6.2f} {r['floor_us']:6.2f}{'' if r['byte_equal'] else '  DIFFER'}")
    return 0 if all(r["byte_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(run(CASES, "engine_shapes", [1, 512, 1024], "engine shape"))

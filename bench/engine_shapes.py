"""Device time of our Triton kernels beside kernels of the engines' shape, in one run on one GPU: the
stages issue 20 names as device-time laggards (rejection.expand, eagle.step_slot_mapping,
eagle.copy_and_expand_inputs), each against a reference written here in the shape the engines launch it:

- expand: one program per request, one tile of next_power_of_2(longest span) tokens, no loop;
- step_slot_mapping: one program per slot, scalar code, block_size and max_model_len compile-time
  constants (the engine specializes on both);
- copy_and_expand_inputs: our kernel with one request per program (the engine's grid).

    OUT=/tmp/out PYTHONPATH=. python bench/engine_shapes.py [--batch 1 512 1024] [--rounds 7] [--stage ...]

Inputs: each stage's `bench` function (K = 5). Every case is timed as `specverify bench` times a call (20
calls in one CUDA graph, replayed between events: `timing.graph_us`), the cases of one stage and B
interleaved round by round (`--rounds`, median), so that a drift of the GPU's clocks falls on all of them.
Ours is the stage's wrapper as a user calls it. Before timing, each reference's outputs are compared byte
for byte with ours on the same input. Writes $OUT/engine_shapes.json and prints a table; exits 1 when an
output differs.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import numpy as np
import torch
import triton
import triton.language as tl

from specverify.judge import timing
from specverify.kernels.triton import eagle, rejection
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


CASES = {"rejection.expand": (rejection.expand, expand_reference),
         "eagle.step_slot_mapping": (eagle.step_slot_mapping, step_reference),
         "eagle.copy_and_expand_inputs": (eagle.copy_and_expand_inputs, copy_reference)}


def arena_after(call_plan, arena, make_call) -> np.ndarray:
    """The arena after one call (made by `make_call(kwargs)`) on a fresh copy of it."""
    bound = Bound(call_plan, arena.copy(), "torch", "cuda")
    make_call(bound.kwargs)()
    torch.cuda.synchronize()
    bound.read_back()
    return bound.arena


def measure(stage, batch: int, rounds: int, settings, cases: dict) -> dict:
    ours, reference = cases[stage.name]
    example = stage.bench(batch, VOCAB, np.random.default_rng([0, batch, VOCAB]))
    call_plan, arena = plan(stage, example)
    same = np.array_equal(arena_after(call_plan, arena, lambda kw: lambda: ours(**kw)),
                          arena_after(call_plan, arena, reference))
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
    for _ in range(rounds):
        for name, call in calls.items():
            samples[name].append(timing.graph_us(call, settings))
    row = {"stage": stage.name, "B": batch, "byte_equal": bool(same)}
    row.update({f"{name}_us": statistics.median(values) for name, values in samples.items()})
    row["ours_x_engine_shape"] = row["ours_us"] / row["engine_shape_us"]
    return row


def run(cases: dict, name: str, batches: list[int], reference: str) -> int:
    """Time each stage of `cases` (stage name -> (our wrapper, a maker of the reference's call)) at each B,
    write $OUT/<name>.json and print the table; 1 when an output differs, 2 without a GPU."""
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
    rows = [measure(stages[stage], batch, args.rounds, settings, cases) for stage in args.stage
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

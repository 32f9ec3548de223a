"""Where the host time of a Triton stage's call goes, piece by piece (CUDA).

Run on a CUDA machine from the repository root:

    PYTHONPATH=. OUT=/some/dir python bench/launch_path.py [--calls 2000] [--rounds 7] [--batch 1 1024]

Each piece is timed as `specverify bench` times a call (`timing.host_us`: `calls` calls with no
synchronization inside the loop, one after it, the median of `rounds` loops), on the stage's bench input
(`Stage.bench`, vocabulary V = 151936 where the stage reads one):

- `floor`: an empty Triton kernel launched as `kernel[(1,)]()` (the bench's launch floor), and `floor_run`:
  its kept launcher (`CompiledKernel.run`) called with ints, the least a Python launch costs; `here`: the
  floor again right before each stage's call (the host's speed drifts during a run);
- `call`: the stage's Triton wrapper as a user calls it (a prepared call: the recipe replayed);
- `lean`: the same with recipes off (`prepared.ENABLED = False`): the argument checks and `launch.launch`;
- `signature`: the recipe key alone (`prepared.signature`), and `guard`: the recipe's guard alone
  (`prepared.Guard.fits`, what a call tries before it builds the key);
- `replay`: the recipe's replay alone (scratch allocated, addresses filled in, launchers called);
- `run`: the recipe's launchers alone, on argument lists filled in beforehand.

The call and lean paths must leave byte-equal arenas. Writes $OUT/launch_path.json and prints a table.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

import numpy as np
import torch
import triton

from specverify.judge import timing
from specverify.kernels.triton import prepared
from specverify.judge.materialize import Bound, plan
from specverify.records.registry import all_stages
from specverify.bench.sweep import reads_vocab

VOCAB = 151936


def implementation(stage):
    module, name = stage.impls["triton"].split(":")
    return getattr(importlib.import_module(module), name)


def arena_after(impl, call_plan, arena) -> np.ndarray:
    """The arena after one call on a fresh copy of it (device slots read back)."""
    bound = Bound(call_plan, arena.copy(), "torch", "cuda")
    impl(**bound.kwargs)
    torch.cuda.synchronize()
    bound.read_back()
    return bound.arena


def recipe_of(wrapper, kwargs):
    """The recipe the prepared `wrapper` keeps for these arguments (None: it has none)."""
    store = getattr(wrapper, "recipes", None)
    if store is None:
        return None
    found = store.get((prepared.current_device(), prepared.signature(kwargs)))
    return found if isinstance(found, prepared.Recipe) else None


def filled_runs(recipe, kwargs, stream):
    """The recipe's launcher calls as (run, args) with every address filled in (one scratch set kept)."""
    temps = [torch.empty(shape, dtype=dtype, device=device) for shape, dtype, device in recipe.scratch]
    tensors = prepared.tensors_of(kwargs)
    runs = []
    for run, function, packed, grid, template, from_args, from_scratch, _, _ in recipe.steps:
        args = list(template)
        for i, position, offset in from_args:
            args[i] = tensors[position].data_ptr() + offset
        for i, index, offset in from_scratch:
            args[i] = temps[index].data_ptr() + offset
        runs.append((run, (grid[0], grid[1], grid[2], stream, function, packed, None, None, None, *args)))
    return runs, temps


def pieces(stage, batch: int, settings) -> dict:
    impl = implementation(stage)
    example = stage.bench(batch, VOCAB, np.random.default_rng([0, batch]))
    call_plan, arena = plan(stage, example)
    bound = Bound(call_plan, arena.copy(), "torch", "cuda")
    kwargs = bound.kwargs
    for _ in range(3):
        impl(**kwargs)
    torch.cuda.synchronize()
    row: dict = {"stage": stage.name, "B": batch}
    floor = timing.empty_kernel()
    row["floor_here_us"] = timing.host_us(lambda: floor[(1,)](), "cuda", settings)
    row["call_us"] = timing.host_us(lambda: impl(**kwargs), "cuda", settings)
    prepared.ENABLED = False
    try:
        row["lean_us"] = timing.host_us(lambda: impl(**kwargs), "cuda", settings)
        lean_bytes = arena_after(impl, call_plan, arena)
    finally:
        prepared.ENABLED = True
    row["byte_equal"] = bool(np.array_equal(lean_bytes, arena_after(impl, call_plan, arena)))
    row["signature_us"] = timing.host_us(lambda: prepared.signature(kwargs), "cuda", settings)
    recipe = recipe_of(impl, kwargs)
    row["prepared"] = recipe is not None
    if recipe is not None:
        device = prepared.current_device()
        stream = prepared.current_stream(device)
        row["launches"], row["scratch"] = len(recipe.steps), len(recipe.scratch)
        row["arguments"] = [len(step[4]) for step in recipe.steps]
        tensors = prepared.tensors_of(kwargs)
        row["replay_us"] = timing.host_us(lambda: recipe.replay(tensors, stream), "cuda", settings)
        entry = prepared.guard(kwargs, device, recipe)
        if entry is not None:
            values = tuple(kwargs.values())
            row["guard_us"] = timing.host_us(lambda: entry.fits(kwargs, values, device), "cuda", settings)
        runs, temps = filled_runs(recipe, kwargs, stream)

        def run_all():
            for run, args in runs:
                run(*args)

        row["run_us"] = timing.host_us(run_all, "cuda", settings)
        del temps
    torch.cuda.synchronize()
    return row


def floors(settings) -> dict:
    kernel = timing.empty_kernel()
    compiled = kernel[(1,)]()
    torch.cuda.synchronize()
    found = {"floor_us": timing.host_us(lambda: kernel[(1,)](), "cuda", settings)}
    stream = prepared.current_stream(prepared.current_device())
    run, function, packed = compiled.run, compiled.function, compiled.packed_metadata
    found["floor_run_us"] = timing.host_us(lambda: run(1, 1, 1, stream, function, packed, None, None, None),
                                           "cuda", settings)
    found["empty_python_call_us"] = timing.host_us(lambda: None, "cuda", settings)
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 1024])
    parser.add_argument("--stage", nargs="*", default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("launch_path: no CUDA device; nothing measured", file=sys.stderr)
        return 2
    out = os.environ.get("OUT", ".")
    settings = timing.Settings(calls=args.calls, repeat=args.rounds)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "python": sys.version.split()[0], "calls": args.calls, "rounds": args.rounds, **floors(settings)}
    rows = []
    for stage in all_stages().values():
        if "triton" not in stage.impls or stage.bench is None or (args.stage and stage.name not in args.stage):
            continue
        for batch in args.batch if not reads_vocab(stage) else args.batch[:1]:
            rows.append(pieces(stage, batch, settings))
            print(json.dumps(rows[-1]), flush=True)
    result["rows"] = rows
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "launch_path.json.tmp"), "w") as f:
        json.dump(result, f, indent=1)
    os.replace(os.path.join(out, "launch_path.json.tmp"), os.path.join(out, "launch_path.json"))
    print(f"{result['device']}, torch {torch.__version__}, triton {triton.__version__}, {args.calls} calls x "
          f"{args.rounds} rounds (median); floor kernel[grid] {result['floor_us']:.2f} us, its launcher "
          f"{result['floor_run_us']:.2f} us, an empty Python call {result['empty_python_call_us']:.2f} us")
    print(f"{'stage':34} {'B':>5} {'here':>6} {'call':>7} {'lean':>7} {'sig':>6} {'guard':>6} {'replay':>7} "
          f"{'run':>6} launches args")
    for r in rows:
        print(f"{r['stage']:34} {r['B']:5} {r['floor_here_us']:6.2f} {r['call_us']:7.2f} {r['lean_us']:7.2f} "
              f"{r['signature_us']:6.2f} "
              f"{r.get('guard_us', float('nan')):6.2f} "
              f"{r.get('replay_us', float('nan')):7.2f} {r.get('run_us', float('nan')):6.2f} "
              f"{r.get('launches', '-')} {r.get('arguments', '-')}{'' if r['byte_equal'] else ' DIFFER'}")
    return 0 if all(r["byte_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

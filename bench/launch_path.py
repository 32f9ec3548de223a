"""Host cost per call of the Triton wrappers: plain `kernel[grid]` launches against the kept-kernel path.

Run on a CUDA machine from the repository root:

    PYTHONPATH=. OUT=/some/dir python bench/launch_path.py [--calls 2000] [--rounds 5]

Host time per call is time.perf_counter around `calls` calls with no synchronization inside the loop (one
synchronization after it), the median of `rounds` rounds (`specverify.bench.timing.host_us`), for: an empty
Triton kernel through `kernel[grid]` (the baseline) and through the launcher; each stage with a Triton
implementation, on its worked example (`Stage.worked`; host cost hardly depends on sizes) three ways: `old`
(plain `kernel[grid]` launches and the argument checks run in full, as before the launcher), `plain` (plain
launches, memoized checks) and `lean` (the launcher and memoized checks). The plain and lean paths must write
byte-equal outputs. Writes $OUT/launch_path.json and prints a table (ratios to the empty kernel through
`kernel[grid]`, E); `target` is lean <= E + 2 us.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from contextlib import contextmanager

import numpy as np
import torch
import triton
import triton.language as tl

from specverify.bench import timing
from specverify.kernels.triton import launch as launch_module
from specverify.kernels.triton.launch import Launcher, plain_launch
from specverify.materialize import Bound, plan
from specverify.registry import all_stages

SLACK_US = 2.0


@triton.jit
def empty_kernel(x_ptr, n, BLOCK: tl.constexpr):
    pass


@contextmanager
def full_checks(impl):
    """Run the argument checks of `impl`'s module unmemoized inside the block."""
    module = sys.modules[impl.__module__]
    memoized = module.validate
    module.validate = lambda check, *args, values: check(*args, values=values)
    try:
        yield
    finally:
        module.validate = memoized


def implementation(stage):
    module, name = stage.impls["triton"].split(":")
    return getattr(importlib.import_module(module), name)


def wrappers():
    """(stage name, Triton implementation, plan, arena) for each stage with a Triton implementation."""
    found = []
    for stage in all_stages().values():
        if "triton" in stage.impls and stage.worked is not None:
            call_plan, arena = plan(stage, stage.worked())
            found.append((stage.name, implementation(stage), call_plan, arena))
    return found


def run_once(impl, call_plan, arena) -> np.ndarray:
    """The arena after one call on a fresh copy of it (device slots read back)."""
    bound = Bound(call_plan, arena.copy(), "torch", "cuda")
    impl(**bound.kwargs)
    torch.cuda.synchronize()
    bound.read_back()
    return bound.arena


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("launch_path: no CUDA device; nothing measured", file=sys.stderr)
        return 2
    out = os.environ.get("OUT", ".")
    settings = timing.Settings(calls=args.calls, repeat=args.rounds)
    x = torch.zeros(16, dtype=torch.int32, device="cuda")
    lean_empty = Launcher(empty_kernel)
    for _ in range(3):
        empty_kernel[(1,)](x, 7, BLOCK=16)
        lean_empty[(1,)](x, 7, BLOCK=16)
    empty = timing.host_us(lambda: empty_kernel[(1,)](x, 7, BLOCK=16), "cuda", settings)
    empty_lean = timing.host_us(lambda: lean_empty[(1,)](x, 7, BLOCK=16), "cuda", settings)
    rows = []
    for name, impl, call_plan, arena in wrappers():
        with plain_launch():
            plain_bytes = run_once(impl, call_plan, arena)
        run_once(impl, call_plan, arena)                 # the first launcher call keeps the compiled kernels
        lean_bytes = run_once(impl, call_plan, arena)    # this one goes through them
        bound = Bound(call_plan, arena.copy(), "torch", "cuda")
        call = lambda: impl(**bound.kwargs)              # noqa: E731
        with plain_launch(), full_checks(impl):
            call()
            old = timing.host_us(call, "cuda", settings)
        with plain_launch():
            call()
            plain = timing.host_us(call, "cuda", settings)
        call()
        lean = timing.host_us(call, "cuda", settings)
        rows.append({"stage": name, "old_us": old, "plain_us": plain, "lean_us": lean, "old_ratio": old / empty,
                     "plain_ratio": plain / empty, "lean_ratio": lean / empty, "lean_minus_empty_us": lean - empty,
                     "target": lean <= empty + SLACK_US, "byte_equal": bool(np.array_equal(plain_bytes, lean_bytes))})
    declined = sorted(getattr(k, "__name__", str(k)) for k, v in launch_module._kernels.items() if v is None)
    kept = {getattr(k, "__name__", str(k)): len(v.launches) for k, v in launch_module._kernels.items() if v is not None}
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
              "python": sys.version.split()[0], "calls": args.calls, "rounds": args.rounds,
              "empty_plain_us": empty, "empty_lean_us": empty_lean, "slack_us": SLACK_US, "wrappers": rows,
              "declined": declined, "kept": kept}
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "launch_path.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(f"{result['device']}, torch {torch.__version__}, triton {triton.__version__}, {args.calls} calls x "
          f"{args.rounds} rounds (median)")
    print(f"empty kernel: kernel[grid] {empty:.2f} us, launcher {empty_lean:.2f} us ({empty_lean / empty:.2f}x)")
    print(f"{'stage':34} {'old us':>8} {'plain us':>9} {'lean us':>8} {'old/E':>6} {'lean/E':>7} {'lean-E':>7} "
          "target bytes")
    for r in rows:
        print(f"{r['stage']:34} {r['old_us']:8.2f} {r['plain_us']:9.2f} {r['lean_us']:8.2f} {r['old_ratio']:6.2f} "
              f"{r['lean_ratio']:7.2f} {r['lean_minus_empty_us']:7.2f} {'met' if r['target'] else 'MISSED':6} "
              f"{'equal' if r['byte_equal'] else 'DIFFER'}")
    print(f"kernels on the fast path: {kept}; declined (plain launches): {declined or 'none'}")
    return 0 if all(r["byte_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

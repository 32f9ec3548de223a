"""Python overhead per call of each Triton wrapper, with the kernel launch stubbed out (CPU, no GPU).

Run from a checkout's root: PYTHONPATH=. python bench/wrapper_overhead.py [--calls 2000] [--repeat 7]
(OUT=dir also writes dir/wrapper_overhead.json). Each stage with a Triton implementation is called on its
worked example with every tensor moved to the meta device (so, as on CUDA outside checked mode, no value
check runs); the launch does nothing: the launcher's `launch` where there is one, else `kernel[grid]`.
Reports the best of `repeat` timeit runs of process CPU time (robust on a shared machine), in us per
call, beside the cost of calling an empty function with the same keyword arguments (the floor here).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
import timeit

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402

from specverify.judge.materialize import Bound, plan  # noqa: E402
from specverify.records.registry import all_stages  # noqa: E402


CPU = time.process_time


def stub_launch() -> str:
    """Make every launch a no-op; returns which path was stubbed."""
    noop = lambda *args, **meta: None  # noqa: E731
    try:
        from specverify.kernels.triton import launch
    except ImportError:
        from triton.runtime.interpreter import InterpretedFunction
        InterpretedFunction.__getitem__ = lambda self, grid: noop
        return "kernel[grid]"
    launch.launch = noop
    return "launcher"


def on_meta(value):
    if isinstance(value, torch.Tensor):
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    stubbed = stub_launch()
    rows = {}
    floor = None
    for stage in all_stages().values():
        if "triton" not in stage.impls or stage.worked is None:
            continue
        module, name = stage.impls["triton"].split(":")
        impl = getattr(importlib.import_module(module), name)
        call_plan, arena = plan(stage, stage.worked())
        kwargs = {k: on_meta(v) for k, v in Bound(call_plan, arena, "torch", "cpu").kwargs.items()}
        impl(**kwargs)
        best = min(timeit.repeat(lambda: impl(**kwargs), number=args.calls, repeat=args.repeat, timer=CPU))
        empty = min(timeit.repeat(lambda: (lambda **kw: None)(**kwargs), number=args.calls, repeat=args.repeat,
                                  timer=CPU))
        rows[stage.name] = round(best / args.calls * 1e6, 3)
        floor = min(floor or 1e9, empty / args.calls * 1e6)
    result = {"stubbed": stubbed, "calls": args.calls, "repeat": args.repeat, "floor_us": round(floor, 3),
              "overhead_us": rows}
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "wrapper_overhead.json"), "w") as f:
            json.dump(result, f, indent=1)
    print(f"stubbed launch: {stubbed}; empty call with the same arguments: {floor:.3f} us")
    for name, us in rows.items():
        print(f"{name:34} {us:8.3f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())

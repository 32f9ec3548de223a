"""Our Triton kernels built for an NVIDIA GPU on a machine without one (tests/kernels/test_gpu_builds.py).

    python tests/kernels/gpu_builds.py record PATH   (TRITON_INTERPRET=1) a few valid examples of every stage's
                                                     Triton target in the interpreter; each distinct launch's
                                                     specialization (argument types, constexprs, warps) to PATH
    python tests/kernels/gpu_builds.py build PATH    (TRITON_INTERPRET=0) each one compiled by Triton for sm_90,
                                                     ptxas included; one line per failure, exit 1 if any

The interpreter runs a kernel's Python, not Triton's compiler, so it accepts code the GPU build refuses (a
loop-carried scalar whose dtype changes in the loop, say); this finds that on the CPU.
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import sys

EXAMPLES = "12"        # valid-tier examples per stage (the other tiers get none or a few)
TARGET = ("cuda", 90, 32)


def kind(value) -> str | None:
    """Triton's signature entry of a runtime argument (None: a None argument, passed as a constexpr)."""
    import torch

    if isinstance(value, torch.Tensor):
        return "*" + {torch.bool: "i1", torch.uint8: "u8", torch.int8: "i8", torch.int16: "i16", torch.int32: "i32",
                      torch.int64: "i64", torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32",
                      torch.float64: "fp64"}[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -2**31 <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    return None


def record(path: str) -> int:
    import triton.runtime.interpreter as interpreter

    from specverify.cli import main

    found: dict[str, dict] = {}
    run = interpreter.InterpretedFunction.run

    def recording(self, *args, grid, warmup, **kwargs):
        params = list(inspect.signature(self.fn).parameters.values())
        given = {**dict(zip([p.name for p in params], args)), **kwargs}
        spec = {"module": self.fn.__module__, "name": self.fn.__qualname__, "signature": {}, "constexprs": {},
                "options": {k: given[k] for k in ("num_warps", "num_stages") if k in given}}
        for p in params:
            value = given.get(p.name, p.default)
            entry = "constexpr" if "constexpr" in str(p.annotation) else kind(value)
            spec["signature"][p.name] = entry or "constexpr"
            if entry in (None, "constexpr"):
                spec["constexprs"][p.name] = value
        found.setdefault(json.dumps(spec, sort_keys=True, default=str), spec)
        return run(self, *args, grid=grid, warmup=warmup, **kwargs)

    interpreter.InterpretedFunction.run = recording
    status = main(["check", "--backend", "triton", "--device", "cpu", "--examples", EXAMPLES, "--check", "valid",
                   "--no-isolate", "--devices", "cpu:1", "--findings", path + ".findings"])
    with open(path + ".tmp", "w") as f:
        json.dump(list(found.values()), f, default=str)
    os.replace(path + ".tmp", path)
    return status


def build(path: str) -> int:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    failed = 0
    with open(path) as f:
        specs = json.load(f)
    for spec in specs:
        kernel = getattr(importlib.import_module(spec["module"]), spec["name"])
        fn = getattr(kernel, "fn", kernel)                       # a @launcher kernel holds its JITFunction
        try:
            triton.compile(ASTSource(fn=fn, signature=spec["signature"], constexprs=spec["constexprs"]),
                           target=GPUTarget(*TARGET), options=spec["options"])
        except Exception as e:   # the compiler's own errors vary by Triton version: report each, go on
            failed += 1
            last = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
            print(f"{spec['module']}.{spec['name']} {spec['constexprs']}: {last}")
    print(f"{len(specs)} specializations built for sm_90, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit({"record": record, "build": build}[sys.argv[1]](sys.argv[2]))

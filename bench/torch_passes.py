"""A bytes model of the probability-reading Torch kernels, measured on the CPU (no GPU needed).

    PYTHONPATH=. python bench/torch_passes.py [--batch 64] [--vocab 4096] [--ops]

Each case runs one stage's Torch kernel under a TorchDispatchMode that adds up, per aten op that
launches (tests/dispatch_count.py's rule), the bytes it reads and writes of tensors whose last dim is V:
a view counts its distinct elements once (a broadcast noise row is read once), an indexing op reads what
it gathers, a scatter writes what it scatters, an `out=` buffer or a fill is written without being
read, an in-place op reads and writes its target. These eager kernels are memory-bound: each op streams
its operands through DRAM, so device time follows the bytes (on an H200 both backends move ~3.7 TB/s).

Reported: full-table passes, the bytes over one table (T * V * 4; for rejection.chain_cdf, whose pick
reads one row per request, B * V * 4), beside our Triton kernel's: every input table read once (inv_q
once per request: its rows stay in L2 while a request's K programs read them), and for chain_cdf the
pick's two rows swept twice once V > 1024 (the sum, then the scan) with one rejection per request.
"""
from __future__ import annotations

import argparse
import functools

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from specverify.records import backends, registry
from specverify.records import bench_inputs as bench
from specverify.kernels.triton.prepared import METADATA_OPS
from specverify.records.stage import Buffer

K = 5
GATHERS = {"index", "index_select", "gather", "take", "take_along_dim", "embedding"}
SCATTERS = {"scatter_", "scatter_add_", "index_put_", "_index_put_impl_", "index_copy_", "index_fill_"}
FILLS = {"fill_", "zero_", "copy_"}   # write their target without reading it (copy_ reads its source)


def distinct_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a view touches (a stride-0 dim counts once)."""
    if t.numel() == 0:
        return 0
    return t.element_size() * functools.reduce(int.__mul__, (n for n, s in zip(t.shape, t.stride()) if s), 1)


def view_key(t: torch.Tensor) -> tuple:
    return t.data_ptr(), tuple(t.shape), t.stride(), t.dtype


class Traffic(TorchDispatchMode):
    """Records (op, bytes read, bytes written) of V-wide tensors per launching aten op."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.ops: list[tuple[str, int, int]] = []

    def wide(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[-1] == self.vocab

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = func.overloadpacket.__name__
        if name in METADATA_OPS:
            return result
        schema = func._schema.arguments
        values = [(a, args[i] if i < len(args) else kwargs.get(a.name)) for i, a in enumerate(schema)]
        written = [v for a, v in values if a.alias_info is not None and a.alias_info.is_write]
        outs = [t for t in (result if isinstance(result, (tuple, list)) else (result,)) if isinstance(t, torch.Tensor)]
        read = write = 0
        seen = set()
        for a, v in values:
            tensors = v if isinstance(v, (list, tuple)) else (v,)
            for t in tensors:
                if not self.wide(t) or view_key(t) in seen:
                    continue                                 # an operand passed twice is read once
                seen.add(view_key(t))
                target = any(t is w for w in written)
                if target and (a.kwarg_only or name in FILLS or name in SCATTERS):
                    continue                                 # out= buffer, fill or scatter target: not read
                if name in GATHERS and a.name in ("self", "weight", "input"):
                    read += min(distinct_bytes(t), sum(o.numel() for o in outs) * t.element_size())
                else:
                    read += distinct_bytes(t)
        for t in outs:
            if not self.wide(t):
                continue
            if name in SCATTERS:
                source = kwargs.get("src", kwargs.get("values", kwargs.get("source", args[-1] if args else None)))
                write += source.numel() * t.element_size() if isinstance(source, torch.Tensor) else 0
            else:
                write += distinct_bytes(t)
        self.ops.append((name, read, write))
        return result


def tensors(inputs: dict, outputs: dict) -> dict:
    kw = {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    kw.update({k: torch.full(b.shape, -9, dtype=getattr(torch, b.dtype)) for k, b in outputs.items()})
    return kw


def ragged(x: dict, outputs: dict, counts: np.ndarray) -> tuple[dict, dict]:
    """A flattened example of B * K tokens re-laid out with `counts` (summing to B * K) drafts per request."""
    spec = int(counts.max())
    x = dict(x, cu_num_draft_tokens=np.cumsum(counts).astype(np.int32), max_spec_len=spec)
    if "output_token_ids" in outputs:
        outputs = dict(outputs, output_token_ids=Buffer((len(counts), spec + 1), "int32"))
    return x, outputs


def cases(batch: int, vocab: int, rng):
    """(label, stage, inputs, outputs, triton passes, unit bytes) of each measured configuration."""
    stages = registry.all_stages()
    counts = rng.permutation(np.resize([K - 3, K + 3], batch))     # K on average, never K each
    for name in ("rejection.recovered", "rejection.sample", "rejection.sample_padded"):
        stage = stages[name]
        base = stage.bench(batch, vocab, rng)
        target = base.inputs["target_probs"]
        draft = bench.probability_table(rng, target.size // vocab, vocab)[0].reshape(target.shape)
        layouts = ("uniform", "ragged") if name != "rejection.sample_padded" else ("padded",)
        for layout in layouts:
            for with_draft in (False, True):
                x = dict(base.inputs, draft_probs=draft if with_draft else None)
                outputs = dict(base.outputs)
                if layout == "ragged":
                    x, outputs = ragged(x, outputs, counts)
                tokens = x["draft_token_ids"].size
                unit = tokens * vocab * 4
                triton = 1 + with_draft + batch / tokens
                label = f"{name.split('.')[1]} {layout} {'draft' if with_draft else 'no draft'}"
                yield label, stage, x, outputs, triton, unit
    stage = stages["rejection.chain_cdf"]
    base = stage.bench(batch, vocab, rng)
    yield "chain_cdf padded", stage, base.inputs, base.outputs, 2 * (1 if vocab <= 1024 else 2), batch * vocab * 4


def measure(stage, inputs: dict, outputs: dict, vocab: int) -> Traffic:
    impl = backends.load(stage.impls["torch"])
    impl(**tensors(inputs, outputs))             # warm-up: the cached constants
    kw = tensors(inputs, outputs)
    with Traffic(vocab) as traffic:
        impl(**kw)
    return traffic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=4096)
    parser.add_argument("--ops", action="store_true", help="list each op's passes")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"B = {args.batch}, K = {K} (ragged: {K - 3} or {K + 3} drafts), V = {args.vocab}: full-table passes")
    print(f"{'case':<34}{'torch':>7}{'triton':>8}{'ratio':>7}{'ops':>5}")
    for label, stage, x, outputs, triton, unit in cases(args.batch, args.vocab, rng):
        traffic = measure(stage, x, outputs, args.vocab)
        total = sum(r + w for _, r, w in traffic.ops) / unit
        print(f"{label:<34}{total:>7.2f}{triton:>8.2f}{total / triton:>7.2f}{len(traffic.ops):>5}")
        if args.ops:
            for name, r, w in traffic.ops:
                if r or w:
                    print(f"    {name:<28} read {r / unit:5.2f}  write {w / unit:5.2f}")


if __name__ == "__main__":
    main()

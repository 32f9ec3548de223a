"""Benchmark of `output.parse`: the production host version against a naive per-row NumPy filter and
the oracle, in one run, at batch 1 to 512.

    python bench/output_parse.py [--spec 8] [--json PATH]

Each row: rejection-sampler output [B, S+1] int32 over a 151936-token vocabulary (an emitted prefix,
-1 after it, a few out-of-vocabulary ids), about 1 in 16 requests discarded. Median microseconds per
call over timeit rounds after a warm-up, the three taking turns.
"""
from __future__ import annotations

import argparse
import json
import statistics
import timeit
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from specverify.kernels.host.output import parse
from specverify.oracles.output import parse as oracle

VOCAB = 151936
BATCHES = (1, 16, 64, 256, 512)


def naive(*, output_token_ids, vocab_size, discard_req_indices):
    """The per-row filter production code replaces: one fancy index and tolist() per request."""
    out = [row[(row >= 0) & (row < vocab_size)].tolist() for row in output_token_ids]
    for r in discard_req_indices:
        out[r] = []
    return out, None


def batch_input(batch: int, spec: int, rng: np.random.Generator) -> dict:
    width = spec + 1
    ids = rng.integers(0, VOCAB, (batch, width))
    ids[np.arange(width)[None, :] >= rng.integers(1, width + 1, batch)[:, None]] = -1
    ids[(rng.random((batch, width)) < 0.02) & (ids >= 0)] = VOCAB + 7
    discard = np.flatnonzero(rng.random(batch) < 1 / 16).tolist()
    return {"output_token_ids": ids.astype(np.int32), "vocab_size": VOCAB, "discard_req_indices": discard}


def median_us(fns: dict, kwargs: dict, rounds: int = 9, budget: float = 0.02) -> dict[str, float]:
    """Median µs per call of each function; the functions take turns in every round (after a warm-up),
    so a busy machine slows them alike. Each turn makes about `budget` seconds of calls."""
    timers = {name: timeit.Timer(lambda fn=fn: fn(**kwargs)) for name, fn in fns.items()}
    numbers = {name: max(1, int(budget / max(t.timeit(3) / 3, 1e-7))) for name, t in timers.items()}
    samples = {name: [] for name in fns}
    for _ in range(rounds):
        for name, t in timers.items():
            samples[name].append(t.timeit(numbers[name]) / numbers[name] * 1e6)
    return {name: statistics.median(s) for name, s in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", type=int, default=8, help="draft tokens per request (S = spec + 1)")
    ap.add_argument("--json", type=Path, help="also write the numbers as JSON")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    rows = []
    for batch in BATCHES:
        kwargs = batch_input(batch, args.spec, rng)
        assert parse(**kwargs) == naive(**kwargs) == oracle(**kwargs)
        times = median_us({"production": parse, "naive": naive, "oracle": oracle}, kwargs)
        rows.append({"batch": batch, "S": args.spec + 1, **times})
    table = Table("B", "S", "production µs", "naive per-row µs", "oracle µs", "naive / production",
                  title=f"output.parse, V={VOCAB}, median per call")
    for r in rows:
        table.add_row(str(r["batch"]), str(r["S"]), f"{r['production']:.1f}", f"{r['naive']:.1f}",
                      f"{r['oracle']:.1f}", f"{r['naive'] / r['production']:.1f}x")
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps({"vocab_size": VOCAB, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

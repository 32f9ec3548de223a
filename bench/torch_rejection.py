"""GPU timing of the probability-reading `rejection` stages: our Torch kernel beside our Triton kernel.

For B in (1, 16, 64, 256, 512, 1024) requests of K = 5 drafts, V in (32000, 151936), with and without
draft probabilities: µs per call, as `specverify bench` times eager calls (CUDA events around 5 blocks
of 10 calls, the median block, after a warm-up call) of rejection.random,
.recovered, .sample (half the rows greedy) and .sample_padded. Writes $OUT/torch_rejection.json and prints
a table. Run from the repository root: PYTHONPATH=. python bench/torch_rejection.py [--batch B ...]
[--vocab V ...]
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from specverify.judge import timing
from specverify.kernels.torch import rejection as torch_kernels
from specverify.kernels.triton import rejection as triton_kernels

K = 5
STAGES = ("random", "recovered", "sample", "sample_padded")
SETTINGS = timing.Settings(calls=10)


def inputs(stage: str, batch: int, vocab: int, with_draft: bool, gen: torch.Generator) -> dict:
    dev = "cuda"
    tokens = batch * K
    target = torch.rand(tokens, vocab, device=dev, generator=gen)
    draft_probs = torch.rand(tokens, vocab, device=dev, generator=gen) if with_draft else None
    drafts = torch.randint(0, vocab, (tokens,), device=dev, generator=gen)
    inv_q = torch.rand(batch, vocab, device=dev, generator=gen).add_(0.01).reciprocal_()
    uniform = torch.rand(tokens, device=dev, dtype=torch.float64, generator=gen)
    is_greedy = torch.arange(batch, device=dev) % 2 == 0
    bonus = torch.randint(0, vocab, (batch,), device=dev, generator=gen)
    if stage == "sample_padded":
        return dict(draft_token_ids=drafts.view(batch, K), draft_probs=None if draft_probs is None else
                    draft_probs.view(batch, K, vocab), target_probs=target.view(batch, K, vocab),
                    bonus_token_ids=bonus, is_greedy=is_greedy, uniform_probs=uniform.view(batch, K), inv_q=inv_q,
                    output_token_ids=torch.empty(batch, K + 1, dtype=torch.int64, device=dev),
                    num_rejected_tokens=torch.empty(batch, dtype=torch.int64, device=dev),
                    last_token_ids=torch.empty(batch, dtype=torch.int64, device=dev))
    flat = dict(draft_token_ids=drafts.int(), cu_num_draft_tokens=torch.arange(1, batch + 1, device=dev,
                dtype=torch.int32) * K, draft_probs=draft_probs, target_probs=target)
    if stage == "recovered":
        return dict(flat, inv_q=inv_q, recovered_token_ids=torch.empty(tokens, dtype=torch.int32, device=dev))
    out = torch.full((batch, K + 1), -1, dtype=torch.int32, device=dev)
    if stage == "random":
        return dict(flat, bonus_token_ids=bonus, max_spec_len=K, is_greedy=is_greedy, uniform_probs=uniform,
                    recovered_token_ids=torch.randint(0, vocab, (tokens,), device=dev, generator=gen).int(),
                    output_token_ids=out)
    return dict(flat, bonus_token_ids=bonus, max_spec_len=K, is_greedy=is_greedy, uniform_probs=uniform,
                inv_q=inv_q, output_token_ids=out)


def median_us(fn, kw: dict) -> float:
    """µs per call of eager calls after a warm-up call (`timing.events_us`: 5 blocks of 10 calls)."""
    call = lambda: fn(**kw)
    call()
    return timing.events_us(call, SETTINGS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 16, 64, 256, 512, 1024])
    parser.add_argument("--vocab", type=int, nargs="+", default=[32000, 151936])
    args = parser.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    print(f"{'stage':<14}{'draft':>6}{'V':>8}{'B':>6}{'torch us':>11}{'triton us':>11}{'ratio':>7}")
    for vocab in args.vocab:
        for batch in args.batch:
            for with_draft in (False, True):
                for stage in STAGES:
                    kw = inputs(stage, batch, vocab, with_draft, gen)
                    ours = median_us(getattr(torch_kernels, stage), kw)
                    theirs = median_us(getattr(triton_kernels, stage), kw)
                    rows.append(dict(stage=stage, draft_probs=with_draft, V=vocab, B=batch, K=K,
                                     torch_us=round(ours, 1), triton_us=round(theirs, 1),
                                     ratio=round(ours / theirs, 2)))
                    print(f"{stage:<14}{str(with_draft):>6}{vocab:>8}{batch:>6}{ours:>11.1f}{theirs:>11.1f}"
                          f"{ours / theirs:>7.2f}")
                    del kw
                torch.cuda.empty_cache()
    out = Path(os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    (out / "torch_rejection.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

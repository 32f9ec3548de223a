"""Device time of the probability-reading Triton kernels of the `rejection` family (CUDA only).

    PYTHONPATH=. python bench/triton_rejection.py [--programs-per-sm 8 [4 16 ...]]

For B in BATCHES, V in VOCABS and K = 5 drafts per request: rejection.recovered (with and without draft
probs), rejection.sample and rejection.sample_padded (every row greedy: `is_greedy` None and no noise;
every row random: `is_greedy` all False, with draft probs and noise). Each case: one eager call checked
byte for byte against the Torch backend (a mismatch is printed loudly and fails the run), then 20 calls
captured in one CUDA graph and replayed (`specverify.judge.timing.graph_us`); µs per call = event time
of a replay / 20, the median of 5 replays. The eager call runs on a side stream after all work queued on
the current one (inputs, reference, the -9 fill of its outputs). GB/s counts the probability tables read
(target, draft probs, inv_q, each once) and the outputs written; the device-to-device copy of a 1 GiB
buffer (read + write, `timing.copy_bandwidth`) measured in the same run is the reference. Results: a
table and $OUT/triton_rejection.json.
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import triton

from specverify.judge import timing
from specverify.kernels.torch import rejection as reference
from specverify.kernels.triton import rejection as kernels

BATCHES = (1, 16, 64, 256, 512, 1024)
VOCABS = (32000, 151936)
K = 5
CALLS, REPLAYS = 20, 5
SETTINGS = timing.Settings(calls=CALLS, replays=REPLAYS)   # specverify bench's graph timing


def tables(vocab: int, device: str) -> dict:
    """The largest batch's tables; every case uses a contiguous prefix of them."""
    g = torch.Generator(device=device).manual_seed(vocab)
    tokens, batch = max(BATCHES) * K, max(BATCHES)
    return {"target": torch.rand(tokens, vocab, generator=g, device=device),
            "draft": torch.rand(tokens, vocab, generator=g, device=device),
            "inv_q": torch.empty(batch, vocab, device=device).exponential_(generator=g).reciprocal_(),
            "uniform": torch.rand(tokens, generator=g, device=device, dtype=torch.float64),
            "drafts": torch.randint(0, vocab, (tokens,), generator=g, device=device),
            "bonus": torch.randint(0, vocab, (batch,), generator=g, device=device)}


def cases(batch: int, vocab: int, t: dict) -> list[tuple[str, str, object, dict, dict, int]]:
    """(stage, variant, function name, inputs, outputs, bytes moved) of every timed case."""
    tokens, dev = batch * K, t["target"].device
    target, draft, inv_q = t["target"][:tokens], t["draft"][:tokens], t["inv_q"][:batch]
    table, noise = target.numel() * 4, inv_q.numel() * 4
    cu = torch.arange(1, batch + 1, device=dev, dtype=torch.int32) * K
    drafts = t["drafts"][:tokens].to(torch.int32)
    flat = dict(draft_token_ids=drafts, cu_num_draft_tokens=cu, max_spec_len=K, target_probs=target,
                bonus_token_ids=t["bonus"][:batch])
    padded = dict(draft_token_ids=t["drafts"][:tokens].view(batch, K), target_probs=target.view(batch, K, vocab),
                  bonus_token_ids=t["bonus"][:batch])
    greedy_noise = dict(draft_probs=None, is_greedy=None, uniform_probs=None, inv_q=None)
    random_noise = dict(is_greedy=torch.zeros(batch, dtype=torch.bool, device=dev), inv_q=inv_q)
    flat_out = lambda: {"output_token_ids": torch.full((batch, K + 1), -9, dtype=torch.int32, device=dev)}
    padded_out = lambda: {"output_token_ids": torch.full((batch, K + 1), -9, dtype=torch.int64, device=dev),
                          "num_rejected_tokens": torch.full((batch,), -9, dtype=torch.int64, device=dev),
                          "last_token_ids": torch.full((batch,), -9, dtype=torch.int64, device=dev)}
    rec_out = lambda: {"recovered_token_ids": torch.full((tokens,), -9, dtype=torch.int32, device=dev)}
    rec = dict(cu_num_draft_tokens=cu, draft_token_ids=drafts, target_probs=target, inv_q=inv_q)
    padded_bytes = batch * (K + 3) * 8
    return [
        ("recovered", "draft probs", "recovered", {**rec, "draft_probs": draft}, rec_out, 2 * table + noise + tokens * 4),
        ("recovered", "no draft probs", "recovered", {**rec, "draft_probs": None}, rec_out, table + noise + tokens * 4),
        ("sample", "all greedy", "sample", {**flat, **greedy_noise}, flat_out, table + batch * (K + 1) * 4),
        ("sample", "all random", "sample",
         {**flat, **random_noise, "draft_probs": draft, "uniform_probs": t["uniform"][:tokens]}, flat_out,
         2 * table + noise + batch * (K + 1) * 4),
        ("sample_padded", "all greedy", "sample_padded", {**padded, **greedy_noise}, padded_out, table + padded_bytes),
        ("sample_padded", "all random", "sample_padded",
         {**padded, **random_noise, "draft_probs": draft.view(batch, K, vocab),
          "uniform_probs": t["uniform"][:tokens].view(batch, K)}, padded_out, 2 * table + noise + padded_bytes),
    ]


def equal(got: dict, want: dict) -> bool:
    return all(torch.equal(got[k], want[k]) for k in got)


def differences(got: dict, want: dict) -> str:
    """Per output: elements that differ, and how many of them still hold the -9 fill (never written)."""
    parts = []
    for k in got:
        wrong = got[k] != want[k]
        parts.append(f"{k}: {int(wrong.sum())} differ, {int((wrong & (got[k] == -9)).sum())} unwritten")
    return "; ".join(parts)


def on_side_stream(call, stream: torch.cuda.Stream) -> None:
    """Run `call` on `stream` after all work queued on the current stream (the inputs, the Torch reference,
    the -9 fill of the outputs), then make the current stream wait for it. Without the first wait the
    fill, queued behind a slow reference, can land after the kernel's writes."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs-per-sm", type=int, nargs="+", default=[kernels.PROGRAMS_PER_SM],
                    help="split-pick budgets to time (the module's by default)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("CUDA is not available: this benchmark times device kernels")
        return 2
    out_dir = Path(os.environ.get("OUT", "out"))
    out_dir.mkdir(parents=True, exist_ok=True)
    copy = timing.copy_bandwidth("cuda", SETTINGS)["gbps"]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{torch.cuda.get_device_name()} ({sms} SMs), torch {torch.__version__}, triton {triton.__version__}; copy_ of 1 GiB: {copy:.0f} GB/s")
    stream = torch.cuda.Stream()
    rows, mismatches = [], 0
    print(f"{'stage':14} {'variant':15} {'B':>5} {'V':>7} {'/SM':>4} {'split':>5} {'tile':>5} {'µs':>9} "
          f"{'GB/s':>7} {'of copy':>7}  equal")
    for vocab in VOCABS:
        t = tables(vocab, "cuda")
        for batch in BATCHES:
            for stage, variant, fn, inputs, outputs, moved in cases(batch, vocab, t):
                want = outputs()
                getattr(reference, fn)(**inputs, **want)
                for per_sm in args.programs_per_sm:
                    kernels.PROGRAMS_PER_SM = per_sm
                    kernels.program_budget.cache_clear()
                    split, tile, _ = kernels.split_plan(batch * K, vocab, *kernels.program_budget(torch.device("cuda", 0)))
                    got = outputs()
                    call = lambda: getattr(kernels, fn)(**inputs, **got)
                    on_side_stream(call, stream)
                    same = equal(got, want)
                    if not same:
                        print(f"  eager call: {differences(got, want)}")
                    us = timing.graph_us(call, SETTINGS)
                    same = same and equal(got, want)    # the replays wrote the same bytes
                    gbps = moved / us / 1e3
                    mismatches += not same
                    rows.append(dict(stage=stage, variant=variant, B=batch, V=vocab, K=K, programs_per_sm=per_sm,
                                     split=split, tile=tile, us=us, bytes=moved, gbps=gbps, of_copy=gbps / copy,
                                     equal=same))
                    print(f"{stage:14} {variant:15} {batch:5} {vocab:7} {per_sm:4} {split:5} {tile:5} {us:9.2f} "
                          f"{gbps:7.0f} {gbps / copy:7.1%}  {'yes' if same else '!!! MISMATCH vs Torch !!!'}",
                          flush=True)
        del t
        torch.cuda.empty_cache()
    (out_dir / "triton_rejection.json").write_text(json.dumps(
        {"device": torch.cuda.get_device_name(), "sms": sms, "torch": torch.__version__,
         "triton": triton.__version__, "copy_gbps": copy,
         "calls_per_graph": CALLS, "replays": REPLAYS, "rows": rows}, indent=1))
    if mismatches:
        print(f"!!! {mismatches} case(s) differ from the Torch backend !!!")
    return 1 if mismatches else 0


if __name__ == "__main__":
    raise SystemExit(main())

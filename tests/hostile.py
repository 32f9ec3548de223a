"""Hostile implementations of `rejection.greedy` and `rejection.expand` (and one of
`rejection.sample_padded`): each breaks the judge's trust in a different way. The suite must turn every
one into a failure of that target alone (`orders_its_side_stream` is the control that must pass)."""
import os
import struct
import sys
import time

import torch

from specverify.kernels.torch.rejection import greedy, sample_padded


def exit_zero(**kw):
    sys.exit(0)


def os_exit_zero(**kw):
    os._exit(0)


def abort(**kw):
    os.abort()


def hang(**kw):
    time.sleep(3600)


def stalls_every_descriptor(**kw):
    """Answers correctly, then announces a 1 MiB frame on every descriptor it holds (its socket among
    them) and sends none of it; from the first non-empty batch on, so that a search would shrink."""
    greedy(**kw)
    if kw["cu_num_draft_tokens"].numel():
        for name in os.listdir("/proc/self/fd"):
            try:
                os.write(int(name), struct.pack("!i", 1 << 20))
            except OSError:
                pass


def exits_once(**kw):
    """Prints a line and exits with status 1 on its first call in this folder (the worker's current one,
    the judge's); answers correctly on every later call."""
    if not os.path.exists("exited-once"):
        open("exited-once", "w").close()
        print("hostile: giving up on this batch")
        os._exit(1)
    greedy(**kw)


def wrong_once(**kw):
    """A wrong output on its first call with outputs in this folder, right ones after: nondeterministic."""
    greedy(**kw)
    if kw["output_token_ids"].numel() and not os.path.exists("wrong-once"):
        open("wrong-once", "w").close()
        kw["output_token_ids"].fill_(12345)


def patch_the_judge(**kw):
    """Replaces the comparison functions with no-ops, then writes nonsense."""
    import specverify.judge.compare
    import specverify.judge.harness

    specverify.judge.harness.compare_output = lambda *a, **k: None
    specverify.judge.harness.judge = lambda *a, **k: None
    specverify.judge.compare.compare_output = lambda *a, **k: None
    kw["output_token_ids"].fill_(12345)


def past_the_end(tensor: torch.Tensor, extra: int = 1) -> torch.Tensor:
    """The flat storage of a contiguous tensor and `extra` elements after it."""
    return tensor.as_strided((tensor.numel() + extra,), (1,), tensor.storage_offset())


def writes_one_past_the_end(**kw):
    greedy(**kw)
    out = kw["output_token_ids"]
    past_the_end(out)[out.numel()] = 7


def reads_one_past_the_end(**kw):
    """An off-by-one read: the element after the last draft decides the first output slot."""
    greedy(**kw)
    draft = kw["draft_token_ids"]
    if draft.numel() and kw["output_token_ids"].numel():
        after = past_the_end(draft)[draft.numel()]
        if after > 0:
            kw["output_token_ids"][0, 0] = after


def gaps_on_hazard(**kw):
    """Correct, except that on NaN probabilities it scribbles into the gap after each output row."""
    sample_padded(**kw)
    out = kw["output_token_ids"]
    if torch.isnan(kw["target_probs"]).any() and out.shape[0] and out.stride(0) > out.shape[1] * out.stride(1):
        row_end = out.as_strided((out.shape[0],), (out.stride(0),), out.storage_offset() + out.shape[1] * out.stride(1))
        row_end.fill_(3)


def syncs_the_host(**kw):
    """A correct `rejection.expand`, after reading a value back to the host (a device sync on CUDA)."""
    from specverify.kernels.torch.rejection import expand

    if kw["cu_num_tokens"].numel():
        int(kw["cu_num_tokens"][-1])
    expand(**kw)


def launches_many(**kw):
    """A correct `rejection.expand` followed by 40 no-op launches."""
    from specverify.kernels.torch.rejection import expand

    expand(**kw)
    for _ in range(40):
        kw["expanded"].add_(0)


def host_copy_not_replayed(**kw):
    """Writes its output from a host-side copy made at call time: right when called, stale in a CUDA graph
    (the replay repeats the device copy of the values captured once)."""
    from specverify.kernels.torch.rejection import expand

    scratch = torch.empty_like(kw["expanded"])
    expand(**{**kw, "expanded": scratch})
    kw["expanded"].copy_(torch.tensor(scratch.cpu().tolist(), dtype=scratch.dtype, device=scratch.device))


def switches_sync_debug_off(**kw):
    """A correct `rejection.expand` that turns CUDA's sync debug mode off, reads a value back to the host
    (a sync the mode no longer reports) and leaves the mode off."""
    from specverify.kernels.torch.rejection import expand

    torch.cuda.set_sync_debug_mode(0)
    if kw["cu_num_tokens"].numel():
        int(kw["cu_num_tokens"][-1])
    expand(**kw)


def restores_sync_debug_mode(**kw):
    """As `switches_sync_debug_off`, but it sets the mode back to error before it returns."""
    from specverify.kernels.torch.rejection import expand

    torch.cuda.set_sync_debug_mode(0)
    if kw["cu_num_tokens"].numel():
        int(kw["cu_num_tokens"][-1])
    torch.cuda.set_sync_debug_mode("error")
    expand(**kw)


def forge_the_probes() -> bool:
    """Replace the suite's probes (table and functions) by forgeries that report one launch and no sync;
    True when they were forged already."""
    import specverify.judge.probes as probes

    def forged(call, bound, device, *spec):
        return call(), {"launches": 1, "witness": "pending"}

    already = getattr(probes, "forged", None) is not None
    probes.PROBES.update(dict.fromkeys(probes.PROBES, forged))
    probes.PROBES = dict(probes.PROBES)
    probes.plain = probes.no_sync = probes.launches = probes.forged = forged
    return already


def patches_the_probes(**kw):
    """A correct `rejection.expand` that forges the probes (`forge_the_probes`); once they are forged
    (from its second call in a process on) it syncs and launches 40 more kernels per call."""
    from specverify.kernels.torch.rejection import expand

    forging = forge_the_probes()
    scratch = torch.empty(1, device=kw["expanded"].device)
    if forging:
        int(scratch.zero_())
    expand(**kw)
    for _ in range(40 if forging else 0):
        scratch.add_(0)


def synchronizes_explicitly(**kw):
    """A correct `rejection.expand` followed by torch.cuda.synchronize() (which CUDA's sync debug mode
    does not report)."""
    from specverify.kernels.torch.rejection import expand

    expand(**kw)
    torch.cuda.synchronize()


def empties_the_profiler(**kw):
    """A correct `rejection.expand` that makes the torch profiler's record of it come back empty."""
    from specverify.kernels.torch.rejection import expand

    torch.profiler.profile.events = lambda self: []
    expand(**kw)


def remembers_its_calls(**kw):
    """A correct `rejection.expand` that returns how many calls its process has made (state that lives
    as long as its worker)."""
    from specverify.kernels.torch.rejection import expand

    remembers_its_calls.calls = getattr(remembers_its_calls, "calls", 0) + 1
    expand(**kw)
    return remembers_its_calls.calls


SIDE_STREAM_DELAY = 50_000_000    # torch.cuda._sleep cycles (tens of milliseconds) before the output is written


def on_a_side_stream(kw: dict, ordered: bool) -> None:
    """A correct `rejection.expand` on a side stream (which first waits for the caller's, so it reads the
    inputs as given), into a copy of the output that is copied back after a delay: every allocation is
    made before the delay is queued. `ordered`: the caller's stream then waits for the side stream."""
    from specverify.kernels.torch.rejection import expand

    current = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(current)
    with torch.cuda.stream(side):
        out = kw["expanded"]
        scratch = out.clone()
        expand(**{**kw, "expanded": scratch})
        torch.cuda._sleep(SIDE_STREAM_DELAY)
        out.copy_(scratch)
    if ordered:
        current.wait_stream(side)


def races_the_callers_stream(**kw):
    """Right once the device is synchronized; still unwritten when the caller's stream reads the output."""
    on_a_side_stream(kw, ordered=False)


def orders_its_side_stream(**kw):
    """The same side-stream work, ordered before the caller's stream: right on it."""
    on_a_side_stream(kw, ordered=True)


def loses_the_cuda_context(**kw):
    """Answers correctly until its batch has three requests, then indexes past a device tensor's end: a
    device-side assert, which takes its process's CUDA context with it."""
    greedy(**kw)
    if kw["cu_num_draft_tokens"].numel() >= 3:
        probe = torch.zeros(1, device=kw["output_token_ids"].device)
        probe[torch.full((1,), 1 << 20, device=probe.device)] = 1.0

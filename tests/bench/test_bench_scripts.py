"""The GPU scripts under bench/: their stream ordering (CUDA only)."""
from __future__ import annotations

import pytest
import torch

from tests.bench_scripts import bench_script

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@needs_cuda
def test_triton_rejection_side_stream_call_follows_the_output_fill():
    """The eager check of bench/triton_rejection.py: a call on the side stream must run after the -9 fill
    of its outputs, queued on the current stream behind slow work (there: the Torch reference). Without
    the wait the fill lands after the call's writes and every large case reads as a mismatch."""
    script = bench_script("triton_rejection")
    stream = torch.cuda.Stream()
    out = torch.zeros(1 << 20, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    torch.cuda._sleep(100_000_000)      # the current stream busy for tens of ms, like a slow reference
    out.fill_(-9)
    script.on_side_stream(lambda: out.fill_(1), stream)
    assert int((out != 1).sum()) == 0

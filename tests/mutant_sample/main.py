"""The sample's entry point `entry` (and `other_stage`, which it never calls)."""
import torch

from mutant_sample import helpers
from mutant_sample.helpers import BLOCK, copy_kernel
from specverify.kernels.triton.launch import next_power_of_2


def launch(out, x):
    """Launch copy_kernel over x: a < b and x[1:2] in a docstring stay."""
    copy_kernel[(helpers.cdiv(x.numel(), BLOCK),)](out, x, x.numel(), x.stride(0), BLOCK=BLOCK)


def entry(out, x, rows):
    if x.numel() == 0:
        raise ValueError(f"empty input: {x.numel() - 1} < 1")
    launch(out, x)
    out[rows >= 0] = next_power_of_2(4)   # a comment with x < 1
    n = x.numel()
    for i in range(n):
        out[i] += 1
    return torch.where(rows.argmax(-1) > 2, x.long(), x.clamp(min=0)) and x[:-1]


def other_stage(x):
    return x[0:3] + 1

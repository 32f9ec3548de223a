"""Correct outside implementations that take their time, for tests of a target whose time runs out."""
import time

from specverify.kernels.torch.eagle import next_token_padded as ours_next_token
from specverify.kernels.torch.rejection import greedy as ours_greedy

PAUSE = 0.25    # seconds per call


def greedy_slowly(**kw):
    """`rejection.greedy`, right on every input, PAUSE seconds per call."""
    time.sleep(PAUSE)
    ours_greedy(**kw)


def next_token_slowly(**kw):
    """`eagle.next_token_padded`, right on every input, PAUSE seconds per call."""
    time.sleep(PAUSE)
    ours_next_token(**kw)

"""The Triton n-gram kernel past 2**31 elements (CUDA only: an offset kept in int32 wraps there): a token buffer
of more than 2**31 elements, and a column stride of 2**21 over 3 * 2**30 elements, each checked against the
oracle on the rows it can read back."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specverify.oracles import ngram as oracle
from specverify.runs.wide_offsets import one_at_a_time

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (offsets past 2**31 elements)")
RULES = ["", "rightmost_last", "short"]


@pytest.fixture(autouse=True)
def one_big_buffer_at_a_time():
    """Up to 12 GiB each: one such test (or wide-offsets call) on the machine's GPUs at a time, its memory given
    back after it, so that `pytest -n 8` runs them whatever ran before."""
    with one_at_a_time():
        yield
        torch.cuda.empty_cache()


def kernel(rule: str):
    from specverify.kernels.triton import ngram
    return getattr(ngram, f"propose_{rule}" if rule else "propose")


def expected(rule: str, tokens: np.ndarray, lengths: np.ndarray, k: int, fill: int):
    drafts, counts = np.full((len(tokens), k), fill, tokens.dtype), np.zeros(len(tokens), np.int32)
    getattr(oracle, f"propose_{rule}" if rule else "propose")(
        token_ids=tokens, num_tokens=lengths, min_n=2, max_n=4, max_model_len=10**6, draft_token_ids=drafts,
        num_draft_tokens=counts)
    return drafts, counts


@pytest.mark.parametrize("rule", RULES)
def test_rows_past_2_31_elements(rule):
    batch, width, k = 2**22 + 8, 520, 8                        # 2.18e9 token slots
    tokens = torch.randint(0, 3, (batch, width), dtype=torch.int32, device="cuda")
    lengths = torch.randint(0, width + 1, (batch,), device="cuda")
    drafts = torch.full((batch, k), 7, dtype=torch.int32, device="cuda")
    counts = torch.zeros(batch, dtype=torch.int32, device="cuda")
    kernel(rule)(token_ids=tokens, num_tokens=lengths, min_n=2, max_n=4, max_model_len=10**6,
                 draft_token_ids=drafts, num_draft_tokens=counts)
    want_drafts, want_counts = expected(rule, tokens[-8:].cpu().numpy(), lengths[-8:].cpu().numpy(), k, 7)
    assert (drafts[-8:].cpu().numpy() == want_drafts).all() and (counts[-8:].cpu().numpy() == want_counts).all()


@pytest.mark.parametrize("rule", RULES)
def test_a_column_stride_past_2_31_elements(rule):
    base = torch.randint(0, 2, (1, 3 * 2**30), dtype=torch.int32, device="cuda")
    view = base[:, ::2**21]                                    # 1536 columns, the last at element 3.2e9
    drafts = torch.full((1, 8), 7, dtype=torch.int32, device="cuda")
    counts = torch.zeros(1, dtype=torch.int32, device="cuda")
    length = np.array([view.shape[1]])
    kernel(rule)(token_ids=view, num_tokens=torch.from_numpy(length).cuda(), min_n=1, max_n=5,
                 max_model_len=10**6, draft_token_ids=drafts, num_draft_tokens=counts)
    want_drafts, want_counts = expected(rule, view.cpu().numpy(), length, 8, 7)
    assert (drafts.cpu().numpy() == want_drafts).all() and (counts.cpu().numpy() == want_counts).all()

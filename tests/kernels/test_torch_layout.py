"""Our Torch kernels on inputs torch counts as contiguous whose last stride is not 1 (a one-element tensor
broadcast from a scalar, an empty one): the int64-to-int32 view `low_bits` takes would refuse them, so it
copies those instead, and every value is the contract's."""
from __future__ import annotations

import numpy as np
import torch

from specverify.kernels.torch import layout, rejection
from specverify.oracles import rejection as oracle


def test_low_bits_takes_a_broadcast_and_an_empty_run():
    single = torch.tensor(2**32 + 7).expand(1)
    empty = torch.empty(0, dtype=torch.long).as_strided((0,), (0,))
    assert single.is_contiguous() and empty.is_contiguous()
    assert layout.low_bits(single, torch.int32).tolist() == [7]
    assert layout.low_bits(empty, torch.int32).shape == (0,)
    assert layout.low_bits(torch.arange(4), torch.int32).tolist() == [0, 1, 2, 3]


def greedy_case(bonus, target):
    drafts = np.array([3], np.int32)
    out = {"output_token_ids": np.full((1, 3), -1, np.int32)}
    inputs = {"draft_token_ids": drafts, "target_argmax": target.numpy(), "bonus_token_ids": bonus.numpy(),
              "cu_num_draft_tokens": np.array([1], np.int32), "is_greedy": None, "max_spec_len": 2}
    oracle.greedy(**inputs, **out)
    got = torch.full((1, 3), -1, dtype=torch.int32)
    rejection.greedy(**{**{k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()},
                        "target_argmax": target, "bonus_token_ids": bonus}, output_token_ids=got)
    return got.numpy(), out["output_token_ids"]


def test_greedy_takes_a_broadcast_bonus():
    got, want = greedy_case(torch.tensor(5).expand(1), torch.tensor([3]))
    np.testing.assert_array_equal(got, want)
    got, want = greedy_case(torch.tensor(5).expand(1), torch.tensor(4).expand(1))
    np.testing.assert_array_equal(got, want)


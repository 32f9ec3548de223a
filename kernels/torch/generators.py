"""cuRAND's Philox stream in eager Torch: `curand_uniforms(seed, subsequence, offset, count)` gives each row b
the first `count` values of `curand_uniform` after `curand_init(seed[b], subsequence[b], offset[b])`, byte for
byte what `specverify.oracles.generators.curand_uniforms` gives (the contract is there). 32-bit words live in
int64 tensors; each 32 x 32-bit product is taken in two 32 x 16-bit halves, so nothing overflows int64."""
from __future__ import annotations

import torch

from specverify.oracles.generators import ROUND_MULTIPLIERS, ROUNDS, WEYL

MASK32 = 0xFFFFFFFF


def _multiply(constant: int, word: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(high, low) 32-bit halves of constant * word, both below 2^32."""
    low_part = constant * (word & 0xFFFF)                 # < 2^48
    high_part = constant * (word >> 16)                   # < 2^48
    low_sum = low_part + ((high_part & 0xFFFF) << 16)     # < 2^49
    return (high_part >> 16) + (low_sum >> 32), low_sum & MASK32


def philox4x32_10(c0, c1, c2, c3, k0, k1) -> tuple[torch.Tensor, ...]:
    """The Philox4x32-10 block on int64 tensors holding 32-bit words (broadcast together)."""
    for r in range(ROUNDS):
        if r:
            k0, k1 = (k0 + WEYL[0]) & MASK32, (k1 + WEYL[1]) & MASK32
        hi0, lo0 = _multiply(ROUND_MULTIPLIERS[0], c0)
        hi1, lo1 = _multiply(ROUND_MULTIPLIERS[1], c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def curand_uniforms(seed: torch.Tensor, subsequence: torch.Tensor, offset: torch.Tensor,
                    count: int) -> torch.Tensor:
    """[B, count] f32 on the rows' device: `seed`, `subsequence`, `offset` int64 [B] (uint64 values by their bit
    pattern: a seed of 2^64 - 1 is -1)."""
    n = torch.arange(count, dtype=torch.int64, device=seed.device)
    within = (offset & 3)[:, None] + n                                # position from the first block's start
    step = ((offset >> 2) & ((1 << 62) - 1))[:, None] + (within >> 2)  # < 2^63: no carry into the high half
    column = (lambda x: x[:, None])
    words = philox4x32_10(step & MASK32, step >> 32, column(subsequence & MASK32), column((subsequence >> 32) & MASK32),
                          column(seed & MASK32), column((seed >> 32) & MASK32))
    word = torch.stack(torch.broadcast_tensors(*words), -1).gather(-1, (within & 3)[..., None])[..., 0]
    return word.to(torch.float32) * 2.0**-32 + 2.0**-33

"""cuRAND's Philox stream in Triton: `curand_uniforms(seed, subsequence, offset, count)` gives each row b the
first `count` values of `curand_uniform` after `curand_init(seed[b], subsequence[b], offset[b])`, byte for
byte what `specverify.oracles.generators.curand_uniforms` gives (the contract is there). One launch, one
program per row; the block function is Triton's own Philox4x32-10 (`tl.philox_impl`, the same rounds), fed with
cuRAND's counter and key layout."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from specverify.kernels.triton.launch import launcher, next_power_of_2


@triton.jit
def curand_uniform_at(seed, subsequence, offset, n):
    """`curand_uniform` number n (a block of uint64 indices) after `curand_init(seed, subsequence, offset)`
    (uint64 scalars): an f32 block."""
    within = (offset & 3) + n                       # word position from the start of the first block
    step = (offset >> 2) + (within >> 2)            # < 2^63: the low 64 bits of the counter, no carry
    zero = (n * 0).to(tl.uint32)
    c0 = (step & 0xFFFFFFFF).to(tl.uint32)
    c1 = (step >> 32).to(tl.uint32)
    c2 = zero + (subsequence & 0xFFFFFFFF).to(tl.uint32)
    c3 = zero + (subsequence >> 32).to(tl.uint32)
    k0 = zero + (seed & 0xFFFFFFFF).to(tl.uint32)
    k1 = zero + (seed >> 32).to(tl.uint32)
    w0, w1, w2, w3 = tl.philox_impl(c0, c1, c2, c3, k0, k1)
    position = within & 3
    word = tl.where(position == 0, w0, tl.where(position == 1, w1, tl.where(position == 2, w2, w3)))
    return word.to(tl.float32) * 2.3283064365386963e-10 + 1.1641532182693481e-10   # 2^-32, 2^-33


@launcher
@triton.jit
def curand_uniform_kernel(seed_ptr, subsequence_ptr, offset_ptr, out_ptr, count, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    seed = tl.load(seed_ptr + row).to(tl.uint64, bitcast=True)
    subsequence = tl.load(subsequence_ptr + row).to(tl.uint64, bitcast=True)
    offset = tl.load(offset_ptr + row).to(tl.uint64, bitcast=True)
    n = tl.arange(0, BLOCK).to(tl.uint64)
    uniform = curand_uniform_at(seed, subsequence, offset, n)
    index = n.to(tl.int64)
    tl.store(out_ptr + row.to(tl.int64) * count + index, uniform, mask=index < count)


def curand_uniforms(seed: torch.Tensor, subsequence: torch.Tensor, offset: torch.Tensor,
                    count: int) -> torch.Tensor:
    """[B, count] f32 on the rows' device: `seed`, `subsequence`, `offset` int64 [B] (uint64 values by their bit
    pattern: a seed of 2^64 - 1 is -1)."""
    rows = seed.shape[0]
    out = torch.empty((rows, count), dtype=torch.float32, device=seed.device)
    if rows and count:
        curand_uniform_kernel[(rows,)](seed, subsequence, offset, out, count, BLOCK=next_power_of_2(count))
    return out

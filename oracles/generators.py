"""The random-number generators engines' samplers draw from, ported to NumPy word for word: the references a
replay oracle regenerates a kernel's stream with.

- **Philox4x32-10** (Salmon et al., SC 2011; Random123): a 128-bit counter (c0 lowest) and a 64-bit key, ten
  rounds; each multiplies c0 and c2 by the round constants, splits the 64-bit products, and mixes in the other
  two words and the key, which is bumped by the Weyl constants between rounds. Held to Random123's known
  answers (`PHILOX_KNOWN_ANSWERS`).
- **cuRAND's `curandStatePhilox4_32_10_t`** (`curand_words`, `curand_uniforms`): `curand_init(seed, subsequence,
  offset)` keys the block with (low, high) 32 bits of `seed`, starts the counter at `subsequence << 64` and skips
  `offset` words; the n-th word of the stream (n counted from 0 after the skip) is word `(offset + n) % 4` of the
  block at counter `(subsequence << 64) + (offset + n) // 4` (mod 2^128). `curand_uniform` is
  f32(f32(word) * 2^-32 + 2^-33): the product is exact, the sum rounds once, so the value lies in (0, 1] and is
  exactly 1.0 for the 128 largest words.
- **Triton's `tl.randint` / `tl.rand`** (`triton/language/random.py`, the same block function): for an offset
  o and a seed s the four words of `randint4x` are the block at counter (o mod 2^32, o >> 32, 0, 0) with key
  (s mod 2^32, s >> 32); `randint` is the first, as int32. `rand` maps a word x, read as int32, to
  f32(x if x >= 0 else ~x) * f32(4.6566127342e-10): a value in [0, 1).

Every function is vectorized over leading axes and exact: integers are Python ints or uint64 arrays, nothing
is rounded but where the generator rounds.
"""
from __future__ import annotations

import numpy as np

MASK32 = np.uint64(0xFFFFFFFF)
ROUND_MULTIPLIERS = (0xD2511F53, 0xCD9E8D57)      # multiply c0, c2
WEYL = (0x9E3779B9, 0xBB67AE85)                   # added to k0, k1 between rounds
ROUNDS = 10
# (counter c0..c3, key k0 k1) -> output words, from Random123's kat_vectors (philox4x32, 10 rounds)
PHILOX_KNOWN_ANSWERS = (
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
)
CURAND_SCALE = np.float32(2.0**-32)
CURAND_HALF_STEP = np.float32(2.0**-33)
TRITON_SCALE = np.float32(4.6566127342e-10)       # the largest f32 with (2^31 - 1) * scale < 1


def philox4x32_10(counter, key) -> np.ndarray:
    """The Philox4x32-10 block: `counter` [..., 4] and `key` [..., 2] (integers below 2^32, broadcast against
    each other) -> the four output words [..., 4], uint32."""
    c = np.asarray(counter, dtype=np.uint64)
    k = np.asarray(key, dtype=np.uint64)
    shape = np.broadcast_shapes(c.shape[:-1], k.shape[:-1])
    c0, c1, c2, c3 = (np.broadcast_to(c[..., i], shape).copy() for i in range(4))
    k0, k1 = (np.broadcast_to(k[..., i], shape).copy() for i in range(2))
    a, b = (np.uint64(m) for m in ROUND_MULTIPLIERS)
    for r in range(ROUNDS):
        if r:
            k0 = (k0 + np.uint64(WEYL[0])) & MASK32
            k1 = (k1 + np.uint64(WEYL[1])) & MASK32
        p0, p1 = a * c0, b * c2                       # < 2^64: exact in uint64
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & MASK32, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & MASK32
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def _words(counter: np.ndarray, key: np.ndarray) -> np.ndarray:
    """[..., 4] uint32 counter words from a uint64 [..., 2] counter (low, high 64 bits) -> Philox blocks."""
    lo, hi = counter[..., 0], counter[..., 1]
    return philox4x32_10(np.stack([lo & MASK32, lo >> np.uint64(32), hi & MASK32, hi >> np.uint64(32)], -1), key)


def _u64(values, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=object)
    if array.size and any(not isinstance(v, (int, np.integer)) or not 0 <= int(v) < 2**64 for v in array.flat):
        raise ValueError(f"{name}: every value must be an integer in [0, 2^64)")
    return np.vectorize(int, otypes=[object])(array).astype(np.uint64) if array.size else array.astype(np.uint64)


def curand_words(seed, subsequence, offset, count: int) -> np.ndarray:
    """The first `count` words `curand()` returns after `curand_init(seed, subsequence, offset)`, per state:
    `seed`, `subsequence`, `offset` broadcast against each other (integers in [0, 2^64)) -> [..., count] uint32."""
    seed, subsequence, offset = np.broadcast_arrays(_u64(seed, "seed"), _u64(subsequence, "subsequence"),
                                                    _u64(offset, "offset"))
    if count < 0:
        raise ValueError("count: must be >= 0")
    key = np.stack([seed & MASK32, seed >> np.uint64(32)], -1)
    n = np.arange(count, dtype=np.uint64)
    first = offset[..., None] // np.uint64(4)                          # < 2^62
    within = offset[..., None] % np.uint64(4) + n                      # position from the first block's start
    step = first + within // np.uint64(4)                              # < 2^63: no carry into the high half
    counter = np.stack([step, np.broadcast_to(subsequence[..., None], step.shape)], -1)
    blocks = _words(counter, key[..., None, :])                        # [..., count, 4]
    return np.take_along_axis(blocks, (within % np.uint64(4)).astype(np.intp)[..., None], -1)[..., 0]


def curand_uniform(words) -> np.ndarray:
    """`curand_uniform` of each uint32 word: f32 in (0, 1], exactly 1.0 for the 128 largest words."""
    return np.asarray(words, dtype=np.uint32).astype(np.float32) * CURAND_SCALE + CURAND_HALF_STEP


def curand_uniforms(seed, subsequence, offset, count: int) -> np.ndarray:
    """The first `count` values of `curand_uniform` after `curand_init(seed, subsequence, offset)`: [..., count] f32."""
    return curand_uniform(curand_words(seed, subsequence, offset, count))


def triton_randint4x(seed: int, offsets) -> np.ndarray:
    """Triton's `tl.randint4x(seed, offsets)` for non-negative int64 `offsets` (int32 offsets are the same
    values): [..., 4] uint32 (the kernel sees them bitcast to int32)."""
    offsets = _u64(offsets, "offsets")
    seed = int(_u64(seed, "seed"))
    counter = np.stack([offsets, np.zeros_like(offsets)], -1)
    return _words(counter, np.array([seed & 0xFFFFFFFF, seed >> 32], dtype=np.uint64))


def triton_randint(seed: int, offsets) -> np.ndarray:
    """Triton's `tl.randint(seed, offsets)`: the first word of `randint4x`, as int32."""
    return triton_randint4x(seed, offsets)[..., 0].view(np.int32)


def triton_uniform(words) -> np.ndarray:
    """Triton's `uint_to_uniform_float` of uint32 words: f32 in [0, 1)."""
    x = np.asarray(words, dtype=np.uint32).view(np.int32)
    return np.where(x < 0, ~x, x).astype(np.float32) * TRITON_SCALE


def triton_rand(seed: int, offsets) -> np.ndarray:
    """Triton's `tl.rand(seed, offsets)`: f32 in [0, 1)."""
    return triton_uniform(triton_randint4x(seed, offsets)[..., 0])

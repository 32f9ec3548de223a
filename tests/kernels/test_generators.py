"""The generators' NumPy ports (`specverify.oracles.generators`) against published known answers and against the
installed Triton's own `tl.randint` / `tl.rand`, and our Torch and Triton kernels of cuRAND's stream against the
port, byte for byte (in Triton's interpreter on the CPU; compiled on a GPU)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from specverify import env

env.prepare()            # the interpreter flag must be set before any kernel is defined
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from specverify.kernels.torch import generators as torch_generators  # noqa: E402
from specverify.kernels.triton import generators as triton_generators  # noqa: E402
from specverify.oracles import generators  # noqa: E402
from specverify.strategies import seeded as seeded_fields  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# states that reach every carry and edge of curand_init: seeds across the 32-bit halves and at 2^64 - 1,
# subsequences above 2^32 and 2^40, offsets that are not multiples of 4, past 2^34 and next to 2^64
SEEDS = [0, 1, 2**32 - 1, 2**32, 2**63 - 1, 2**64 - 1, 0x243F6A8885A308D3, 12345]
SUBSEQUENCES = [0, 1, 5, 2**32 + 3, 2**40, 2**64 - 1, 7, 3]
OFFSETS = [0, 3, 4, 2**34 + 3, 7, 2**64 - 5, 1, 2]


def as_int64(values) -> torch.Tensor:
    return torch.from_numpy(seeded_fields.as_int64(values))


@pytest.mark.parametrize("counter, key, words", generators.PHILOX_KNOWN_ANSWERS)
def test_philox_gives_random123s_known_answers(counter, key, words):
    assert generators.philox4x32_10(counter, key).tolist() == list(words)


def test_the_torch_block_gives_the_known_answers_too():
    for counter, key, words in generators.PHILOX_KNOWN_ANSWERS:
        got = torch_generators.philox4x32_10(*(torch.tensor(v) for v in counter + key))
        assert [int(w) for w in got] == list(words)


def test_a_curand_stream_skips_offset_words_across_blocks_and_subsequences():
    """Word n after curand_init(s, q, o) is word 0 after curand_init(s, q, o + n); subsequence q is the high
    half of the counter, so q + 1 starts where q would after 2^64 blocks."""
    stream = generators.curand_words(7, 3, 5, 12)
    assert stream.tolist() == generators.curand_words(7, 3, np.arange(5, 17), 1)[:, 0].tolist()
    block = generators.philox4x32_10([2, 0, 3, 0], [7, 0])          # block 2 of subsequence 3
    assert stream[3:7].tolist() == block.tolist()                   # offset 5: words 8..11 are block 2
    high = generators.philox4x32_10([0, 0, 0, 1], [0xFFFFFFFF, 0xFFFFFFFF])
    assert generators.curand_words(2**64 - 1, 2**32, 0, 4).tolist() == high.tolist()


def test_curand_uniform_is_exactly_one_for_the_128_largest_words():
    words = np.arange(2**32 - 300, 2**32, dtype=np.uint64)
    values = generators.curand_uniform(words)
    assert values.dtype == np.float32
    assert (values[-128:] == 1.0).all() and (values[:-128] < 1.0).all()
    assert generators.curand_uniform(np.array([0], np.uint64))[0] == np.float32(2.0**-33)


@pytest.mark.parametrize("bad", [-1, 2**64, 1.5])
def test_a_state_out_of_range_names_the_field(bad):
    with pytest.raises(ValueError, match="seed: every value must be an integer in"):
        generators.curand_words(bad, 0, 0, 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("count", [1, 4, 11, 1000])
def test_our_kernels_give_curands_stream_byte_for_byte(device, count):
    want = generators.curand_uniforms(SEEDS, SUBSEQUENCES, OFFSETS, count).view(np.uint32)
    state = [as_int64(values).to(device) for values in (SEEDS, SUBSEQUENCES, OFFSETS)]
    for kernel in (torch_generators.curand_uniforms, triton_generators.curand_uniforms):
        got = kernel(*state, count).cpu().numpy().view(np.uint32)
        assert got.shape == want.shape and (got == want).all(), kernel.__module__


@triton.jit
def triton_streams(words_ptr, uniforms_ptr, seed, offsets_ptr, BLOCK: tl.constexpr):
    index = tl.arange(0, BLOCK)
    offsets = tl.load(offsets_ptr + index)
    tl.store(words_ptr + index, tl.randint(seed, offsets))
    tl.store(uniforms_ptr + index, tl.rand(seed, offsets))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("seed", [0, 1, 2**31 - 1, 2**32 + 5, 2**63 - 1])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_the_triton_port_gives_tl_randint_and_tl_rand(device, seed, dtype):
    offsets = [0, 1, 2, 3, 4, 1000, 2**31 - 1, 12345]
    if dtype == torch.int64:
        offsets = [0, 1, 2**32, 2**32 + 1, 2**40 + 3, 2**62, 2**63 - 1, 777]
    given = torch.tensor(offsets, dtype=dtype, device=device)
    words = torch.empty(8, dtype=torch.int32, device=device)
    uniforms = torch.empty(8, dtype=torch.float32, device=device)
    triton_streams[(1,)](words, uniforms, seed, given, BLOCK=8)
    assert words.cpu().numpy().tolist() == generators.triton_randint(seed, offsets).tolist()
    assert (uniforms.cpu().numpy().view(np.uint32) == generators.triton_rand(seed, offsets).view(np.uint32)).all()

"""Fixed cases of the `tree` family: the worked examples of TREES.md on every backend, the untouched
FULL_MASK prefix and pack tail, whole bytes in mode 2, the root-only, chain and star trees, FULL_MASK
offsets past 2**31, build's QLEN_ONLY mask fed back through reconstruct_from_mask, and the invalid
inputs' messages."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

from specverify import env
from specverify.judge.harness import oracle_outputs
from specverify.oracles import tree as oracle
from specverify.records import backends
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.records.values import POISON_A
from specverify.runs.session import verify_example as verify
from specverify.stages import tree
from specverify.strategies import tree as draw

QLEN_ROWS = ["100000", "110000", "101000", "110100", "110010", "110101"]


def targets(stage):
    return [backends.target(stage, b, d) for _, b, d, why in backends.matrix([stage]) if why is None]


def outputs(stage, example: Example) -> dict[str, np.ndarray]:
    """Every available backend must match the oracle on `example`; the oracle's outputs (poison A where
    it writes nothing)."""
    for target in targets(stage):
        verify(target, example)
    return oracle_outputs(stage, example)


def with_mode(example: Example, mode: int) -> Example:
    """The same tree with another mask mode (and a mask of exactly that mode's length)."""
    x = example.inputs
    size = oracle.mask_length(mode, x["N"], x["verified_seq_len"])
    dtype = "uint8" if mode == oracle.QLEN_ONLY_BITPACKING else "bool"
    return dataclasses.replace(example, inputs={**x, "tree_mask_mode": mode},
                               outputs={**example.outputs, "tree_mask": Buffer((size,), dtype)})


def rows(text: list[str]) -> np.ndarray:
    return np.array([[c == "1" for c in r] for r in text])


def test_backends_present():
    assert {t.backend.name for t in targets(tree.BUILD)} >= {"oracle", "torch", "triton"}


def test_build_worked_example_qlen_only():
    out = outputs(tree.BUILD, tree.build_worked())
    assert out["positions"].tolist() == [10, 11, 11, 12, 12, 13]
    assert out["retrieve_index"].tolist() == [[0, 1, 2, 3, 4, 5]]
    assert out["retrieve_next_token"].tolist() == [[1, 3, -1, 5, -1, -1]]
    assert out["retrieve_next_sibling"].tolist() == [[-1, 2, -1, 4, -1, -1]]
    assert np.array_equal(out["tree_mask"].reshape(6, 6), rows(QLEN_ROWS))


def test_build_full_mask_leaves_the_prefix_untouched():
    out = outputs(tree.BUILD, with_mode(tree.build_worked(), oracle.FULL_MASK))
    mask = out["tree_mask"].view(np.uint8).reshape(6, 16)
    assert (mask[:, :10] == POISON_A).all()                 # the caller's prefix columns
    assert np.array_equal(mask[:, 10:], rows(QLEN_ROWS).astype(np.uint8))


def test_build_bitpacked_rows_are_whole_bytes():
    out = outputs(tree.BUILD, with_mode(tree.build_worked(), oracle.QLEN_ONLY_BITPACKING))
    # little endian: column j is bit j; the poison's other bits are gone (no OR into the old byte)
    assert out["tree_mask"].tolist() == [0b1, 0b11, 0b101, 0b1011, 0b10011, 0b101011]


def test_build_bitpacked_two_byte_rows():
    # a chain of 12 nodes: row i has bits 0..i set, in W = 2 bytes
    chain = Example("valid", inputs={
        "parent_list": np.array([[-1, *range(10)]], np.int64), "selected_index": np.arange(11)[None],
        "verified_seq_len": np.array([3], np.int64), "topk": 1, "depth": 11, "N": 12, "tree_mask_mode": 2,
    }, outputs={"tree_mask": Buffer((24,), "uint8"), **draw.index_buffers(1, 12)})
    out = outputs(tree.BUILD, chain)
    words = out["tree_mask"].reshape(12, 2).astype(np.int64) @ np.array([1, 256])
    assert words.tolist() == [(1 << (i + 1)) - 1 for i in range(12)]
    assert out["positions"].tolist() == list(range(3, 15))
    assert out["retrieve_next_token"].tolist() == [[*range(1, 12), -1]]
    assert out["retrieve_next_sibling"].tolist() == [[-1] * 12]


def test_build_root_only():
    root = Example("valid", inputs={
        "parent_list": np.zeros((2, 0), np.int64), "selected_index": np.zeros((2, 0), np.int64),
        "verified_seq_len": np.array([4, 0], np.int64), "topk": 3, "depth": 1, "N": 1, "tree_mask_mode": 1,
    }, outputs={"tree_mask": Buffer((2,), "bool"), **draw.index_buffers(2, 1)})
    out = outputs(tree.BUILD, root)
    assert out["tree_mask"].tolist() == [True, True]
    assert out["positions"].tolist() == [4, 0] and out["retrieve_index"].tolist() == [[0], [1]]
    assert out["retrieve_next_token"].tolist() == [[-1], [-1]] == out["retrieve_next_sibling"].tolist()


def test_build_star_siblings_ascend():
    # depth 1: every node a child of the root, linked in entry order (the draft's rank order)
    star = Example("valid", inputs={
        "parent_list": np.array([[-1]], np.int64), "selected_index": np.array([[0, 2, 3]], np.int64),
        "verified_seq_len": np.array([7], np.int64), "topk": 5, "depth": 1, "N": 4, "tree_mask_mode": 1,
    }, outputs={"tree_mask": Buffer((16,), "bool"), **draw.index_buffers(1, 4)})
    out = outputs(tree.BUILD, star)
    assert out["retrieve_next_token"].tolist() == [[1, -1, -1, -1]]
    assert out["retrieve_next_sibling"].tolist() == [[-1, 2, 3, -1]]
    assert out["positions"].tolist() == [7, 8, 8, 8]


def test_build_tree_deeper_than_its_steps():
    # a kept beam of step 0 (parent_list[2]) naming a step-1 entry: entry 4 hangs below entry 3, so the tree
    # is 3 levels deep after 2 steps (no rule forbids it; a kernel may not stop walking at `depth`)
    odd = Example("valid", inputs={
        "parent_list": np.array([[-1, 0, 3]], np.int64), "selected_index": np.array([[0, 3, 4]], np.int64),
        "verified_seq_len": np.array([1], np.int64), "topk": 2, "depth": 2, "N": 4, "tree_mask_mode": 2,
    }, outputs={"tree_mask": Buffer((4,), "uint8"), **draw.index_buffers(1, 4)})
    out = outputs(tree.BUILD, odd)
    assert out["positions"].tolist() == [1, 2, 3, 4]
    assert out["tree_mask"].tolist() == [0b1, 0b11, 0b111, 0b1111]


def test_full_mask_offsets_pass_int32():
    # no mask of 2**31 elements fits a test: the torch kernel's row offsets are checked on their own
    from specverify.kernels.torch.tree import full_mask_rows
    seq = torch.tensor([2**31, 3, 2**31 + 5], dtype=torch.long)
    got = full_mask_rows(seq, 4)
    n = 4
    want = [[n * n * b + n * int(seq[:b].sum()) + (int(seq[b]) + n) * i + int(seq[b]) for i in range(n)]
            for b in range(3)]
    assert got.dtype == torch.long and got.tolist() == want


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(draw.build_valid(DrawContext(small=True)))
def test_reconstruct_of_the_qlen_mask_gives_builds_indices(example):
    built = oracle_outputs(tree.BUILD, with_mode(example, oracle.QLEN_ONLY))
    x = example.inputs
    batch, nodes = len(x["verified_seq_len"]), x["N"]
    back = Example("valid", inputs={"tree_mask": built["tree_mask"][:batch * nodes * nodes].copy(),
                                    "verified_seq_len": x["verified_seq_len"], "N": nodes},
                   outputs=draw.index_buffers(batch, nodes))
    for target in targets(tree.RECONSTRUCT):
        if target.backend.name != "triton":   # the interpreter: kept to the fixed cases
            verify(target, back)
    again = oracle_outputs(tree.RECONSTRUCT, back)
    for name in draw.INDEX_OUTPUTS:
        assert np.array_equal(again[name], built[name]), name


def test_reconstruct_upstream_example():
    mask = rows(["1000", "1100", "1010", "1011"]).reshape(-1)
    example = Example("valid", inputs={"tree_mask": mask, "verified_seq_len": np.array([12], np.int64), "N": 4},
                      outputs=draw.index_buffers(1, 4))
    out = outputs(tree.RECONSTRUCT, example)
    assert out["positions"].tolist() == [12, 13, 13, 14]
    assert out["retrieve_next_token"].tolist() == [[1, -1, 3, -1]]
    assert out["retrieve_next_sibling"].tolist() == [[-1, 2, -1, -1]]


def test_reconstruct_forest_roots_are_not_siblings():
    out = outputs(tree.RECONSTRUCT, tree.reconstruct_from_mask_worked())
    assert out["positions"].tolist() == [5, 6, 5, 7, 6, 6]
    assert out["retrieve_next_token"].tolist() == [[1, 3, 4, -1, -1, -1]]
    assert out["retrieve_next_sibling"].tolist() == [[-1, 5, -1, -1, -1, -1]]


def test_reconstruct_ignores_the_diagonal_and_above():
    base = tree.reconstruct_from_mask_worked()
    noisy = base.inputs["tree_mask"].reshape(6, 6) | np.triu(np.ones((6, 6), bool))
    example = dataclasses.replace(base, inputs={**base.inputs, "tree_mask": noisy.reshape(-1)})
    assert all(np.array_equal(a, b) for a, b in zip(outputs(tree.RECONSTRUCT, example).values(),
                                                   oracle_outputs(tree.RECONSTRUCT, base).values()))


def test_pack_worked_example_leaves_the_tail():
    out = outputs(tree.PACK, tree.pack_mask_worked())
    assert out["packed"].tolist() == [61, 243, 2, POISON_A]


def test_pack_long_segment_and_gap():
    rng = np.random.default_rng(5)
    lengths = np.array([0, 700, 3])            # 2100 bits: past one 256-byte program
    mask = rng.random(3 * int(lengths.sum())) < 0.5
    example = Example("valid", inputs={
        "mask": mask, "kv_indptr": np.array([0, 0, 700, 703], np.int32), "Q": 3, "max_kv_len": 700,
        "packed_indptr": np.array([0, 0, 265, 268], np.int32)}, outputs={"packed": Buffer((270,), "uint8")})
    packed = outputs(tree.PACK, example)["packed"]
    assert np.array_equal(packed[:263], np.packbits(mask[:2100], bitorder="little"))
    assert (packed[263:265] == POISON_A).all() and (packed[268:] == POISON_A).all()   # the gap and the tail
    assert np.array_equal(packed[265:267], np.packbits(mask[2100:], bitorder="little"))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_pack_grid_past_one_wave_on_cuda():
    """A grid of more than PACK_ONE_WAVE programs (1100 requests of two 256-byte programs each): the Triton
    kernel launches with 2 warps there, 4 below; the CUDA targets must match the oracle either way."""
    from specverify.kernels.triton.tree import PACK_ONE_WAVE
    rng = np.random.default_rng(7)
    lengths = rng.integers(300, 700, 1100)               # Q = 6: 1800..4194 bits, up to three programs
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    packed_indptr = np.concatenate([[0], np.cumsum(-(-6 * lengths // 8))]).astype(np.int32)
    example = Example("valid", inputs={"mask": rng.random(6 * int(indptr[-1])) < 0.5, "kv_indptr": indptr, "Q": 6,
                                       "max_kv_len": int(lengths.max()), "packed_indptr": packed_indptr},
                      outputs={"packed": Buffer((int(packed_indptr[-1]) + 3,), "uint8")})
    assert 1100 * -(-6 * int(lengths.max()) // 2048) > PACK_ONE_WAVE
    found = [t for t in targets(tree.PACK) if t.device == "cuda"]
    assert found
    for target in found:
        verify(target, example)


def test_reconstruct_reads_a_mask_past_2_31_elements(wide_cuda):
    """524,289 chains of 64 nodes: the mask holds B * N * N > 2**31 elements (2.1 GB), so the Triton kernel
    must form its offsets in int64 there (it takes int32 below). Every tree is a chain: node i sits at
    verified_seq_len + i, its next token is i + 1, it has no sibling."""
    from specverify.kernels.triton.tree import reconstruct_from_mask

    batch, n, cuda = 2**31 // (64 * 64) + 1, 64, wide_cuda
    seq = torch.arange(batch, dtype=torch.int64, device=cuda) % 1000
    node = torch.arange(n, dtype=torch.int64, device=cuda)
    out = {"positions": torch.full((batch * n,), -9, dtype=torch.int64, device=cuda),
           **{name: torch.full((batch, n), -9, dtype=torch.int64, device=cuda) for name in draw.INDEX_OUTPUTS[1:]}}
    chain = torch.tril(torch.ones((n, n), dtype=torch.bool, device=cuda))
    mask = chain.expand(batch, n, n).contiguous().view(-1)
    reconstruct_from_mask(tree_mask=mask, verified_seq_len=seq, N=n, **out)
    torch.cuda.synchronize()
    del mask
    expected = {"positions": (seq[:, None] + node).view(-1),
                "retrieve_index": torch.arange(batch * n, dtype=torch.int64, device=cuda).view(batch, n),
                "retrieve_next_token": torch.where(node < n - 1, node + 1, -1).expand(batch, n),
                "retrieve_next_sibling": torch.full((batch, n), -1, dtype=torch.int64, device=cuda)}
    for name, want in expected.items():
        wrong = (out[name] != want).view(batch, -1).any(dim=1).nonzero().flatten()
        assert len(wrong) == 0, f"{name}: {len(wrong)} requests wrong, the first {wrong[0].item()}"


def test_pack_reads_a_mask_past_2_31_elements(wide_cuda):
    """1,025 requests of Q = 16 over 131,072 columns (the last over 700): the last request's segment starts at
    mask element 2**31, so the Triton kernel must take int64 offsets there (int32 below)."""
    check_pack_on_cuda(wide_cuda, 16, [2**17] * 1024 + [700], 2**31 + 16 * 700)


def test_pack_launches_more_blocks_a_request_than_a_grid_axis_holds():
    """One request of Q = 1 over 2**27 + 2**11 columns: 65,537 blocks of 2,048 bits, past the 65,535 programs
    a CUDA grid holds on its second axis, so the Triton kernel puts the blocks on the first."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    check_pack_on_cuda(torch.device("cuda"), 1, [2**27 + 2**11], 2**27 + 2**11)


def test_pack_refuses_a_grid_past_both_axes():
    """B and the blocks a request both past 65,535: no CUDA grid holds that many programs, and the Triton
    wrapper says so, naming the argument, before any launch."""
    env.prepare()
    if env.triton_import_error():
        pytest.skip(env.triton_import_error())
    from specverify.kernels.triton.tree import GRID_Y, pack_mask

    zeros = torch.zeros(GRID_Y + 2, dtype=torch.int32)
    with pytest.raises(ValueError, match=r"^max_kv_len: Q \* max_kv_len = 134219776 bits a request over "
                                         r"B = 65536 requests needs a grid of more than 65535 programs on both"):
        pack_mask(mask=torch.zeros(0, dtype=torch.bool), kv_indptr=zeros, packed_indptr=zeros, Q=1,
                  max_kv_len=2**27 + 2**11, packed=torch.zeros(0, dtype=torch.uint8))


def check_pack_on_cuda(cuda, q, lengths, bits_in_all):
    """pack_mask (Triton) of random bits in segments of `lengths` columns, laid end to end in the mask and in
    the packed bytes (Q * length is a multiple of 8): every byte the mask's bits, least significant first,
    and the bytes past the last segment untouched."""
    from specverify.kernels.triton.tree import pack_mask

    indptr = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32, device=cuda)
    packed_indptr = (indptr.long() * q // 8).int()
    assert q * int(indptr[-1]) == bits_in_all and all(q * n % 8 == 0 for n in lengths)
    packed = torch.full((int(packed_indptr[-1]) + 3,), 7, dtype=torch.uint8, device=cuda)
    bits = torch.randint(0, 2, (bits_in_all,), dtype=torch.uint8, device=cuda,
                         generator=torch.Generator(cuda).manual_seed(0))
    pack_mask(mask=bits.view(torch.bool), kv_indptr=indptr, packed_indptr=packed_indptr, Q=q, max_kv_len=max(lengths),
              packed=packed)
    torch.cuda.synchronize()
    weights = (1 << torch.arange(8, dtype=torch.int32, device=cuda)).to(torch.uint8)
    expected = (bits.view(-1, 8) * weights).sum(dim=1, dtype=torch.int32).to(torch.uint8)
    del bits
    wrong = (packed[:-3] != expected).nonzero().flatten()
    assert len(wrong) == 0, f"{len(wrong)} packed bytes wrong, the first {wrong[0].item()}"
    assert packed[-3:].tolist() == [7, 7, 7], "bytes past the last segment were written"


@pytest.mark.parametrize("change, message", [
    (lambda x: {"parent_list": np.array([[-1, 0, 1, 2, 5]], np.int64), "selected_index": np.array([[0, 1, 2, 3, 8]])},
     "parent_list: node 5's parent entry 5 (parent_list[4]) is not in selected_index"),
    (lambda x: {"selected_index": np.array([[0, 1, 1, 3, 6]], np.int64)},
     "selected_index: every row must be strictly increasing"),
    (lambda x: {"selected_index": np.array([[0, 1, 2, 3, 10]], np.int64)},
     "selected_index: entries must be in [0, topk + (depth-1)*topk**2 = 10), found 0..10"),
    (lambda x: {"tree_mask_mode": 2, "N": 33}, "N: bit-packed masks (mode 2) hold at most 32 nodes, got 33"),
    (lambda x: {"parent_list": np.array([[-1, 0, 1, 2]], np.int64)},
     "parent_list: shape must be [1, 5] (B = len(verified_seq_len), topk*(depth-1)+1), got [1, 4]"),
])
def test_build_refusals(change, message):
    x = tree.build_worked().inputs
    args = {**x, **change(x)}
    args["selected_index"] = np.asarray(args["selected_index"], np.int64)
    out = {name: np.zeros(buf.shape, buf.dtype) for name, buf in tree.build_worked().outputs.items()}
    with pytest.raises(ValueError) as raised:
        oracle.build(**args, **out)
    assert str(raised.value) == message


def test_pack_refuses_overlap_and_a_long_segment():
    x = tree.pack_mask_worked().inputs
    packed = np.zeros(4, np.uint8)
    with pytest.raises(ValueError, match=r"packed_indptr: request 1's 2 bytes overlap the next segment \(1 bytes"):
        oracle.pack_mask(**{**x, "packed_indptr": np.array([0, 1, 2], np.int32)}, packed=packed)
    with pytest.raises(ValueError, match="kv_indptr: a segment of 5 columns is longer than max_kv_len = 4"):
        oracle.pack_mask(**{**x, "max_kv_len": 4}, packed=packed)

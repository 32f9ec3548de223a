"""Strategies of the `tree` family.

`tree.build` draws a real top-k beam search: topk and depth, the beams kept after every step (in a
random rank order, as scores would give), then an ascending choice of N-1 score-list entries that
forms a tree (each chosen entry's beam is chosen too). Shapes: the root alone (N = 1), chains
(topk = 1), stars (depth = 1), bushy beams, N not a power of two, B = 0, long FULL_MASK prefixes.
`tree.reconstruct_from_mask` draws any bool mask, mostly ancestor-closed forests with about 30 %
roots, with or without a diagonal, with garbage above it, N on the list of tile edges.
`tree.pack_mask` draws ragged segments: bit counts not a multiple of 8, empty segments, segments of
more than 2048 bits, Q = 1, gaps between output segments and a tail after them.

`tree.verify_greedy` and `tree.sample_target_only` take their trees from `tree_shapes`; tokens are drawn
against the tree so that matches, duplicate sibling tokens, ties and fallbacks are common. Mode "stress"
draws deep trees (8 or more nodes, S not below the depth) whose path to the deepest node is accepted (its
tokens match; its coins are 0), so walks past the first level are common; what each walk met is labelled. Valid-tier
probabilities are multiples of 2**-16 with row sums <= 1 and `uniform_final` a multiple of 2**-8, so
every sum and product the rule forms is exact in f32 whatever the order; coins are only compared, so they
may be any f32 (and are often set to a sibling's exact mass / threshold_acc: a tie).
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from specverify.oracles import tree as oracle
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.records.values import POISON_A, filled, output_value, output_values
from specverify.strategies.blocks import (PLACEHOLDER, batch_size, generator, invalid, label, layout, mode, one_invalid,
                                          short)
from specverify.strategies.tree_shapes import NODE_COUNTS, Trees, node_count, trees

INDEX_OUTPUTS = ("positions", "retrieve_index", "retrieve_next_token", "retrieve_next_sibling")
PACK_BYTES = 256       # output bytes per program of the Triton pack kernel
STRESS_NODES = (1, 2, 3, 7, 8, 16, 17, 32, 63, 64)


def index_buffers(batch: int, nodes: int) -> dict[str, Buffer]:
    found = {"positions": Buffer((batch * nodes,), "int64")}
    found.update({name: Buffer((batch, nodes), "int64") for name in INDEX_OUTPUTS[1:]})
    return found


# ---------------------------------------------------------------- tree.build

def beams(rng: np.random.Generator, topk: int, depth: int, columns: int) -> np.ndarray:
    """parent_list of one request: -1, the k first-step entries, then the k entries kept among the k*k
    children of each later step (but the last), in a random rank order."""
    found = np.full(columns, -1, np.int64)
    if depth > 1:
        found[1:topk + 1] = np.arange(topk)
        for step in range(1, depth - 1):
            children = topk + topk * topk * (step - 1) + np.arange(topk * topk)
            found[1 + topk * step: 1 + topk * (step + 1)] = rng.choice(children, topk, replace=False)
    return found


def select(rng: np.random.Generator, parent_list: np.ndarray, topk: int, count: int, style: str) -> np.ndarray:
    """`count` entries that form a tree: an entry is open once its beam is chosen (first-step entries
    always are); "deep" takes the newest open entry more often, "wide" any open one."""
    beam_of = {int(parent_list[q]): q for q in range(1, len(parent_list))}
    open_entries, chosen = list(range(topk)), []
    while len(chosen) < count:
        pick = len(open_entries) - 1 if style == "deep" and rng.random() < 0.7 else int(rng.integers(len(open_entries)))
        entry = open_entries.pop(pick)
        chosen.append(entry)
        if entry in beam_of:
            q = beam_of[entry]
            open_entries += list(range(topk * q, topk * q + topk))
    return np.array(sorted(chosen), np.int64)


LARGE_TREES = ((8, 17), (4, 65), (1, 1024))     # (topk, depth) of the large shape
LARGE_NODES = (1024, 1000, 513)


def build_modes(ctx: DrawContext) -> tuple[int, ...]:
    """The mask modes to draw: the declared domain's, less mode 2 where its bound on N leaves no tree of at
    most 32 nodes (`build_domain_problem` refuses a domain that leaves none)."""
    low = ctx.limits("N", 1, oracle.MAX_NODES)[0]
    return tuple(m for m in ctx.values("tree_mask_mode", oracle.MODES)
                 if m != oracle.QLEN_ONLY_BITPACKING or low <= oracle.MAX_PACKED_NODES)


def build_domain_problem(ctx: DrawContext) -> str:
    """Why a declared domain of tree.build leaves no call ("" when it leaves some)."""
    if build_modes(ctx):
        return ""
    return f"a bound N >= {ctx.limits('N', 1, oracle.MAX_NODES)[0]} leaves mode 2 (at most 32 nodes) no tree"


@st.composite
def build_shape(draw, ctx: DrawContext, mode: int) -> tuple[str, int, int, int]:
    """(shape, topk, depth, N) within the mode's node limit and the declared bounds on N and depth (a shape
    they exclude drawn as a beam; topk raised where the tree is too small for N's lower bound)."""
    low, high = ctx.limits("N", 1, oracle.MAX_NODES)
    shallow, deep = ctx.limits("depth", 1, oracle.MAX_NODES)
    shape = draw(st.sampled_from(["beam", "beam", "chain", "star", "root only"]))
    if not ctx.small and mode != oracle.QLEN_ONLY_BITPACKING and draw(st.integers(0, 5)) == 5:
        shape = "large"    # drawn on its own, so a failure shrinks to the smaller shapes
    trees = [(k, d) for k, d in LARGE_TREES if shallow <= d <= deep]
    sizes = [n for n in LARGE_NODES if low <= n <= high]
    if (shape == "large" and not (trees and sizes)) or (shape == "star" and shallow > 1) or \
            (shape == "root only" and low > 1):
        shape = "beam"
    label(f"tree: {shape}")
    cap = 20 if ctx.small else oracle.MAX_PACKED_NODES if mode == oracle.QLEN_ONLY_BITPACKING else 64
    cap = max(min(cap, high), low)
    if mode == oracle.QLEN_ONLY_BITPACKING and shape in ("beam", "star"):
        low = min(max(low, draw(st.sampled_from([1, 9, 17]))), cap)     # rows of 1, 2 or 4 bytes
    if shape == "large":
        topk, depth = draw(st.sampled_from(trees))
        return shape, topk, depth, draw(st.sampled_from(sizes))
    topk = 1 if shape == "chain" else draw(st.integers(1, 4)) if shape != "star" else draw(st.integers(1, 40))
    depth = 1 if shape == "star" else draw(st.integers(shallow, max(shallow, min(12 if shape == "chain" else 5, deep))))
    while topk + (depth - 1) * topk * topk + 1 < low:
        topk += 1
    entries = topk + (depth - 1) * topk * topk
    nodes = 1 if shape == "root only" else draw(st.integers(low, min(entries + 1, cap)))
    return shape, topk, depth, nodes


def two_steps(ctx: DrawContext, rng: np.random.Generator, shape: str, depth: int) -> bool:
    """Whether a chain of depth > 1 becomes the chain of two steps (topk 1, depth 2, N = 3: node 2 grows from
    parent_list's second column), in half of those the declared bounds allow (decided by the example's
    generator, so the Hypothesis choices stay those of the chain drawn)."""
    low, high = ctx.limits("N", 1, oracle.MAX_NODES)
    deep = ctx.limits("depth", 1, oracle.MAX_NODES)[1]
    return shape == "chain" and depth > 1 and 2 <= deep and low <= 3 <= high and rng.random() < 0.5


@st.composite
def build_valid(draw, ctx: DrawContext, tier: str = "valid") -> Example:
    mode = draw(st.sampled_from(build_modes(ctx)))
    label(f"mask: mode {mode}")
    shape, topk, depth, nodes = draw(build_shape(ctx, mode))
    high = 1 if shape == "large" else 3 if ctx.small else 64
    batch = draw(batch_size(ctx, 0, high))
    label("batch: B=0" if batch == 0 else "batch: B=1" if batch == 1 else "batch: B>1")
    rng = draw(generator())
    if two_steps(ctx, rng, shape, depth):
        depth, nodes = 2, 3
    if nodes & (nodes - 1):
        label("tree: N not a power of two")
    if mode == oracle.QLEN_ONLY_BITPACKING:
        label(f"mask: mode 2, {oracle.row_bytes(nodes)}-byte rows")
        if nodes > 8:
            label("mask: mode 2, rows of 2 or 4 bytes")
    long = "long" if mode == oracle.FULL_MASK else "short"
    seq_kind = draw(st.sampled_from(["short", long, long, "zero"]))
    if tier == "hazard" and mode != oracle.FULL_MASK:
        seq_kind = "near 2**62"
    label(f"verified_seq_len: {seq_kind}")
    if seq_kind == "long":
        seq = rng.integers(1000, 3000 if ctx.small else 20000, batch)
    elif seq_kind == "near 2**62":
        seq = oracle.MAX_SEQ - 1 - rng.integers(0, 2**20, batch)
    else:
        seq = rng.integers(0, 1 if seq_kind == "zero" else 40, batch)
    columns = topk * (depth - 1) + 1 if depth > 1 else draw(st.sampled_from([0, 1]))
    if columns == 0:
        label("parent_list: no columns")
    style = draw(st.sampled_from(["wide", "deep"]))
    parent_list = np.stack([beams(rng, topk, depth, columns) for _ in range(batch)]) if batch else \
        np.zeros((0, columns), np.int64)
    selected = np.stack([select(rng, row, topk, nodes - 1, style) for row in parent_list]) if batch else \
        np.zeros((0, nodes - 1), np.int64)
    grown = selected // topk
    if depth > 1 and (grown == columns - 1).any():
        label("tree: a node grows from the last kept beam (parent_list's last column)")
        if columns == 2:
            label("tree: two steps of one beam (parent_list of 2 columns), a node under node 1")
    needed = oracle.mask_length(mode, nodes, seq)
    tail = draw(st.sampled_from([0, 0, 1, 9]))
    dtype = "uint8" if mode == oracle.QLEN_ONLY_BITPACKING else "bool"
    layouts = {name: lay for name in ("parent_list", "selected_index") if (lay := draw(layout(2))) is not None}
    return Example(tier, inputs={
        "parent_list": parent_list, "selected_index": selected, "verified_seq_len": seq.astype(np.int64),
        "topk": topk, "depth": depth, "N": nodes, "tree_mask_mode": mode,
    }, outputs={"tree_mask": Buffer((needed + tail,), dtype), **index_buffers(batch, nodes)}, layouts=layouts)


def build_hazard(ctx: DrawContext):
    """Lengths just below 2**62 (positions need all 64 bits), and every shape of the valid tier."""
    return build_valid(ctx, tier="hazard")


def expected(stage_oracle, ex: Example) -> dict[str, np.ndarray]:
    """The contract's outputs of `ex` on zero-filled buffers."""
    out = {name: np.zeros(buf.shape, buf.dtype) for name, buf in ex.outputs.items()}
    stage_oracle(**ex.inputs, **out)
    return out


def index_differences(ex: Example, out: dict, want: dict) -> list[str]:
    broken = []
    for name in INDEX_OUTPUTS:
        if not np.array_equal(out[name], want[name]):
            where = np.argwhere(out[name] != want[name])[0]
            broken.append(f"{name}{list(where)} holds {output_value(out[name][tuple(where)])}, the contract gives "
                          f"{want[name][tuple(where)]}")
    return broken


def build_invariants(ex: Example, out: dict) -> list[str]:
    """Hazard tier: the positions (seq + depth, in 64 bits), links and the mask the contract gives."""
    want = expected(oracle.build, ex)
    broken = index_differences(ex, out, want)
    x = ex.inputs
    if x["tree_mask_mode"] != oracle.FULL_MASK:
        needed = oracle.mask_length(x["tree_mask_mode"], x["N"], x["verified_seq_len"])
        if not np.array_equal(out["tree_mask"][:needed], want["tree_mask"][:needed]):
            broken.append("tree_mask: differs from the contract's ancestor rows")
    return broken[:3]


@st.composite
def build_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(build_valid(ctx))
    x = ex.inputs
    batch, nodes, topk, depth = len(x["verified_seq_len"]), x["N"], x["topk"], x["depth"]
    found = []   # the tree rules first: Hypothesis draws early choices more often
    if batch and nodes >= 2:
        b, i = draw(st.integers(0, batch - 1)), draw(st.integers(1, nodes - 1))
        sel = x["selected_index"].copy()
        sel[b, i - 1] = topk + (depth - 1) * topk * topk
        found.append(invalid(ex, "selected_index", "entries below topk + (depth-1)*topk**2", selected_index=sel))
        grouped = [j for j in range(nodes - 1) if x["selected_index"][b, j] >= topk]
        if grouped:
            j = grouped[0]
            group = int(x["selected_index"][b, j]) // topk
            lost = x["parent_list"].copy()
            lost[b, group] = -1
            found.append(invalid(ex, "parent_list", "every node's beam is selected", parent_list=lost))
            late = x["parent_list"].copy()
            late[b, group] = x["selected_index"][b, j]      # the node would be its own parent
            found.append(invalid(ex, "parent_list", "a parent comes before its child", parent_list=late))
    if batch and nodes >= 3:
        b = draw(st.integers(0, batch - 1))
        sel = x["selected_index"].copy()
        sel[b, 1] = sel[b, 0]
        found.append(invalid(ex, "selected_index", "strictly increasing rows", selected_index=sel))
    need = oracle.mask_length(x["tree_mask_mode"], nodes, x["verified_seq_len"])
    if need:
        found.append(invalid(ex, "tree_mask", "as long as the mode needs",
                             outputs={"tree_mask": Buffer((need - 1,), ex.outputs["tree_mask"].dtype)}))
    if depth > 1:
        found.append(invalid(ex, "parent_list", "topk*(depth-1)+1 columns", parent_list=x["parent_list"][:, :-1]))
    if batch:
        b = draw(st.integers(0, batch - 1))
        seq = x["verified_seq_len"].copy()
        seq[b] = -1
        found.append(invalid(ex, "verified_seq_len", "lengths >= 0", verified_seq_len=seq))
    found += [invalid(ex, "tree_mask_mode", "0, 1 or 2", tree_mask_mode=3),
              invalid(ex, "N", "1..1024", N=draw(st.sampled_from([0, 1025]))),
              invalid(ex, "topk", ">= 1", topk=0)]
    if x["tree_mask_mode"] != oracle.QLEN_ONLY_BITPACKING and oracle.QLEN_ONLY_BITPACKING in build_modes(ctx):
        found.append(invalid(ex, "N", "at most 32 nodes in mode 2", tree_mask_mode=2, N=33))
    return draw(one_invalid(found))


def build_table(ex: Example):
    x = ex.inputs
    rows = [[b, int(x["verified_seq_len"][b]), short(x["parent_list"][b]), short(x["selected_index"][b])]
            for b in range(len(x["verified_seq_len"]))]
    return ["req", "seq", "parent_list", "selected_index"], rows


# ---------------------------------------------------------------- tree.reconstruct_from_mask

def forest_parents(rng: np.random.Generator, nodes: int, roots: float) -> np.ndarray:
    """parent of each node: -1 (a root) with probability `roots` (node 0 always), else an earlier node."""
    parents = np.array([-1] + [int(rng.integers(i)) for i in range(1, nodes)], np.int64)
    parents[1:][rng.random(nodes - 1) < roots] = -1
    return parents


def closed_mask(parents: np.ndarray) -> np.ndarray:
    """[N, N]: row i marks the ancestors of i (not i itself)."""
    nodes = len(parents)
    mask = np.zeros((nodes, nodes), bool)
    for i in range(nodes):
        if parents[i] >= 0:
            mask[i] = mask[parents[i]]
            mask[i, parents[i]] = True
    return mask


@st.composite
def reconstruct_from_mask_valid(draw, ctx: DrawContext, tier: str = "valid") -> Example:
    common = [n for n in STRESS_NODES if n <= 17]
    nodes = draw(st.sampled_from(common * 3 + [32, 63, 64, 65, 65] if ctx.small else [*STRESS_NODES, 128]))
    budget = 1 << 14 if ctx.small else 1 << 18      # the interpreter's: N = 65 with B = 1 or 3
    sizes = [b for b in (0, 1, 3, 16, 64) if b * nodes * nodes <= budget and b <= ctx.max_batch
             and (b <= 3 or not ctx.small)]
    batch = draw(st.sampled_from(sizes or [min(1, ctx.max_batch)]))
    label_nodes_and_batch(nodes, batch)
    rng = draw(generator())
    kind = draw(st.sampled_from(["forest", "forest", "forest", "tree", "any"]))
    diagonal = draw(st.sampled_from(["none", "set", "random"]))
    upper = draw(st.sampled_from(["zero", "garbage"]))
    for text in (f"mask: {kind}", f"mask: diagonal {diagonal}", f"mask: upper {upper}"):
        label(text)
    blocks = []
    for _ in range(batch):
        if kind == "any":
            mask = np.tril(rng.random((nodes, nodes)) < rng.random(), -1)
        else:
            mask = closed_mask(forest_parents(rng, nodes, 0.3 if kind == "forest" else 0.0))
        if diagonal != "none":
            np.fill_diagonal(mask, True if diagonal == "set" else rng.random(nodes) < 0.5)
        if upper == "garbage":
            mask |= np.triu(rng.random((nodes, nodes)) < 0.5, 1)
        if (~np.tril(mask, -1).any(axis=1)).sum() > 1:
            label("mask: two or more roots")
        blocks.append(mask.reshape(-1))
    tail = rng.random(draw(st.sampled_from([0, 0, 5]))) < 0.5
    seq = (oracle.MAX_SEQ - 1 - rng.integers(0, 2**20, batch) if tier == "hazard"
           else rng.integers(0, draw(st.sampled_from([1, 50, 1 << 20])), batch))
    return Example(tier, inputs={
        "tree_mask": np.concatenate(blocks + [tail]).astype(bool), "verified_seq_len": seq.astype(np.int64),
        "N": nodes}, outputs=index_buffers(batch, nodes))


def label_nodes_and_batch(nodes: int, batch: int) -> None:
    """N = 1, N not a power of two, N past one tile of 64 rows (Triton; a request at least); B = 0, 1 or more."""
    label("tree: N=1" if nodes == 1 else "tree: N a power of two" if nodes & (nodes - 1) == 0
          else "tree: N not a power of two")
    if nodes > 64 and batch > 0:
        label("tree: N > 64 (several row tiles)")
    if nodes > 64 and batch > 1:
        label("tree: N > 64, B > 1 (requests' scratch rows side by side)")
    label("batch: B=0" if batch == 0 else "batch: B=1" if batch == 1 else "batch: B>1")


def reconstruct_from_mask_hazard(ctx: DrawContext):
    """Lengths just below 2**62 with every mask kind of the valid tier."""
    return reconstruct_from_mask_valid(ctx, tier="hazard")


def reconstruct_from_mask_invariants(ex: Example, out: dict) -> list[str]:
    """Hazard tier: the contract's positions (in 64 bits) and links."""
    return index_differences(ex, out, expected(oracle.reconstruct_from_mask, ex))[:3]


@st.composite
def reconstruct_from_mask_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(reconstruct_from_mask_valid(ctx))
    x = ex.inputs
    batch, nodes = len(x["verified_seq_len"]), x["N"]
    found = [invalid(ex, "N", "1..1024", N=draw(st.sampled_from([0, 1025])))]
    if batch:
        found.append(invalid(ex, "tree_mask", "at least B*N*N elements", tree_mask=x["tree_mask"][:batch * nodes * nodes - 1]))
        seq = x["verified_seq_len"].copy()
        seq[draw(st.integers(0, batch - 1))] = -3
        found.append(invalid(ex, "verified_seq_len", "lengths >= 0", verified_seq_len=seq))
    return draw(one_invalid(found))


def reconstruct_from_mask_table(ex: Example):
    x = ex.inputs
    nodes = x["N"]
    rows = []
    for b in range(len(x["verified_seq_len"])):
        block = x["tree_mask"][b * nodes * nodes: (b + 1) * nodes * nodes].reshape(nodes, nodes)
        rows.append([b, int(x["verified_seq_len"][b]), short(["".join("1" if v else "0" for v in r) for r in block], 8)])
    return ["req", "seq", "mask rows"], rows


# ---------------------------------------------------------------- tree.pack_mask

@st.composite
def pack_mask_valid(draw, ctx: DrawContext, tier: str = "valid") -> Example:
    batch = draw(batch_size(ctx, 0, 4 if ctx.small else 48))
    q = draw(st.sampled_from([1, 1, 2, 3, 6, 8, 16]))
    rng = draw(generator())
    kind = draw(st.sampled_from(["short", "short", "long", "empty", "mixed"]))
    if tier == "hazard":
        kind = draw(st.sampled_from(["empty", kind]))
    label(f"segments: {kind}")
    long_len = 2049 // q + 1 + int(rng.integers(0, 300 if ctx.small else 1200))   # past 2048 bits
    lengths = {"short": lambda: rng.integers(0, 13, batch), "long": lambda: np.full(batch, long_len),
               "empty": lambda: np.zeros(batch, np.int64),
               "mixed": lambda: np.where(rng.random(batch) < 0.3, long_len, rng.integers(0, 13, batch))}[kind]()
    kv_indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    room = -(-q * lengths // 8)
    gaps = rng.integers(0, 4, batch) * (rng.random(batch) < draw(st.sampled_from([0.0, 0.5])))
    lead = draw(st.sampled_from([0, 0, 3]))
    bits = q * lengths
    for text, present in (("Q=1", q == 1), ("batch: B=0", batch == 0), ("batch: B>1", batch > 1),
                          ("segments: a bit count not a multiple of 8", (bits % 8 != 0).any()),
                          ("segments: one of kv_len 0 among others", batch > 1 and (lengths == 0).any()),
                          (f"segments: more than {8 * PACK_BYTES} bits (several programs)",
                           (bits > 8 * PACK_BYTES).any()),
                          ("packed_indptr: gaps between segments", (gaps > 0).any() or lead > 0)):
        if present:
            label(text)
    packed_indptr = np.concatenate([[lead], lead + np.cumsum(room + gaps)]).astype(np.int32)
    extra = draw(st.sampled_from([0, 0, 1, 7])) + (int(rng.integers(1000, 3000)) if tier == "hazard" else 0)
    max_kv_len = int(lengths.max(initial=0)) + extra
    density = draw(st.sampled_from([0.5, 0.0, 1.0, 0.1]))
    mask = rng.random(q * int(kv_indptr[-1]) + draw(st.sampled_from([0, 0, 11]))) < density
    tail = draw(st.sampled_from([0, 0, 4]))
    return Example(tier, inputs={"mask": mask, "kv_indptr": kv_indptr, "packed_indptr": packed_indptr, "Q": q,
                                 "max_kv_len": max_kv_len},
                   outputs={"packed": Buffer((int(packed_indptr[-1]) + tail,), "uint8")})


def pack_mask_hazard(ctx: DrawContext):
    """A grid far wider than the segments (max_kv_len well above every length), empty segments."""
    return pack_mask_valid(ctx, tier="hazard")


def pack_mask_invariants(ex: Example, out: dict) -> list[str]:
    """Hazard tier: each segment equals NumPy's little-endian packbits of its bits."""
    x, broken = ex.inputs, []
    for r in range(len(x["kv_indptr"]) - 1):
        q, start, end = x["Q"], int(x["kv_indptr"][r]), int(x["kv_indptr"][r + 1])
        want = np.packbits(x["mask"][q * start: q * end], bitorder="little")
        got = out["packed"][int(x["packed_indptr"][r]):][:len(want)]
        if not np.array_equal(got, want):
            broken.append(f"packed: request {r} holds {output_values(got, 10)}, packbits gives {short(want)}")
    return broken[:3]


@st.composite
def pack_mask_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(pack_mask_valid(ctx))
    x = ex.inputs
    kv, out, q = x["kv_indptr"], x["packed_indptr"], x["Q"]
    lengths = np.diff(kv.astype(np.int64))
    found = []
    nonempty = np.flatnonzero(lengths > 0)
    if len(nonempty):
        r = int(nonempty[0])
        falling = kv.copy()
        falling[r + 1] = kv[r] - 1
        found.append(invalid(ex, "kv_indptr", "non-decreasing", kv_indptr=falling))
        tight = out.copy()
        tight[r + 1:] -= int(out[r + 1] - out[r]) - -(-q * int(lengths[r]) // 8) + 1   # one byte short
        found.append(invalid(ex, "packed_indptr", "segments do not overlap", packed_indptr=tight))
        found.append(invalid(ex, "max_kv_len", "every kv_len <= max_kv_len", max_kv_len=int(lengths.max()) - 1))
        found.append(invalid(ex, "mask", "at least Q*kv_indptr[B] elements", mask=x["mask"][:q * int(kv[-1]) - 1]))
    if int(out[-1]) > 0:
        found.append(invalid(ex, "packed", "at least packed_indptr[B] bytes",
                             outputs={"packed": Buffer((int(out[-1]) - 1,), "uint8")}))
    shifted = kv.copy()
    shifted[0] = 1 if kv[-1] == 0 else -1
    found += [invalid(ex, "kv_indptr", "starts at 0", kv_indptr=shifted), invalid(ex, "Q", ">= 1", Q=0)]
    return draw(one_invalid(found))


def pack_mask_table(ex: Example):
    x = ex.inputs
    rows = [[r, int(x["kv_indptr"][r + 1] - x["kv_indptr"][r]), int(x["packed_indptr"][r]),
             short(x["mask"][x["Q"] * int(x["kv_indptr"][r]): x["Q"] * int(x["kv_indptr"][r + 1])].astype(int), 16)]
            for r in range(len(x["kv_indptr"]) - 1)]
    return ["req", "kv_len", "byte offset", "bits"], rows


# ---------------------------------------------------------------- tree verification: shared pieces

BLOCK_V = 1024     # residual tile of the Triton sampler
GRID = 2.0 ** -16
COARSE = 2.0 ** -8
ALIAS = 2**32    # a candidate that equals a prediction once truncated to int32


def outputs(batch: int, n: int, spec: int) -> dict[str, Buffer]:
    return {"predicts": Buffer((batch * n,), "int32"), "accept_index": Buffer((batch, spec), "int32"),
            "accept_token_num": Buffer((batch,), "int32")}


DEEP_SHAPES = ("chain", "irregular", "k-ary", "padded")


@st.composite
def tree_batch(draw, ctx: DrawContext, most: int = 512, no_nodes: bool = False) -> tuple[int, int, Trees, bool]:
    """(B, N, trees, deep): B small in the interpreter (rarely up to 64), B * N bounded by `most` (64 in
    the interpreter); with `no_nodes`, B = 0 comes with N = 0 where N was drawn even. Mode "single" gives N of 1
    or 2; mode "stress" (`deep`) a batch of at least one tree of 8 or more nodes and a shape that can be deep."""
    most = min(most, 64) if ctx.small else most
    kind = draw(mode())
    deep = kind == "stress"
    if kind == "single":
        n = 1 + draw(st.integers(0, 1))
    elif deep:
        n = draw(st.sampled_from([c for c in NODE_COUNTS if c >= 8 and (c <= 17 or not ctx.small)]))
    else:
        n = draw(node_count(ctx.small))
    high = max(1, min(ctx.max_batch, most // n, 4 if ctx.small and draw(st.integers(0, 7)) else 64))
    batch = draw(batch_size(ctx, 1 if deep else 0, high))
    label("batch: B=0" if batch == 0 else "batch: B=1" if batch == 1 else "batch: B>1")
    if no_nodes and batch == 0 and n % 2 == 0:    # decided by the drawn N: the Hypothesis choices stay the batch's
        n = 0                                  # [0, 0] tensors: the checks ask N >= 1 only of a request
        label("batch: B=0 with N=0")
    return batch, n, draw(trees(batch, n, draw(st.sampled_from(DEEP_SHAPES)) if deep else None)), deep


@st.composite
def spec_for(draw, tree: Trees, n: int, cap: int | None = None, deep: bool = False) -> int:
    """S: the deepest level + 1, fewer (1 or 2), or more (up to `cap`); `deep`: not fewer."""
    deepest = tree.max_depth + 1
    kind = draw(st.sampled_from(["depth", "beyond"] if deep else ["depth", "depth", "one", "short", "beyond"]))
    label(f"S: {kind}")
    beyond = deepest + draw(st.integers(1, 3))
    spec = {"depth": deepest, "one": 1, "short": max(1, min(2, deepest - 1)), "beyond": beyond}[kind]
    return min(spec, cap) if cap is not None else spec


def slots(batch: int, n: int) -> np.ndarray:
    return np.arange(batch * n, dtype=np.int64).reshape(batch, n)


# ---------------------------------------------------------------- tree.verify_greedy

def deepest_paths(tree: Trees) -> np.ndarray:
    """[B, N]: the nodes on the path from the root to each request's deepest node (the lowest-numbered)."""
    on = np.zeros(tree.parent.shape, bool)
    for b, node in enumerate(np.argmax(tree.depth, axis=1).tolist() if on.size else []):
        while node > 0:
            on[b, node] = True
            node = int(tree.parent[b, node])
    return on


@st.composite
def greedy_tokens(draw, tree: Trees, predict: np.ndarray, index: np.ndarray, deep: bool) -> np.ndarray:
    """Candidates: each child of a node equals the target's prediction there at a drawn rate (so
    several siblings often match: duplicates), else another id; then some are -1, a negative id or an
    int32 alias of the prediction (whatever the rate); with `deep` (else in about half the requests)
    every node on the path to the deepest node matches."""
    rng = draw(generator())
    rate = draw(st.sampled_from([0.3, 0.6, 0.9, 1.0]))
    mix = draw(st.sampled_from(["plain", "placeholders", "aliases", "all"]))
    label(f"candidates: match rate {rate}, {mix}")
    flat = predict.reshape(-1)
    want = flat[index[np.arange(len(index))[:, None], np.maximum(tree.parent, 0)]]
    found = np.where(rng.random(want.shape) < rate, want, want + 1 + rng.integers(0, 3, want.shape))
    if mix in ("placeholders", "all"):
        found = np.where(rng.random(want.shape) < 0.25, rng.choice([PLACEHOLDER, -5], want.shape), found)
    if mix in ("aliases", "all"):
        found = np.where(rng.random(want.shape) < 0.25, want + ALIAS, found)
    planted = deepest_paths(tree) & ((rng.random((len(want), 1)) < 0.5) | deep)
    if planted.any():
        label("candidates: the path to a deepest node matches")
    found = np.where(planted, want, found)
    if found.size:
        found[:, 0] = rng.integers(-1, 9, len(found))
    return found.astype(np.int64)


@st.composite
def predictions(draw, shape: tuple[int, int]) -> np.ndarray:
    rng = draw(generator())
    kind = draw(st.sampled_from(["small", "small", "wide", "largest"]))
    label(f"target_predict: {kind}")
    top = {"small": 3, "wide": 50000, "largest": oracle.INT32_MAX + 1}[kind]
    low = 0 if kind != "largest" else top - 3
    return rng.integers(low, top, shape).astype(np.int64)


@st.composite
def verify_greedy_valid(draw, ctx: DrawContext, permuted: bool = False) -> Example:
    batch, n, tree, deep = draw(tree_batch(ctx, no_nodes=True))
    spec = draw(spec_for(tree, n, deep=deep))
    predict = draw(predictions((batch, n)))
    index = slots(batch, n)
    if permuted:
        index = draw(generator()).permutation(batch * n).reshape(batch, n).astype(np.int64)
    ex = Example("hazard" if permuted else "valid", inputs={
        "candidates": draw(greedy_tokens(tree, predict, index, deep)), "retrieve_index": index,
        "retrieve_next_token": tree.next_token, "retrieve_next_sibling": tree.next_sibling,
        "target_predict": predict}, outputs=outputs(batch, n, spec))
    label_greedy_walk(ex)
    return ex


def label_greedy_walk(ex: Example) -> None:
    """Labels of what the contract's walk meets: how deep it goes, a match after the first sibling, several
    matching siblings (the first in list order wins, not always the lowest-numbered), the cut at S - 1 with a
    match below, and negative or int32-alias candidates in a list it scans."""
    x = ex.inputs
    out = expected(oracle.verify_greedy, ex)
    flat, index, cand = x["target_predict"].reshape(-1), x["retrieve_index"], x["candidates"]
    spec = ex.outputs["accept_index"].shape[1]
    for b, n in enumerate(out["accept_token_num"].tolist()):
        for depth in (1, 2, 4, 8):
            if n >= depth:
                label(f"walk: {depth} or more drafts accepted")
        slot_to_node = {int(s): i for i, s in enumerate(index[b])}
        path = [slot_to_node[int(s)] for s in out["accept_index"][b, :n + 1]]
        for k, node in enumerate(path):
            children = oracle.child_list(x["retrieve_next_token"], x["retrieve_next_sibling"], b, node)
            matching = [c for c in children if cand[b, c] == flat[index[b, node]]]
            if k == spec - 1:     # a level the walk may not take
                if matching:
                    label("walk: cut at S - 1 with a match below")
                continue
            if (cand[b, children] < 0).any():
                label("walk: a negative candidate in a scanned list")
            if (cand[b, children] > oracle.INT32_MAX).any():
                label("walk: an int32 alias in a scanned list")
            if k == n:
                continue
            if children[0] != path[k + 1]:
                label("walk: accepts a sibling after the first")
            if len(matching) > 1:
                label("walk: several siblings match, the first listed wins")
                if min(matching) != path[k + 1]:
                    label("walk: the first listed match is not the lowest-numbered")


def verify_greedy_hazard(ctx: DrawContext):
    """Valid draws with `retrieve_index` an arbitrary permutation of the B*N slots."""
    return verify_greedy_valid(ctx, permuted=True)


def poison_int32() -> int:
    return int(filled((1,), np.dtype("int32"), POISON_A)[0])


def path_problems(ex: Example, views: dict, emitted) -> list[str]:
    """Each request's outputs describe one root-to-node path: n in [0, S-1], accept_index[b, 0..n] the
    slots of that path, its tail untouched, and `emitted(b, k, path, value)` holding for the token at each
    path slot (None: fine, else the problem with that value)."""
    x = ex.inputs
    index, token, sibling = x["retrieve_index"], x["retrieve_next_token"], x["retrieve_next_sibling"]
    predicts, accept, count = views["predicts"], views["accept_index"], views["accept_token_num"]
    spec, poison, found = accept.shape[1], poison_int32(), []
    for b in range(len(count)):
        n = int(count[b])
        if not 0 <= n <= spec - 1:
            found.append(f"accept_token_num[{b}] = {output_value(count[b])}: outside [0, S-1] = [0, {spec - 1}]")
            continue
        if (accept[b, n + 1:] != poison).any():
            found.append(f"accept_index[{b}]: written past accept_token_num ({n})")
        path = [0]
        for k in range(1, n + 1):
            children = oracle.child_list(token, sibling, b, path[-1])
            slot_of = {int(index[b, c]): c for c in children}
            if int(accept[b, k]) not in slot_of:
                found.append(f"accept_index[{b}, {k}] = {output_value(accept[b, k])}: not the slot of a child of "
                             "the node before")
                break
            path.append(slot_of[int(accept[b, k])])
        else:
            if int(accept[b, 0]) != int(index[b, 0]):
                found.append(f"accept_index[{b}, 0] = {output_value(accept[b, 0])}: not the root's slot "
                             f"{int(index[b, 0])}")
            for k, node in enumerate(path):
                slot = int(index[b, node])
                problem = emitted(b, k, path, int(predicts[slot]))
                if problem:
                    found.append(f"predicts[{slot}] (request {b}, path node {k}) = {output_value(predicts[slot])}: "
                                 f"{problem}")
    return found[:3]


def verify_greedy_invariants(ex: Example, views: dict) -> list[str]:
    """The path matches the target's predictions step by step, and each path slot holds the
    prediction there (not the first-match rule: a permutation moves which slot is read)."""
    x = ex.inputs
    flat, index, cand = x["target_predict"].reshape(-1), x["retrieve_index"], x["candidates"]

    def emitted(b, k, path, value):
        want = int(flat[index[b, path[k]]])
        if value != want:
            return f"not the prediction {want} at that slot"
        if k + 1 < len(path) and int(cand[b, path[k + 1]]) != want:
            return f"the next path node's token {int(cand[b, path[k + 1]])} does not match it"
        return None
    return path_problems(ex, views, emitted)


def link_corruptions(ex: Example) -> list[Example]:
    """Invalid variants every tree stage shares (links, slots, dtypes)."""
    x = ex.inputs
    batch, n = x["candidates"].shape
    found = [invalid(ex, "candidates", "int64", candidates=x["candidates"].astype(np.int32))]
    if not batch:
        return found
    token, sibling = x["retrieve_next_token"].copy(), x["retrieve_next_sibling"].copy()
    out = token.copy()
    out[-1, -1] = n
    found.append(invalid(ex, "retrieve_next_token", "links in [-1, N)", retrieve_next_token=out))
    out = sibling.copy()
    out[0, -1] = -2
    found.append(invalid(ex, "retrieve_next_sibling", "links in [-1, N)", retrieve_next_sibling=out))
    loop = sibling.copy()
    loop[0, 0] = 0
    found.append(invalid(ex, "retrieve_next_sibling", "no cycle of links", retrieve_next_sibling=loop))
    first = int(token[0, 0])
    if first > 0:
        back = token.copy()
        leaf = next((i for i in range(1, n) if token[0, i] == -1 and i != first), None)
        top = oracle.child_list(token, sibling, 0, 0)
        deep = next((i for i in range(1, n) if token[0, i] == -1 and i in top), None)
        if deep is not None:
            back[0, deep] = 0
            found.append(invalid(ex, "retrieve_next_token", "no cycle of links", retrieve_next_token=back))
        if leaf is not None:
            twice = token.copy()
            twice[0, leaf] = first
            found.append(invalid(ex, "retrieve_next_token", "each node the target of at most one link",
                                 retrieve_next_token=twice))
    for bad in (-1, batch * n):
        index = x["retrieve_index"].copy()
        index[-1, 0] = bad
        found.append(invalid(ex, "retrieve_index", "slots in [0, B*N)", retrieve_index=index))
    found.append(invalid(ex, "accept_index", "S >= 1", outputs={"accept_index": Buffer((batch, 0), "int32")}))
    found.append(invalid(ex, "predicts", "shape [B*N]", outputs={"predicts": Buffer((batch * n + 1,), "int32")}))
    return found


@st.composite
def verify_greedy_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(verify_greedy_valid(ctx).filter(lambda e: len(e.inputs["candidates"]) > 0))
    found = link_corruptions(ex)
    for bad in (-1, oracle.INT32_MAX + 1):
        predict = ex.inputs["target_predict"].copy()
        predict[0, 0] = bad
        found.append(invalid(ex, "target_predict", "predictions in [0, 2**31)", target_predict=predict))
    return draw(one_invalid(found))


def tree_table(ex: Example):
    """One row per request: its links, tokens and slots."""
    x = ex.inputs
    headers = ["req", "candidates", "next_token", "next_sibling", "retrieve_index"]
    return headers, [[b, x["candidates"][b].tolist(), x["retrieve_next_token"][b].tolist(),
                      x["retrieve_next_sibling"][b].tolist(), x["retrieve_index"][b].tolist()]
                     for b in range(len(x["candidates"]))]


# ---------------------------------------------------------------- tree.sample_target_only

def grid_rows(rng: np.random.Generator, shape: tuple, zeros: float, coarse: bool) -> np.ndarray:
    """f32 rows on the 2**-16 grid (2**-8 when `coarse`) with sums <= 1 (some exactly 1, some not)."""
    step = COARSE if coarse else GRID
    weights = rng.random(shape) * (rng.random(shape) >= zeros)
    total = np.maximum(weights.sum(-1, keepdims=True), 1e-30)
    scale = np.where(rng.random(shape[:-1] + (1,)) < 0.5, 1.0, rng.random(shape[:-1] + (1,)))
    return (np.floor(weights / total * scale / step) * step).astype(np.float32)


def sibling_masses(tree: Trees, candidates, probs, b: int, row: int, acc: np.float32) -> list:
    """The exact f32 values mass / threshold_acc along the child list of `row` (the coins that tie)."""
    mass, found = np.float32(0), []
    for c in oracle.child_list(tree.next_token, tree.next_sibling, b, row):
        x = int(candidates[b, c])
        if 0 <= x < probs.shape[2]:
            mass = np.float32(mass + probs[b, row, x])
            found.append(np.float32(mass / acc))
    return found


@st.composite
def sample_tokens(draw, tree: Trees, probs: np.ndarray, ctx: DrawContext) -> np.ndarray:
    """Candidates: a child's token is drawn from its parent's row (positive mass likely), or uniform
    (zero mass likely), or a duplicate of a sibling's, or -1, or out of the vocabulary."""
    rng = draw(generator())
    vocab = probs.shape[2]
    mix = draw(st.sampled_from(["plain", "duplicates", "placeholders", "oov"]))
    mix = "placeholders" if mix == "oov" and ctx.excludes("oov_candidates") else mix
    label(f"candidates: {mix}")
    batch, n = tree.parent.shape
    found = rng.integers(0, vocab, (batch, n))
    rows = probs[np.arange(batch)[:, None], np.maximum(tree.parent, 0)].astype(np.float64)   # [B, N, V]
    cdf = np.cumsum(np.nan_to_num(np.maximum(rows, 0), posinf=1.0), -1)
    drawn = np.minimum((cdf < rng.random((batch, n, 1)) * cdf[..., -1:]).sum(-1), vocab - 1)
    found = np.where((rng.random((batch, n)) < 0.6) & (cdf[..., -1] > 0), drawn, found)
    if mix == "duplicates":
        same = rng.random((batch, n)) < 0.5
        prev = np.where(tree.next_sibling >= 0, tree.next_sibling, np.arange(n))
        for b in range(batch):
            found[b, prev[b][same[b]]] = found[b][same[b]]
    elif mix != "plain":
        special = [PLACEHOLDER] if mix == "placeholders" else [vocab, vocab + 7]
        found = np.where(rng.random((batch, n)) < 0.25, rng.choice(special, (batch, n)), found)
    return found.astype(np.int64)


@st.composite
def thresholds(draw, probs: np.ndarray) -> tuple[float, float]:
    kind = draw(st.sampled_from(["lossless", "lossless", "single", "acc", "both", "zero"]))
    label(f"thresholds: {kind}")
    present = probs[probs > 0]
    single = float(draw(st.sampled_from([0.5, 0.25, 0.0] + ([float(present[0])] if len(present) else []))))
    acc = float(draw(st.sampled_from([0.5, 0.75, 0.3, 0.0])))
    return {"lossless": (1.0, 1.0), "single": (single, 1.0), "acc": (1.0, acc), "both": (single, acc),
            "zero": (0.0, 0.0)}[kind]


@st.composite
def sample_target_only_valid(draw, ctx: DrawContext, general: bool = False) -> Example:
    batch, n, tree, deep = draw(tree_batch(ctx))
    spec = draw(spec_for(tree, n, cap=n, deep=deep))
    rng = draw(generator())
    low, high = ctx.limits("V", 1, 100 if ctx.small else 8193)
    sizes = [v for v in (1, 2, 3, 4, 5, 8, 17, 100, 1000, 1025, 8193) if low <= v <= high] or [low]
    vocab = max(low, min(draw(st.sampled_from(sizes)), max(1, 2**17 // max(1, batch * n))))
    if vocab == 1 or vocab > BLOCK_V:
        label("vocab: V=1" if vocab == 1 else f"vocab: V > {BLOCK_V} (several residual tiles)")
    zeros = draw(st.sampled_from([0.0, 0.5, 0.9]))
    coarse = draw(st.booleans())
    label(f"target rows: {'coarse' if coarse else 'fine'} grid, {int(zeros * 100)}% zeros")
    if general:
        probs = rng.random((batch, n, vocab)).astype(np.float32)
        probs /= np.where(rng.random((batch, n, 1)) < 0.7, probs.sum(-1, keepdims=True), 1).astype(np.float32)
    else:
        probs = grid_rows(rng, (batch, n, vocab), zeros, coarse)
    entry = draw(st.sampled_from(["zero", "zero", "zero", "residue"]))
    label(f"draft_probs on entry: {entry}")
    draft = np.zeros_like(probs) if entry == "zero" else grid_rows(rng, probs.shape, 0.7, coarse)
    candidates = draw(sample_tokens(tree, probs, ctx))
    single, acc = draw(thresholds(probs))
    coins = (rng.integers(0, 256, (batch, n)) * COARSE).astype(np.float32)
    floor = max(np.float32(acc), oracle.THR_FLOOR)
    if draw(st.booleans()):   # ties: a coin equal to one of its node's sibling masses / threshold
        label("coins: ties with a sibling's mass")
        for b in range(batch):
            for row in range(n):
                masses = sibling_masses(tree, candidates, probs, b, row, floor)
                if masses and rng.random() < 0.7:
                    coins[b, row] = min(masses[int(rng.integers(0, len(masses)))], np.float32(1 - COARSE))
    if deep:   # each level takes its first sibling of positive mass along the path to the deepest node
        label("coins: 0 on the path to the deepest node")
        coins[deepest_paths(tree) | (np.arange(n) == 0)] = 0
    final = (rng.integers(0, 256, batch) * COARSE).astype(np.float32)
    if general:
        coins = rng.random((batch, n)).astype(np.float32)
        final = rng.random(batch).astype(np.float32)
    inputs = {"candidates": candidates, "retrieve_index": slots(batch, n), "retrieve_next_token": tree.next_token,
              "retrieve_next_sibling": tree.next_sibling, "uniform_samples": coins, "uniform_final": final,
              "target_probs": probs, "draft_probs": draft, "threshold_single": single, "threshold_acc": acc}
    layouts = {name: found for name, ndim in (("uniform_samples", 2), ("target_probs", 3), ("draft_probs", 3))
               if (found := draw(layout(ndim))) is not None}
    ex = Example("hazard" if general else "valid", inputs=inputs, outputs=outputs(batch, n, spec), layouts=layouts)
    label_sampling_walk(ex)
    return ex


def label_sampling_walk(ex: Example) -> None:
    """Labels of what the contract's walk meets: how deep it goes, every level taken (the bonus from the last
    node's target row), a rejected sibling's draft_probs write, and an all-zero residual (the pick V - 1)."""
    x = ex.inputs
    out = {name: np.zeros(buf.shape, buf.dtype) for name, buf in ex.outputs.items()}
    written = x["draft_probs"].copy()
    oracle.sample_target_only(**{**x, "draft_probs": written}, **out)
    spec, probs = ex.outputs["accept_index"].shape[1], x["target_probs"]
    if (written != x["draft_probs"]).any():
        label("walk: a rejected sibling writes draft_probs")
    for b, n in enumerate(out["accept_token_num"].tolist()):
        for depth in (1, 2, 4):
            if n >= depth:
                label(f"walk: {depth} or more drafts accepted")
        row = int(out["accept_index"][b, n]) - b * probs.shape[1]
        if n == spec - 1 and n:
            label("walk: all S - 1 levels accepted")
        res = probs[b, row] if n == spec - 1 else np.maximum(probs[b, row] - written[b, row], 0)
        if not (res > 0).any():
            label("pick: an all-zero residual (V - 1)")


@st.composite
def sample_target_only_hazard(draw, ctx: DrawContext) -> Example:
    """General float rows (normalised or not) and uniforms, then NaN, inf or all-zero rows planted."""
    ex = draw(sample_target_only_valid(ctx, general=True))
    probs = ex.inputs["target_probs"].copy()
    rng = draw(generator())
    kind = draw(st.sampled_from(["floats", "nan", "inf", "zero rows", "negative"]))
    label(f"hazard: {kind}")
    cells = rng.random(probs.shape) < 0.2
    if kind == "nan":
        probs[cells] = np.nan
    elif kind == "inf":
        probs[cells] = np.inf
    elif kind == "zero rows":
        probs[rng.random(probs.shape[:2]) < 0.5] = 0
    elif kind == "negative":
        probs[cells] = -probs[cells]
    ex.inputs["target_probs"] = probs
    return ex


def sample_target_only_invariants(ex: Example, views: dict) -> list[str]:
    """Every emitted id is in [0, V); the path's tokens are its nodes' candidates; draft_probs changed
    only at (request, path node, a child's token), to the target's value there."""
    x = ex.inputs
    cand, probs, vocab = x["candidates"], x["target_probs"], x["target_probs"].shape[2]

    def emitted(b, k, path, value):
        if not 0 <= value < vocab:
            return f"outside [0, V) = [0, {vocab})"
        if k + 1 < len(path) and value != int(cand[b, path[k + 1]]):
            return "not the token of the next path node"
        return None
    found = path_problems(ex, views, emitted)
    before, after = x["draft_probs"], views["draft_probs"]
    changed = np.argwhere(before.view(np.uint32) != after.view(np.uint32))
    for b, row, v in changed[:50]:
        tokens = {int(cand[b, c]) for c in oracle.child_list(x["retrieve_next_token"], x["retrieve_next_sibling"],
                                                             b, row)}
        same = probs[b, row, v].view(np.uint32) == after[b, row, v].view(np.uint32) or (
            np.isnan(probs[b, row, v]) and np.isnan(after[b, row, v]))
        if v not in tokens or not same:
            found.append(f"draft_probs[{b}, {row}, {v}] changed, but no rejected sibling wrote it")
            break
    return found[:3]


@st.composite
def sample_target_only_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(sample_target_only_valid(ctx).filter(lambda e: len(e.inputs["candidates"]) > 0))
    x = ex.inputs
    batch, n = x["candidates"].shape
    found = link_corruptions(ex)
    found += [
        invalid(ex, "accept_index", "S <= N", outputs={"accept_index": Buffer((batch, n + 1), "int32")}),
        invalid(ex, "threshold_single", "in [0, 1]", threshold_single=1.5),
        invalid(ex, "threshold_acc", "in [0, 1]", threshold_acc=-0.25),
        invalid(ex, "uniform_final", "shape [B]", uniform_final=np.zeros(batch + 1, np.float32)),
        invalid(ex, "uniform_samples", "float32", uniform_samples=x["uniform_samples"].astype(np.float64)),
        invalid(ex, "draft_probs", "shape [B, N, V]", draft_probs=x["draft_probs"][..., :0]),
    ]
    return draw(one_invalid(found))

"""Strategies of tree verification: `tree.verify_greedy` and `tree.sample_target_only`.

Trees come from `tree_shapes`; tokens are drawn against the tree so that matches, duplicate sibling
tokens, ties and fallbacks are common. Valid-tier probabilities are multiples of 2**-16 with row sums
<= 1 and `uniform_final` a multiple of 2**-8, so every sum and product the rule forms is exact in f32
whatever the order; coins are only compared, so they may be any f32 (and are often set to a sibling's
exact mass / threshold_acc: a tie).
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from specverify.oracles import tree_verify as oracle
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.records.values import POISON_A, filled, output_value
from specverify.strategies.blocks import PLACEHOLDER, batch_size, generator, invalid, label, layout, mode, one_invalid
from specverify.strategies.tree_shapes import Trees, node_count, trees

GRID = 2.0 ** -16
COARSE = 2.0 ** -8
ALIAS = 2**32    # a candidate that equals a prediction once truncated to int32


def outputs(batch: int, n: int, spec: int) -> dict[str, Buffer]:
    return {"predicts": Buffer((batch * n,), "int32"), "accept_index": Buffer((batch, spec), "int32"),
            "accept_token_num": Buffer((batch,), "int32")}


@st.composite
def tree_batch(draw, ctx: DrawContext, most: int = 512) -> tuple[int, int, Trees]:
    """(B, N, trees): B small in the interpreter (rarely up to 64), B * N bounded by `most` (64 in
    the interpreter)."""
    most = min(most, 64) if ctx.small else most
    kind = draw(mode())
    n = 1 + draw(st.integers(0, 1)) if kind == "single" else draw(node_count(ctx.small))
    high = max(1, min(ctx.max_batch, most // n, 4 if ctx.small and draw(st.integers(0, 7)) else 64))
    batch = draw(batch_size(ctx, 0, high))
    label("batch: B=0" if batch == 0 else "batch: B=1" if batch == 1 else "batch: B>1")
    return batch, n, draw(trees(batch, n))


@st.composite
def spec_for(draw, tree: Trees, n: int, cap: int | None = None) -> int:
    """S: the deepest level + 1, fewer (1 or 2), or more (up to `cap`)."""
    deepest = tree.max_depth + 1
    kind = draw(st.sampled_from(["depth", "depth", "one", "short", "beyond"]))
    label(f"S: {kind}")
    beyond = deepest + draw(st.integers(1, 3))
    spec = {"depth": deepest, "one": 1, "short": max(1, min(2, deepest - 1)), "beyond": beyond}[kind]
    return min(spec, cap) if cap is not None else spec


def slots(batch: int, n: int) -> np.ndarray:
    return np.arange(batch * n, dtype=np.int64).reshape(batch, n)


# ---------------------------------------------------------------- tree.verify_greedy

@st.composite
def greedy_tokens(draw, tree: Trees, predict: np.ndarray, index: np.ndarray) -> np.ndarray:
    """Candidates: each child of a node equals the target's prediction there at a drawn rate (so
    several siblings often match: duplicates), else another id, -1, a negative id or an int32 alias."""
    rng = draw(generator())
    rate = draw(st.sampled_from([0.3, 0.6, 0.9, 1.0]))
    mix = draw(st.sampled_from(["plain", "placeholders", "aliases", "all"]))
    label(f"candidates: match rate {rate}, {mix}")
    flat = predict.reshape(-1)
    want = flat[index[np.arange(len(index))[:, None], np.maximum(tree.parent, 0)]]
    other = want + 1 + rng.integers(0, 3, want.shape)
    if mix in ("placeholders", "all"):
        other = np.where(rng.random(want.shape) < 0.3, rng.choice([PLACEHOLDER, -5], want.shape), other)
    if mix in ("aliases", "all"):
        other = np.where(rng.random(want.shape) < 0.3, want + ALIAS, other)
    found = np.where(rng.random(want.shape) < rate, want, other)
    found[:, 0] = rng.integers(-1, 9, len(found)) if len(found) else found[:, 0]
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
    batch, n, tree = draw(tree_batch(ctx))
    spec = draw(spec_for(tree, n))
    predict = draw(predictions((batch, n)))
    index = slots(batch, n)
    if permuted:
        index = draw(generator()).permutation(batch * n).reshape(batch, n).astype(np.int64)
    return Example("hazard" if permuted else "valid", inputs={
        "candidates": draw(greedy_tokens(tree, predict, index)), "retrieve_index": index,
        "retrieve_next_token": tree.next_token, "retrieve_next_sibling": tree.next_sibling,
        "target_predict": predict}, outputs=outputs(batch, n, spec))


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
    batch, n, tree = draw(tree_batch(ctx))
    spec = draw(spec_for(tree, n, cap=n))
    rng = draw(generator())
    low, high = ctx.limits("V", 1, 100 if ctx.small else 8193)
    sizes = [v for v in (1, 2, 3, 4, 5, 8, 17, 100, 1000, 8193) if low <= v <= high] or [low]
    vocab = max(low, min(draw(st.sampled_from(sizes)), max(1, 2**17 // max(1, batch * n))))
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
    final = (rng.integers(0, 256, batch) * COARSE).astype(np.float32)
    if general:
        coins = rng.random((batch, n)).astype(np.float32)
        final = rng.random(batch).astype(np.float32)
    inputs = {"candidates": candidates, "retrieve_index": slots(batch, n), "retrieve_next_token": tree.next_token,
              "retrieve_next_sibling": tree.next_sibling, "uniform_samples": coins, "uniform_final": final,
              "target_probs": probs, "draft_probs": draft, "threshold_single": single, "threshold_acc": acc}
    layouts = {name: found for name, ndim in (("uniform_samples", 2), ("target_probs", 3), ("draft_probs", 3))
               if (found := draw(layout(ndim))) is not None}
    return Example("hazard" if general else "valid", inputs=inputs, outputs=outputs(batch, n, spec), layouts=layouts)


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

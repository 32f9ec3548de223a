"""Strategies of the `kv` family.

Sources are f16, bf16 or f32 (bf16 as ml_dtypes arrays); caches the source dtype or fp8 (e4m3fn, e5m2).
Values are drawn where fp8 rounding decides: exact midpoints between neighbouring fp8 values (ties,
with power-of-two scales so the quotient is exact), the largest finite value and just beyond it,
subnormal edges, signed zeros, and a wide sweep of magnitudes. Slots: contiguous runs (a request's
tokens), scattered slots, the cache's last slot; tokens that are not written (rejected, or without a
slot) often point at a written token's slot, so writing one clobbers an accepted value.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from specverify.oracles.kv import BITS, FP8, LAYOUTS, SOURCES, fp8_code_of_bits, fp8_value
from specverify.records.stage import Buffer, DrawContext, Example, Layout
from specverify.records.values import output_value
from specverify.strategies.blocks import (batch_size, generator, invalid, label, labelled_dtype, layout, mode,
                                          one_invalid, power_of_two_at_least, short)

BLOCK_T, MAX_ROW = 16, 1024        # tokens and row elements per program of the Triton commit kernel
ONE_PROGRAM, ACCEPT_BLOCK, COUNT_BLOCK = 1024, 256, 4096   # Triton accept: entries one program takes whole, per
                                                          # program past that, per step of a program's count
REQUESTS, SLOT_BLOCKS = 4, (8, 64)      # requests per program, the range of its tile's width (Triton assign)
PREFIX_BLOCK = 1024                     # request lengths a Triton assign program sums per step


def assign_tile_width(slots: int, batch: int) -> int:
    """The Triton assign kernel's tile width: about the mean length out_cache_loc holds room for, a power of
    two within SLOT_BLOCKS; a longer range takes several steps."""
    return min(max(power_of_two_at_least(-(-slots // max(batch, 1))), SLOT_BLOCKS[0]), SLOT_BLOCKS[1])


def cast(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 values in a source dtype, clipped to its finite range (bf16 rounds through float32)."""
    import ml_dtypes  # a second to import: only where a draw needs it

    top = float(ml_dtypes.finfo(dtype).max)
    return np.clip(values, -top, top).astype(np.float32).astype(dtype)


def fp8_points(rng, size: int, cache_dtype: str) -> np.ndarray:
    """Magnitudes where rounding to the cache format decides: midpoints of neighbouring values, the
    largest value and beyond, subnormal edges."""
    fmt = FP8[cache_dtype]
    codes = rng.integers(0, fmt.max_code, size)
    low = np.array([fp8_value(int(c), fmt) for c in codes])
    high = np.array([fp8_value(int(c) + 1, fmt) for c in codes])
    largest, tiny = fp8_value(fmt.max_code, fmt), fp8_value(1, fmt)
    edges = np.array([largest, largest * (1 + 2.0 ** -(fmt.mantissa + 1)), largest * 1.5, tiny / 2, tiny * 1.5,
                      fp8_value(1 << fmt.mantissa, fmt), 0.0])
    return np.where(rng.random(size) < 0.8, (low + high) / 2, rng.choice(edges, size))


@st.composite
def source_values(draw, rng, shape: tuple, dtype: str, cache_dtype: str, scale) -> np.ndarray:
    """[T, H, D] values of a kind; fp8 edge points are multiplied by `scale` (a number, or one per token)."""
    kind = draw(st.sampled_from(["normal", "wide", "fp8 edges" if cache_dtype in FP8 else "normal", "subnormal"]))
    label(f"values: {kind}")
    size = int(np.prod(shape))
    if kind == "normal":
        values = rng.standard_normal(size) * 10.0 ** rng.integers(-2, 3)
    elif kind == "wide":
        values = np.ldexp(rng.random(size) + 0.5, rng.integers(-30, 20, size))
    elif kind == "subnormal":   # the source dtype's subnormals, and normals around them
        import ml_dtypes

        tiny = float(ml_dtypes.finfo(dtype).smallest_normal)
        values = tiny * np.ldexp(rng.random(size), rng.integers(-10, 2, size))
    else:
        per_token = np.reshape(scale, (-1,) + (1,) * (len(shape) - 1))
        values = (fp8_points(rng, size, cache_dtype).reshape(shape) * per_token).reshape(-1)
    values = np.where(rng.random(size) < 0.5, -values, values)
    values[rng.random(size) < 0.02] = -0.0
    return cast(values, dtype).reshape(shape)


@st.composite
def written_mask(draw, rng, tokens: int) -> np.ndarray:
    """Accepted tokens: all, none, random, or requests of consecutive tokens each accepting a prefix."""
    kind = draw(st.sampled_from(["prefixes", "all", "random", "none", "prefixes"]))
    label(f"accepted: {kind}")
    if kind in ("all", "none"):
        return np.full(tokens, kind == "all")
    if kind == "random":
        return rng.random(tokens) < 0.5
    mask, start = np.zeros(tokens, bool), 0
    while start < tokens:
        n = int(rng.integers(1, 6))
        mask[start:start + int(rng.integers(0, n + 1))] = True
        start += n
    return mask


@st.composite
def slots(draw, rng, written: np.ndarray, capacity: int) -> np.ndarray:
    """Distinct slots for the written tokens (a run, scattered, or taking the last slot); the others get
    -1, a written token's slot, or any slot."""
    count = int(written.sum())
    kind = draw(st.sampled_from(["run", "scattered", "last slot"]))
    label(f"slots: {kind}")
    if kind == "run":
        start = int(rng.integers(0, capacity - count + 1))
        chosen = np.arange(start, start + count)
    else:
        chosen = rng.choice(capacity, count, replace=False)
        if kind == "last slot" and count and capacity - 1 not in chosen:
            chosen[-1] = capacity - 1
    out = np.full(len(written), -1, np.int64)
    out[written] = chosen
    others = np.flatnonzero(~written)
    style = draw(st.sampled_from(["collide", "none", "anywhere"]))
    if len(others):
        label(f"unwritten tokens: {style}")
    if style == "collide" and count:
        out[others] = rng.choice(chosen, len(others))
    elif style == "anywhere":
        out[others] = rng.integers(-1, capacity, len(others))
    return out


@st.composite
def scales(draw, rng, tokens: int, fp8: bool, hazard: bool) -> tuple:
    """(k_scale, v_scale, (k_edge, v_edge)): each edge the power of two (a number, or one per token) that the
    fp8 edge values of keys or values are multiplied by, so that their quotients stay exact. Per-token scales
    other than "one" differ from token to token (a kernel reading one scale for all must show)."""
    unit = 2.0 ** draw(st.integers(-4, 4))
    if not fp8:
        kind = draw(st.sampled_from(["None", "ignored"]))
        label(f"scales: {kind} (same-dtype cache)")
        if kind == "None":
            return None, None, (unit, unit)
        return np.array([np.nan], np.float32), np.full(tokens or 1, -3.0, np.float32), (unit, unit)
    found, edges = [], []
    for name in ("k", "v"):
        per_token = tokens > 1 and draw(st.booleans())
        size = tokens if per_token else 1
        kind = draw(st.sampled_from(["power of two", "one", "random", "tiny"]))
        label(f"scale: {'per token' if per_token else 'per tensor'}, {kind}")
        edge = unit * 2.0 ** rng.integers(-2, 3, size) if per_token else unit
        values = {"power of two": edge, "one": np.ones(size), "tiny": np.full(size, 1e-3) * edge / unit,
                  "random": rng.uniform(0.01, 4.0, size)}[kind]
        if hazard:
            bad = draw(st.sampled_from([0.0, -0.0, np.inf, np.nan, -2.0, 1e-40]))
            label(f"hazard: scale {bad}")
            label("hazard: a zero, negative, infinite, NaN or subnormal scale")
            values = np.where(rng.random(size) < 0.5, bad, values)
        found.append(np.broadcast_to(values, (size,)).astype(np.float32))
        edges.append(edge)
    return found[0], found[1], tuple(edges)


@st.composite
def commit_draft_valid(draw, ctx: DrawContext, tier: str = "valid") -> Example:
    tokens = draw(st.one_of(st.integers(0, 4), st.integers(0, 24 if ctx.small else 48)))
    heads = draw(st.sampled_from([1, 2, 3, 4]))
    dim = draw(st.sampled_from([1, 3, 8, 16, 64, 520]))    # 520: rows of more than 1024 elements from 2 heads
    if tokens > BLOCK_T:
        label(f"tokens: more than {BLOCK_T} (several programs)")
    if heads * dim > MAX_ROW:
        label(f"rows: more than {MAX_ROW} elements (several programs)")
    src_dtype = draw(st.sampled_from(SOURCES))
    for name in ("key", "value", "key_cache", "value_cache"):   # a same-dtype cache needs a source it allows
        src_dtype = ctx.dtype(name, src_dtype, SOURCES)
    choices = (src_dtype, *FP8)
    cache_dtype = ctx.dtype("value_cache", ctx.dtype("key_cache", draw(st.sampled_from(choices)), choices), choices)
    layout = draw(st.sampled_from(LAYOUTS))
    block_size = draw(st.sampled_from([1, 2, 5, 16]))
    label(f"cache: {src_dtype} -> {cache_dtype}")
    label(f"cache: {cache_dtype if cache_dtype in FP8 else 'the source dtype'}")
    label(f"layout: {layout}")
    rng = draw(generator())
    accepted = draw(written_mask(rng, tokens))
    has_slot = rng.random(tokens) >= draw(st.sampled_from([0.0, 0.0, 0.3]))
    written = accepted & has_slot
    num_blocks = -(-int(written.sum()) // block_size) + draw(st.integers(0, 2))
    if tokens and not written.any() and rng.random() < 0.5:
        num_blocks = 0                                          # caches of no blocks: nothing to write
        label("cache: no blocks (tokens, none written)")
    else:
        num_blocks = max(num_blocks, 1)
    slot_mapping = draw(slots(rng, written, num_blocks * block_size))
    slot_mapping[accepted & ~has_slot] = -1
    if (accepted & ~has_slot).any():
        label("slots: an accepted token without a slot (-1)")
    k_scale, v_scale, (k_edge, v_edge) = draw(scales(rng, tokens, cache_dtype in FP8, tier == "hazard"))
    for scale in (k_scale, v_scale):
        if cache_dtype in FP8 and len(scale) > 1 and len(np.unique(scale[written])) > 1:
            label("scale: per token, differing over the written tokens")
    key = draw(source_values(rng, (tokens, heads, dim), src_dtype, cache_dtype, k_edge))
    value = draw(source_values(rng, (tokens, heads, dim), src_dtype, cache_dtype, v_edge))
    if tier == "hazard":
        key, value = (draw(non_finite(rng, x)) for x in (key, value))
    shape = (num_blocks, block_size, heads, dim) if layout == "NHD" else (num_blocks, heads, block_size, dim)
    slot_dtype = draw(st.sampled_from(["int64", "int32"]))
    label(f"dtype: slot_mapping {slot_dtype}")
    return Example(
        tier=tier,
        inputs={"key": key, "value": value, "slot_mapping": slot_mapping.astype(slot_dtype),
                "accepted_mask": accepted, "layout": layout, "k_scale": k_scale, "v_scale": v_scale},
        outputs={"key_cache": Buffer(shape, cache_dtype, draw(cache_layout())),
                 "value_cache": Buffer(shape, cache_dtype, draw(cache_layout()))},
        layouts={name: lay for name in ("key", "value") if (lay := draw(source_layout())) is not None},
    )


@st.composite
def source_layout(draw) -> Layout | None:
    """Contiguous; tokens further apart (a slice of a fused qkv tensor) with padded rows; or any strided
    view (steps on every axis, transposed)."""
    kind = draw(st.sampled_from(["contiguous", "fused qkv", "any"]))
    if kind == "contiguous":
        return None
    label(f"source: {kind}")
    if kind == "any":
        return draw(layout(3, strided=True))
    return Layout((draw(st.sampled_from([1, 3])), 1, 1), (0, 0, draw(st.sampled_from([0, 2]))))


@st.composite
def cache_layout(draw) -> Layout | None:
    """Contiguous; every other block (one of the caches of a [NB, 2, ...] tensor) with padded rows; or any
    strided view."""
    kind = draw(st.sampled_from(["contiguous", "paired caches", "any"]))
    if kind == "contiguous":
        return None
    label(f"cache: {kind}")
    if kind == "any":
        return draw(layout(4, strided=True))
    return Layout((2, 1, 1, 1), (0, 0, 0, draw(st.sampled_from([0, 3]))))


@st.composite
def non_finite(draw, rng, x: np.ndarray) -> np.ndarray:
    """Hazard: NaN (either sign, any payload) and infinities among the values."""
    bits = x.view(BITS[x.dtype.name]).copy()
    width = bits.dtype.itemsize * 8
    mantissa = {"float16": 10, "bfloat16": 7, "float32": 23}[x.dtype.name]
    exponent_mask = ((1 << (width - 1 - mantissa)) - 1) << mantissa
    special = rng.random(bits.shape) < draw(st.sampled_from([0.1, 0.5]))
    payload = rng.integers(0, 1 << mantissa, bits.shape)
    payload[rng.random(bits.shape) < 0.3] = 0                       # infinities
    sign = rng.integers(0, 2, bits.shape) << (width - 1)
    bits[special] = (sign | exponent_mask | payload)[special].astype(bits.dtype)
    label("hazard: NaN and infinite sources")
    return bits.view(x.dtype)


def commit_draft_hazard(ctx: DrawContext):
    return commit_draft_valid(ctx, tier="hazard")


def commit_draft_invariants(ex: Example, out: dict) -> list[str]:
    """Hazard tier: every written element holds the contract's bytes (the copy, or the fp8 byte of
    source / scale: NaN 0x7F, infinities saturated), and every other element of a cache is untouched
    (they all hold the same fill)."""
    x = ex.inputs
    layout, broken = x["layout"], []
    for source, scale, name in ((x["key"], x["k_scale"], "key_cache"), (x["value"], x["v_scale"], "value_cache")):
        cache = out[name]
        bits = cache.view(BITS[cache.dtype.name])
        block_size = cache.shape[1 if layout == "NHD" else 2]
        written = np.zeros(cache.shape, bool)
        for t in np.flatnonzero(x["accepted_mask"] & (x["slot_mapping"] >= 0)):
            block, offset = divmod(int(x["slot_mapping"][t]), block_size)
            where = (block, offset) if layout == "NHD" else (block, slice(None), offset)
            written[where] = True
            got = bits[where]
            if cache.dtype.name in FP8:
                divisor = np.float32(scale[t if len(scale) > 1 else 0])
                with np.errstate(all="ignore"):
                    quotient = source[t].astype(np.float32) / divisor
                codes = [fp8_code_of_bits(b, cache.dtype.name) for b in quotient.view(np.uint32).ravel().tolist()]
                want = np.array(codes, np.uint8).reshape(got.shape)
            else:
                want = source[t].view(bits.dtype)
            if not np.array_equal(got, want):
                broken.append(f"{name}: token {t} (slot {int(x['slot_mapping'][t])}) holds {short(got.ravel())}, "
                              f"the contract gives {short(want.ravel())}")
        rest = bits[~written]
        if len(rest) and (rest != rest[0]).any():
            broken.append(f"{name}: an element outside the written slots changed")
    return broken[:3]


@st.composite
def commit_draft_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(commit_draft_valid(ctx))
    x = ex.inputs
    slot_mapping, accepted = x["slot_mapping"], x["accepted_mask"]
    buf = ex.outputs["key_cache"]
    capacity = buf.shape[0] * buf.shape[1 if x["layout"] == "NHD" else 2]
    found = [invalid(ex, "layout", "'NHD' or 'HND'", layout="NDH")]
    other = {"float16": "bfloat16", "bfloat16": "float32", "float32": "float16"}[x["key"].dtype.name]
    found.append(invalid(ex, "key_cache", "the source dtype or fp8", outputs={
        "key_cache": Buffer(buf.shape, other), "value_cache": Buffer(buf.shape, other)}))
    if buf.dtype in FP8:
        found.append(invalid(ex, "k_scale", "an fp8 cache needs its scales", k_scale=None))
        wrong = np.ones(len(slot_mapping) + 2, np.float32)
        found.append(invalid(ex, "v_scale", "shape [1] or [T]", v_scale=wrong))
    heads, block_size = x["key"].shape[1], buf.shape[1 if x["layout"] == "NHD" else 2]
    if heads != block_size:   # the other layout's shape for the same cache
        swapped = (buf.shape[0], buf.shape[2], buf.shape[1], buf.shape[3])
        found.append(invalid(ex, "key_cache", "shape of the layout", outputs={
            "key_cache": Buffer(swapped, buf.dtype), "value_cache": Buffer(swapped, buf.dtype)}))
    if len(slot_mapping):
        t = draw(st.integers(0, len(slot_mapping) - 1))
        for bad, rule in ((capacity, "slots < num_blocks * block_size"), (-2, "slots >= -1")):
            changed = slot_mapping.copy()
            changed[t] = bad
            found.append(invalid(ex, "slot_mapping", rule, slot_mapping=changed))
        if len(slot_mapping) >= 2:
            both = accepted.copy()
            both[:2] = True
            pair = slot_mapping.copy()
            pair[:2] = max(int(pair[0]), int(pair[1]), 0)
            found.append(invalid(ex, "slot_mapping", "no slot written by two accepted tokens", slot_mapping=pair,
                                 accepted_mask=both))
    return draw(one_invalid(found))


def commit_draft_table(ex: Example):
    x = ex.inputs

    def scale(name: str, t: int):
        values = x[name]
        return None if values is None else float(values[t if len(values) > 1 else 0])

    def values(name: str, t: int):
        return short(x[name][t].astype(np.float32).ravel().tolist(), 4)

    rows = [[t, bool(x["accepted_mask"][t]), int(x["slot_mapping"][t]), scale("k_scale", t), scale("v_scale", t),
             values("key", t), values("value", t)] for t in range(len(x["slot_mapping"]))]
    source = f"{x['key'].dtype.name}, {x['layout']}"
    return ["token", "accepted", "slot", "k_scale", "v_scale", f"key ({source})", "value"], rows


# ---------------------------------------------------------------- kv.accept_out_cache_loc

INT32_MAX = 2**31 - 1


def cache_locations(rng, size: int, dtype: str, extremes: bool = False) -> np.ndarray:
    """`size` distinct KV slots of `dtype`, low ones or just below the top (int32's, or for int64 often
    2**40); with `extremes`, any value of the dtype, its lowest and highest included (harmless to a stage
    that only moves them)."""
    info = np.iinfo(dtype)
    if extremes:
        label("slots: anywhere in the dtype")
        values = rng.integers(info.min, info.max, size, dtype=dtype, endpoint=True)
        pick = rng.random(size) < 0.2
        values[pick] = rng.choice(np.array([info.min, info.max, -1, 0], dtype), int(pick.sum()))
        return values
    top = INT32_MAX if dtype == "int32" or rng.random() < 0.5 else 2**40
    span = 4 * size + 8
    low = 0 if rng.random() < 0.5 else top - span + 1
    if size:
        label("slots: low" if low == 0 else "slots: near 2**31" if top == INT32_MAX else "slots: near 2**40")
    return (low + rng.choice(span, size, replace=False)).astype(dtype)


def first_of_permutations(rng, batch: int, size: int, counts: np.ndarray, fill: int) -> np.ndarray:
    """[batch, size]: per row, `counts[b]` distinct values of 0..size-1 in rising order, then `fill`."""
    chosen = np.argsort(rng.random((batch, size)), axis=1)
    chosen = np.where(np.arange(size)[None, :] < counts[:, None], chosen, size)
    chosen.sort(axis=1)
    return np.where(chosen == size, fill, chosen)


def accepted_rows(rng, batch: int, width: int, nodes: int, shape: str) -> np.ndarray:
    """accept_index [B, S] over trees of `nodes` nodes per request (flat slot b*nodes + i): engine rows
    (the root, then a rising path of accepted nodes, then -1), bonus only, all accepted, holes (a -1
    before later entries), or scrambled (any entry, repeats, falling order, empty rows)."""
    if shape == "scrambled":
        index = rng.integers(-1, batch * nodes, (batch, width))
        index[rng.random((batch, width)) < 0.3] = -1
        index[rng.random(batch) < 0.2] = -1
        return index.astype(np.int32)
    if width == 0:
        return np.zeros((batch, 0), np.int32)
    counts = {"bonus only": np.ones(batch, np.int64), "all accepted": np.full(batch, width)}.get(
        shape, rng.integers(1, width + 1, batch))
    path = first_of_permutations(rng, batch, nodes - 1, counts - 1, -2)[:, :width - 1] + 1   # nodes 1.., or -1
    rows = np.concatenate([np.zeros((batch, 1), np.int64), path], axis=1)
    index = np.where(rows >= 0, rows + np.arange(batch)[:, None] * nodes, -1)
    if shape == "holes":   # the same entries spread over the row in order, -1 between
        places = first_of_permutations(rng, batch, width, counts, width)
        spread = np.full((batch, width + 1), -1, np.int64)
        np.put_along_axis(spread, places, index, axis=1)
        index = spread[:, :width]
    return index.astype(np.int32)


@st.composite
def accept_out_cache_loc_valid(draw, ctx: DrawContext, tier: str = "valid") -> Example:
    kind = draw(mode())
    stress = kind == "stress"
    width = 1 if kind == "single" else draw(st.one_of(st.integers(1, 8), st.just(0)))
    batch = 1 if kind == "single" else draw(batch_size(ctx, high=32 if ctx.small else 256))
    if stress:   # a batch of many blocks of the running count, B*S not a power of two
        batch, width = draw(st.sampled_from([(630, 7), (900, 5)] if ctx.small else [(1000, 7), (2049, 5)]))
        batch = ctx.limits("B", 0, batch)[1]   # past the usual batch limit unless a domain bounds B
    nodes = width + draw(st.integers(0, 6)) if width else draw(st.integers(1, 4))
    shapes = ["scrambled"] if tier == "hazard" else ["engine", "holes", "bonus only", "all accepted", "holes"]
    shape = draw(st.sampled_from(shapes))
    label(f"accept_index: {shape}")
    label("accept_index: B*S a power of two" if batch * width and not batch * width & (batch * width - 1)
          else "accept_index: B*S not a power of two")
    if width == 0:
        label("accept_index: S=0")
    if batch * width > ONE_PROGRAM:
        label(f"accept_index: more than {ONE_PROGRAM} entries (several programs)")
    if batch * width > COUNT_BLOCK + ACCEPT_BLOCK:
        label(f"accept_index: more than {COUNT_BLOCK + ACCEPT_BLOCK} entries (a program counts in several steps)")
    rng = draw(generator())
    index = accepted_rows(rng, batch, width, max(nodes, 1), shape)
    length = batch * max(nodes, 1) + draw(st.sampled_from([0, 0, 3]))
    if batch * width and draw(st.integers(0, 9)) == 9:   # no slots at all: every entry -1
        index, length = np.full_like(index, -1), 0
        label("out_cache_loc: empty (every entry -1)")
    dtype = draw(labelled_dtype("out_cache_loc", ctx))
    return Example(
        tier=tier,
        inputs={"accept_index": index, "out_cache_loc": cache_locations(rng, length, dtype, tier == "hazard")},
        outputs={"accepted_out_cache_loc": Buffer((batch * width,), dtype)},
        layouts={"accept_index": lay} if (lay := draw(layout(2))) is not None else {},
    )


def accept_out_cache_loc_hazard(ctx: DrawContext):
    return accept_out_cache_loc_valid(ctx, tier="hazard")


def accept_out_cache_loc_invariants(ex: Example, out: dict) -> list[str]:
    """Hazard tier: the first `count` entries are the kept entries' slots in row-major order (the tail
    is the harness's: it must keep its fill)."""
    index, loc = ex.inputs["accept_index"].reshape(-1), ex.inputs["out_cache_loc"]
    want = loc[index[index != -1].astype(np.int64)]
    got = out["accepted_out_cache_loc"][:len(want)]
    wrong = np.flatnonzero(got != want)
    if len(wrong):
        k = int(wrong[0])
        return [f"accepted_out_cache_loc[{k}] = {output_value(got[k])}, the {k}-th kept entry's slot is "
                f"{int(want[k])}"]
    return []


@st.composite
def accept_out_cache_loc_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(accept_out_cache_loc_valid(ctx))
    index, loc = ex.inputs["accept_index"], ex.inputs["out_cache_loc"]
    buf = ex.outputs["accepted_out_cache_loc"]
    batch, width = index.shape
    wider = Buffer((batch * (width + 2),), buf.dtype)
    other = "int32" if loc.dtype == np.int64 else "int64"
    found = []   # the value rules first: the ci profile's few draws favour the first candidates
    if index.size:
        b, s = draw(st.integers(0, batch - 1)), draw(st.integers(0, width - 1))
        for bad, rule in ((draw(st.sampled_from([-2, -5])), "entries >= -1"), (len(loc), "entries < L")):
            changed = index.copy()
            changed[b, s] = bad
            found.append(invalid(ex, "accept_index", rule, accept_index=changed))
    if batch:   # B*N nodes' room for a [B, S] array (B = 0 gives the same size)
        found.append(invalid(ex, "accepted_out_cache_loc", "B*S entries (B*N given)",
                             outputs={"accepted_out_cache_loc": wider}))
    found.append(invalid(ex, "accepted_out_cache_loc", "the dtype of out_cache_loc",
                         outputs={"accepted_out_cache_loc": Buffer(buf.shape, other)}))
    return draw(one_invalid(found))


def accept_out_cache_loc_table(ex: Example):
    index, loc = ex.inputs["accept_index"], ex.inputs["out_cache_loc"]
    def slots(row):   # entries outside [0, L) (invalid-tier cases) show as "?"
        return short([int(loc[e]) if 0 <= e < len(loc) else "?" for e in row.tolist() if e != -1])

    rows = [[b, short(index[b]), slots(index[b])] for b in range(len(index))]
    return ["req", "accept_index", "their out_cache_loc"], rows


# ---------------------------------------------------------------- kv.assign_req_to_token

@st.composite
def request_ranges(draw, rng, batch: int, rows: int, width: int, stress: bool) -> tuple[np.ndarray, ...]:
    """(req_pool_indices, start, end): distinct table rows in any order, or rows shared by several
    requests with disjoint ranges; lengths of decode steps (1 to 8), long ones (above 32, when L allows),
    zeros, and ranges ending exactly at L."""
    shared = (draw(st.booleans()) or rows < batch) and not stress
    label("rows: shared, disjoint ranges" if shared else "rows: distinct, unsorted")
    pool = rng.integers(0, rows, batch) if shared else rng.permutation(rows)[:batch]
    lengths = draw(st.sampled_from(["decode", "long", "mixed"]))
    lengths = "long" if stress else lengths
    label(f"lengths: {lengths}")
    start, end = np.zeros(batch, np.int64), np.zeros(batch, np.int64)
    for row in np.unique(pool):
        owners = rng.permutation(np.flatnonzero(pool == row))
        cuts = np.sort(rng.integers(0, width + 1, 2 * len(owners)))
        if lengths == "long" and len(owners) == 1 and width > 32:   # one range of more than 32
            cuts[0] = rng.integers(0, width - 32)
            cuts[1] = rng.integers(cuts[0] + 33, width + 1)
        if stress or rng.random() < 0.3:
            cuts[-1] = width                                   # the last range ends exactly at L
        for i, b in enumerate(owners):
            low, high = int(cuts[2 * i]), int(cuts[2 * i + 1])
            cap = {"decode": int(rng.integers(1, 9)), "long": high - low}.get(lengths, int(rng.integers(0, 48)))
            if rng.random() < 0.15:
                cap = 0
            start[b] = max(low, high - cap)
            end[b] = high
    if stress and batch:
        end[0] = start[0]                                      # a length-0 row
    if (end == width).any():
        label("ranges: one ends at L")
    if ((end - start) > 32).any():
        label("ranges: longer than 32")
    if ((end - start) == 0).any():
        label("ranges: length 0")
    return pool, start, end


@st.composite
def assign_req_to_token_valid(draw, ctx: DrawContext, tier: str = "valid") -> Example:
    kind = draw(mode())
    stress = kind == "stress"
    batch = 1 if kind == "single" else draw(batch_size(ctx, high=24 if ctx.small else 128))
    if stress:
        batch = ctx.limits("B", 0, draw(st.sampled_from([3, 5, 17, 33])))[1]
    elif kind != "single" and draw(st.sampled_from([False] * 5 + [True])):   # past a step of the Triton prefix sum
        batch = ctx.limits("B", 0, PREFIX_BLOCK + 76)[1]
    rows = max(1, draw(st.sampled_from([batch, batch + 1, batch + 4, batch // 2])))
    width = draw(st.sampled_from([1, 5, 8, 33, 70, 100, 0] if not ctx.small else [1, 5, 8, 40, 70, 0]))
    if stress:
        width, rows = max(width, 33), max(rows, batch)
    rng = draw(generator())
    if batch > REQUESTS:
        label(f"batch: more than {REQUESTS} requests (several programs)")
    if batch & (batch - 1):
        label("batch: B not a power of two")
    if batch > PREFIX_BLOCK:
        label(f"batch: more than {PREFIX_BLOCK} requests (a program sums the lengths before it in several steps)")
    if width == 0:
        label("req_to_token: no columns (every range empty, slots in out_cache_loc)")
    pool, start, end = draw(request_ranges(rng, batch, rows, width, stress))
    total = int((end - start).sum())
    if tier == "hazard":   # slots at 0 and 2**31 - 1 only, a tail of slots past int32 and below 0
        slots = rng.choice([0, INT32_MAX], total)
    else:
        slots = cache_locations(rng, total, "int32")
    tail = rng.integers(-2**40, 2**40, max(draw(st.sampled_from([0, 1, 7])), int(width == 0)))   # L = 0: some slots
    if len(tail):
        label("out_cache_loc: a tail past the sum of lengths")
    if ((end - start) > assign_tile_width(total + len(tail), batch)).any():
        label("ranges: longer than the Triton tile (several steps of a program)")
    tail[rng.random(len(tail)) < 0.5] = INT32_MAX + 1
    table = rng.integers(-2**31, 2**31, (rows, width)).astype(np.int32)
    lay = draw(layout(2, True if stress else None))
    if stress:    # with the other rare classes, a table stored column-major
        lay = replace(lay, order=(1, 0))
        label("req_to_token: transposed")
    return Example(
        tier=tier,
        inputs={"req_pool_indices": pool.astype(draw(labelled_dtype("req_pool_indices", ctx))), "start_offset": start,
                "end_offset": end, "out_cache_loc": np.concatenate([slots, tail]).astype(np.int64),
                "req_to_token": table},
        layouts={"req_to_token": lay} if lay is not None else {},
    )


def assign_req_to_token_hazard(ctx: DrawContext):
    return assign_req_to_token_valid(ctx, tier="hazard")


def assign_req_to_token_invariants(ex: Example, out: dict) -> list[str]:
    """Hazard tier: every element of the ranges holds its slot, every other element what it held."""
    x = ex.inputs
    want = x["req_to_token"].copy()
    o = 0
    for row, start, end in zip(x["req_pool_indices"].tolist(), x["start_offset"].tolist(), x["end_offset"].tolist()):
        want[row, start:end] = x["out_cache_loc"][o:o + end - start]
        o += end - start
    got = out["req_to_token"]
    wrong = np.argwhere(got != want)
    if len(wrong):
        r, c = (int(v) for v in wrong[0])
        return [f"req_to_token[{r}, {c}] = {int(got[r, c])}, the contract gives {int(want[r, c])}"]
    return []


@st.composite
def assign_req_to_token_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(assign_req_to_token_valid(ctx))
    x = ex.inputs
    pool, start, end, loc = x["req_pool_indices"], x["start_offset"], x["end_offset"], x["out_cache_loc"]
    rows, width = x["req_to_token"].shape
    total = int((end - start).sum())
    found = []   # the rules engines break first: the ci profile's few draws favour the first candidates
    long = np.flatnonzero(end > start)
    if len(long) >= 2:   # a second written range moved onto the first one's row, overlapping it
        a, b = int(long[0]), int(long[1])
        same, s, e = pool.copy(), start.copy(), end.copy()
        same[b], s[b], e[b] = pool[a], start[a], min(start[a] + end[b] - start[b], width)
        found.append(invalid(ex, "req_pool_indices", "no overlapping ranges on one row", req_pool_indices=same,
                             start_offset=s, end_offset=e))
    if total:
        high = loc.copy()
        high[draw(st.integers(0, total - 1))] = INT32_MAX + 1
        found.append(invalid(ex, "out_cache_loc", "slots < 2**31", out_cache_loc=high))
        found.append(invalid(ex, "out_cache_loc", "at least Σlen slots", out_cache_loc=loc[:total - 1]))
    if len(pool):
        b = draw(st.integers(0, len(pool) - 1))

        def changed(name, value, rule):
            a = x[name].copy()
            a[b] = value
            return invalid(ex, name, rule, **{name: a})

        found += [changed("start_offset", -1, "start >= 0"), changed("end_offset", width + 1, "end <= L"),
                  changed("req_pool_indices", rows, "rows in [0, P)"), changed("req_pool_indices", -1, "rows >= 0")]
        if end[b] > 0:
            found.append(changed("start_offset", int(end[b]) + 1, "start <= end"))
    if not found:   # B = 0: an empty batch is always valid; break a dtype the record allows no other way
        found.append(invalid(ex, "start_offset", "dtype int64", start_offset=start.astype(np.int32)))
    return draw(one_invalid(found))


def assign_req_to_token_table(ex: Example):
    x = ex.inputs
    rows, o = [], 0
    for b, (row, start, end) in enumerate(zip(x["req_pool_indices"].tolist(), x["start_offset"].tolist(),
                                              x["end_offset"].tolist())):
        rows.append([b, row, start, end, short(x["out_cache_loc"][o:o + end - start])])
        o += end - start
    return ["req", "table row", "start", "end", "slots"], rows



"""Strategies of the `graph` family.

Capacities are drawn like an engine's capture sizes (powers of two up to 256, then multiples of 256);
batches from empty to exactly full; the target-verify (K + 1 tokens per request), draft (1 token) and
ragged layouts; int32 and int64 index arrays; sliced (strided) inputs. The invalid tiers hold the value
rules only (over capacity, inconsistent offsets, out-of-range lengths and ids, bad flags): wrong dtypes,
ranks and lengths are generated from the records.
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from specverify.oracles.graph import INT32_MAX
from specverify.records.stage import Buffer, DrawContext, Example, Layout
from specverify.records.values import POISON_A, output_value
from specverify.strategies.blocks import (batch_size, exclusive_offsets, generator, invalid, label, label_programs,
                                          labelled_dtype, layout, one_invalid, power_of_two_at_least)
from specverify.strategies.eagle import buffers, column_rows

CAPTURE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 768, 1024)
DRAFT_KS = (1, 2, 3, 5, 7)       # K of target-verify layouts (K + 1 tokens per request)
VOCAB = 151936
# the Triton kernels' tiles (kernels/triton/graph.py): a shape past one of them runs two programs or more
TOKEN_TILE = 256                 # graph token slots per program (fill: TOKENS)
WIDE_ROW = 1100                  # dsa: block-table columns past one Triton tile of 1024
TABLE_TILE = 1024                # block-table entries per program, rows x columns padded to a power of two
REQUEST_TILE = 16                # most requests per program (step_context, dsa: REQUESTS)


def label_tile_crossing(q: np.ndarray, rows: int) -> None:
    """Label a query longer than `rows` / B rounded up to a power of two (rows: the token rows of the
    outputs): the width of the Triton kernels' token tiles, which such a query crosses in two steps or
    more."""
    if len(q) and int(q.max()) > power_of_two_at_least(-(-rows // len(q))):
        label("queries: one longer than the token tile")


def capture_size(ctx: DrawContext) -> st.SearchStrategy[int]:
    return st.sampled_from([s for s in CAPTURE_SIZES if s <= (256 if ctx.small else 1024)])


@st.composite
def query_layout(draw, batch: int, long_one: bool = False) -> tuple[int, np.ndarray]:
    """(width, q): target-verify (every q = K + 1), draft (every q = 1) or ragged (0 to width
    tokens each, a request without tokens among them); with `long_one` also decodes (q = 1) with one
    chunk of 9 to 80 tokens among them (width: its length), longer than a token tile sized for the mean."""
    kinds = ["target_verify", "target_verify", "draft", "ragged"] + (["long among decodes"] if long_one else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "draft":
        width = 1
    elif kind == "long among decodes":
        width = draw(st.integers(9, 80))
    else:
        width = draw(st.sampled_from(DRAFT_KS)) + 1
    if kind == "ragged":
        q = draw(generator()).integers(0, width + 1, batch)
    elif kind == "long among decodes":
        q = np.ones(batch, np.int64)
        if batch:
            q[draw(st.integers(0, batch - 1))] = width
    else:
        q = np.full(batch, width, np.int64)
    label(f"layout: {kind}")
    return width, q.astype(np.int64)


def packed_positions(history: np.ndarray, q: np.ndarray) -> np.ndarray:
    """history[b] + 0, 1, ..., q[b] - 1 for every request, packed (int64)."""
    parts = [h + np.arange(n, dtype=np.int64) for h, n in zip(history.tolist(), q.tolist())]
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


@st.composite
def sliced(draw, names: list[str], ndim: int = 1) -> dict[str, Layout]:
    """Example.layouts: each named input, independently, now and then a strided view of a larger buffer."""
    found = {}
    for name in names:
        drawn = draw(layout(ndim))
        if drawn is not None:
            found[name] = drawn
    return found


@st.composite
def central_or_other(draw, central: list[Example], others: list[Example]) -> Example:
    """Half the draws break one of the stage's central rules (capacity; the rank and the query offsets),
    the other half any of its remaining value rules, so the ci profile's few draws reach both."""
    pool = central if central and (not others or draw(st.booleans())) else others
    return draw(one_invalid(pool))


def set_at(values: np.ndarray, index, value) -> np.ndarray:
    changed = values.copy()
    changed[index] = value
    return changed


# ---------------------------------------------------------------- graph.fill_common_inputs

@st.composite
def fill_common_inputs_valid(draw, ctx: DrawContext) -> Example:
    max_batch = draw(capture_size(ctx))
    most = ctx.limits("B", 0, max_batch)[1]
    batch = draw(st.one_of(st.just(most), st.sampled_from([min(1, most), 0]), st.integers(0, most)))
    label("fill: batch = capacity" if batch == max_batch else "fill: B = 0" if batch == 0 else "fill: B < capacity")
    width, q = draw(query_layout(batch))
    max_tokens = max_batch * width + draw(st.sampled_from([0, 0, 0, 5]))
    if int(q.sum()) == max_tokens:
        label("fill: tokens = capacity")
    if max_tokens > TOKEN_TILE:
        label("fill: more than one token program")
    low, high = ctx.limits("pad_query_len", 0, max(width, 1))
    pad = draw(st.sampled_from([min(max(p, low), high) for p in (width, width, 0, 1)]))
    max_blocks = draw(st.sampled_from([1, 3, 4, 16, 17, 64, 100, 128] if not ctx.small else [1, 3, 4, 16, 17, 64]))   # widths off a power of two: a tile wider than the row
    blocks = draw(st.one_of(st.just(max_blocks), st.integers(0, max_blocks)))
    if blocks == max_blocks:
        label("fill: blocks per request = capacity")
    if max_batch * power_of_two_at_least(max_blocks) > TABLE_TILE:
        label("fill: more than one block-table program")
    if pad == 0 and batch < max_batch:
        label("fill: padding requests with PAD = 0")
    rng = draw(generator())
    history = rng.integers(0, 16 * max(blocks, 1) * 64, batch)
    if batch and draw(st.integers(0, 4)) == 0:   # contexts so long the running kv sum nears int32
        label("fill: kv running sum near int32")
        room = (INT32_MAX - pad * (max_batch - batch)) // batch - width
        history = np.minimum(rng.integers(room // 2, room + 1, batch), room)
    dtypes = {f: draw(labelled_dtype(f, ctx)) for f in ("block_offsets", "q_start_loc", "q_seqlens", "kv_seqlens")}
    top = draw(st.sampled_from([4096, INT32_MAX]))
    table = rng.integers(0, top, (batch, blocks), endpoint=True)
    if top == INT32_MAX and table.size:
        table.reshape(-1)[0] = INT32_MAX
        label("fill: block id 2**31 - 1")
    tokens = int(q.sum())
    layouts = draw(sliced(["input_ids", "position_ids", "q_start_loc", "q_seqlens", "kv_seqlens", "pad_ids"]))
    layouts.update(draw(sliced(["block_offsets"], 2)))
    if layouts:
        label("fill: strided inputs")
    return Example(
        tier="valid",
        inputs={"input_ids": rng.integers(0, VOCAB, tokens), "position_ids": packed_positions(history, q),
                "block_offsets": table.astype(dtypes["block_offsets"]),
                "q_start_loc": exclusive_offsets(q, dtypes["q_start_loc"])[:-1],
                "q_seqlens": q.astype(dtypes["q_seqlens"]), "kv_seqlens": (q + history).astype(dtypes["kv_seqlens"]),
                "pad_ids": rng.integers(0, VOCAB, max_tokens), "pad_query_len": pad},
        outputs=buffers(graph_input_ids=((max_tokens,), "int64"), graph_position_ids=((max_tokens,), "int64"),
                        graph_block_offsets=((max_batch, max_blocks), "int32"),
                        graph_qkv_lens=((3, max_batch), "int32"), graph_cu_seqlens=((2, max_batch + 1), "int32")),
        layouts=layouts,
    )


def fill_over_capacity(ex: Example) -> list[Example]:
    """One request, one block per row and one token more than the graph holds."""
    x = ex.inputs
    max_batch, max_blocks = ex.outputs["graph_block_offsets"].shape
    max_tokens = ex.outputs["graph_input_ids"].shape[0]
    batch, blocks = x["block_offsets"].shape
    tokens = len(x["input_ids"])
    more = max_batch + 1 - batch              # requests without tokens: only the batch breaks
    grow = lambda a, value: np.concatenate([a, np.full(more, value, a.dtype)])   # noqa: E731
    found = [
        invalid(ex, "block_offsets", "B <= MB", block_offsets=np.vstack(
                    [x["block_offsets"], np.ones((more, blocks), x["block_offsets"].dtype)]),
                q_start_loc=grow(x["q_start_loc"], tokens), q_seqlens=grow(x["q_seqlens"], 0),
                kv_seqlens=grow(x["kv_seqlens"], 1)),
        invalid(ex, "block_offsets", "NB <= MNB", block_offsets=np.hstack(
                    [x["block_offsets"], np.ones((batch, max_blocks + 1 - blocks), x["block_offsets"].dtype)])),
    ]
    if batch:   # the last request's query grows past the token capacity
        extra = max_tokens + 1 - tokens
        found.append(invalid(ex, "input_ids", "N <= MT",
                             input_ids=np.concatenate([x["input_ids"], np.arange(extra)]),
                             position_ids=np.concatenate([x["position_ids"], np.arange(extra)]),
                             q_seqlens=set_at(x["q_seqlens"], -1, int(x["q_seqlens"][-1]) + extra)))
    return found


@st.composite
def fill_common_inputs_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(fill_common_inputs_valid(ctx))
    x = ex.inputs
    max_batch = ex.outputs["graph_block_offsets"].shape[0]
    batch, blocks = x["block_offsets"].shape
    found = [invalid(ex, "pad_query_len", "pad_query_len >= 0", pad_query_len=-1)]
    if max_batch > batch:
        found.append(invalid(ex, "pad_query_len", "padding rows fit int32",
                             pad_query_len=INT32_MAX // (max_batch - batch) + 1))
    if batch:
        q, kv, start = x["q_seqlens"], x["kv_seqlens"], x["q_start_loc"]
        found += [invalid(ex, "q_seqlens", "q >= 0", q_seqlens=set_at(q, 0, -1)),
                  invalid(ex, "q_seqlens", "sum(q) == N", q_seqlens=set_at(q, -1, int(q[-1]) + 1)),
                  invalid(ex, "kv_seqlens", "kv >= 0", kv_seqlens=set_at(kv, -1, -1)),
                  invalid(ex, "q_start_loc", "starts at 0", q_start_loc=set_at(start, 0, 1))]
        others = int(kv.astype(np.int64).sum()) - int(kv[0]) + int(x["pad_query_len"]) * (max_batch - batch)
        if others > 0:
            found.append(invalid(ex, "kv_seqlens", "running sum fits int32", kv_seqlens=set_at(kv, 0, INT32_MAX)))
        if batch >= 2:
            found.append(invalid(ex, "q_start_loc", "exclusive running sum of q",
                                 q_start_loc=set_at(start, batch - 1, int(start[-1]) + 1)))
        if blocks:
            table = x["block_offsets"]
            found.append(invalid(ex, "block_offsets", "block ids >= 0", block_offsets=set_at(table, (0, 0), -1)))
            if table.dtype == np.int64:
                found.append(invalid(ex, "block_offsets", "block ids fit int32",
                                     block_offsets=set_at(table, (batch - 1, blocks - 1), INT32_MAX + 1)))
    return draw(central_or_other(fill_over_capacity(ex), found))


def fill_common_inputs_table(ex: Example):
    """A first row with the sizes against the capacities, then the real requests and the padding ones."""
    x = ex.inputs
    max_batch, max_blocks = ex.outputs["graph_block_offsets"].shape
    (batch, blocks), pad = x["block_offsets"].shape, x["pad_query_len"]
    headers, rows = column_rows(kind=["real"] * batch, q_start=x["q_start_loc"], q=x["q_seqlens"],
                               kv=x["kv_seqlens"], blocks=x["block_offsets"])
    sizes = ["sizes", f"B={batch} of MB={max_batch}", "", f"N={len(x['input_ids'])} of "
             f"MT={ex.outputs['graph_input_ids'].shape[0]}", f"PAD={pad}", f"NB={blocks} of MNB={max_blocks}"]
    return headers, [sizes] + rows + [[b, "pad", 0, pad, pad, "0 ..."] for b in range(batch, max_batch)]


# ---------------------------------------------------------------- graph.step_context

@st.composite
def step_context_valid(draw, ctx: DrawContext, low: int = 0) -> Example:
    batch = draw(batch_size(ctx, low))
    _, q = draw(query_layout(batch, long_one=True))
    if draw(st.integers(0, 9)) == 0:
        q[:] = 0
        label("step: every query empty")
    uniform = batch == 0 or bool((q == q[0]).all())
    flag = uniform and draw(st.booleans())
    label(f"step: uniform={uniform}, flag={flag}")
    label_programs(batch, REQUEST_TILE)
    label_tile_crossing(q, int(q.sum()))
    dtype = draw(labelled_dtype("q_seqlens", ctx))
    rng = draw(generator())
    history = rng.integers(0, 4096, batch) * draw(st.sampled_from([0, 1, 1]))
    window = draw(st.sampled_from(["none", "some", "all"]))
    label(f"step: sliding window ignores {window} history")
    ignored = {"none": np.zeros(batch, np.int64), "some": rng.integers(0, history + 1), "all": history}[window]
    if dtype == "int64" and window != "none" and draw(st.booleans()):
        label("step: history beyond int32 (positions need int64)")
        history = history + 2**31 + rng.integers(0, 5, batch)
        ignored = ignored + 2**31 + rng.integers(0, 5, batch)
        ignored = np.minimum(ignored, history)
    elif dtype == "int32" and window != "none" and draw(st.booleans()):
        label("step: int32 history at the top of int32 (positions past it need int64)")
        history = INT32_MAX - rng.integers(0, 4, batch)
        ignored = history - (rng.integers(0, 8, batch) if window == "some" else 0)   # kv and its sums stay small
    tokens = int(q.sum())
    return Example(
        tier="valid",
        inputs={"q_seqlens": q.astype(dtype), "history_lengths": history.astype(dtype),
                "num_ignored_history": ignored.astype(dtype), "uniform_layout": flag},
        outputs=buffers(q_start_loc=((batch,), dtype), kv_seqlens=((batch,), dtype),
                        position_ids=((tokens,), "int64"), cu_seqlens=((2, batch + 1), "int32")),
        layouts=draw(sliced(["q_seqlens", "history_lengths", "num_ignored_history"])),
    )


@st.composite
def step_context_invalid(draw, ctx: DrawContext) -> Example:
    if draw(st.booleans()):
        return draw(one_invalid([draw(step_broken_promise(ctx))]))
    ex = draw(step_context_valid(ctx))
    x = ex.inputs
    q, history, ignored = x["q_seqlens"], x["history_lengths"], x["num_ignored_history"]
    batch, tokens = len(q), int(q.astype(np.int64).sum())
    found = [invalid(ex, "position_ids", "length sum(q)", uniform_layout=False,
                     outputs={"position_ids": Buffer((tokens + 1,), "int64")})]
    if batch:
        kv = q.astype(np.int64) + history - ignored
        found += [invalid(ex, "q_seqlens", "q >= 0", q_seqlens=set_at(q, 0, -1)),
                  invalid(ex, "history_lengths", "history >= 0", history_lengths=set_at(history, -1, -1)),
                  invalid(ex, "num_ignored_history", "ignored >= 0", num_ignored_history=set_at(ignored, 0, -1))]
        if int(history[-1]) < np.iinfo(history.dtype).max:      # one more than the history fits its dtype
            found.append(invalid(ex, "num_ignored_history", "ignored <= history",
                                 num_ignored_history=set_at(ignored, -1, int(history[-1]) + 1)))
        if int(q[0]) + int(kv[1:].sum()) > 0:
            found.append(invalid(ex, "history_lengths", "running kv sum fits int32",
                                 history_lengths=set_at(history, 0, INT32_MAX),
                                 num_ignored_history=set_at(ignored, 0, 0)))
    return draw(one_invalid(found))


@st.composite
def step_broken_promise(draw, ctx: DrawContext) -> Example:
    """Half the invalid draws: the uniform fast path asked for on queries of different lengths (the
    first B longer, the last 2B if need be: N still splits into B equal parts)."""
    ex = draw(step_context_valid(ctx, low=2))
    q = ex.inputs["q_seqlens"]
    batch, tokens = len(q), int(q.astype(np.int64).sum())
    longer = set_at(q, 0, int(q[0]) + batch)
    if (longer == longer[0]).all():
        longer[-1] += batch
    return invalid(ex, "uniform_layout", "every q equal", uniform_layout=True, q_seqlens=longer,
                   outputs={"position_ids": Buffer((tokens + int(longer.sum()) - int(q.sum()),), "int64")})


def step_context_table(ex: Example):
    x = ex.inputs
    return column_rows(q=x["q_seqlens"], history=x["history_lengths"], ignored=x["num_ignored_history"],
                      uniform_layout=[x["uniform_layout"]] * len(x["q_seqlens"]))


# ---------------------------------------------------------------- graph.dsa_indexer_metadata

@st.composite
def dsa_indexer_metadata_example(draw, ctx: DrawContext, tier: str) -> Example:
    """Valid: every kv >= q. Hazard: some requests' kv shorter than their query (down to 0)."""
    batch = draw(batch_size(ctx, low=1 if tier == "hazard" else 0))
    width, q = draw(query_layout(batch, long_one=True))
    rng = draw(generator())
    history = rng.integers(0, 3000, batch) * draw(st.sampled_from([0, 1, 1]))
    kv = q + history
    if tier == "hazard":
        short = rng.random(batch) < draw(st.sampled_from([0.3, 1.0]))
        kv = np.where(short, rng.integers(0, np.maximum(q, 1)), kv)
        q[short & (q == 0)] = 1                      # the short requests have a query to fall short of
        label("hazard: kv shorter than q" if (kv < q).any() else "hazard: kv = q")
    tokens = int(q.sum())
    size = draw(st.sampled_from(["exact", "spare", "capture"]))
    capture = next((s for s in CAPTURE_SIZES if s * width >= tokens), tokens)
    n_rows = {"exact": tokens, "spare": tokens + 3, "capture": max(capture * width, tokens)}[size]
    label(f"dsa: N {size}")
    if n_rows > tokens:
        label("dsa: rows past the queries")
    dcp = draw(st.sampled_from([1, 1, 2, 4, 4, 3, 8]))
    rank = draw(st.integers(0, dcp - 1))
    label(f"dsa: dcp_size {dcp}" + (", last rank" if rank == dcp - 1 and dcp > 1 else ""))
    if rank > 0:
        label("dsa: rank > 0")
    if ((kv - q + 1 <= rank) & (q > 0)).any():
        label("dsa: a token with no entries on this rank")
    label_programs(batch, REQUEST_TILE)
    label_tile_crossing(q, n_rows)
    # NB not a power of two too, and a row wider than a Triton program's 1024 columns (a 128K context in
    # blocks of 64 holds 2048)
    blocks = draw(st.sampled_from([1, 3, 4, 16, 17, 64, WIDE_ROW] if not ctx.small else [1, 3, 4, 16, WIDE_ROW]))
    if blocks > TABLE_TILE:
        label("dsa: a block row wider than 1024 columns")
    dtypes = {f: draw(labelled_dtype(f, ctx)) for f in ("q_seqlens", "kv_seqlens", "cu_q", "block_offsets")}
    table = rng.integers(0, draw(st.sampled_from([4096, INT32_MAX])), (batch, blocks), endpoint=True)
    layouts = draw(sliced(["q_seqlens", "kv_seqlens", "cu_q"]))
    layouts.update(draw(sliced(["block_offsets"], 2)))
    return Example(
        tier=tier,
        inputs={"q_seqlens": q.astype(dtypes["q_seqlens"]), "kv_seqlens": kv.astype(dtypes["kv_seqlens"]),
                "cu_q": exclusive_offsets(q, dtypes["cu_q"]), "block_offsets": table.astype(dtypes["block_offsets"]),
                "N": n_rows, "dcp_size": dcp, "dcp_rank": rank},
        outputs=buffers(indexer_kv_lens=((n_rows,), "int32"), expanded_block_table=((n_rows, blocks), "int32")),
        layouts=layouts,
    )


def dsa_indexer_metadata_valid(ctx: DrawContext):
    return dsa_indexer_metadata_example(ctx, "valid")


def dsa_indexer_metadata_hazard(ctx: DrawContext):
    return dsa_indexer_metadata_example(ctx, "hazard")


def dsa_indexer_metadata_invariants(ex: Example, views: dict) -> list[str]:
    """Every query token's length is the rank's share of its causal prefix, 0 (never negative) when
    that prefix is empty; its block row is its request's; rows past the queries are untouched."""
    x = ex.inputs
    lens, table = views["indexer_kv_lens"], views["expanded_block_table"]
    dcp, rank = x["dcp_size"], x["dcp_rank"]
    cu = x["cu_q"].astype(np.int64)
    for b, (q, kv) in enumerate(zip(x["q_seqlens"].tolist(), x["kv_seqlens"].tolist())):
        for j in range(q):
            row = int(cu[b]) + j
            want = max((kv - q + j + 1 + dcp - 1 - rank) // dcp, 0)
            if int(lens[row]) != want:
                return [f"indexer_kv_lens[{row}]: request {b} token {j} (q={q}, kv={kv}) needs {want}, "
                        f"got {output_value(lens[row])}"]
            if not np.array_equal(table[row], x["block_offsets"][b].astype(np.int32)):
                return [f"expanded_block_table[{row}]: not request {b}'s block row"]
    tail = int(cu[-1])
    for name, view in (("indexer_kv_lens", lens), ("expanded_block_table", table)):
        if not (view[tail:].reshape(-1).view(np.uint8) == POISON_A).all():
            return [f"{name}: a row past the {tail} query tokens was written"]
    return []


@st.composite
def dsa_indexer_metadata_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(dsa_indexer_metadata_valid(ctx))
    x = ex.inputs
    q, kv, cu = x["q_seqlens"], x["kv_seqlens"], x["cu_q"]
    batch, blocks = x["block_offsets"].shape
    tokens, dcp = int(cu[-1]), x["dcp_size"]
    central = [invalid(ex, "dcp_rank", "rank < dcp_size", dcp_rank=dcp),
               invalid(ex, "dcp_rank", "rank >= 0", dcp_rank=-1)]
    found = [invalid(ex, "dcp_size", "dcp_size >= 1", dcp_size=0, dcp_rank=0),
             invalid(ex, "N", "N = rows of the outputs", N=x["N"] + 1)]
    if tokens:
        central.append(invalid(ex, "N", "the queries fit N rows", N=tokens - 1,
                               outputs=buffers(indexer_kv_lens=((tokens - 1,), "int32"),
                                               expanded_block_table=((tokens - 1, blocks), "int32"))))
    if batch:
        central.append(invalid(ex, "cu_q", "exclusive running sum of q", cu_q=set_at(cu, 1, int(cu[1]) + 1)))
        found += [invalid(ex, "q_seqlens", "q >= 0", q_seqlens=set_at(q, 0, -1)),
                  invalid(ex, "kv_seqlens", "kv >= 0", kv_seqlens=set_at(kv, -1, -1)),
                  invalid(ex, "cu_q", "starts at 0", cu_q=cu + np.asarray(1, cu.dtype)),
                  invalid(ex, "block_offsets", "block ids >= 0",
                          block_offsets=set_at(x["block_offsets"], (batch - 1, 0), -1))]
        if kv.dtype == np.int64:
            found.append(invalid(ex, "kv_seqlens", "kv fits int32", kv_seqlens=set_at(kv, 0, INT32_MAX + 1)))
        if x["block_offsets"].dtype == np.int64:
            found.append(invalid(ex, "block_offsets", "block ids fit int32",
                                 block_offsets=set_at(x["block_offsets"], (0, blocks - 1), INT32_MAX + 1)))
    return draw(central_or_other(central, found))


def dsa_indexer_metadata_table(ex: Example):
    x = ex.inputs
    batch = len(x["q_seqlens"])
    headers, rows = column_rows(cu_q=x["cu_q"][:-1], q=x["q_seqlens"], kv=x["kv_seqlens"],
                               dcp=[f"rank {x['dcp_rank']} of {x['dcp_size']}"] * batch, blocks=x["block_offsets"])
    padding = ["rows", int(x["cu_q"][-1]), f"to N={x['N']}", "", "", "untouched"]
    return headers, rows + [padding]



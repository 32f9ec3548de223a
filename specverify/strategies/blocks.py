"""Building blocks every family's strategies draw from.

Structure (batch sizes, per-request counts, vocab sizes, layouts, dtypes, where the hazards sit) is
drawn by Hypothesis so it shrinks; bulk values come from a NumPy generator seeded by a drawn integer,
so large arrays cost one draw. Every block labels what it drew with `label()` (Hypothesis `event`).
"""
from __future__ import annotations

from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import lru_cache, wraps

import numpy as np
from hypothesis import assume, event
from hypothesis import strategies as st
from hypothesis import target

from specverify.records.stage import Buffer, DrawContext, Example, Layout

PLACEHOLDER = -1
VOCAB_EDGES = (1, 2, 8191, 8192, 8193, 151936)   # one id, tile edges and a real vocabulary (Qwen's)
MODES = ("plain", "plain", "plain", "single", "stress", "stress")

INVALID = "invalid: "   # the label of an invalid example breaking a value rule: INVALID + its `invalid_rule` key
# the row tile of the Triton row-parallel kernels (kernels/triton/eagle.py and stop.py: BLOCK_ROWS, ROW_TILE): at
# most 32 rows of 1024 elements
TILE_ROWS, TILE_ELEMENTS = 32, 1024

coverage: ContextVar[Counter | None] = ContextVar("specverify_coverage", default=None)
# value rules (`invalid_rule` keys) the invalid tier's draws offered, where a search gathers them; and the one
# rule a search asks (None: any)
rules_offered: ContextVar[set | None] = ContextVar("specverify_rules_offered", default=None)
rule_asked: ContextVar[str | None] = ContextVar("specverify_rule_asked", default=None)


def reused(factory):
    """`factory` (a function that builds a strategy) giving one strategy object per distinct hashable
    arguments: Hypothesis validates a strategy object at its first draw, which a block built anew for
    every example would pay each time. The draws are the same."""
    cached = lru_cache(maxsize=4096)(factory)

    @wraps(factory)
    def build(*args, **kwargs):
        try:
            return cached(*args, **kwargs)
        except TypeError:          # an unhashable argument (a declared domain holding lists, say)
            return factory(*args, **kwargs)

    return build


def label(text: str) -> None:
    """Record an equivalence class the current example belongs to."""
    event(text)
    seen = coverage.get()
    if seen is not None:
        seen[text] += 1


def power_of_two_at_least(n: int) -> int:
    """n rounded up to a power of two (at least 1), as the Triton kernels pad a tile's side."""
    return 1 << max(n - 1, 0).bit_length()


def tile_rows(width: int) -> int:
    """Rows per program of a Triton row tile over rows `width` wide (padded to a power of two): a batch of more
    rows than this spreads over two programs or more."""
    return max(1, min(TILE_ROWS, TILE_ELEMENTS // power_of_two_at_least(width)))


def label_programs(batch: int, rows: int) -> None:
    """Label a batch that spreads over two or more programs of `rows` rows each."""
    if batch > rows:
        label("batch: more than one program")


def aim(value: float, metric: str) -> None:
    """A boundary metric the nightly profile's targeting phase pushes upwards (Hypothesis `target`)."""
    target(float(value), label=metric)


@st.composite
def _generator(draw) -> np.random.Generator:
    return np.random.default_rng(draw(st.integers(0, 2**32 - 1)))


GENERATOR = _generator()


def generator():
    """A NumPy generator for bulk values; shrinks towards seed 0."""
    return GENERATOR


@reused
@st.composite
def mode(draw) -> str:
    """How rare classes are drawn: "plain" (each at its own rate), "single" (one request with one
    token), or "stress" (several rare classes switched on together, e.g. a long request with
    placeholder and out-of-vocabulary ids, a large batch with discarded rows). Shrinks to "plain".
    A strategy makes the ordinary draws in every mode and applies the stress overrides after them, so
    a shrinker that turns stress off keeps the rest of the case."""
    chosen = draw(st.sampled_from(MODES))
    label(f"mode: {chosen}")
    return chosen


@reused
@st.composite
def bound(draw, high: int, small: int = 4) -> int:
    """An exclusive upper bound for bulk values drawn below `high`: `high` itself three times in four,
    else a small one (2 to `small`). The small one comes first, so shrinking reaches it when the
    failure does not need large values, and a shrunk case shows 0, 1, 2 rather than 117342."""
    which = draw(st.sampled_from(["small", "full", "full", "full"]))
    low = draw(st.integers(2, max(2, min(small, high))))   # drawn either way: the choices stay aligned
    if which == "small" and high > 2:
        label("values: small")
        return low   # 0 and at least one other value
    return high


@dataclass(frozen=True)
class DraftBatch:
    """Per-request draft counts and the max_spec_len they respect."""
    counts: np.ndarray      # int64 [B]
    max_spec_len: int

    @property
    def batch(self) -> int:
        return len(self.counts)

    @property
    def num_tokens(self) -> int:
        return int(self.counts.sum())


@reused
def batch_size(ctx: DrawContext, low: int = 0, high: int | None = None) -> st.SearchStrategy[int]:
    """0 or 1, small (up to 16), and anything up to `high` and the context's limit."""
    high = max(low, ctx.max_batch if high is None else min(high, ctx.max_batch))
    bands = [(low, 1), (max(low, 2), 16), (max(low, 17), high)]
    return st.one_of(*[st.integers(a, min(b, high)) for a, b in bands if a <= min(b, high)])


@reused
@st.composite
def draft_batch(draw, ctx: DrawContext, low: int = 0, max_tokens: int | None = None,
                kind: str | None = None) -> DraftBatch:
    """Per-request draft counts: empty batches, uniform K, ragged with zeros, mostly-zero, and a few
    requests of more than 128 drafts among short ones; max_spec_len at or above the largest count.
    At most `max_tokens` (and the context's limit) drafts in all: later requests lose drafts first.
    `kind` (a `mode`, drawn when not given): "single" is one request with one draft, "stress" has
    a long request (among short and empty ones when B > 1; ragged counts when the budget has no
    room for a long request). Within the declared bounds on `max_spec_len` (a long request at most as long
    as the upper one allows)."""
    cap = ctx.max_tokens if max_tokens is None else min(max_tokens, ctx.max_tokens)
    shortest, longest = ctx.limits("max_spec_len", 0, 1 << 62)
    kind = kind or draw(mode())
    if kind == "single" and low <= 1:
        label("batch: one request, one draft")
        spec = 1 + draw(st.sampled_from([0, 0, 1]))
        return DraftBatch(np.ones(1, np.int64), max(shortest, min(spec, longest)))
    shape = draw(st.sampled_from(["uniform", "ragged", "sparse", "long", "long"]))
    if kind == "stress":   # a long request where the token budget has room for one
        shape = "long" if cap > 128 else "ragged"
    spec = draw(st.integers(0, min(8, longest))) if shape != "long" else \
        draw(st.integers(min(129, longest), min(300, longest)))
    budget = max(1, cap // max(spec, 1))
    batch = draw(batch_size(ctx, low, budget))
    rng = draw(generator())
    if shape == "uniform":
        counts = np.full(batch, draw(st.integers(0, spec)), np.int64)
    elif shape == "ragged":
        counts = rng.integers(0, spec + 1, batch)
    elif shape == "sparse":
        counts = np.where(rng.random(batch) < 0.2, rng.integers(0, spec + 1, batch), 0)
    else:
        counts = rng.integers(0, 5, batch)
        counts[rng.random(batch) < 0.1] = spec
        if batch:
            counts[draw(st.integers(0, batch - 1))] = spec
    spec = max(shortest, min(longest, max(spec, int(counts.max(initial=0))) + draw(st.sampled_from([0, 0, 1, 3]))))
    ends = np.minimum(np.cumsum(counts), cap)
    if len(ends) and ends[-1] < counts.sum():
        label("batch: drafts cut to the token budget")
        counts = np.diff(ends, prepend=0)
    label(f"batch: {shape}")
    label("batch: B=0" if batch == 0 else "batch: B=1" if batch == 1 else "batch: B>1")
    if batch and (counts == 0).any():
        label("batch: a request with no drafts")
    if counts.max(initial=0) > 128:
        label("batch: a request with more than 128 drafts")
    return DraftBatch(counts.astype(np.int64), spec)


def inclusive_offsets(counts: np.ndarray, dtype: str = "int32") -> np.ndarray:
    """cu[r] = counts[0] + ... + counts[r] (no leading 0)."""
    return np.cumsum(counts, dtype=np.int64).astype(dtype)


def exclusive_offsets(counts: np.ndarray, dtype: str = "int32") -> np.ndarray:
    """[0, counts[0], counts[0] + counts[1], ...] of length B + 1."""
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(dtype)


@reused
@st.composite
def vocab_size(draw, ctx: DrawContext) -> int:
    """A single id, tile edges (2, 8191, 8192, 8193, 151936) and small sizes; the interpreter stays
    below 8194. Within the declared domain's bounds on V (or vocab_size)."""
    low, high = ctx.limits("V", *ctx.limits("vocab_size", 1, 8193 if ctx.small else max(VOCAB_EDGES)))
    edges = [v for v in VOCAB_EDGES if low <= v <= high]
    small = st.integers(low, max(low, min(high, low + 299)))
    vocab = draw(st.one_of(st.sampled_from(edges), small) if edges else small)
    label("vocab: V=1" if vocab == 1 else "vocab: tile edge or real size" if vocab in VOCAB_EDGES else "vocab: small")
    return vocab


@reused
@st.composite
def host_hint(draw, name: str, largest: int, given: bool | None = None) -> int | None:
    """An optional host hint of a value the data holds (`largest`): None (unless the declared domain says
    it is always `given`), the value itself, or above it."""
    hint = draw(st.sampled_from([None, 0, 0, 1, 3]))
    hint = 0 if given and hint is None else hint
    label(f"{name}: {'None' if hint is None else 'exact' if hint == 0 else 'above the data'}")
    return None if hint is None else largest + hint


SMALL_ARRAY = 8   # arrays up to this size get their values drawn one by one (they shrink to 0, 1, ...)


@reused
@st.composite
def token_ids(draw, size: int, vocab: int, dtype: str = "int32", stress: bool = False,
              excluded: frozenset[str] = frozenset()) -> np.ndarray:
    """Ids in [0, V) (or a small part of it, see `bound`), with placeholder (-1) and out-of-vocabulary
    (V, V+7) ids mixed in at drawn rates (both when `stress`), except the kinds a declared domain
    `excluded` ("placeholder", "oov"). Up to SMALL_ARRAY ids are drawn one by one, so a shrunk case
    shows the smallest ids that still fail."""
    mix = draw(st.sampled_from(["valid", "placeholders", "oov", "both"]))
    mix = "both" if stress else mix
    label(f"ids: {mix}")
    specials = {"valid": [], "placeholders": [PLACEHOLDER], "oov": [vocab, vocab + 7],
                "both": [PLACEHOLDER, vocab, vocab + 7]}[mix]
    specials = [v for v in specials if ("placeholder" if v == PLACEHOLDER else "oov") not in excluded]
    if size <= SMALL_ARRAY:
        label("ids: drawn one by one")
        valid = st.integers(0, vocab - 1)
        one = st.one_of(valid, valid, valid, st.sampled_from(specials)) if specials else valid
        return np.array(draw(st.lists(one, min_size=size, max_size=size)), dtype)
    rng = draw(generator())
    ids = rng.integers(0, draw(bound(vocab)), size)
    if PLACEHOLDER in specials:
        ids[rng.random(size) < 0.2] = PLACEHOLDER
    if vocab in specials:
        oov = rng.random(size) < 0.2
        ids[oov] = vocab + rng.choice([0, 7], size)[oov]
    return ids.astype(dtype)


@reused
@st.composite
def layout(draw, ndim: int, strided: bool | None = None) -> Layout | None:
    """None (contiguous) or a strided view (always when `strided`): a step of 1-3 on every axis, the
    last (column) axis included, and padding after every axis (the row stride exceeds the row); never
    a layout that is contiguous after all. One in four views of two or more axes is stored in another
    axis order (a transposed view: the column stride exceeds the row stride)."""
    chosen = draw(st.booleans())
    if not ndim or not (chosen if strided is None else strided):
        return None
    steps = tuple(draw(st.integers(1, 3)) for _ in range(ndim))
    pads = tuple(draw(st.integers(0, 5)) for _ in range(ndim))
    if all(step == 1 for step in steps) and not any(pads[1:]):
        pads = pads[:-1] + (draw(st.integers(1, 5)),) if ndim > 1 else pads
        steps = steps if ndim > 1 else (draw(st.integers(2, 3)),)
    label("layout: strided")
    if steps[-1] > 1:
        label("layout: column step > 1")
    if ndim > 1 and (steps[0] > 1 or any(pads[1:])):
        label("layout: row stride > row length")
    order = tuple(draw(st.permutations(range(ndim)))) if ndim > 1 and draw(st.integers(0, 3)) == 0 else None
    if order == tuple(range(ndim)):
        order = None
    if order is not None:
        label("layout: transposed")
    return Layout(steps, pads, order)


@reused
def index_dtype(allowed: tuple[str, ...] = ("int32", "int64")) -> st.SearchStrategy[str]:
    return st.sampled_from(allowed)


@reused
@st.composite
def labelled_dtype(draw, field: str, ctx: DrawContext) -> str:
    """int32 or int64 for an index field whose dtype the contract leaves open (within the declared domain)."""
    dtype = ctx.dtype(field, draw(index_dtype()))
    label(f"dtype: {field} {dtype}")
    return dtype


def invalid(example: Example, field: str, rule: str, outputs: dict[str, Buffer] | None = None,
            **inputs) -> Example:
    """A copy of a valid example that breaks `rule` of `field` (new input values, new output buffers)."""
    return replace(example, tier="invalid", bad_field=field, rule=rule,
                   inputs={**example.inputs, **inputs}, outputs={**example.outputs, **(outputs or {})})


def short(values, limit: int = 10) -> str:
    """A list for a report cell: the first `limit` values (floats as the shortest text of their dtype)."""
    items = [str(int(v)) if isinstance(v, (np.integer, np.bool_)) else str(v) if isinstance(v, np.floating)
             else repr(v) for v in list(values)[:limit]]
    return "[" + ", ".join(items) + (", ...]" if len(values) > limit else "]")


def request_rows(cu_inclusive: np.ndarray, per_token: dict[str, np.ndarray],
                 per_request: dict[str, object]) -> tuple[list[str], list[list]]:
    """A row table of a flattened batch: one row per request, its count, its per-request values and
    the slices of its per-token arrays (None-valued columns show as None)."""
    headers = ["req", "n", *per_request, *per_token]
    rows = []
    for r in range(len(cu_inclusive)):
        start, end = (0 if r == 0 else int(cu_inclusive[r - 1])), int(cu_inclusive[r])
        row = [r, end - start]
        row += [None if v is None else (v[r].item() if r < len(v) else "?") for v in per_request.values()]
        row += [short(v[start:end]) for v in per_token.values()]
        rows.append(row)
    return headers, rows


def invalid_rule(example: Example) -> str:
    """The key of the value rule an invalid example breaks: "field: rule"."""
    return f"{example.bad_field}: {example.rule}"


def asked_rules(counts: Counter) -> set[str]:
    """The value rules (`invalid_rule` keys) among the classes `counts` holds: those its examples broke."""
    return {name.removeprefix(INVALID) for name in counts if name.startswith(INVALID)}


@st.composite
def one_invalid(draw, candidates: list[Example]) -> Example:
    """One of several invalid variants (value rules), each as likely, labelled "invalid: field: rule"; the rules
    offered are gathered in `rules_offered`. Where a search asks one rule (`rule_asked`), a variant breaking
    it, and a draw that offers none is rejected."""
    offered, asked = rules_offered.get(), rule_asked.get()
    if offered is not None:
        offered.update(map(invalid_rule, candidates))
    pool = [c for c in candidates if asked is None or invalid_rule(c) == asked]
    assume(pool)
    chosen = pool[draw(st.integers(0, len(pool) - 1))]
    label(INVALID + invalid_rule(chosen))
    return chosen

"""Strategies of the `rejection` family."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from specverify.stage import Buffer, DrawContext, Example
from specverify.strategies.blocks import (PLACEHOLDER, draft_batch, generator, inclusive_offsets, invalid,
                                          label, one_invalid, request_rows, vocab_size)


@st.composite
def greedy_rows(draw, batch: int) -> np.ndarray | None:
    """is_greedy: None (every row greedy), all True, all False, or mixed."""
    kind = draw(st.sampled_from(["none", "all", "no", "mixed"]))
    label(f"is_greedy: {kind}")
    if kind == "none":
        return None
    if kind == "mixed":
        return draw(generator()).random(batch) < 0.5
    return np.full(batch, kind == "all")


@st.composite
def drafts_against(draw, target: np.ndarray, counts: np.ndarray, vocab: int) -> np.ndarray:
    """int32 drafts for flattened requests: each request matches `target` for a drawn prefix (all, none,
    anywhere, or near its end), then differs (another valid id, a placeholder or an out-of-vocabulary
    id); after that first difference, drafts match again at random, which must not matter."""
    rng = draw(generator())
    kind = draw(st.sampled_from(["all", "none", "anywhere", "near the end"]))
    label(f"drafts: accepted prefix {kind}")
    accepted = {"all": counts, "none": np.zeros_like(counts),
                "anywhere": rng.integers(0, counts + 1),
                "near the end": np.maximum(counts - rng.integers(1, 4, len(counts)), 0)}[kind]
    size = len(target)
    request = np.repeat(np.arange(len(counts)), counts)
    position = np.arange(size) - np.repeat(np.cumsum(counts) - counts, counts)
    other = (target + 1 + rng.integers(0, vocab - 1, size)) % vocab
    oov = vocab + rng.choice([0, 7], size)
    other = np.select([rng.random(size) < 0.2, rng.random(size) < 0.2], [PLACEHOLDER, oov], other)
    after_cut = position > accepted[request]
    matches = (position < accepted[request]) | (after_cut & (rng.random(size) < 0.5))
    return np.where(matches, target, other).astype(np.int32)


@st.composite
def greedy_valid(draw, ctx: DrawContext) -> Example:
    batch = draw(draft_batch(ctx))
    vocab = draw(vocab_size(ctx))
    rng = draw(generator())
    argmax = rng.integers(0, vocab, batch.num_tokens).astype(np.int64)
    return Example(
        tier="valid",
        inputs={
            "draft_token_ids": draw(drafts_against(argmax, batch.counts, vocab)),
            "target_argmax": argmax,
            "bonus_token_ids": rng.integers(0, vocab, batch.batch).astype(np.int64),
            "cu_num_draft_tokens": inclusive_offsets(batch.counts),
            "is_greedy": draw(greedy_rows(batch.batch)),
            "max_spec_len": batch.max_spec_len,
        },
        outputs={"output_token_ids": Buffer((batch.batch, batch.max_spec_len + 1), "int32")},
    )


def batch_corruptions(ex: Example) -> list[Example]:
    """Invalid variants every flattened-layout stage shares: offsets, counts, ids, dtypes, lengths."""
    x = ex.inputs
    cu, draft, spec = x["cu_num_draft_tokens"], x["draft_token_ids"], x["max_spec_len"]
    batch, counts = len(cu), np.diff(cu, prepend=0)
    out = ex.outputs["output_token_ids"]
    found = [
        invalid(ex, "draft_token_ids", "dtype int32", draft_token_ids=draft.astype(np.int64)),
        invalid(ex, "cu_num_draft_tokens", "dtype int32", cu_num_draft_tokens=cu.astype(np.int64)),
        invalid(ex, "output_token_ids", "dtype int32",
                outputs={"output_token_ids": Buffer(out.shape, "int64")}),
        invalid(ex, "output_token_ids", "shape [B, max_spec_len + 1]",
                outputs={"output_token_ids": Buffer((batch, spec + 2), "int32")}),
    ]
    if batch >= 2 and cu[0] > 0:
        bad = cu.copy()
        bad[1] = cu[0] - 1
        found.append(invalid(ex, "cu_num_draft_tokens", "non-decreasing", cu_num_draft_tokens=bad))
    if batch and counts.max() > 0:
        smaller = int(counts.max()) - 1
        found.append(invalid(ex, "cu_num_draft_tokens", "counts <= max_spec_len", max_spec_len=smaller,
                             outputs={"output_token_ids": Buffer((batch, smaller + 1), "int32")}))
    if len(draft):
        below = draft.copy()
        below[len(draft) // 2] = -2 - len(draft) % 5
        found.append(invalid(ex, "draft_token_ids", "ids >= -1", draft_token_ids=below))
        found.append(invalid(ex, "cu_num_draft_tokens", "last offset == number of tokens",
                             draft_token_ids=draft[:-1]))
    if x.get("is_greedy") is not None:
        found.append(invalid(ex, "is_greedy", "length B", is_greedy=np.append(x["is_greedy"], True)))
        found.append(invalid(ex, "is_greedy", "dtype bool", is_greedy=x["is_greedy"].astype(np.int32)))
    return found


@st.composite
def greedy_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(greedy_valid(ctx))
    x = ex.inputs
    found = batch_corruptions(ex) + [
        invalid(ex, "target_argmax", "dtype int64", target_argmax=x["target_argmax"].astype(np.int32)),
        invalid(ex, "target_argmax", "length T", target_argmax=np.append(x["target_argmax"], 0)),
        invalid(ex, "bonus_token_ids", "length B", bonus_token_ids=x["bonus_token_ids"][1:]),
    ]
    if len(x["target_argmax"]):
        neg = x["target_argmax"].copy()
        neg[0] = -1
        found.append(invalid(ex, "target_argmax", "ids >= 0", target_argmax=neg))
    return draw(one_invalid(found))


def greedy_table(ex: Example):
    x = ex.inputs
    return request_rows(x["cu_num_draft_tokens"],
                        per_token={"draft_token_ids": x["draft_token_ids"], "target_argmax": x["target_argmax"]},
                        per_request={"is_greedy": x["is_greedy"], "bonus": x["bonus_token_ids"]})

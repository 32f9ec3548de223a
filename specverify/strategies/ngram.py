"""Strategies of the `ngram` family: token histories that reach every place where n-gram rules differ.

Each request plays one history kind, drawn on purpose (Hypothesis draws which kind the batch focuses on, or a
mix, so a failure shrinks to the kind that shows it): periodic histories, whose longest suffix occurs several
times (the occurrence rule decides); a pattern planted at several earlier places with different followers; a
run of one token at the end (the only match ends at L - 2: one follower); one token repeated throughout (every
n matches); empty histories; histories of min_n - 1 to min_n + 1 tokens; and random ones. The length cap is put
at a request's length less 1, exactly, or plus 1; the draft width K often exceeds the histories; the buffer's
positions past each history hold traps (copies of the pattern, -1, the largest id) that a kernel reading there
would match. Ids come from a small alphabet mapped to 0, small ids or ids just below 2**31.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import strategies as st

from specverify.oracles.ngram import ID_LIMIT, RULES, suffix_search
from specverify.records.stage import Buffer, DrawContext, Example
from specverify.records.values import output_value
from specverify.strategies.blocks import batch_size, generator, invalid, label, labelled_dtype, layout, one_invalid

KINDS = ("periodic", "planted", "one follower", "repeated", "empty", "short", "random")
POOLED_BATCH = 12          # a pooled rule's oracle searches every pair of requests: small batches
LONG_BATCH = 4             # requests in a batch of long histories (several blocks of a program's loop)
INTERPRETED_BATCH = 6      # Triton's interpreter: a few milliseconds per request and pattern token
TRAPS = ("the pattern", "-1", "the largest id", "zeros")
SIZES = ("few", "tens of", "few", "tens of", "tens of", "few", "tens of", "several hundred")   # buffer widths T


def alphabet_ids(draw, size: int, tier: str) -> np.ndarray:
    """The ids a batch's letters 0..size-1 stand for: from 0, small, or just below 2**31 (the hazard tier:
    0 and the largest id always among them, the tokens a fill value or an overflow would imitate)."""
    where = "zero and the largest" if tier == "hazard" else draw(st.sampled_from(
        ["small", "from zero", "small", "near 2**31", "zero and the largest"]))
    label(f"ids: {where}")
    if where == "near 2**31":
        return ID_LIMIT - 1 - np.arange(size)
    if where == "zero and the largest":
        return np.concatenate([[0, ID_LIMIT - 1], 1 + np.arange(max(0, size - 2))])[:size]
    return np.arange(size) + (0 if where == "from zero" else 1)


def history(rng: np.random.Generator, kind: str, width: int, letters: int, min_n: int, max_n: int) -> list[int]:
    """Letter indices of one request's history of kind `kind`, at most `width` long."""
    if kind == "empty" or width == 0:
        return []
    if kind == "short":
        return rng.integers(0, letters, min(width, max(0, min_n + int(rng.integers(-1, 2))))).tolist()
    length = int(width if rng.random() < 0.3 else rng.integers(1, width + 1))
    if kind == "repeated":     # half no longer than max_n + 1: the longest pattern is then the history less a token
        length = min(length, int(rng.integers(1, max_n + 2))) if rng.random() < 0.5 else length
        return [int(rng.integers(0, letters))] * length
    if kind == "periodic":
        period = rng.integers(0, letters, int(rng.integers(1, 5)))
        h = np.resize(period, length)
        noisy = rng.random(length) < 0.1
        h[noisy] = rng.integers(0, letters, int(noisy.sum()))
        return h.tolist()
    h = rng.integers(0, letters, length)
    n = int(rng.integers(min_n, max_n + 1))
    if kind == "one follower" and length > n:
        h[length - n - 1:] = h[-1]
    elif kind == "planted" and length > n + 1:
        for s in rng.integers(0, length - n, int(rng.integers(1, 4))):
            h[s:s + n] = h[length - n:]
    return h.tolist()


def cap(draw, rng: np.random.Generator, lengths: np.ndarray, width: int, k: int, proposing: np.ndarray) -> int:
    """max_model_len: far above every history, or at a request's length less 1, exactly, or plus 1 (a request
    with a proposal, where there is one)."""
    where = draw(st.sampled_from(["far", "at a request", "at a request", "tight", "at a request"]))
    if where == "far" or not len(lengths) or not lengths.max():
        label("cap: far")
        return width + k + int(rng.integers(0, 5))
    if where == "tight":
        label("cap: below the longest history")
        return max(1, int(rng.integers(1, int(lengths.max()) + 1)))
    step = draw(st.sampled_from([-1, 0, 1]))
    candidates = np.flatnonzero(proposing) if proposing.any() else np.arange(len(lengths))
    return max(1, int(lengths[candidates[int(rng.integers(0, len(candidates)))]]) + step)


def cap_reached(proposals: list[list[int]], lengths: np.ndarray, max_model_len: int) -> None:
    """Label where the cap falls, read off the drawn requests (any of them) and their uncapped `proposals`:
    max_model_len - L of -1, 0 or 1 for a request with a proposal, and a cap that cuts a proposal short
    (vLLM #42533)."""
    room = max_model_len - lengths
    for gap in sorted({int(r) for proposal, r in zip(proposals, room) if proposal} & {-1, 0, 1}):
        label(f"cap: max_model_len - L = {gap} for a request")
    if any(len(proposal) > max(0, r) for proposal, r in zip(proposals, room.tolist())):
        label("cap: cuts a proposal short")


def trapped_tail(buffer: np.ndarray, lengths: np.ndarray, letters_ids: np.ndarray, trap: str) -> None:
    """Fill each row's positions past its history with `trap` (never read by a correct kernel)."""
    for b, length in enumerate(lengths):
        tail = buffer[b, length:]
        if trap == "the pattern":
            tail[:] = np.resize(buffer[b, max(0, length - 3):length] if length else letters_ids, len(tail))
        else:
            tail[:] = {"-1": -1, "the largest id": ID_LIMIT - 1, "zeros": 0}[trap]


@st.composite
def propose_valid(draw, ctx: DrawContext, tier: str = "valid", pooled: bool = False) -> Example:
    rng = draw(generator())
    size = draw(st.sampled_from(SIZES))
    size = "few" if size == "several hundred" and ctx.small and draw(st.integers(0, 4)) else size
    label(f"histories: {size} tokens")
    width = draw(st.integers(*{"few": (0, 12), "tens of": (0, 48), "several hundred": (100, 600)}[size]))
    high = POOLED_BATCH if pooled else (LONG_BATCH if width >= 100 else None)
    batch = draw(batch_size(ctx, high=min(high or INTERPRETED_BATCH, INTERPRETED_BATCH) if ctx.small else high))
    min_n = draw(st.integers(1, 3))
    wide = draw(st.integers(0, 9 if ctx.small else 1)) == 0      # the interpreter: a pattern loop of 64, rarely
    max_n = 64 if wide else draw(st.integers(min_n, min_n + 4))
    if max_n > width:
        label("max_n > T")
    k = draw(st.integers(1, 8))
    letters = draw(st.sampled_from([1, 2, 3, 4, 8, 50]))
    ids = alphabet_ids(draw, letters, tier)
    focus = draw(st.sampled_from(("mixed",) * 6 + KINDS))
    kind = st.sampled_from(KINDS) if focus == "mixed" else st.just(focus)
    # a kind and a seed per request: the shrinker drops requests and keeps the others' histories
    requests = draw(st.lists(st.tuples(kind, st.integers(0, 2**32 - 1)), min_size=batch, max_size=batch))
    for name in sorted({name for name, _ in requests}):
        label(f"history: {name}")
    rows = [history(np.random.default_rng(seed), name, width, letters, min_n, max_n) for name, seed in requests]
    lengths = np.array([len(h) for h in rows], np.int64)
    if batch and lengths.max(initial=0) < k:
        label("K > every L")
    tok_dtype, len_dtype = draw(labelled_dtype("token_ids", ctx)), draw(labelled_dtype("num_tokens", ctx))
    buffer = np.zeros((batch, width), np.int64)
    for b, h in enumerate(rows):
        buffer[b, :len(h)] = ids[h] if h else []
    if any(ID_LIMIT - 1 in buffer[b, :length] for b, length in enumerate(lengths)):
        label("ids: 2**31 - 1 in a history")
    trap = draw(st.sampled_from(TRAPS))
    label(f"past the history: {trap}")
    trapped_tail(buffer, lengths, ids, trap)
    out = draw(layout(2))
    uncapped = [proposal for proposal, _ in
                suffix_search(RULES["uncapped"], buffer, lengths, min_n, max_n, max(1, width + k), k)]
    max_model_len = cap(draw, rng, lengths, width, k, np.array([len(p) > 0 for p in uncapped], bool))
    cap_reached(uncapped, lengths, max_model_len)
    return Example(
        tier=tier,
        inputs={"token_ids": buffer.astype(tok_dtype), "num_tokens": lengths.astype(len_dtype), "min_n": min_n,
                "max_n": max_n, "max_model_len": max_model_len},
        outputs={"draft_token_ids": Buffer((batch, k), tok_dtype, out), "num_draft_tokens": Buffer((batch,), "int32")},
        layouts={name: value for name, value in {"token_ids": draw(layout(2))}.items() if value is not None},
    )


def propose_pooled_valid(ctx: DrawContext):
    """A pooled rule's draws: batches of at most POOLED_BATCH requests."""
    return propose_valid(ctx, pooled=True)


def propose_hazard(ctx: DrawContext):
    """Histories whose ids imitate the fill values (0, the last token) and the largest id."""
    return propose_valid(ctx, tier="hazard")


def propose_pooled_hazard(ctx: DrawContext):
    return propose_valid(ctx, tier="hazard", pooled=True)


def invariants_of(rule_name: str):
    """The hazard tier's judge under rule `rule_name`: each request's drafts, count and fill equal the
    independent suffix-length search (`oracles.ngram.suffix_search`)."""
    rule = RULES[rule_name]

    def invariants(ex: Example, out: dict) -> list[str]:
        x = ex.inputs
        drafts, counts = out["draft_token_ids"], out["num_draft_tokens"]
        found = suffix_search(rule, x["token_ids"], x["num_tokens"], x["min_n"], x["max_n"], x["max_model_len"],
                              drafts.shape[1])
        broken = []
        for b, (proposal, fill) in enumerate(found):
            count = len(proposal)
            if int(counts[b]) != count:
                broken.append(f"num_draft_tokens[{b}]: {output_value(counts[b:b + 1])}, the suffix search "
                              f"proposes {count} token(s) {proposal}")
                continue
            wanted = proposal + ([fill] * (drafts.shape[1] - count) if fill is not None else [])
            got = [int(v) for v in drafts[b, :len(wanted)]]
            if got != wanted:
                broken.append(f"draft_token_ids[{b}]: {got}, the suffix search gives {wanted}")
        return broken[:3]

    invariants.__name__ = f"propose_{rule_name}_invariants" if rule_name else "propose_invariants"
    return invariants


propose_invariants = invariants_of("")


@st.composite
def propose_invalid(draw, ctx: DrawContext) -> Example:
    ex = draw(propose_valid(ctx))
    x, outs = ex.inputs, ex.outputs
    tokens, lengths = x["token_ids"], x["num_tokens"]
    batch, width = tokens.shape
    k = outs["draft_token_ids"].shape[1]
    other = "int64" if tokens.dtype == np.int32 else "int32"
    found = [invalid(ex, "min_n", ">= 1", min_n=0),
             invalid(ex, "max_n", ">= min_n", max_n=x["min_n"] - 1),
             invalid(ex, "max_model_len", ">= 1", max_model_len=0),
             invalid(ex, "draft_token_ids", "K >= 1 columns", outputs={"draft_token_ids": Buffer((batch, 0),
                                                                                                  tokens.dtype.name)}),
             invalid(ex, "draft_token_ids", "the dtype of token_ids",
                     outputs={"draft_token_ids": Buffer((batch, k), other)})]
    if batch:
        r = int(draw(st.integers(0, batch - 1)))
        longer = lengths.copy()
        longer[r] = width + 1
        found.append(invalid(ex, "num_tokens", "<= T", num_tokens=longer))
        negative = lengths.copy()
        negative[r] = -1
        found.append(invalid(ex, "num_tokens", ">= 0", num_tokens=negative))
        if lengths[r]:
            bad = tokens.copy()
            bad[r, int(draw(st.integers(0, int(lengths[r]) - 1)))] = -1
            found.append(invalid(ex, "token_ids", "history ids >= 0", token_ids=bad))
            if tokens.dtype == np.int64:
                bad = tokens.copy()
                bad[r, int(lengths[r]) - 1] = ID_LIMIT
                found.append(invalid(ex, "token_ids", "history ids < 2**31", token_ids=bad))
    return draw(one_invalid(found))


def propose_twin(ex: Example) -> tuple[Example, int] | None:
    """The example with one request's history changed (the longest one, reversed; where that changes
    nothing, each id's lowest bit flipped), and that request; None for fewer than two requests."""
    tokens, lengths = ex.inputs["token_ids"], ex.inputs["num_tokens"]
    if len(lengths) < 2 or not int(lengths.max()):
        return None
    r = int(np.argmax(lengths))
    changed = tokens.copy()
    h = changed[r, :int(lengths[r])]
    flipped = h[::-1].copy()
    changed[r, :len(h)] = flipped if not np.array_equal(flipped, h) else h ^ 1
    return replace(ex, inputs={**ex.inputs, "token_ids": changed}), r


def tail(values, limit: int = 12) -> str:
    """The last `limit` values of a history (where its pattern is)."""
    items = [str(int(v)) for v in values]
    return "[" + ("..., " if len(items) > limit else "") + ", ".join(items[-limit:]) + "]"


def propose_table(ex: Example):
    x = ex.inputs
    rows = [[b, int(length), tail(x["token_ids"][b, :int(length)]), min(x["max_n"], max(int(length) - 1, 0)),
             x["max_model_len"] - int(length)] for b, length in enumerate(x["num_tokens"])]
    return ["req", "L", "history (its end)", "longest n tried", "max_model_len - L"], rows

"""Oracle of the `ngram` family: prompt-lookup (n-gram) drafting, no draft model.

Loop-level and obviously correct; destination passing; invalid input refused with an error naming the field.
`check_propose` is shared with the production kernels (`values=False` skips the checks that read array
contents). Every rule the engines ship is a `Rule` of three choices (which occurrence, what fills the draft
slots no proposal reaches, whether the model's length caps the drafts); `propose` is the record's rule and the
other `propose_*` functions its dialects. `suffix_search` is a second, independent reference: it measures, for
every position of every searched history, how many tokens before it agree with the end of the history, and
picks by a sort key, as a pooled engine does.

The common rule, for request b with history h = token_ids[b, :L] (L = num_tokens[b]) and K draft slots: for n
from min(max_n, L - 1) down to min_n, a match is a window h[s : s+n] equal to the pattern h[L-n : L] with at
least one follower (s + n <= L - 1); the first n with a match decides, the rule's occurrence picks its s, and
the proposal is h[s+n : s+n+k'] cut at the end of the history, k' = K, or min(K, max_model_len - L) where the
rule caps (nothing at all when that is <= 0). Slots past the proposal hold the rule's fill.

Choices where the sources are silent:
- the batch is the pool of a pooled rule (`pooled`): its matches may lie in any request's history, each with its
  own followers; the key is (match length, own history first, newest or oldest start, lowest request).
- the "last token" fill of an empty history is -1 (there is no last token); a history shorter than min_n + 1
  has no match (a window needs a follower).
- ids are vocabulary ids in [0, 2**31) in either dtype; positions of token_ids past num_tokens are never read.
"""
from __future__ import annotations

from dataclasses import dataclass

from specverify.oracles.arguments import dtype_name, need_at_least, need_dtype, need_int, need_ndim, need_shape

IDS = ("int32", "int64")
NO_MATCH = -1
ID_LIMIT = 2**31                   # ids are below this in either dtype
OCCURRENCES = ("leftmost", "rightmost", "newest", "oldest")   # the last two: pooled, keyed
FILLS = ("-1", "0", "last", "none")


@dataclass(frozen=True)
class Rule:
    """One engine's rule: `occurrence` leftmost or rightmost start among the longest matches of the request's
    own history, or newest / oldest by the pooled key; `fill` what the slots past the proposal hold ("-1", "0",
    "last": the history's last token, "none": left unwritten); `capped`: at most max_model_len - L drafts."""
    occurrence: str
    fill: str
    capped: bool

    @property
    def pooled(self) -> bool:
        """Whether matches are searched in every request's history (information flows between requests)."""
        return self.occurrence in ("newest", "oldest")


RULES = {
    "": Rule("leftmost", "-1", True),
    "short": Rule("leftmost", "none", True),
    "uncapped": Rule("leftmost", "-1", False),
    "rightmost_last": Rule("rightmost", "last", False),
    "trtllm_newest": Rule("newest", "0", False),
    "trtllm_oldest": Rule("oldest", "0", False),
}


def check_propose(token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids, num_draft_tokens,
                  values: bool = True) -> tuple[int, int, int]:
    """The argument checks of `propose`; returns (B, T, K)."""
    need_dtype("token_ids", token_ids, *IDS)
    need_ndim("token_ids", token_ids, 2)
    batch, width = token_ids.shape
    rows = "B = rows of token_ids"
    need_dtype("num_tokens", num_tokens, *IDS)
    need_shape("num_tokens", num_tokens, (batch,), rows)
    need_int("min_n", min_n, 1)
    need_int("max_n", max_n, min_n)
    need_int("max_model_len", max_model_len, 1)
    need_dtype("draft_token_ids", draft_token_ids, dtype_name(token_ids), source="the dtype of token_ids")
    need_ndim("draft_token_ids", draft_token_ids, 2)
    need_shape("draft_token_ids", draft_token_ids, (batch, draft_token_ids.shape[1]), rows)
    k = draft_token_ids.shape[1]
    if k < 1:
        raise ValueError("draft_token_ids: needs K >= 1 columns (the drafts wanted), got 0")
    need_dtype("num_draft_tokens", num_draft_tokens, "int32")
    need_shape("num_draft_tokens", num_draft_tokens, (batch,), rows)
    if values and batch:
        need_at_least("num_tokens", num_tokens, 0)
        if bool((num_tokens > width).any()):
            raise ValueError(f"num_tokens: must be <= T = {width} (the columns of token_ids), found "
                             f"{int(num_tokens.max())}")
        wide = dtype_name(token_ids) == "int64"     # an int32 id is below 2**31 already
        for b in range(batch):
            history = token_ids[b, :int(num_tokens[b])]
            if len(history) and (bool((history < 0).any()) or wide and bool((history >= ID_LIMIT).any())):
                raise ValueError(f"token_ids: history ids must be in [0, 2**31) (request {b}'s first "
                                 f"num_tokens entries)")
    return batch, width, k


def history(token_ids, num_tokens, b: int) -> list[int]:
    return [int(t) for t in token_ids[b, :int(num_tokens[b])]]


def budget(rule: Rule, k: int, length: int, max_model_len: int) -> int:
    """Drafts a request may get: K, or min(K, max_model_len - L) under a cap (<= 0: none)."""
    return min(k, max_model_len - length) if rule.capped else k


def own_match(h: list[int], min_n: int, max_n: int, occurrence: str) -> tuple[int, int]:
    """(n, s) of the request's own longest match by `occurrence`, or (0, NO_MATCH)."""
    length = len(h)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        pattern = h[length - n:]
        starts = [s for s in range(0, length - n) if h[s:s + n] == pattern]   # s + n <= L - 1
        if starts:
            return n, (starts[0] if occurrence == "leftmost" else starts[-1])
    return 0, NO_MATCH


def pooled_match(histories: list[list[int]], b: int, min_n: int, max_n: int, occurrence: str):
    """(n, request, s) of request b's longest match in any history by the pooled key, or (0, b, NO_MATCH)."""
    h = histories[b]
    best, chosen = None, (0, b, NO_MATCH)
    for n in range(min(max_n, len(h) - 1), min_n - 1, -1):
        pattern = h[len(h) - n:]
        for j, other in enumerate(histories):
            for s in range(0, len(other) - n):
                if other[s:s + n] == pattern:
                    key = (n, j == b, s if occurrence == "newest" else -s, -j)
                    if best is None or key > best:
                        best, chosen = key, (n, j, s)
        if best is not None:
            return chosen
    return chosen


def fill_value(rule: Rule, h: list[int]) -> int | None:
    if rule.fill == "none":
        return None
    if rule.fill == "last":
        return h[-1] if h else -1
    return int(rule.fill)


def proposed(rule: Rule, *, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
             num_draft_tokens) -> None:
    """The drafts of every request under `rule` (see the module's docstring)."""
    batch, _, k = check_propose(token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                                num_draft_tokens)
    histories = [history(token_ids, num_tokens, b) for b in range(batch)]
    for b in range(batch):
        h = histories[b]
        if rule.pooled:
            n, source, s = pooled_match(histories, b, min_n, max_n, rule.occurrence)
        else:
            (n, s), source = own_match(h, min_n, max_n, rule.occurrence), b
        drafts = []
        if s != NO_MATCH:
            drafts = histories[source][s + n:s + n + max(0, budget(rule, k, len(h), max_model_len))]
        num_draft_tokens[b] = len(drafts)
        for i, t in enumerate(drafts):
            draft_token_ids[b, i] = t
        fill = fill_value(rule, h)
        if fill is not None:
            for i in range(len(drafts), k):
                draft_token_ids[b, i] = fill


def suffix_search(rule: Rule, token_ids, num_tokens, min_n: int, max_n: int, max_model_len: int,
                  k: int) -> list[tuple[list[int], int | None]]:
    """The independent reference: per request, (its proposal, its fill or None). For every end position e
    with a follower in each searched history, the match length m = how many tokens up to e agree with the
    request's last tokens (at most max_n and L - 1); the largest key (m, own, start order, -request) with
    m >= min_n decides."""
    batch = len(num_tokens)
    hs = [history(token_ids, num_tokens, b) for b in range(batch)]
    found = []
    for b in range(batch):
        h = hs[b]
        best = None
        searched = range(batch) if rule.pooled else [b]
        for j in searched:
            other = hs[j]
            for e in range(len(other) - 1):
                m = 0
                while m < min(max_n, len(h) - 1) and m <= e and other[e - m] == h[len(h) - 1 - m]:
                    m += 1
                if m < min_n:
                    continue
                start = e - m + 1
                order = start if rule.occurrence in ("rightmost", "newest") else -start
                key = (m, j == b, order, -j)
                if best is None or key > best[0]:
                    best = (key, j, e)
        proposal = []
        if best is not None:
            _, j, e = best
            proposal = hs[j][e + 1:e + 1 + max(0, budget(rule, k, len(h), max_model_len))]
        found.append((proposal, fill_value(rule, h)))
    return found


def propose(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
            num_draft_tokens) -> None:
    """Longest match, its leftmost occurrence, -1 past the proposal, at most max_model_len - L drafts."""
    proposed(RULES[""], **locals())


def propose_short(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                  num_draft_tokens) -> None:
    """As `propose`, the slots past the proposal left unwritten (an engine that returns fewer than K)."""
    proposed(RULES["short"], **locals())


def propose_uncapped(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                     num_draft_tokens) -> None:
    """As `propose`, without the max_model_len cap (drafts may run past the model's length)."""
    proposed(RULES["uncapped"], **locals())


def propose_rightmost_last(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                           num_draft_tokens) -> None:
    """Longest match, its rightmost occurrence, the history's last token past the proposal, no cap."""
    proposed(RULES["rightmost_last"], **locals())


def propose_trtllm_newest(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                          num_draft_tokens) -> None:
    """Pooled over the batch: the longest match in any history, own history first, then the newest (largest)
    start, then the lowest request; 0 past the proposal; no cap."""
    proposed(RULES["trtllm_newest"], **locals())


def propose_trtllm_oldest(*, token_ids, num_tokens, min_n, max_n, max_model_len, draft_token_ids,
                          num_draft_tokens) -> None:
    """As `propose_trtllm_newest`, the oldest (smallest) start first."""
    proposed(RULES["trtllm_oldest"], **locals())

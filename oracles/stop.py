"""Oracle of the `stop` family: the engine's stop check after a speculative step.

Loop-level and obviously correct; destination passing; invalid input refused with an error naming the
field. `check_spec_stopping` is shared with the production kernels (`values=False` skips the checks
that read array contents). `sequential_stopping` is a second, independent reference: the same tokens
fed one at a time through an ordinary, non-speculative stop check.

Choices where STAGES.md is silent:
- the rows hold an emitted prefix of ids >= 0 (OOV ids included: without a vocabulary size they are
  ordinary ids that match no stop id) followed only by -1; `num_rejected_tokens`, when given, counts
  those -1 exactly. Either way a row emits `K+1 - (number of -1)` tokens; with the counts given a
  kernel need not scan the row for them.
- `stop_ids` rows are matched only against their own request's tokens; a -1 entry is padding wherever
  it sits and never matches anything. `stop_ids` None or of width 0: only the length budget stops.
- the budget `num_appendable` A (max_new_tokens less the tokens so far) may be 0 or negative on entry:
  the first emitted token then stops the request. The new budget has A's dtype and must fit it.
"""
from __future__ import annotations

from specverify.oracles.arguments import dtype_name, need_at_least, need_dtype, need_ndim

PLACEHOLDER = -1
IDS = ("int32", "int64")
LOWEST = {"int32": -2**31, "int64": -2**63}


def need_sized(name: str, a, shape: tuple[int, ...], source: str) -> None:
    """A shape check that also names where the size comes from, so that of two fields disagreeing on a
    size, the error names both."""
    if tuple(a.shape) != tuple(shape):
        raise ValueError(f"{name}: shape must be {list(shape)} ({source}), got {list(a.shape)}")


def check_spec_stopping(output_token_ids, num_rejected_tokens, num_appendable, stop_ids, stop_pos, stopped,
                        new_num_appendable, values: bool = True) -> tuple[int, int]:
    """The argument checks of `spec_stopping`; returns (B, K+1)."""
    need_dtype("output_token_ids", output_token_ids, *IDS)
    need_ndim("output_token_ids", output_token_ids, 2)
    batch, width = output_token_ids.shape
    if width < 1:
        raise ValueError("output_token_ids: needs K+1 >= 1 columns, got 0")
    rows = "B = rows of output_token_ids"
    if num_rejected_tokens is not None:
        need_dtype("num_rejected_tokens", num_rejected_tokens, *IDS)
        need_sized("num_rejected_tokens", num_rejected_tokens, (batch,), rows)
    need_dtype("num_appendable", num_appendable, *IDS)
    need_sized("num_appendable", num_appendable, (batch,), rows)
    if stop_ids is not None:
        need_dtype("stop_ids", stop_ids, *IDS)
        need_ndim("stop_ids", stop_ids, 2)
        need_sized("stop_ids", stop_ids, (batch, stop_ids.shape[1]), rows)
    need_dtype("stop_pos", stop_pos, "int32")
    need_sized("stop_pos", stop_pos, (batch,), rows)
    need_dtype("stopped", stopped, "bool")
    need_sized("stopped", stopped, (batch,), rows)
    need_dtype("new_num_appendable", new_num_appendable, dtype_name(num_appendable))
    need_sized("new_num_appendable", new_num_appendable, (batch,), rows)
    if values and batch:
        need_at_least("output_token_ids", output_token_ids, PLACEHOLDER)
        gap = output_token_ids == PLACEHOLDER
        if bool((gap[:, :-1] & ~gap[:, 1:]).any()):
            raise ValueError("output_token_ids: an id follows a -1 (rows are an emitted prefix, then -1)")
        if num_rejected_tokens is not None and bool((gap.sum(1) != num_rejected_tokens).any()):
            raise ValueError("num_rejected_tokens: must count the -1 entries of each row (0 to K+1)")
        if stop_ids is not None:
            need_at_least("stop_ids", stop_ids, PLACEHOLDER)
        lowest = LOWEST[dtype_name(num_appendable)] + width
        if bool((num_appendable < lowest).any()):
            raise ValueError(f"num_appendable: must be >= {lowest} so that A - emitted fits "
                             f"{dtype_name(num_appendable)}, found {int(num_appendable.min())}")
    return batch, width


def spec_stopping(*, output_token_ids, num_rejected_tokens, num_appendable, stop_ids, stop_pos, stopped,
                  new_num_appendable):
    """Where each request stops among the tokens this step emitted, and its budget after the step.

    Row r emits e = K+1 - num_rejected[r] tokens (K+1 less its -1 entries when the counts are None).
    Emitted token i stops the request when A - (i+1) <= 0 (it uses up the budget) or when it is one of
    row r's stop ids (-1 entries excepted). `stop_pos[r]` is the first such i, -1 if none;
    `stopped[r] = stop_pos[r] >= 0`; `new_num_appendable[r] = A - e`, made min(A - e, 0) when the
    request stopped (so it may be negative). The engine keeps tokens [0, stop_pos] of a stopped row.
    """
    batch, width = check_spec_stopping(output_token_ids, num_rejected_tokens, num_appendable, stop_ids,
                                       stop_pos, stopped, new_num_appendable)
    for r in range(batch):
        row = output_token_ids[r].tolist()
        if num_rejected_tokens is not None:
            emitted = width - int(num_rejected_tokens[r])
        else:
            emitted = sum(1 for t in row if t != PLACEHOLDER)
        own = set() if stop_ids is None else {s for s in stop_ids[r].tolist() if s != PLACEHOLDER}
        budget = int(num_appendable[r])
        first = -1
        for i in range(emitted):
            if budget - (i + 1) <= 0 or row[i] in own:
                first = i
                break
        stop_pos[r] = first
        stopped[r] = first >= 0
        left = budget - emitted
        new_num_appendable[r] = min(left, 0) if first >= 0 else left


class OrdinaryStopCheck:
    """A non-speculative engine's per-request stop check: it sees one sampled token at a time."""

    def __init__(self, max_new_tokens_left: int, stop_token_ids):
        self.left = max_new_tokens_left
        self.stop_token_ids = frozenset(int(s) for s in stop_token_ids if int(s) != PLACEHOLDER)
        self.finished = False

    def append(self, token: int) -> bool:
        """Count one generated token; True once the request is finished."""
        self.left -= 1
        self.finished = token in self.stop_token_ids or self.left <= 0
        return self.finished


def sequential_stopping(tokens, num_appendable: int, stop_ids) -> tuple[list[int], int, bool, int]:
    """The independent reference for one request: feed the emitted tokens (those before the first -1)
    to `OrdinaryStopCheck` until it finishes. Returns (kept tokens, stop position or -1, stopped, new
    budget): every emitted token is counted against the budget, and a finished request keeps none left."""
    emitted = []
    for t in list(tokens):
        if int(t) == PLACEHOLDER:
            break
        emitted.append(int(t))
    check = OrdinaryStopCheck(int(num_appendable), [] if stop_ids is None else list(stop_ids))
    kept, position = [], -1
    for i, t in enumerate(emitted):
        kept.append(t)
        if check.append(t):
            position = i
            break
    budget = int(num_appendable)
    for _ in emitted:
        budget -= 1
    if check.finished:
        budget = min(budget, 0)
    return kept, position, check.finished, budget

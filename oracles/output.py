"""Oracles of the `output` family: what the engine does with the verified tokens.

`parse` is a host stage: it returns Python values. `spec_metadata` follows destination passing.
Loop-level and obviously correct; invalid input is refused with an error naming the field. The checks
are written against the array protocol NumPy and torch share, so the production versions reuse them.
"""
from __future__ import annotations

import numpy as np

from specverify.oracles.arguments import dtype_name, need_dtype, need_int, need_ndim, need_shape

PLACEHOLDER = -1


def is_int_dtype(a) -> bool:
    return dtype_name(a).startswith(("int", "uint"))


def check_indices(name: str, indices, size: int, values: bool = True) -> None:
    """Row indices: a list or tuple of Python ints, or a 1-D integer ndarray or tensor; each in [0, size).
    Duplicates are allowed."""
    if isinstance(indices, (list, tuple)):
        for i in indices:
            if isinstance(i, bool) or not isinstance(i, int):
                raise TypeError(f"{name}: must hold Python ints, found a {type(i).__name__}")
            if not 0 <= i < size:
                raise ValueError(f"{name}: index {i} is out of range for {size} rows")
        return
    if not hasattr(indices, "dtype") or not is_int_dtype(indices):
        kind = dtype_name(indices) if hasattr(indices, "dtype") else type(indices).__name__
        raise TypeError(f"{name}: must be a list, ndarray or tensor of integers, got {kind}")
    need_ndim(name, indices, 1)
    if values and len(indices):
        low, high = int(indices.min()), int(indices.max())
        if low < 0 or high >= size:
            raise ValueError(f"{name}: index {low if low < 0 else high} is out of range for {size} rows")


def check_host_array(name: str, a) -> None:
    """A host stage's array argument: an ndarray, or a tensor on the CPU."""
    if hasattr(a, "device") and str(a.device) != "cpu":
        raise ValueError(f"{name}: must be on the host (an ndarray or a CPU tensor), got device {a.device}")


def check_lowest_id(lowest: int) -> None:
    """output_token_ids of `parse` holds no id below the placeholder (-1)."""
    if lowest < PLACEHOLDER:
        raise ValueError(f"output_token_ids: ids must be >= {PLACEHOLDER}, found {lowest}")


def check_parse(output_token_ids, vocab_size, discard_req_indices, token_ids, logprobs, ranks) -> tuple[int, int]:
    """The argument checks of `parse` that read no token ids (see `check_lowest_id`); returns (B, S)."""
    need_dtype("output_token_ids", output_token_ids, "int32")
    check_host_array("output_token_ids", output_token_ids)
    need_ndim("output_token_ids", output_token_ids, 2)
    need_int("vocab_size", vocab_size, 1)
    batch, width = output_token_ids.shape
    check_indices("discard_req_indices", discard_req_indices, batch)
    if token_ids is not None or logprobs is not None or ranks is not None:
        for name, value in {"token_ids": token_ids, "logprobs": logprobs, "ranks": ranks}.items():
            if value is None:
                raise ValueError(f"{name}: the logprobs inputs come together; {name} is missing")
            check_host_array(name, value)
        positions = "B*S: B, S = output_token_ids.shape"
        need_dtype("token_ids", token_ids, "int32", "int64")
        need_ndim("token_ids", token_ids, 2)
        need_shape("token_ids", token_ids, (batch * width, token_ids.shape[1]), positions)
        need_dtype("logprobs", logprobs, "float32")
        need_shape("logprobs", logprobs, tuple(token_ids.shape), "as token_ids")
        need_dtype("ranks", ranks, "int32", "int64")
        need_shape("ranks", ranks, (batch * width,), positions)
    return batch, width


def parse(*, output_token_ids, vocab_size, discard_req_indices, token_ids=None, logprobs=None, ranks=None):
    """The tokens each request gets this step, as plain Python values.

    Returns `(tokens, lp)`. `tokens[r]` is the list of valid ids (0 <= id < vocab_size) of row r in
    order, dropping -1 and out-of-vocabulary ids wherever they sit; `[]` for a row named in
    `discard_req_indices` (duplicates allowed). `lp` is None without the logprobs inputs, else the tuple
    `(token_ids, logprobs, ranks, cu_num_tokens)`: for each returned token, in the order of `tokens`
    flattened, the row of `token_ids` and of `logprobs` at its flattened position r*S + j (as lists) and
    its rank; `cu_num_tokens[B+1]` is the exclusive offsets of each request's tokens in those lists.
    """
    batch, width = check_parse(output_token_ids, vocab_size, discard_req_indices, token_ids, logprobs, ranks)
    ids = np.asarray(output_token_ids)
    discarded = {int(i) for i in discard_req_indices}
    tokens, positions = [], []
    for r in range(batch):
        row = []
        for j in range(width):
            t = int(ids[r, j])
            check_lowest_id(t)
            if r not in discarded and 0 <= t < vocab_size:
                row.append(t)
                positions.append(r * width + j)
        tokens.append(row)
    if token_ids is None:
        return tokens, None
    top_ids, top_lps, rank_values = np.asarray(token_ids), np.asarray(logprobs), np.asarray(ranks)
    cu = [0]
    for row in tokens:
        cu.append(cu[-1] + len(row))
    return tokens, ([[int(x) for x in top_ids[p]] for p in positions],
                    [[float(x) for x in top_lps[p]] for p in positions],
                    [int(rank_values[p]) for p in positions], cu)


SPEC_METADATA_OUTPUTS = ("cu_num_draft_tokens", "cu_num_sampled_tokens", "logits_indices",
                         "target_logits_indices", "bonus_logits_indices", "draft_token_ids")


def check_spec_metadata(num_draft_tokens, cu_num_scheduled_tokens, input_ids, outputs: dict,
                        values: bool = True) -> tuple[int, int]:
    """The argument checks of `spec_metadata`; returns (B, T). `values=False` skips the checks that read
    tensor contents (the kernels skip them on CUDA outside checked mode)."""
    if sorted(outputs) != sorted(SPEC_METADATA_OUTPUTS):
        raise TypeError(f"outputs: expected {', '.join(SPEC_METADATA_OUTPUTS)}, got {', '.join(outputs)}")
    if not isinstance(num_draft_tokens, (list, tuple)):
        raise TypeError(f"num_draft_tokens: must be a list of Python ints, got {type(num_draft_tokens).__name__}")
    for n in num_draft_tokens:
        need_int("num_draft_tokens", n)
    batch, total = len(num_draft_tokens), sum(num_draft_tokens)
    sizes = "B = len(num_draft_tokens), T = sum(num_draft_tokens)"
    need_dtype("cu_num_scheduled_tokens", cu_num_scheduled_tokens, "int32")
    need_shape("cu_num_scheduled_tokens", cu_num_scheduled_tokens, (batch,), sizes)
    need_dtype("input_ids", input_ids, "int32", "int64")
    need_ndim("input_ids", input_ids, 1)
    shapes = {"cu_num_draft_tokens": batch, "cu_num_sampled_tokens": batch, "logits_indices": total + batch,
              "target_logits_indices": total, "bonus_logits_indices": batch, "draft_token_ids": total}
    for name, size in shapes.items():
        if name == "draft_token_ids":
            need_dtype(name, outputs[name], "int32", "int64")
            need_dtype(name, outputs[name], dtype_name(input_ids), source="dtype of input_ids")
        else:
            need_dtype(name, outputs[name], "int32")
        need_shape(name, outputs[name], (size,), sizes)
    if values:
        previous = 0
        for r, (end, n) in enumerate(zip(cu_num_scheduled_tokens.tolist(), num_draft_tokens)):
            if end - previous < n + 1:
                raise ValueError(f"cu_num_scheduled_tokens: request {r} schedules {end - previous} token(s), "
                                 f"fewer than its {n} draft(s) + 1")
            previous = end
        if previous > len(input_ids):
            raise ValueError(f"input_ids: holds {len(input_ids)} tokens, {previous} are scheduled")
    return batch, total


def spec_metadata(*, num_draft_tokens, cu_num_scheduled_tokens, input_ids, cu_num_draft_tokens,
                  cu_num_sampled_tokens, logits_indices, target_logits_indices, bonus_logits_indices,
                  draft_token_ids):
    """Where the target model's logits are read in a speculative step, and which drafts they verify.

    Request r schedules the tokens ending at `cu_num_scheduled_tokens[r]` (inclusive offsets); its last
    n[r] + 1 scheduled positions, `first(r) = cu_num_scheduled_tokens[r] - n[r] - 1` onwards, are sampled:
    its n[r] drafts and the bonus. Written (all int32 except `draft_token_ids`, which has input_ids' dtype):
    - `cu_num_draft_tokens[r]` = n[0] + ... + n[r]; `cu_num_sampled_tokens[r]` = the same sum of n + 1;
    - `logits_indices[s(r) + j] = first(r) + j` for j <= n[r], with s(r) = cu_num_sampled_tokens[r-1]
      (0 for r = 0): every sampled position, packed;
    - `target_logits_indices[d(r) + j] = s(r) + j` for j < n[r], with d(r) = cu_num_draft_tokens[r-1]:
      where in `logits_indices` the logits verifying draft j sit;
    - `bonus_logits_indices[r] = s(r) + n[r]`: where the bonus token's logits sit;
    - `draft_token_ids[d(r) + j] = input_ids[first(r) + 1 + j]`: the drafts, which follow the first
      sampled position in the scheduled tokens.
    """
    outputs = {"cu_num_draft_tokens": cu_num_draft_tokens, "cu_num_sampled_tokens": cu_num_sampled_tokens,
               "logits_indices": logits_indices, "target_logits_indices": target_logits_indices,
               "bonus_logits_indices": bonus_logits_indices, "draft_token_ids": draft_token_ids}
    check_spec_metadata(num_draft_tokens, cu_num_scheduled_tokens, input_ids, outputs)
    drafts = sampled = 0
    for r, n in enumerate(num_draft_tokens):
        first = int(cu_num_scheduled_tokens[r]) - n - 1
        for j in range(n + 1):
            logits_indices[sampled + j] = first + j
        for j in range(n):
            target_logits_indices[drafts + j] = sampled + j
            draft_token_ids[drafts + j] = input_ids[first + 1 + j]
        bonus_logits_indices[r] = sampled + n
        drafts += n
        sampled += n + 1
        cu_num_draft_tokens[r] = drafts
        cu_num_sampled_tokens[r] = sampled

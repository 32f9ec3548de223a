"""Host production code of the `output` family: `parse`, fast at batch 1 and at batch 512.

No per-row NumPy call (each costs microseconds): a small batch becomes Python lists in one `tolist()`
and is filtered there; a large one is filtered with one vectorized mask, flattened by one `tolist()`
and cut into rows by list slices.
"""
from __future__ import annotations

from itertools import accumulate

import numpy as np

from specverify.oracles.output import check_lowest_id, check_parse

SMALL = 256   # elements of output_token_ids up to which filtering in Python beats the vectorized mask
SEQUENCES = (list, tuple)
INT32 = np.dtype(np.int32)


def as_numpy(a) -> np.ndarray:
    """An ndarray, or a CPU tensor viewed as one (no copy)."""
    return a if isinstance(a, np.ndarray) else a.numpy()


def host_list(values) -> list:
    """A list, tuple, ndarray or CPU tensor as a list of Python values."""
    return values.tolist() if hasattr(values, "tolist") else list(values)


def filter_small(output_token_ids, vocab_size: int, discarded, width: int):
    """The valid ids per row, and a function giving the flattened positions of the ids returned."""
    rows = output_token_ids.tolist()
    if rows and width:
        check_lowest_id(min(map(min, rows)))
    dropped = set(host_list(discarded)) if len(discarded) else ()
    tokens = [[] if r in dropped else [t for t in row if 0 <= t < vocab_size] for r, row in enumerate(rows)]
    return tokens, lambda: np.fromiter((r * width + j for r, row in enumerate(rows) if r not in dropped
                                        for j, t in enumerate(row) if 0 <= t < vocab_size), np.int64)


def filter_large(output_token_ids, vocab_size: int, discarded, width: int):
    """As `filter_small`, with one vectorized mask."""
    ids = as_numpy(output_token_ids)
    check_lowest_id(int(ids.min()))
    valid = (ids >= 0) & (ids < vocab_size)
    if len(discarded):
        valid[as_numpy(discarded) if hasattr(discarded, "dtype") else list(discarded)] = False
    flat = ids[valid].tolist()
    ends = np.cumsum(valid.sum(axis=1)).tolist()
    return [flat[start:end] for start, end in zip([0] + ends[:-1], ends)], lambda: np.flatnonzero(valid)


def parse(*, output_token_ids, vocab_size, discard_req_indices, token_ids=None, logprobs=None, ranks=None):
    """See `specverify.oracles.output.parse`. The common engine step (a small int32 ndarray of two
    dimensions, a positive Python int vocabulary, no discarded rows as an empty list or tuple, no logprobs)
    passes `check_parse` by construction and is filtered at once: one `tolist()`, the lowest-id check, one
    list comprehension."""
    if (type(output_token_ids) is np.ndarray and token_ids is None and type(vocab_size) is int
            and type(discard_req_indices) in SEQUENCES and not discard_req_indices and vocab_size >= 1
            and output_token_ids.dtype == INT32 and output_token_ids.ndim == 2 and output_token_ids.size <= SMALL
            and logprobs is None and ranks is None):
        rows = output_token_ids.tolist()
        if output_token_ids.size:
            check_lowest_id(min(map(min, rows)))
        return [[t for t in row if 0 <= t < vocab_size] for row in rows], None
    batch, width = check_parse(output_token_ids, vocab_size, discard_req_indices, token_ids, logprobs, ranks)
    filtered = filter_small if batch * width <= SMALL else filter_large
    tokens, positions = filtered(output_token_ids, vocab_size, discard_req_indices, width)
    if token_ids is None:
        return tokens, None
    index = positions()
    cu = [0, *accumulate(map(len, tokens))]
    return tokens, (as_numpy(token_ids)[index].tolist(), as_numpy(logprobs)[index].tolist(),
                    as_numpy(ranks)[index].tolist(), cu)

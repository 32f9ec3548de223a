"""Deliberately wrong `rejection` implementations of bugs engines shipped: the suite must catch each one.

Each wraps or copies our Torch kernel and breaks one promise of its record.
"""
import torch

from specverify.kernels.torch.rejection import (RATIO, STRICT, accepted_drafts, at_drafts, first_max, in_vocab,
                                                pick_rows, random, recovery_scores, token_requests)
from specverify.kernels.validation import validate
from specverify.oracles.rejection import check_chain_cdf, check_recovered


def read_past_the_row(table: torch.Tensor | None, width: int) -> torch.Tensor | None:
    """[T, width] rows of a [T, V] table read from the flat offset t * V on: the cells of column v >= V are
    those of the rows after t (0 past the table's end)."""
    if table is None:
        return None
    tokens, vocab = table.shape
    flat = torch.cat((table.reshape(-1), table.new_zeros(width)))
    return flat.as_strided((tokens, width), (vocab, 1))


def oov_read_from_the_next_row(**kw):
    """vLLM's `rejection_random_sample_kernel`: an out-of-vocabulary draft d is tested like a valid one, p and
    q read at the flat offset t * V + d (the next rows' cells), so it is accepted when they pass."""
    read_out_of_vocabulary(RATIO, kw)


def oov_read_from_the_next_row_strict(**kw):
    """`oov_read_from_the_next_row` under dialect `strict` (SGLang's and FlashInfer's test f32(u * q) < p), as
    the kernel of examples/vendor_domain reads it."""
    read_out_of_vocabulary(STRICT, kw)


def read_out_of_vocabulary(rule: str, kw: dict) -> None:
    """Our `rejection.random` under `rule` on tables widened by `read_past_the_row`, so that the ids V and
    V + 7 (the strategies' out-of-vocabulary drafts) read the cells of the rows after their own."""
    width = kw["target_probs"].shape[1] + 8
    random(**{**kw, "target_probs": read_past_the_row(kw["target_probs"], width),
              "draft_probs": read_past_the_row(kw["draft_probs"], width)}, rule=rule)


def nan_residual_as_zero(*, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q,
                         recovered_token_ids, max_spec_len=None):
    """`rejection.recovered` whose scores drop NaN for 0 (a NaN-dropping max, fmax(score, 0), as vLLM's
    `tl.maximum(p - q, 0)` does): a NaN ahead of the first maximum wins in a row whose finite scores are 0."""
    check_recovered(cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q, recovered_token_ids,
                    max_spec_len=max_spec_len)
    tokens = draft_token_ids.shape[0]
    if not tokens:
        return
    valid, safe = in_vocab(draft_token_ids, inv_q.shape[1])
    noise = inv_q.index_select(0, token_requests(cu_num_draft_tokens, tokens))
    scores = recovery_scores(target_probs, draft_probs, valid, safe, noise, lambda: at_drafts(noise, safe))
    scores = torch.fmax(scores, scores.new_zeros(()))
    recovered_token_ids.copy_(first_max(scores, owned=True).view(tokens))


def crossing_without_carry(res, u_final, tile: int = 1024):
    """`first_crossing` whose running sum restarts at every tile of `tile` cells (the carried sum of the tiles
    before is lost), so a pick past the first tile comes late or not at all (then V - 1)."""
    sums = torch.cat([part.cumsum(-1) for part in res.split(tile, -1)], -1)
    t = u_final * res.sum(-1)
    hits = torch.gt(sums, t[:, None]).logical_and_(res > 0)
    first = hits.view(torch.uint8).argmax(-1)
    found = hits[torch.arange(res.shape[0]), first]
    return torch.where(found, first, res.shape[-1] - 1)


def pick_without_carry(*, candidates, target_probs, draft_probs, uniform_samples, uniform_final, predicts,
                       accept_index, accept_token_num):
    """Our `rejection.chain_cdf` with `crossing_without_carry` for its inverse-CDF walk."""
    batch, k, _ = validate(check_chain_cdf, candidates, target_probs, draft_probs, uniform_samples, uniform_final,
                           predicts, accept_index, accept_token_num, values=True)
    if batch == 0:
        return
    accepted = accepted_drafts(candidates, target_probs, draft_probs, uniform_samples, True)
    num = torch.cat((accepted, accepted.new_zeros((batch, 1))), 1).to(torch.uint8).argmin(-1)
    token = crossing_without_carry(pick_rows(target_probs, draft_probs, num, True), uniform_final)
    slots = torch.arange(k + 1)
    written = slots <= num[:, None]
    values = torch.where(slots < num[:, None], torch.roll(candidates, -1, 1), token[:, None])
    grid = predicts.view(batch, k + 1)
    torch.where(written, values.to(torch.int32), grid, out=grid)
    flat = torch.arange(batch)[:, None] * (k + 1) + slots
    torch.where(written, flat.to(torch.int32), accept_index, out=accept_index)
    accept_token_num.copy_(num)

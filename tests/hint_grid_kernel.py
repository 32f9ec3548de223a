"""A `rejection.recovered` kernel computed on a (B, max_spec_len) grid of (request, position) cells, as vLLM
launches its recovered-token kernel: the grid's width is the `max_spec_len` host hint; without the hint the
kernel must read the device to size it (a synchronization the `no-sync` check sees)."""
import torch

from specverify.kernels.torch.rejection import at_drafts, first_max, in_vocab, recovery_scores


def recovered_on_a_request_grid(*, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q,
                                recovered_token_ids, max_spec_len=None):
    batch, tokens = cu_num_draft_tokens.shape[0], draft_token_ids.shape[0]
    if not batch or not tokens:
        return
    ends = cu_num_draft_tokens.long()
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    width = max_spec_len if max_spec_len is not None else int((ends - starts).max())   # a device read
    cell = starts[:, None] + torch.arange(width, device=ends.device)                    # [B, width] token ids
    token = torch.where(cell < ends[:, None], cell, tokens).reshape(-1)   # cells past a request: a scratch slot
    rows = token.clamp(max=tokens - 1)
    valid, safe = in_vocab(draft_token_ids.index_select(0, rows), inv_q.shape[1])
    noise = inv_q.index_select(0, torch.arange(batch, device=ends.device).repeat_interleave(width))
    draft = None if draft_probs is None else draft_probs.index_select(0, rows)
    scores = recovery_scores(target_probs.index_select(0, rows), draft, valid, safe, noise,
                             lambda: at_drafts(noise, safe))
    scratch = recovered_token_ids.new_empty(tokens + 1)
    scratch.scatter_(0, token, first_max(scores, owned=True).to(scratch.dtype))
    recovered_token_ids.copy_(scratch[:tokens])

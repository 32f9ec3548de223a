"""Chain rejection sampling as this engine verifies drafts: ties reject (specverify's dialect `strict`)."""
import torch


def random(*, draft_token_ids, bonus_token_ids, cu_num_draft_tokens, max_spec_len, draft_probs, target_probs,
           recovered_token_ids, uniform_probs, is_greedy, output_token_ids):
    """Accept draft d at token t while 0 < q <= 1 and f32(f32(u) * q) < p (p, q the target's and the
    draft's probabilities of d). Written for this engine's drafter: it always passes its probabilities,
    and proposes ids in [0, V) only, so a draft id is not compared with V: the probabilities are read at
    the flat offset t * V + d of the [T, V] tables (a -1 draft is rejected)."""
    batch, tokens = cu_num_draft_tokens.shape[0], draft_token_ids.shape[0]
    if batch == 0:
        return
    device = target_probs.device
    drafts = draft_token_ids.long()
    if tokens:
        vocab = target_probs.shape[1]
        offset = (torch.arange(tokens, device=device) * vocab + drafts.clamp(min=0)).clamp(max=tokens * vocab - 1)
        p = target_probs.reshape(-1).index_select(0, offset)
        q = draft_probs.reshape(-1).index_select(0, offset)
        accepted = (drafts >= 0) & (q > 0) & (q <= 1) & (uniform_probs.to(torch.float32) * q < p)
    ends = cu_num_draft_tokens.long()
    counts = ends - torch.cat([ends.new_zeros(1), ends[:-1]])
    column = torch.arange(max_spec_len + 1, device=device)
    cell = (ends - counts)[:, None] + column[:max_spec_len]             # [B, S]: the token of each position
    live = column[:max_spec_len] < counts[:, None]
    safe = torch.where(live, cell, 0).clamp(max=max(tokens - 1, 0))
    taken = live & accepted[safe] if tokens else live
    emitted = taken.int().cumprod(1).sum(1)                              # drafts accepted per row
    recovered = recovered_token_ids.long()[(ends - counts + emitted).clamp(0, tokens - 1)] if tokens else emitted
    last = torch.where(emitted < counts, recovered, bonus_token_ids.long())
    values = torch.cat([drafts[safe] if tokens else safe, last[:, None]], 1)
    values.scatter_(1, emitted[:, None], last[:, None])
    write = ~is_greedy[:, None] & (column[None, :] <= emitted[:, None])
    output_token_ids.copy_(torch.where(write, values.to(output_token_ids.dtype), output_token_ids))

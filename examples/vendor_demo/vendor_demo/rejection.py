"""vendor_demo's rejection-sampling kernels (Torch, vectorized, CPU and CUDA).

- `expand` conforms. Its defensive clamp (an index never passes the last request) plants an equivalent
  mutant: `- 1` made `- 0` clamps to one past the last request, which no index reaches either (see
  mutants-equivalent.toml).
- `recovered` conforms on the contract's domain but lets a NaN score win: `torch.argmax` treats NaN as
  the largest value, while the contract says a NaN score never wins. Tracked as vendor-demo#7 and
  waived in waivers.toml (the engine masks NaN logits before this kernel runs).
"""
import torch


def request_of_each_token(cu: torch.Tensor, total: int) -> torch.Tensor:
    """For inclusive offsets `cu`, the request index of each of the `total` positions."""
    counts = torch.diff(cu.long(), prepend=cu.new_zeros(1, dtype=torch.long))
    return torch.repeat_interleave(torch.arange(cu.shape[0], device=cu.device), counts, output_size=total)


def expand(*, x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded):
    """Each request's value broadcast to its tokens, `replace_from` (in x's dtype) turned into `replace_to`."""
    if num_tokens == 0:
        return
    old = torch.tensor(replace_from, dtype=x.dtype, device=x.device)
    new = torch.tensor(replace_to, dtype=x.dtype, device=x.device)
    values = torch.where(x == old, new, x)
    index = request_of_each_token(cu_num_tokens, num_tokens)
    expanded.copy_(values[index.clamp(max=cu_num_tokens.shape[0] - 1)])   # defensive: never past the last request


def recovered(*, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, inv_q, recovered_token_ids,
              max_spec_len=None):
    """Per draft position: the lowest index of the largest residual * noise score."""
    total, vocab = target_probs.shape
    if total == 0:
        return
    request = request_of_each_token(cu_num_draft_tokens, total)
    if draft_probs is not None:
        residual = torch.clamp_min(target_probs - draft_probs, 0)
    else:  # one-hot drafts: the draft's own id is taken out of the target distribution
        ids = draft_token_ids.long()
        own = (ids >= 0) & (ids < vocab)
        column = torch.where(own, ids, 0)[:, None]
        residual = target_probs.scatter(1, column, torch.where(own[:, None], 0.0, target_probs.gather(1, column)))
    score = residual * inv_q[request]
    recovered_token_ids.copy_(torch.argmax(score, dim=1).to(torch.int32))   # NaN wins here (vendor-demo#7)

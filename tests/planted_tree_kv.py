"""Planted bugs of the `tree` and `kv` families: each is our Torch kernel with one bug, of a class the old
strategies drew too rarely to catch within the ci budget (tests/stages/test_tree_verify.py, test_kv.py).

- `verify_greedy_root_prediction`: every level's siblings are compared with the root's prediction, not
  with the prediction at the last accepted node. Level 1 is right (its last node is the root), so only a
  walk that accepts a draft and goes on to a second level can tell.
- `commit_draft_first_scale`: per-token fp8 scales read at token 0 (as if per tensor). Only per-token scales
  that differ over the written tokens can tell.
- `assign_reads_past_end_offsets`: a tile's lane past the batch reads `end_offset` one element past its end
  and takes it as a length (an unmasked load): a negative one writes nothing, a positive one runs past the
  table. Only the second guard pattern shows it.
"""
from specverify.kernels.torch import kv as ours_kv
from specverify.kernels.torch import tree as ours
from specverify.oracles import tree as oracle


def verify_greedy_root_prediction(*, candidates, retrieve_index, retrieve_next_token, retrieve_next_sibling,
                                  target_predict, predicts, accept_index, accept_token_num):
    """`specverify.kernels.torch.tree.verify` with each node's match tested against the root's prediction."""
    batch, n, spec = oracle.check_verify_greedy(candidates, retrieve_index, retrieve_next_token,
                                                retrieve_next_sibling, target_predict, predicts, accept_index,
                                                accept_token_num)
    if batch == 0:
        return
    levels = min(spec - 1, n - 1)
    want = target_predict.reshape(-1)[retrieve_index]
    parent, position = ours.tree_order(retrieve_next_token, retrieve_next_sibling)
    match = (parent >= 0) & (candidates == want[:, :1])                  # the bug: want.gather(1, parent)
    path, count = ours.descend(match, parent, position, levels)
    ours.write_path(path, count, retrieve_index, want.gather(1, path), predicts, accept_index, accept_token_num)


def commit_draft_first_scale(**kw):
    """Our kernel reading every token's fp8 scale at token 0: per-token scales taken as per-tensor."""
    first = {name: kw[name][:1] for name in ("k_scale", "v_scale") if kw[name] is not None}
    ours_kv.commit_draft(**{**kw, **first})


def assign_reads_past_end_offsets(**kw):
    """Our kernel after reading the element past `end_offset`, as a lane past the batch would."""
    end = kw["end_offset"]
    past = int(end.as_strided((end.shape[0] + 1,), (1,))[-1])
    if past > 0:
        raise IndexError(f"a request of length {past} runs past req_to_token")
    ours_kv.assign_req_to_token(**kw)

"""A stop check with one planted bug, the kind an engine shipped (an outside implementation for the tests)."""
from __future__ import annotations

import torch

from specverify.kernels.torch.stop import spec_stopping
from specverify.oracles.stop import PLACEHOLDER


def cap_before_stop_ids(*, output_token_ids, num_rejected_tokens, num_appendable, stop_ids, stop_pos, stopped,
                        new_num_appendable):
    """Our Torch kernel with the length cap checked before the stop ids (SGLang #31599): a row whose budget runs
    out among this step's emitted tokens stops where it runs out (index max(A, 1) - 1), even when one of its stop
    ids comes earlier. Rows the cap does not reach are right, and so are `stopped` and `new_num_appendable`."""
    spec_stopping(output_token_ids=output_token_ids, num_rejected_tokens=num_rejected_tokens,
                  num_appendable=num_appendable, stop_ids=stop_ids, stop_pos=stop_pos, stopped=stopped,
                  new_num_appendable=new_num_appendable)
    if not len(num_appendable):
        return
    emitted = (output_token_ids != PLACEHOLDER).sum(dim=1)
    runs_out = num_appendable.clamp(min=1).to(torch.int64)   # 1-based: the budget is spent at this token
    capped = runs_out <= emitted
    stop_pos.copy_(torch.where(capped, runs_out - 1, stop_pos.to(torch.int64)).to(torch.int32))

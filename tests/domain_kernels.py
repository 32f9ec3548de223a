"""Outside implementations with a narrower domain than the contract, for tests/records/test_domain.py."""
import torch

from specverify.kernels.torch.eagle import next_token_padded as ours


def next_token_unit_columns(**kw):
    """`eagle.next_token_padded` written for a caller that passes rows with unit column step: it indexes
    `sampled_token_ids` through its row stride only (as vLLM's kernel does), so a column-strided view
    reads the gaps between its elements."""
    tok = kw["sampled_token_ids"]
    rows = torch.as_strided(tok, tok.shape, (tok.stride(0), 1))
    ours(**{**kw, "sampled_token_ids": rows})


def next_token_refusing(**kw):
    """Refuses invalid arguments as the contract says (it declares `validates`)."""
    ours(**kw)


def next_token_silent(**kw):
    """Declares `validates`, yet on an argument it cannot handle it returns without a word."""
    try:
        ours(**kw)
    except (ValueError, TypeError):
        return


# A vendor declaration (`check --vendor tests.domain_kernels`): a table declaring the unit-column kernel's domain.
IMPLEMENTATIONS = {"eagle.next_token_padded": {
    "impl": "tests.domain_kernels:next_token_unit_columns",
    "domain": {"fields": {"sampled_token_ids": {"layout": "rows", "reason": "the engine passes contiguous rows"}},
               "bounds": {"B <= 16": "the engine's max_num_seqs"}}}}
NOT_JSON = {"eagle.next_token_padded": {"impl": "tests.domain_kernels:next_token_refusing", "domain": {1, 2}}}


def recovered_without_hint(**kw):
    """`rejection.recovered` that declares `validates` yet never looks at its `max_spec_len` hint."""
    from specverify.kernels.torch.rejection import recovered

    kw.pop("max_spec_len")
    recovered(**kw)


def next_token_in_vocab_only(**kw):
    """`eagle.next_token_padded` for an engine whose sampler never emits an id >= V: it never compares
    ids with the vocabulary size, so an out-of-vocabulary id counts as valid."""
    ours(**{**kw, "vocab_size": 2**31 - 1})


def random_reading_oov_from_the_next_row(**kw):
    """`rejection.random` indexed as vLLM's kernel indexes it: an out-of-vocabulary draft d at token t is
    not rejected unread; its probabilities are read at flat offset t * V + d, in the next row (zero past
    the table's end), and the draft can be accepted and emitted."""
    from specverify.kernels.torch.rejection import random

    def widened(table):
        if table is None:
            return None
        tokens, vocab = table.shape
        flat = torch.cat([table.contiguous().reshape(-1), table.new_zeros(8)])
        return torch.as_strided(flat, (tokens, vocab + 8), (vocab, 1))
    random(**{**kw, "target_probs": widened(kw["target_probs"]), "draft_probs": widened(kw["draft_probs"])})


def random_wrong_only_on_oov_drafts(**kw):
    """`rejection.random` that is right on every input without an out-of-vocabulary draft, and writes a wrong
    value into every output slot when any draft is >= V, with device arithmetic only (no host read, no
    extra launch shape, capturable): wrong only outside a domain that excludes `oov_drafts`."""
    from specverify.kernels.torch.rejection import random

    random(**kw)
    out, drafts = kw["output_token_ids"], kw["draft_token_ids"]
    oov = (drafts >= kw["target_probs"].shape[1]).any()
    out.add_(oov.to(out.dtype))


def build_without_bitpacking(**kw):
    """`tree.build` for SGLang's caller, which chooses FULL_MASK or QLEN_ONLY only: it raises on mode 2 (as
    SGLang's mask-size helper does)."""
    from specverify.kernels.torch.tree import build

    if kw["tree_mask_mode"] == 2:
        raise ValueError("tree_mask_mode 2 (QLEN_ONLY_BITPACKING) is not supported")
    build(**kw)


def expand_capped_at_128(*, x, cu_num_tokens, num_tokens, replace_from, replace_to, expanded):
    """`rejection.expand` as vLLM's expand_kernel writes it: at most 128 tokens per request (its MAX_SPEC_LEN);
    a longer request's later tokens are left unwritten."""
    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    request = torch.repeat_interleave(torch.arange(len(x), device=x.device), counts)
    position = torch.arange(num_tokens, device=x.device) - (ends - counts)[request]
    value = torch.where(x == torch.tensor(replace_from).to(x.dtype), torch.tensor(replace_to).to(x.dtype), x)
    kept = position < 128
    expanded[kept] = value[request][kept]

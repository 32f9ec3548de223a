"""What vendor_domain implements, by specverify stage name, with the domain each kernel is written for.

Registered in pyproject.toml under the entry-point group `specverify.files.vendors`. A value is a
"module:function" string or a table: `impl`, the `domain` it supports (each restriction with the call
site that guarantees it), the rule `dialect` it follows. Plain data: reading it imports no kernel.
"""
IMPLEMENTATIONS = {
    "rejection.random": {
        "impl": "vendor_domain.rejection:random",
        "dialect": "strict",
        "domain": {
            "fields": {"draft_probs": {"given": True,
                                       "reason": "the engine's EAGLE drafter always returns its probabilities"}},
            "excludes": {"oov_drafts": "the drafter samples from its own [0, V) head: no id >= V is proposed"},
        },
    },
    "eagle.next_token_padded": {
        "impl": "vendor_domain.eagle:next_token_padded",
        "domain": {
            "fields": {"sampled_token_ids": {"layout": "rows",
                                             "reason": "the sampler's output is a contiguous [B, K+1] tensor"}},
            "excludes": {"discarded_rows": "kept from an older kernel that had no discard mask"},
        },
    },
}

"""What vendor_demo implements, by specverify stage name: the one declaration specverify reads.

Registered in pyproject.toml under the entry-point group `specverify.files.vendors`. Values are
"module:function" strings, so reading this declaration imports none of the kernels.
"""
IMPLEMENTATIONS = {
    "rejection.expand": "vendor_demo.rejection:expand",
    "rejection.recovered": "vendor_demo.rejection:recovered",
    "eagle.next_token_padded": "vendor_demo.eagle:next_token_padded",
    "eagle.extend_queries": "vendor_demo.eagle:extend_queries",
}

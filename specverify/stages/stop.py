"""Stage record of the `stop` family (STAGES.md: stop.*).

Where STAGES.md is silent (see `specverify.oracles.stop`): rows are an emitted prefix then only -1, and
`num_rejected_tokens`, when given, counts those -1; stop ids are per row, -1 padding anywhere in a row
and never matching; without stop ids (None, or no columns) only the budget stops a request; the budget
may be zero or negative on entry and the new budget keeps its dtype.
"""
from __future__ import annotations

import numpy as np

from specverify.records import bench_inputs as bench
from specverify.records.stage import BENCH_SPEC, Buffer, Example, Floor, I, O
from specverify.records.wiring import wired

IDS = "int32|int64"


def spec_stopping_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: verification output [B, K+1] (accepted + 1 ids, then -1) with its rejected counts, budgets
    of 1 to 2048 tokens, 4 stop ids per row (EOS first, -1 padding); 1 row in 20 emits its EOS."""
    rows = bench.emitted_rows(rng, batch, BENCH_SPEC, vocab)
    emitted = (rows >= 0).sum(axis=1)
    stop_ids = bench.token_ids(rng, (batch, 4), vocab)
    stop_ids[:, 2:][rng.random((batch, 2)) < 0.5] = -1
    hit = np.flatnonzero(rng.random(batch) < 0.05)
    rows[hit, rng.integers(0, emitted[hit])] = stop_ids[hit, 0]
    return Example("valid", inputs={
        "output_token_ids": rows, "num_rejected_tokens": (BENCH_SPEC + 1 - emitted).astype(np.int32),
        "num_appendable": rng.integers(1, 2049, batch).astype(np.int32), "stop_ids": stop_ids,
    }, outputs={"stop_pos": Buffer((batch,), "int32"), "stopped": Buffer((batch,), "bool"),
                "new_num_appendable": Buffer((batch,), "int32")})


def spec_stopping_worked() -> Example:
    """Row 0 stops at its stop id 2 (a draft position); row 1 runs out of budget at its second token;
    row 2 does not stop, though row 0 emitted row 2's stop ids 9 and 5."""
    return Example(
        tier="valid",
        inputs={"output_token_ids": np.array([[5, 9, 2, 7], [4, 4, -1, -1], [3, -1, -1, -1]], np.int32),
                "num_rejected_tokens": np.array([0, 2, 3], np.int32),
                "num_appendable": np.array([10, 2, 5], np.int32),
                "stop_ids": np.array([[2, -1], [-1, -1], [9, 5]], np.int32)},
        outputs={"stop_pos": Buffer((3,), "int32"), "stopped": Buffer((3,), "bool"),
                 "new_num_appendable": Buffer((3,), "int32")},
    )


SPEC_STOPPING = wired(
    name="stop.spec_stopping",
    dtype_follows={"new_num_appendable": "num_appendable"},
    doc="where each request stops among this step's emitted tokens (its stop ids or its length budget)",
    inputs=(
        I("output_token_ids", IDS, "B, K1", strided=True, doc="K1 = K+1 columns: the emitted tokens, then -1"),
        I("num_rejected_tokens", IDS, "B", optional=True, doc="the -1 entries of each row; None: counted here"),
        I("num_appendable", IDS, "B", doc="tokens each request may still append (max_new_tokens less so far)"),
        I("stop_ids", IDS, "B, W", optional=True, strided=True,
          doc="each request's EOS and stop ids, -1 as padding; None: no stop ids"),
    ),
    outputs=(
        O("stop_pos", "int32", "B", doc="index of the token that stops the request, -1 if none"),
        O("stopped", "bool", "B", doc="stop_pos >= 0"),
        O("new_num_appendable", IDS, "B", doc="dtype of num_appendable; A - emitted, at most 0 when stopped"),
    ),
    launches={"triton": 1, "torch": 11},   # 10 with num_rejected_tokens; the H200 measured 11 too
    semantics=(
        "Row r emitted e = K+1 - num_rejected[r] tokens (its entries before the -1s). Emitted token i stops "
        "the request when the budget runs out there (A - (i+1) <= 0) or when it is one of row r's own stop "
        "ids; -1 padding in stop_ids never matches. stop_pos is the first such i (-1 if none), stopped says "
        "whether there is one, and new_num_appendable is A - e, lowered to at most 0 for a stopped request "
        "(it goes negative when the step ran past the budget). The engine keeps tokens 0..stop_pos. The "
        "result equals feeding the emitted tokens one at a time through an ordinary stop check "
        "(`oracles.stop.sequential_stopping`). All three outputs are written for every row."
    ),
    tiers={
        "valid": "Rows of ragged, full or empty emitted prefixes playing one scenario each (no stop, a stop id "
                 "mid-run, as the last token or the bonus, exactly at the budget, the budget crossed, a stop id "
                 "before the budget runs out in a step that crosses it, a budget already spent, another row's "
                 "stop id), a batch focused on one of them (with the stop ids it needs) or dealt all of them; "
                 "stop ids None, empty, shared or per row with scattered padding; int32 and int64 fields, the "
                 "dtype's largest id, budgets at the dtype's edges.",
        "hazard": "The same rows with ids 0 and the largest id both dtypes hold as tokens and stop ids, and stop "
                  "rows of one repeated id; checked against the one-token-at-a-time reference.",
        "invalid": "An id below -1, an id after a -1, no columns, counts that disagree with the -1 entries, a "
                   "stop id below -1, a budget whose result would not fit its dtype, a new-budget buffer of "
                   "another dtype.",
    },
    bench=spec_stopping_bench,
    floors=(
        Floor("stop: stop id", 5, "STAGES.md: EOS at a draft position"),
        Floor("stop: stop id as the bonus", 6, "STAGES.md: EOS as the bonus"),
        Floor("stop: stop id at the cap", 5, "STAGES.md: EOS exactly at the length cap"),
        Floor("stop: cap crossed", 8, "STAGES.md: a cap crossed mid-run"),
        Floor("stop: stop id before the cap", 5, "SGLang #31599: the cap checked before the stop ids stops at "
              "the budget, past an earlier stop id of the same step"),
        Floor("stop: budget spent", 8, "the budget may be zero or negative on entry: the first token stops"),
        Floor("stop: another row's stop id", 8, "stop ids are per row: another row's must not stop a request"),
        Floor("stop ids: none", 5, "stop_ids None: only the budget stops, no stop-id work"),
        Floor("stop ids: empty", 1, "stop ids of no columns: one example shows a kernel that reduces over none"),
        Floor("stop ids: padding between ids", 10, "-1 padding anywhere in a row never matches"),
        Floor("emitted: none", 3, "rows that emitted nothing (every token -1) never stop"),
        Floor("emitted: all", 4, "every draft accepted: the bonus is the last column"),
        Floor("num_rejected_tokens: None", 15, "num_rejected_tokens None: the kernel counts the -1 itself"),
        Floor("num_rejected_tokens: given", 15, "the counts given: the kernel may trust them"),
        Floor("budget: the dtype's lowest", 3, "A - emitted at the edge of the budget's dtype"),
        Floor("budget: the dtype's largest", 3, "A + 1 would overflow the budget's dtype"),
        Floor("ids: out of vocabulary (the dtype's largest)", 10, "ids are unbounded: the dtype's largest id"),
        Floor("dtype: num_appendable int32", 10, "new_num_appendable keeps the budget's dtype"),
        Floor("dtype: num_appendable int64", 10, "new_num_appendable keeps the budget's dtype"),
        Floor("layout: strided", 15, "output_token_ids and stop_ids may be strided"),
        Floor("batch: more than one program", 6, "the Triton kernel's later programs start past row 0",
              interpreted=True),
        Floor("hazard: one stop id repeated across the row", 2, "a row of one id repeated", tier="hazard"),
    ),
)

STAGES = (SPEC_STOPPING,)

"""Stage records of the `rejection` family: verification of draft tokens against the target model.

Choices the oracles make (and every backend follows) where an engine could go either way:
- an out-of-vocabulary draft (id >= V) is rejected by `random` and zeroes nothing in `recovered`
  without draft probs: its probabilities are never read;
- `recovered` and the argmax of `sample`: NaN never wins, +inf wins like any maximum, an all-NaN row
  gives 0, and max(p - q, 0) keeps a NaN (it does not become 0);
- `random` requires `is_greedy` (no None); `sample` needs its noise exactly when `is_greedy` is given;
- `expand` compares and writes after converting replace_from / replace_to to x's dtype.

`rejection.chain_cdf` (the last record) is the chain sampler of SGLang's `chain_speculative_sampling_triton`
(FlashInfer-derived), which draws its replacement or bonus token by walking the CDF of a residual. Choices its
record makes where engines differ or say nothing:
- -1 and out-of-vocabulary drafts are rejected without reading their probabilities. The shipped
  kernels read column -1 for a placeholder (the cell before the row); they fail such valid cases by
  design, as they would fail the `gumbel` rule of `rejection.random`.
- FlashInfer's own `chain_speculative_sampling` is not a dialect here: it takes no uniforms (Philox
  draws, so a byte-exact oracle needs `u[B, K+2]` indexed by its own stream rule, another field), writes
  -1 for an all-zero residual instead of V - 1, fills the rest of each row with -1, and adds into its
  counters. A dialect keeps the record's fields, so it would need a record of its own.
"""
from __future__ import annotations

import numpy as np

from specverify.oracles import rejection as oracle
from specverify.records import bench_inputs as bench
from specverify.records.randomness import Randomness
from specverify.records.stage import BENCH_SPEC, Buffer, Dialect, Example, I, Layout, O
from specverify.records.wiring import kernels, wired
from specverify.stages import rejection_classes as classes
from specverify.strategies import panels
from specverify.strategies import probability_tables as tables
from specverify.strategies import rejection as draw
from specverify.strategies.deciding import rejection_rows

f32, i32, i64 = np.float32, np.int32, np.int64

CU = "inclusive offsets: request r owns draft positions start(r) .. cu[r] - 1"
# the draft ids an engine's drafter may never produce (vLLM's random kernel reads an out-of-vocabulary
# draft's probabilities from the next row; FlashInfer's reads a -1 draft's from column -1)
# vLLM's rejection sampler asserts max_spec_len <= 128 (its MAX_SPEC_LEN) before it calls its kernels
SPEC_BOUND = {"max_spec_len": 0}
DRAFT_CLASSES = {"oov_drafts": ("draft_token_ids", "oov"), "placeholder_drafts": ("draft_token_ids", "placeholder")}
DRAFTS = "draft ids, request by request; -1 and ids >= V allowed"
BONUS = "the token a row emits after accepting all its drafts"
SPEC = "S: the row width of the output minus one; every request has at most S drafts"
TARGET = "target-model probabilities at each draft position"
DRAFT_PROBS = "draft-model probabilities at each draft position; None: drafts are one-hot (n-gram)"
UNIFORMS = "one uniform draw per draft position, the acceptance threshold"
INV_Q = "1 / exponential noise, one row per request shared by all its positions"

BATCH_VALID = ("B from 0 to 1024 requests; draft counts uniform, ragged, mostly zero, or short with a few "
               "rows of more than 128 drafts; `max_spec_len` equal to the longest row or a little above it.")
TABLES_VALID = ("V at tile edges (2, 8191, 8192, 8193, 151936) or small (1 to 64 in a third of the draws), T * V "
                "bounded; target rows normalized "
                "with 0, 50 or 95 % zeros; draft probs absent, independent, or mostly equal to the target "
                "(ratios of exactly 1, zero residuals); planted: equal maxima far apart and across tiles, "
                "and in every table past two 2048-wide tiles 2048 apart in the first two tiles of half the rows "
                "(one lane of a 2048-wide sweep), "
                "all-zero residuals on one side of a tile edge, a lone peak on a tile edge or in the last "
                "partial tile, zero draft probability at the drafted id, rows of -0.0 then +0.0 (every "
                "score ties at zero).")
UNIFORMS_VALID = ("Uniforms are often exactly the f32 acceptance ratio, or one f64 step above or below it.")
OOV_FIRST = ("In two thirds of the draws (all with V <= 64) the first draft of a quarter of the random rows is "
             "out of the vocabulary.")
HAZARDS = ("A valid draw made pathological: NaN, +inf or -inf in a few cells, 30 % of them or every cell of "
           "the probability tables{noise}, out-of-vocabulary drafts (V or V+7) where probabilities are read"
           "{uniforms}, lone NaNs among finite cells (one target cell in half the rows, ahead of the row's first "
           "maximum in its tile of 16; half of those rows with every finite score 0). Checked: {invariant}")
FLAT_INVALID = ("One rule broken: offsets decreasing or not ending at T, a count above `max_spec_len`, a draft "
                "id below -1, a wrong dtype or length, an output of the wrong shape{more}.")
ACCEPT = """\
- acceptance test of draft d at position t: accepted iff 0 <= d < V, q = `draft_probs[t, d]` (1 when
  `draft_probs` is None) is > 0, and p / q >= `uniform_probs[t]`, where p = `target_probs[t, d]`, the
  quotient is one correctly rounded f32 division and the comparison is made in f64. Ties accept; a NaN
  ratio rejects, and so does q NaN or <= 0. The probabilities of -1 and out-of-vocabulary drafts are not
  read: such drafts are rejected."""
RECOVER = """\
- residual[v] = max(p[v] - q[v], 0), the difference in f32, when `draft_probs` is given (a NaN difference
  stays NaN); without draft probs residual = p with the draft's own entry set to 0 (only when 0 <= d < V);
- score[v] = residual[v] * `inv_q[r, v]`, one f32 multiplication;
- the result is the lowest index holding the largest score. NaN scores never win, +inf wins like any
  maximum, and a row whose scores are all NaN gives 0."""


# ---------------------------------------------------------------- rejection.greedy

def greedy_worked() -> Example:
    """Row 0 accepts both drafts and takes its bonus; row 1 stops at a -1 draft; row 2 has no drafts;
    row 3 is not greedy."""
    return Example("valid", inputs={
        "draft_token_ids": np.array([5, 7, 4, -1, 6, 2], i32),
        "target_argmax": np.array([5, 7, 4, 3, 6, 2], i64),
        "bonus_token_ids": np.array([9, 8, 11, 12], i64),
        "cu_num_draft_tokens": np.array([2, 5, 5, 6], i32),
        "is_greedy": np.array([True, True, True, False]),
        "max_spec_len": 3,
    }, outputs={"output_token_ids": Buffer((4, 4), "int32")})


def greedy_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: K drafts per request, each matching the argmax with probability 0.7; every row greedy (None)."""
    k, drafts = BENCH_SPEC, bench.token_ids(rng, batch * BENCH_SPEC, vocab)
    return Example("valid", inputs={
        "draft_token_ids": drafts, "target_argmax": bench.matching(rng, drafts, vocab).astype(i64),
        "bonus_token_ids": bench.token_ids(rng, batch, vocab, i64),
        "cu_num_draft_tokens": np.arange(k, k * batch + 1, k, dtype=i32), "is_greedy": None, "max_spec_len": k,
    }, outputs={"output_token_ids": Buffer((batch, k + 1), "int32")})


GREEDY = wired(
    name="rejection.greedy",
    hazard=None, invariants=None,
    bounded=SPEC_BOUND,
    doc="emit target argmaxes up to the first mismatching draft; the bonus after a fully accepted row",
    inputs=(
        I("draft_token_ids", "int32", "T", doc=DRAFTS),
        I("target_argmax", "int64", "T", doc="the target model's choice at each draft position, >= 0"),
        I("bonus_token_ids", "int64", "B", doc=BONUS),
        I("cu_num_draft_tokens", "int32", "B", doc=CU),
        I("is_greedy", "bool", "B", optional=True, doc="rows to verify; None: every row"),
        I("max_spec_len", "int", doc=SPEC),
    ),
    outputs=(O("output_token_ids", "int32", "B, S+1", doc="written: the emitted prefix of each greedy row"),),
    semantics="""\
Each greedy row r (every row when `is_greedy` is None) is verified left to right over its n[r] drafts,
t = start(r) + pos:
- write `target_argmax[t]` to `output_token_ids[r, pos]`; when the draft differs from it the row ends
  here (the target's token replaces the draft). A -1 or out-of-vocabulary draft always differs.
- when all n[r] drafts match, also write `bonus_token_ids[r]` at `[r, n[r]]`; a request without drafts
  emits only its bonus.

A row emits 1 to n[r] + 1 tokens and only those slots are written. The slots after them and every row
that is not greedy are left untouched (the engine pre-fills the buffer with -1). Drafts after the first
mismatch do not affect the result.

Invalid: draft or bonus ids below -1, `target_argmax` below 0, ids above the int32 range, offsets that are
not inclusive offsets ending at T, a request with more than `max_spec_len` drafts, an output not
[B, S+1].""",
    tiers={
        "valid": BATCH_VALID + " Each request's drafts match the argmax for a drawn prefix (all, none, "
                 "anywhere, near the end), then differ by another valid id, -1 or an out-of-vocabulary id; "
                 "later drafts match again at random. `is_greedy` None, all, none or mixed.",
        "invalid": FLAT_INVALID.format(more=", a negative argmax"),
    },
    bench=greedy_bench,
    launches={"triton": 1, "torch": 11},
    floors=classes.GREEDY,
)


# ---------------------------------------------------------------- rejection.random

def random_worked() -> Example:
    """Row 0 accepts at a tie (u equals the ratio) then rejects; row 1 accepts and takes its bonus;
    row 2 is greedy."""
    return Example("valid", inputs={
        "draft_token_ids": np.array([1, 2, 3, 0], i32),
        "bonus_token_ids": np.array([3, 2, 1], i64),
        "cu_num_draft_tokens": np.array([2, 3, 4], i32),
        "max_spec_len": 2,
        "draft_probs": np.array([[0.25, 0.625, 0.0625, 0.0625], [0.25, 0.125, 0.5, 0.125],
                                 [0.25, 0.25, 0.25, 0.25], [0.25, 0.25, 0.25, 0.25]], f32),
        "target_probs": np.array([[0.125, 0.5, 0.25, 0.125], [0.25, 0.25, 0.25, 0.25],
                                  [0.125, 0.125, 0.375, 0.375], [0.25, 0.25, 0.25, 0.25]], f32),
        "recovered_token_ids": np.array([3, 0, 1, 2], i32),
        "uniform_probs": np.array([float(f32(0.5) / f32(0.625)), 0.75, 0.9, 0.5]),
        "is_greedy": np.array([False, False, True]),
    }, outputs={"output_token_ids": Buffer((3, 3), "int32")})


def random_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: K greedy (EAGLE-style) drafts per request, no draft probs, target softmax rows with a
    confident top token (about 0.7 of the drafts accepted), random recovered ids and uniforms, every row
    random-sampled."""
    k, tokens = BENCH_SPEC, batch * BENCH_SPEC
    target, drafts = bench.probability_table(rng, tokens, vocab)
    return Example("valid", inputs={
        "draft_token_ids": drafts, "bonus_token_ids": bench.token_ids(rng, batch, vocab, i64),
        "cu_num_draft_tokens": np.arange(k, tokens + 1, k, dtype=i32), "max_spec_len": k,
        "draft_probs": None, "target_probs": target,
        "recovered_token_ids": bench.token_ids(rng, tokens, vocab), "uniform_probs": rng.random(tokens),
        "is_greedy": np.zeros(batch, bool),
    }, outputs={"output_token_ids": Buffer((batch, k + 1), "int32")})


def random_call(drafts, counts, spec, draft_probs, target_probs, recovered, uniforms, bonus) -> Example:
    """A valid rejection.random example of non-greedy rows from plain lists."""
    return Example("valid", inputs={
        "draft_token_ids": np.array(drafts, i32), "bonus_token_ids": np.array(bonus, i64),
        "cu_num_draft_tokens": np.cumsum(counts).astype(i32), "max_spec_len": spec,
        "draft_probs": np.array(draft_probs, f32), "target_probs": np.array(target_probs, f32),
        "recovered_token_ids": np.array(recovered, i32), "uniform_probs": np.array(uniforms, np.float64),
        "is_greedy": np.zeros(len(counts), bool),
    }, outputs={"output_token_ids": Buffer((len(counts), spec + 1), "int32")})


def random_strict_worked() -> Example:
    """Row 0 meets a tie (u * q = 0.5 * 0.5 = p) and rejects at once, where the record's rule accepts it
    and rejects the next draft; row 1 accepts (0.75 * 0.25 < 0.375) and takes its bonus; row 2 has
    u = 0 and p = 0, a tie too: rejected (the record's rule accepts, 0 / q >= 0)."""
    quarter = [0.25] * 4
    return random_call([1, 2, 2, 3], [2, 1, 1], 2,
                       [[0.125, 0.5, 0.25, 0.125], [0, 0, 1, 0], quarter, quarter],
                       [[0.25, 0.25, 0.375, 0.125], quarter, [0.125, 0.125, 0.375, 0.375], [0.5, 0.5, 0, 0]],
                       [2, 2, 0, 1], [0.5, 0.75, 0.75, 0.0], [3, 1, 0])


def random_strict_q0_worked() -> Example:
    """Row 0 drafts an id of draft probability 0 whose target probability is 0.25: accepted (0 < 0.25),
    then its bonus (`strict` and the record's rule reject it); row 1 meets a tie and rejects."""
    return random_call([0, 1], [1, 1], 1, [[0, 0.5, 0.5, 0], [0.125, 0.5, 0.25, 0.125]],
                       [[0.25] * 4, [0.25, 0.25, 0.375, 0.125]], [3, 2], [0.9, 0.5], [2, 3])


def random_approx_div_worked() -> Example:
    """p / q = 0.5 / 0.625 = 0.8 in both rows: row 0's uniform is the first f64 above the rule's band of
    f32 steps around f32(0.8) (rejected, whatever the division's last bits), row 1's the first below it
    (accepted, then the bonus)."""
    rows = [[0.25, 0.625, 0.0625, 0.0625]] * 2
    return random_call([1, 1], [1, 1], 1, rows, [[0.125, 0.5, 0.25, 0.125]] * 2, [3, 0], list(band_edges()), [2, 3])


def approx_div(rule_oracle, worked, valid) -> Dialect:
    """Dialect `approx_div` of a stage whose acceptance test divides p / q in f32: its record's oracle,
    judged only on uniforms outside the band where a division within 2 ulp could decide otherwise."""
    return Dialect(
        doc="the record's rule with p / q computed by an approximate f32 division (CUDA's div.full.f32, "
            "which Triton's `/` compiles to): documented within 2 ulp instead of correctly rounded",
        rule=f"""\
- the acceptance test is the record's (q > 0 and p / q >= u), but the quotient may be any f32 within
  2 ulp of the exact p / q. The valid tier therefore draws every uniform outside the band of
  {tables.APPROX_DIV_STEPS} f32 steps either side of the correctly rounded f32(p / q) (a uniform drawn inside it
  is moved to the first f64 above it; the edges just outside are drawn on purpose), where every such
  division decides alike: the verdict stays byte exact. The hazard tier is the record's.""",
        words="approximate f32 division", oracle=rule_oracle, worked=worked, valid=valid,
        inexact=tables.approx_div_inexact)


def band_edges() -> tuple[float, float]:
    """The first f64 above and below the approximate-division band around f32(0.5 / 0.625) = f32(0.8)."""
    lo = hi = f32(0.5) / f32(0.625)
    for _ in range(tables.APPROX_DIV_STEPS):
        lo, hi = np.nextafter(lo, f32(-np.inf)), np.nextafter(hi, f32(np.inf))
    return float(np.nextafter(float(hi), np.inf)), float(np.nextafter(float(lo), -np.inf))


STRICT_RULE = """- acceptance test of draft d at position t: accepted iff 0 <= d < V, q = `draft_probs[t, d]` (1 when
  `draft_probs` is None) lies in (0, 1], and f32(f32(u) * q) < p, where u = `uniform_probs[t]` (f64)
  is rounded to the nearest f32, the product is one f32 multiplication rounded to nearest and
  p = `target_probs[t, d]`. Ties reject (u * q == p, also u = 0 with p = 0); a NaN p or q rejects.
  -1 and out-of-vocabulary drafts are rejected unread. Everything else is the record's rule."""

RANDOM_DIALECTS = {
    "strict": Dialect(
        doc="SGLang's and FlashInfer's acceptance test: accept while f32(u * q) < p, so ties reject",
        rule=STRICT_RULE, words="ties reject: f32(u * q) < p",
        oracle=oracle.random_strict, worked=random_strict_worked, valid=draw.random_strict_valid,
        impls=kernels("rejection", "random_strict")),
    "strict_q0": Dialect(
        doc="FlashInfer's `chain_speculative_sampling`: `strict` with no range test on q (q = 0 accepts "
            "when p > 0)",
        rule=STRICT_RULE.replace("lies in (0, 1], and", "is any value, and") + "\n  So q = 0 accepts "
             "exactly when p > 0 (a draft the drafter gives probability 0 is never drawn in practice).",
        words="ties reject, no range test on q: f32(u * q) < p", oracle=oracle.random_strict_q0,
        worked=random_strict_q0_worked, valid=draw.random_strict_q0_valid,
        impls=kernels("rejection", "random_strict_q0")),
    "approx_div": approx_div(oracle.random, random_approx_div_worked, draw.random_approx_div_valid),
}


RANDOM = wired(
    name="rejection.random",
    bounded=SPEC_BOUND,
    classes=DRAFT_CLASSES,
    doc="rejection sampling of the non-greedy rows: accept while p/q >= u, the recovered token at the first reject",
    inputs=(
        I("draft_token_ids", "int32", "T", doc=DRAFTS),
        I("bonus_token_ids", "int64", "B", doc=BONUS),
        I("cu_num_draft_tokens", "int32", "B", doc=CU),
        I("max_spec_len", "int", doc=SPEC),
        I("draft_probs", "float32", "T, V", optional=True, doc=DRAFT_PROBS),
        I("target_probs", "float32", "T, V", doc=TARGET),
        I("recovered_token_ids", "int32", "T", doc="replacement per position (rejection.recovered), in [0, V)"),
        I("uniform_probs", "float64", "T", doc=UNIFORMS),
        I("is_greedy", "bool", "B", doc="required; greedy rows are left untouched"),
    ),
    outputs=(O("output_token_ids", "int32", "B, S+1", doc="written: the emitted prefix of each non-greedy row"),),
    semantics=f"""\
Each row r with `is_greedy[r]` False is verified left to right over its drafts, t = start(r) + pos:
{ACCEPT}
- an accepted draft is written to `output_token_ids[r, pos]`; at the first rejected one
  `recovered_token_ids[t]` is written instead and the row ends;
- a row that accepts all n[r] drafts also writes `bonus_token_ids[r]` at `[r, n[r]]`.

Only the emitted prefix of non-greedy rows is written; later slots and greedy rows are left untouched.

Invalid: the offset, id and output rules of rejection.greedy (it has no `target_argmax`), plus
`is_greedy` or `uniform_probs` missing, recovered ids outside [0, V), probability tables that are not
float32 [T, V] of equal shape, uniforms not float64 [T].""",
    tiers={
        "valid": BATCH_VALID + " " + TABLES_VALID + " Drafts are valid ids with -1 and out-of-vocabulary "
                 "ids mixed in at drawn rates. " + OOV_FIRST + " " + UNIFORMS_VALID + " `is_greedy` all, none or "
                 "mixed.",
        "hazard": HAZARDS.format(noise="", uniforms=", uniforms of 0",
                                 invariant="each non-greedy row holds 1 to n[r] + 1 ids in [0, V) and nothing "
                                           "after them; greedy rows untouched."),
        "invalid": FLAT_INVALID.format(more=", `is_greedy` or `uniform_probs` missing, a recovered id of V"),
    },
    bench=random_bench,
    deciding=rejection_rows,
    launches={"triton": 1, "torch": 21},   # 18 by the record's rule; dialect strict's q <= 1 and f32 u cost 3
    floors=classes.RANDOM,
    dialects=RANDOM_DIALECTS,
    randomness=Randomness(("uniform_probs",), None, panels.random_launch, panels.random_emitted),
)


# ---------------------------------------------------------------- rejection.recovered

def recovered_worked() -> Example:
    """Position 0: a tie in score, the lower index wins; position 1: every residual is 0, so 0;
    position 2: the noise moves the winner away from the largest residual."""
    return Example("valid", inputs={
        "cu_num_draft_tokens": np.array([2, 3], i32),
        "draft_token_ids": np.array([2, 1, 3], i32),
        "draft_probs": np.array([[0.5, 0.125, 0, 0.375], [0.5, 0.5, 0, 0], [0, 0, 0, 0.25]], f32),
        "target_probs": np.array([[0.25, 0.25, 0.25, 0.25], [0.5, 0.5, 0, 0], [0.125, 0.25, 0.125, 0.5]], f32),
        "inv_q": np.array([[1, 2, 1, 1], [0.5, 1, 4, 1]], f32), "max_spec_len": 2,
    }, outputs={"recovered_token_ids": Buffer((3,), "int32")})


def recovered_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: rejection.random's drafts and target rows (no draft probs) and a noise row per request."""
    k, tokens = BENCH_SPEC, batch * BENCH_SPEC
    target, drafts = bench.probability_table(rng, tokens, vocab)
    return Example("valid", inputs={
        "cu_num_draft_tokens": np.arange(k, tokens + 1, k, dtype=i32), "draft_token_ids": drafts,
        "draft_probs": None, "target_probs": target, "inv_q": bench.inverse_noise(rng, batch, vocab),
        "max_spec_len": k,
    }, outputs={"recovered_token_ids": Buffer((tokens,), "int32")})


RECOVERED = wired(
    name="rejection.recovered",
    classes=DRAFT_CLASSES,
    hints=("max_spec_len",),
    doc="per draft token: the lowest index maximizing residual * inv_q (the replacement for a rejected draft)",
    inputs=(
        I("cu_num_draft_tokens", "int32", "B", doc=CU),
        I("draft_token_ids", "int32", "T", doc=DRAFTS),
        I("draft_probs", "float32", "T, V", optional=True, doc="draft-model probabilities; None: the draft's own "
                                                               "id is zeroed in the residual"),
        I("target_probs", "float32", "T, V", doc=TARGET),
        I("inv_q", "float32", "B, V", doc=INV_Q),
        I("max_spec_len", "int", optional=True, doc="a host hint: None, or at least the most drafts of any request "
                                                   "(lets a kernel size a (B, max_spec_len) grid without a device read)"),
    ),
    outputs=(O("recovered_token_ids", "int32", "T", doc="written: every position"),),
    semantics=f"""\
For every draft position t of request r, `recovered_token_ids[t]` is the token that replaces the draft if
it is rejected, drawn from the residual distribution with the request's noise:
{RECOVER}

Every position is written and the result is always in [0, V), even when the scores hold NaN or
infinities. A vocabulary that is not a multiple of a kernel's tile width must not let a zero or padded
last tile win.

Invalid: offsets that are not inclusive offsets ending at T, draft ids below -1, tables that are not
float32 [T, V] of equal shape, `inv_q` not float32 [B, V], a `max_spec_len` hint below the most drafts of
a request.""",
    tiers={
        "valid": BATCH_VALID + " " + TABLES_VALID + " Drafts are valid ids with -1 and out-of-vocabulary "
                 "ids mixed in.",
        "hazard": HAZARDS.format(noise=" and of `inv_q` (zero noise: inv_q = inf)", uniforms="",
                                 invariant="every id in [0, V), its score the largest non-NaN score, 0 when "
                                           "every score is NaN."),
        "invalid": "One rule broken: offsets not ending at T, a draft id below -1, a wrong dtype, tables of "
                   "different shapes, `inv_q` of the wrong shape, a `max_spec_len` hint one below the most drafts.",
    },
    bench=recovered_bench,
    deciding=rejection_rows,
    launches={"triton": 1, "torch": 22},
    floors=classes.RECOVERED,
)


# ---------------------------------------------------------------- rejection.expand

def expand_worked() -> Example:
    """A NaN is never replaced, -0.0 equals 0.0 and is, a request with no tokens writes nothing."""
    return Example("valid", inputs={
        "x": np.array([2.5, np.nan, 7.0, -0.0], f32),
        "cu_num_tokens": np.array([2, 3, 3, 5], i32),
        "num_tokens": 5,
        "replace_from": 0.0,
        "replace_to": 1.0,
    }, outputs={"expanded": Buffer((5,), "float32")})


def most_tokens(example: Example) -> int | None:
    """The most tokens of one request of a rejection.expand call (0 without requests; None where the call has
    no offsets to read it from, an invalid example)."""
    ends = example.inputs.get("cu_num_tokens")
    if ends is None:
        return None
    ends = np.asarray(ends, np.int64)
    return int(np.diff(ends, prepend=0).max(initial=0))


def expand_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: per-request temperatures (a quarter 0, greedy) broadcast to K tokens each, 0 replaced by 1."""
    x = np.where(rng.random(batch) < 0.25, 0.0, rng.uniform(0.5, 1.5, batch)).astype(f32)
    return Example("valid", inputs={
        "x": x, "cu_num_tokens": np.arange(BENCH_SPEC, BENCH_SPEC * batch + 1, BENCH_SPEC, dtype=i32),
        "num_tokens": batch * BENCH_SPEC, "replace_from": 0.0, "replace_to": 1.0,
    }, outputs={"expanded": Buffer((batch * BENCH_SPEC,), "float32")})


EXPAND = wired(
    name="rejection.expand",
    hazard=None, invariants=None,
    dtype_follows={"expanded": "x"},
    # the most tokens of a request: vLLM's expand_kernel handles at most 128 (MAX_SPEC_LEN) per request, and
    # its only caller, the rejection sampler, asserts max_spec_len <= 128
    bounded={"max_spec_len": 0},
    measured={"max_spec_len": most_tokens},
    doc="broadcast a per-request value to the request's tokens, replacing one value",
    inputs=(
        I("x", "float32|int32|int64", "B", doc="one value per request"),
        I("cu_num_tokens", "int32", "B", doc="inclusive offsets: request r owns tokens start(r) .. cu[r] - 1"),
        I("num_tokens", "int", doc="T, the last offset"),
        I("replace_from", "int|float", doc="Python number; the value to replace"),
        I("replace_to", "int|float", doc="Python number; what it becomes"),
    ),
    outputs=(O("expanded", "float32|int32|int64", "num_tokens", doc="dtype of x; written: every token"),),
    semantics="""\
`replace_from` and `replace_to` are first converted to x's dtype (rounded to nearest for float32; for
integer x they must be Python ints that fit). Then for every request r and every token t of it,
`expanded[t]` = `replace_to` if `x[r] == replace_from` (compared in x's dtype), else `x[r]` copied bit
for bit. So a NaN is never replaced and -0.0 matches 0.0. There is no limit on the tokens of one
request (a kernel that stops after 128 per request leaves the rest unwritten).

Invalid: x not float32, int32 or int64, offsets not ending at `num_tokens`, `expanded` not of x's dtype
and length T, a replace value that is not a number, a float replace value for integer x.""",
    tiers={
        "valid": "B from 0 to 1024 requests; token counts uniform, ragged, mostly zero, or short with a few "
                 "requests of more than 128 tokens. x float32 (0, -0.0, +-1, NaN, inf, 0.5 and the replace "
                 "value mixed with normal draws; NaN, the replace value and the zero of the other sign in up to "
                 "three rows), the replace value a zero of either sign, a number float32 rounds (0.1, 1e-7) or "
                 "another; or int32 / int64 (the replace value, including the dtype's min or max, in 40 % of "
                 "rows).",
        "invalid": "One rule broken: x of dtype float64, offsets int64 or of length B + 1, an output of "
                   "another dtype, `num_tokens` beyond the last offset, a string replace value, a float "
                   "replace value for integer x.",
    },
    bench=expand_bench,
    launches={"triton": 1, "torch": 8},
    floors=classes.EXPAND,
)


# ---------------------------------------------------------------- rejection.sample

def sample_worked() -> Example:
    """Row 0 (greedy): a tied argmax resolves to the lower index, both drafts accepted, bonus; row 1
    (greedy) is rejected at once; row 2 (random) is rejected and recovered."""
    return Example("valid", inputs={
        "draft_token_ids": np.array([1, 0, 1, 3], i32),
        "cu_num_draft_tokens": np.array([2, 3, 4], i32),
        "max_spec_len": 2,
        "draft_probs": None,
        "target_probs": np.array([[0.125, 0.5, 0.25, 0.125], [0.375, 0.125, 0.375, 0.125],
                                  [0.25, 0.125, 0.5, 0.125], [0.25, 0.25, 0.25, 0.25]], f32),
        "bonus_token_ids": np.array([3, 1, 2], i64),
        "is_greedy": np.array([True, True, False]),
        "uniform_probs": np.array([0.5, 0.5, 0.5, 0.5]),
        "inv_q": np.array([[1, 1, 1, 1], [1, 1, 1, 1], [1, 3, 2, 9]], f32),
    }, outputs={"output_token_ids": Buffer((3, 3), "int32")})


def sample_approx_div_worked() -> Example:
    """Two random rows of one draft each, p / q = 0.5 / 0.625 = 0.8: row 0's uniform is the first f64 above
    the band around f32(0.8) (rejected: the recovered token, the largest residual max(p - q, 0) * inv_q),
    row 1's the first below it (accepted, then the bonus)."""
    draft = np.array([[0.25, 0.625, 0.0625, 0.0625]] * 2, f32)
    return Example("valid", inputs={
        "draft_token_ids": np.array([1, 1], i32), "cu_num_draft_tokens": np.array([1, 2], i32), "max_spec_len": 1,
        "draft_probs": draft, "target_probs": np.array([[0.125, 0.5, 0.25, 0.125]] * 2, f32),
        "bonus_token_ids": np.array([2, 3], i64), "is_greedy": np.array([False, False]),
        "uniform_probs": np.array(band_edges()), "inv_q": np.array([[1, 1, 1, 4], [1, 1, 1, 1]], f32),
    }, outputs={"output_token_ids": Buffer((2, 2), "int32")})


def sample_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: rejection.random's drafts and target rows (no draft probs), a quarter of the rows greedy,
    uniforms and noise given."""
    k, tokens = BENCH_SPEC, batch * BENCH_SPEC
    target, drafts = bench.probability_table(rng, tokens, vocab)
    return Example("valid", inputs={
        "draft_token_ids": drafts, "cu_num_draft_tokens": np.arange(k, tokens + 1, k, dtype=i32),
        "max_spec_len": k, "draft_probs": None, "target_probs": target,
        "bonus_token_ids": bench.token_ids(rng, batch, vocab, i64), "is_greedy": rng.random(batch) < 0.25,
        "uniform_probs": rng.random(tokens), "inv_q": bench.inverse_noise(rng, batch, vocab),
    }, outputs={"output_token_ids": Buffer((batch, k + 1), "int32")})


SAMPLE = wired(
    name="rejection.sample",
    bounded=SPEC_BOUND,
    classes=DRAFT_CLASSES,
    presence_follows=("uniform_probs", "inv_q"),   # given exactly when is_greedy is
    doc="the whole verification step: greedy rows against the argmax, the others by rejection sampling",
    inputs=(
        I("draft_token_ids", "int32", "T", doc=DRAFTS),
        I("cu_num_draft_tokens", "int32", "B", doc=CU),
        I("max_spec_len", "int", doc=SPEC),
        I("draft_probs", "float32", "T, V", optional=True, doc=DRAFT_PROBS),
        I("target_probs", "float32", "T, V", doc=TARGET),
        I("bonus_token_ids", "int64", "B", doc=BONUS),
        I("is_greedy", "bool", "B", optional=True, doc="greedy rows; None: every row, and the noise is not read"),
        I("uniform_probs", "float64", "T", optional=True, doc=UNIFORMS + "; required when is_greedy is given"),
        I("inv_q", "float32", "B, V", optional=True, doc=INV_Q + "; required when is_greedy is given"),
    ),
    outputs=(O("output_token_ids", "int32", "B, S+1", doc="written: every slot (the emitted prefix, then -1)"),),
    semantics="""\
The whole buffer is written: every slot is -1 unless a row emits a token there. Per row r:
- greedy rows (every row when `is_greedy` is None) verify as rejection.greedy against the argmax of
  `target_probs[t]`: the lowest index holding the largest value, NaN never wins, a row of NaN gives 0.
  Their `draft_probs`, `uniform_probs` and `inv_q` entries do not affect the result.
- the other rows verify as rejection.random (its acceptance test on the same tables), with the
  replacement tokens computed as in rejection.recovered from the same tables and `inv_q`.

With `is_greedy` None, `uniform_probs` and `inv_q` may be None and are never read; with `is_greedy` given
both are required, even when every row is greedy.

Invalid: the offset, id and output rules of rejection.greedy, tables that are not float32 [T, V] of equal
shape, and, when `is_greedy` is given, `uniform_probs` that is not float64 [T] or `inv_q` that is not
float32 [B, V] (None included).""",
    tiers={
        "valid": BATCH_VALID + " " + TABLES_VALID + " Drafts match the lowest-index argmax for a drawn "
                 "prefix, then differ. " + OOV_FIRST + " Without draft probabilities that holds in every draw, "
                 "and a random row whose out-of-vocabulary draft is tested has its recovery maximum moved to cell "
                 "V - 1 (where a kernel that clamps the id would zero it). " + UNIFORMS_VALID + " `is_greedy` None "
                 "(no noise), all, none or mixed.",
        "hazard": HAZARDS.format(noise=" and of `inv_q`", uniforms=", uniforms of 0",
                                 invariant="each row holds 1 to n[r] + 1 ids in [0, V), then -1."),
        "invalid": FLAT_INVALID.format(more=", tables of the wrong dtype or shape, `inv_q` missing while "
                                            "`is_greedy` is given"),
    },
    bench=sample_bench,
    deciding=rejection_rows,
    launches={"triton": 2, "torch": 48},
    floors=classes.SAMPLE,
    dialects={"approx_div": approx_div(oracle.sample, sample_approx_div_worked, draw.sample_approx_div_valid)},
    randomness=Randomness(("uniform_probs", "inv_q"), None, panels.sample_launch, panels.minus_one_padded),
)


# ---------------------------------------------------------------- padded layout

PADDED_OUTPUTS = (
    O("output_token_ids", "int64", "B, K+1", strided=True,
      doc="written for each verified row: the emitted prefix, then -1"),
    O("num_rejected_tokens", "int64", "B", strided=True, doc="K + 1 - (tokens emitted)"),
    O("last_token_ids", "int64", "B", strided=True, doc="the last token emitted"),
)


PADDED_ROW = """\
A verified row is written in full: after its emitted prefix the rest of the row is set to -1,
`num_rejected_tokens[b]` = K + 1 - emitted, and `last_token_ids[b]` = the last emitted token (the bonus
when every draft was accepted). With K = 0 every row emits just its bonus."""
PADDED_VALID = ("B from 0 to 1024 (fewer as K * V grows), K from 0 to 8; every input and output may be a "
                "strided view (steps of 1 to 3 per axis, padded rows).")
PADDED_INVALID = ("One rule broken: drafts not int64, a draft id below -1, a bonus vector of length B + 1, "
                  "an output of the wrong shape or not int64, `is_greedy` not bool{more}.")


def greedy_padded_worked() -> Example:
    """Row 0 accepts both drafts (bonus); row 1 rejects its first; row 2 is not greedy. The drafts
    arrive with a row stride of 4."""
    return Example("valid", inputs={
        "draft_token_ids": np.array([[3, 5], [2, 2], [6, 6]], i64),
        "target_argmax": np.array([[3, 5], [4, 2], [6, 1]], i64),
        "bonus_token_ids": np.array([7, 8, 9], i64),
        "is_greedy": np.array([True, True, False]),
    }, outputs={"output_token_ids": Buffer((3, 3), "int64"), "num_rejected_tokens": Buffer((3,), "int64"),
                "last_token_ids": Buffer((3,), "int64")},
        layouts={"draft_token_ids": Layout((1, 1), (0, 2))})


def greedy_padded_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: [B, K] drafts matching the argmax with probability 0.7, every row greedy (None), contiguous."""
    drafts = bench.token_ids(rng, (batch, BENCH_SPEC), vocab, i64)
    return Example("valid", inputs={
        "draft_token_ids": drafts, "target_argmax": bench.matching(rng, drafts, vocab),
        "bonus_token_ids": bench.token_ids(rng, batch, vocab, i64), "is_greedy": None,
    }, outputs=draw.padded_buffers(batch, BENCH_SPEC))


GREEDY_PADDED = wired(
    name="rejection.greedy_padded",
    hazard=None, invariants=None,
    doc="greedy verification on the padded [B, K] layout; greedy rows written in full",
    inputs=(
        I("draft_token_ids", "int64", "B, K", strided=True, doc="K drafts per request; -1 and ids >= V allowed"),
        I("target_argmax", "int64", "B, K", strided=True, doc="the target model's choice at each draft, >= 0"),
        I("bonus_token_ids", "int64", "B", strided=True, doc=BONUS),
        I("is_greedy", "bool", "B", optional=True, strided=True, doc="rows to verify; None: every row"),
    ),
    outputs=PADDED_OUTPUTS,
    semantics=f"""\
Every request has K draft slots. Each greedy row b (every row when `is_greedy` is None) emits as in
rejection.greedy: `target_argmax[b, k]` at each position until the first draft that differs from it, or
all K drafts and then `bonus_token_ids[b]`. Rows that are not greedy are left untouched in all three
outputs.

{PADDED_ROW}

Invalid: draft or bonus ids below -1, an argmax below 0, any field of the wrong dtype or shape.""",
    tiers={
        "valid": PADDED_VALID + " Drafts match the argmax for a drawn prefix, then differ by a valid id, -1 or "
                 "an out-of-vocabulary id. `is_greedy` None, all, none or mixed.",
        "invalid": PADDED_INVALID.format(more=", an argmax of the wrong shape or below 0"),
    },
    bench=greedy_padded_bench,
    rows=draw.padded_table,
    launches={"triton": 1, "torch": 10},
    floors=classes.GREEDY_PADDED,
)


def sample_padded_worked() -> Example:
    """Row 0 (greedy) rejects its second draft for the argmax; row 1 (random) accepts at a tie, then
    rejects and takes the recovered token."""
    return Example("valid", inputs={
        "draft_token_ids": np.array([[0, 3], [2, 1]], i64),
        "draft_probs": None,
        "target_probs": np.array([[[0.5, 0.25, 0.125, 0.125], [0.125, 0.25, 0.5, 0.125]],
                                  [[0.25, 0.25, 0.5, 0], [0.25, 0.5, 0.125, 0.125]]], f32),
        "bonus_token_ids": np.array([1, 3], i64),
        "is_greedy": np.array([True, False]),
        "uniform_probs": np.array([[0.5, 0.5], [0.5, 0.75]]),
        "inv_q": np.array([[1, 1, 1, 1], [1, 1, 4, 1]], f32),
    }, outputs={"output_token_ids": Buffer((2, 3), "int64"), "num_rejected_tokens": Buffer((2,), "int64"),
                "last_token_ids": Buffer((2,), "int64")})


def sample_padded_approx_div_worked() -> Example:
    """rejection.sample's approx_div example on the padded layout: row 0 rejected at the band's upper edge
    (the recovered token), row 1 accepted at its lower edge (then the bonus)."""
    flat = sample_approx_div_worked().inputs
    return Example("valid", inputs={
        "draft_token_ids": np.array([[1], [1]], i64), "draft_probs": flat["draft_probs"].reshape(2, 1, 4),
        "target_probs": flat["target_probs"].reshape(2, 1, 4), "bonus_token_ids": np.array([2, 3], i64),
        "is_greedy": np.array([False, False]), "uniform_probs": flat["uniform_probs"].reshape(2, 1),
        "inv_q": flat["inv_q"],
    }, outputs={"output_token_ids": Buffer((2, 2), "int64"), "num_rejected_tokens": Buffer((2,), "int64"),
                "last_token_ids": Buffer((2,), "int64")})


def sample_padded_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: rejection.sample's contents in the padded layout: [B, K, V] target rows, no draft probs."""
    k = BENCH_SPEC
    target, drafts = bench.probability_table(rng, batch * k, vocab)
    return Example("valid", inputs={
        "draft_token_ids": drafts.astype(i64).reshape(batch, k), "draft_probs": None,
        "target_probs": target.reshape(batch, k, vocab), "bonus_token_ids": bench.token_ids(rng, batch, vocab, i64),
        "is_greedy": rng.random(batch) < 0.25, "uniform_probs": rng.random((batch, k)),
        "inv_q": bench.inverse_noise(rng, batch, vocab),
    }, outputs=draw.padded_buffers(batch, k))


SAMPLE_PADDED = wired(
    name="rejection.sample_padded",
    classes=DRAFT_CLASSES,
    presence_follows=("uniform_probs", "inv_q"),   # given exactly when is_greedy is
    doc="rejection.sample on the padded [B, K] layout; every row written in full",
    inputs=(
        I("draft_token_ids", "int64", "B, K", strided=True, doc="K drafts per request; -1 and ids >= V allowed"),
        I("draft_probs", "float32", "B, K, V", optional=True, strided=True, doc=DRAFT_PROBS),
        I("target_probs", "float32", "B, K, V", strided=True, doc=TARGET),
        I("bonus_token_ids", "int64", "B", strided=True, doc=BONUS),
        I("is_greedy", "bool", "B", optional=True, strided=True,
          doc="greedy rows; None: every row, and the noise is not read"),
        I("uniform_probs", "float64", "B, K", optional=True, strided=True,
          doc=UNIFORMS + "; required when is_greedy is given"),
        I("inv_q", "float32", "B, V", optional=True, strided=True,
          doc=INV_Q + "; required when is_greedy is given"),
    ),
    outputs=PADDED_OUTPUTS,
    semantics=f"""\
Every row is written. Each row b is verified over its K drafts, the draft at `[b, k]` taking the role of
position t:
- greedy rows (every row when `is_greedy` is None) as rejection.greedy against the argmax of
  `target_probs[b, k]` (lowest index of the largest value, NaN never wins, all NaN gives 0);
- the other rows as rejection.random, with `uniform_probs[b, k]` and the replacement of
  rejection.recovered computed from `target_probs[b, k]`, `draft_probs[b, k]` and `inv_q[b]`.

{PADDED_ROW}

With `is_greedy` None the noise inputs may be None and are not read; with `is_greedy` given both are
required.

Invalid: as rejection.greedy_padded, plus tables that are not float32 [B, K, V] of equal shape and
missing noise while `is_greedy` is given.""",
    tiers={
        "valid": PADDED_VALID + " " + TABLES_VALID + " Drafts match the argmax for a drawn prefix, then "
                 "differ. " + OOV_FIRST + " " + UNIFORMS_VALID + " `is_greedy` None (no noise), all, none or "
                 "mixed.",
        "hazard": HAZARDS.format(noise=" and of `inv_q`", uniforms=", uniforms of 0",
                                 invariant="each row holds 1 to K + 1 ids in [0, V), then -1; "
                                           "`num_rejected_tokens` and `last_token_ids` agree with it."),
        "invalid": PADDED_INVALID.format(more=", tables of the wrong dtype or shape, `uniform_probs` missing "
                                              "while `is_greedy` is given"),
    },
    bench=sample_padded_bench,
    rows=draw.padded_table,
    deciding=rejection_rows,
    launches={"triton": 2, "torch": 36},
    floors=classes.SAMPLE_PADDED,
    dialects={"approx_div": approx_div(oracle.sample_padded, sample_padded_approx_div_worked,
                                       draw.sample_padded_approx_div_valid)},
    randomness=Randomness(("uniform_probs", "inv_q"), None, panels.sample_padded_launch,
                          panels.minus_one_padded),
)



# ---------------------------------------------------------------- rejection.chain_cdf

f32 = np.float32


def cdf_call(candidates, target, draft, uniforms, u_final) -> Example:
    """A valid example from plain lists (requests of equal K)."""
    cand = np.array(candidates, np.int64)
    batch, k1 = cand.shape
    target = np.array(target, f32).reshape(batch, k1, -1)
    return Example("valid", inputs={
        "candidates": cand, "target_probs": target,
        "draft_probs": np.array(draft, f32).reshape(batch, k1 - 1, target.shape[-1]),
        "uniform_samples": np.array(uniforms, f32), "uniform_final": np.array(u_final, f32),
    }, outputs=draw.buffers(batch, k1 - 1))


P_ROWS = [[0.25, 0.25, 0.375, 0.125], [0.25, 0.25, 0.25, 0.25], [0, 0.5, 0.25, 0.25]]
Q_ROWS = [[0.125, 0.5, 0.25, 0.125], [0, 0, 1, 0]]


def chain_cdf_worked() -> Example:
    """V = 4, K = 2, drafts [1, 2], the same rows twice. Request 0 (u = [0.5, 0.9]) meets a tie at
    position 0 (0.5 * 0.5 = 0.25 = p): rejected; residual [0.125, 0, 0.125, 0], total 0.25, t = 0.125,
    running sums [0.125, 0.125, 0.25, 0.25]: token 2, emitted alone. Request 1 (u = [0.25, 0.125])
    accepts both (0.125 < 0.25, 0.125 < 0.25) and picks its bonus from p_2 with t = 0.5, running sums
    [0, 0.5, 0.75, 1]: token 2. Column 2 of the uniforms is never read."""
    return cdf_call([[7, 1, 2], [7, 1, 2]], [P_ROWS, P_ROWS], [Q_ROWS, Q_ROWS],
                    [[0.5, 0.9, 0.3], [0.25, 0.125, 0.7]], [0.5, 0.5])


def chain_cdf_snapshot_worked() -> Example:
    """Request 0 drafts a token of draft probability 0 (p = 0.25): `snapshot` accepts it and picks its
    bonus from [0, 0, 0.5, 0.5] at t = 0.25: token 2 (the record rejects it: residual
    [0.25, 0, 0, 0.25], t = 0.125, token 0). Request 1 ties at position 0; q = 2 at token 2 is zeroed
    by the record (residual [0, 0, 0.5, 0]: token 2) but kept by `snapshot` (all-zero residual: V - 1 = 3)."""
    quarter = [0.25] * 4
    return cdf_call([[5, 0], [5, 1]], [[quarter, [0, 0, 0.5, 0.5]], [[0.25, 0.25, 0.5, 0], quarter]],
                    [[[0, 0.5, 0.5, 0]], [[0.5, 0.5, 2.0, 0]]], [[0.5, 0.5], [0.5, 0.5]], [0.25, 0.5])


def chain_cdf_bench(batch: int, vocab: int, rng: np.random.Generator) -> Example:
    """Bench: K = BENCH_SPEC drafts per request drawn by a greedy drafter (about 0.7 accepted), target
    rows softmax tables, draft rows a mix of the target row and another table, both on the valid tier's
    2**-16 grid (what flooring loses goes to the row's largest cell: rows sum to 1 exactly), uniforms on
    the 2**-8 grid: every sum is exact, so the outputs do not depend on summation order."""
    k = BENCH_SPEC
    target, top = bench.probability_table(rng, batch * (k + 1), vocab)
    other, _ = bench.probability_table(rng, batch * k, vocab)
    target = bench.on_grid(target.reshape(batch, k + 1, vocab))
    draft = bench.on_grid(0.5 * target[:, :k] + 0.5 * other.reshape(batch, k, vocab))
    cand = top.reshape(batch, k + 1).astype(np.int64)
    return Example("valid", inputs={
        "candidates": np.concatenate([bench.token_ids(rng, (batch, 1), vocab, np.int64), cand[:, :k]], 1),
        "target_probs": target, "draft_probs": draft,
        "uniform_samples": draw.grid_uniforms(rng, (batch, k + 1), 8),
        "uniform_final": draw.grid_uniforms(rng, (batch,), 8),
    }, outputs=draw.buffers(batch, k))


CDF_ACCEPT = """\
- the draft d = `candidates[b, pos + 1]` at position pos is accepted iff 0 <= d < V, q =
  `draft_probs[b, pos, d]` lies in (0, 1], and f32(u * q) < p, with u = `uniform_samples[b, pos]`, one
  f32 multiplication rounded to nearest, and p = `target_probs[b, pos, d]`. Ties reject (u * q == p,
  u = 0 with p = 0 included); a NaN p or q rejects. -1 and out-of-vocabulary drafts are rejected and
  their cells are not read."""

SNAPSHOT_RULE = """\
- acceptance as the record's but with no range test on q: accepted iff 0 <= d < V and f32(u * q) < p,
  so q = 0 accepts exactly when p > 0, and q > 1 may accept;
- in the residual only a NaN q becomes 0 (q < 0, q > 1 and infinities are subtracted as they are).
Everything else is the record's rule."""


CHAIN_CDF = wired(
    name="rejection.chain_cdf",
    doc="chain rejection sampling with ties rejecting, the replacement or bonus drawn by an inverse-CDF walk",
    inputs=(
        I("candidates", "int64", "B, K+1",
          doc="column 0 the previous token (not read), columns 1..K the drafts; -1 and ids >= V allowed"),
        I("target_probs", "float32", "B, K+1, V", doc="target probabilities p_0..p_K; p_K is the bonus row"),
        I("draft_probs", "float32", "B, K, V", doc="draft probabilities q_0..q_{K-1}"),
        I("uniform_samples", "float32", "B, K+1",
          doc="one acceptance uniform per position; column K is never read"),
        I("uniform_final", "float32", "B", doc="one uniform per request for the pick"),
    ),
    outputs=(
        O("predicts", "int32", "B*(K+1)",
          doc="written: slots b*(K+1) + 0..num (the accepted drafts, then the pick)"),
        O("accept_index", "int32", "B, K+1", doc="written: [b, 0..num] = the flat slots b*(K+1) + 0..num"),
        O("accept_token_num", "int32", "B", doc="written: num, the drafts accepted"),
    ),
    semantics=f"""\
Each request b walks its drafts pos = 0, 1, .. K-1 and stops at the first one rejected:
{CDF_ACCEPT}
Let num be the number accepted (0..K). The token emitted after them (the replacement after a
rejection, the bonus when all K pass) is picked from one row `res` of V f32 cells:
- after a rejection at pos = num: res[v] = max(p_num[v] - q'[v], 0), one f32 subtraction, with q' =
  q_num[v] where 0 <= q_num[v] <= 1 and 0 otherwise (NaN, infinities, negative or above 1); a NaN
  difference counts as 0;
- when all K are accepted: res = p_K as it stands (no draft row is read; NaN or negative cells are left
  as they are).
Then total = the f32 sum of res, t = f32(`uniform_final[b]` * total), and the pick is the lowest v whose
running sum res[0] + .. + res[v] exceeds t; V - 1 when none does (total 0 or NaN, or t at or past the
sum). Exactly one `uniform_final` is used per request, and the uniforms after the first rejection are
not read.

Written: `predicts[b*(K+1) + pos]` = the draft for pos < num and the pick at pos = num;
`accept_index[b, pos]` = b*(K+1) + pos for pos <= num; `accept_token_num[b]` = num. The slots after num
in `predicts` and `accept_index` are left untouched, and so is everything else. K = 0 emits only the
pick from p_0.

The order of the sum is not specified, so exact results need sums that do not depend on it: valid
inputs are such that every partial sum is exact in f32 (see the valid tier).

Invalid: candidates not int64 [B, K+1] with K + 1 >= 1 or holding an id below -1; probability tables,
uniforms or outputs of another dtype or shape (target [B, K+1, V >= 1], draft [B, K, V], uniforms
[B, K+1] and [B], predicts [B*(K+1)], accept_index [B, K+1], accept_token_num [B], all int32 outputs).""",
    tiers={
        "valid": "V from 1 to a few thousand (1, 2, 1023, 1024, 1025, 2049, 4097 or small; at most 1025 for "
                 "the interpreter, with B <= 4), K from 1 to 8 (0 in a fifth of the draws), B from 0 with "
                 "B*(K+1)*V bounded. Rows deal 2**bits units (bits 2, 4, 8 or 16; down to half as many in a "
                 "quarter of the rows) to 50 %, 10 % or all of their cells, so probabilities are multiples of "
                 "2**-bits with row sums in [1/2, 1] however wide the row; "
                 "uniforms multiples of 2**-1 to 2**-8: every partial sum, difference and u * q is exact in "
                 "f32 in any order. Drafts drawn from their q row, with -1 and out-of-vocabulary ids mixed "
                 "in. Planted: ties u * q == p (and u = 0 with p = 0), q = p on a tenth of the requests, their "
                 "drafts drawn from it (all accepted, or after a later plant's rejection mostly an all-zero "
                 "residual and V - 1), q = 0 and q > 1 at the drafted token, an all-zero bonus row, u_final 0 or "
                 "1, u_final putting t exactly on a running sum, for V > 1024 u_final putting t past the first "
                 "tile's sum (the pick in a later tile), and bait for placeholders: the cells just before a -1 "
                 "draft's rows (the last cells of the rows before it) set so that reading them would accept it "
                 "(such rows may sum past 1: the sums stay exact).",
        "hazard": "A valid draw made pathological: general f32 rows and uniforms (sums depend on their order), "
                  "NaN, +-inf, -0.25 or 1.5 in 1 %, 30 % or every cell of p and q. Checked: num in [0, K]; "
                  "predicts holds the num accepted drafts then an id in [0, V); accept_index the slots "
                  "b*(K+1) + 0..num; the slots after num untouched; and when the pick row is finite, >= 0, "
                  "with a positive total and t < total * (1 - 2**-20), the picked cell is > 0.",
        "invalid": "One rule broken: a draft id of -2, candidates with no column, any field of the wrong "
                   "dtype, rank or length.",
    },
    bench=chain_cdf_bench,
    deciding=rejection_rows,
    launches={"triton": 1, "torch": 60},
    floors=classes.CHAIN_CDF,
    dialects={
        "snapshot": Dialect(
            doc="SGLang's older snapshots of the same kernel: no range test on q (q = 0 accepts when p > 0), "
                "and only a NaN q is zeroed in the residual",
            rule=SNAPSHOT_RULE, words="no range test on q: f32(u * q) < p", oracle=oracle.chain_cdf_snapshot,
            worked=chain_cdf_snapshot_worked, impls=kernels("rejection", "chain_cdf_snapshot")),
    },
    randomness=Randomness(("uniform_samples", "uniform_final"), None, panels.chain_cdf_launch,
                          panels.predicts_emitted, flat={"predicts": "candidates"}),
)

STAGES = (GREEDY, RANDOM, RECOVERED, EXPAND, SAMPLE, GREEDY_PADDED, SAMPLE_PADDED, CHAIN_CDF)

"""The input classes the `rejection` family's records name (`Stage.floors`): each with the fewest examples of the
ci budget that must hold it and why it matters (the contract's edges, the bugs engines shipped)."""
from __future__ import annotations

from specverify.records.stage import Floor
from specverify.strategies.draft_hazards import NAN_TILE
from specverify.strategies.probability_tables import LANE_TIE, SMALL_VOCAB
from specverify.strategies.rejection import CDF_TILE

LANE_TIES = Floor(f"ties: {LANE_TIE} apart in the first two tiles (one lane of a {LANE_TIE}-wide sweep)", 5,
                  "equal maxima one lane apart in a sweep that gives a program several tiles of a row: a best "
                  "kept per lane must keep the first (a planted `>=` in our own pick slipped through two of seeds "
                  "0-3 before; the corpus holds such cases for the interpreter's shapes)")

GREEDY = (
    Floor("batch: a request with more than 128 drafts", 15, "vLLM's kernels handle at most 128 (MAX_SPEC_LEN): "
          "a kernel capped there leaves later positions unwritten", interpreted=True),
    Floor("batch: a request with no drafts", 15, "a request without drafts emits only its bonus"),
    Floor("batch: B=0", 5, "an empty batch writes nothing"),
    Floor("drafts: accepted prefix all", 10, "a fully accepted row also writes its bonus at [r, n[r]]",
          interpreted=True),
    Floor("drafts: first mismatch a placeholder", 8, "a -1 draft always differs from the argmax"),
    Floor("drafts: first mismatch out of the vocabulary", 6, "an out-of-vocabulary draft always differs"),
    Floor("is_greedy: mixed", 20, "rows that are not greedy are left untouched", interpreted=True),
    Floor("is_greedy: none", 5, "is_greedy None: every row is greedy"),
    Floor("is_greedy: no", 5, "no greedy row: nothing is written"),
)

RANDOM = (
    Floor("reached: an out-of-vocabulary draft tested", 15, "vLLM's rejection_random_sample_kernel reads an "
          "out-of-vocabulary draft's p and q without a range test and accepts it when they pass",
          interpreted=True),
    Floor(f"reached: an out-of-vocabulary draft tested, V <= {SMALL_VOCAB}", 10, "the same kernel: with "
          "a small V the next row's cells it reads often pass (missed at seed 0 before)", interpreted=True),
    Floor("reached: a placeholder draft tested", 4, "-1 drafts are rejected unread (FlashInfer reads column -1)"),
    Floor("a first drafted id with q = 0 < p", 1, "q > 0 is part of the test: p / 0 = inf would accept"),
    Floor("uniforms: at the ratio at rate 1.0", 5, "ties accept: u equal to f32(p / q), and one step off"),
    Floor("draft_probs: none", 10, "without draft probs q = 1 (n-gram drafts)"),
    Floor("draft_probs: close", 8, "draft rows mostly equal to the target: ratios of exactly 1"),
    Floor("is_greedy: mixed", 12, "greedy rows are left untouched"),
    Floor("batch: a request with more than 128 drafts", 10, "vLLM's MAX_SPEC_LEN is 128"),
    Floor("batch: a request with no drafts", 4, "a request without drafts emits only its bonus"),
    Floor("hazard: nan", 5, "NaN p or q rejects; rows keep their invariants", tier="hazard"),
    Floor("hazard: oov drafts", 5, "out-of-vocabulary drafts where probabilities are read", tier="hazard"),
    Floor("hazard: zero uniforms", 5, "u = 0 accepts every readable draft", tier="hazard"),
)

RECOVERED = (
    LANE_TIES,
    Floor("planted: ties", 6, "the lowest index of equal maxima, far apart and across tiles", interpreted=True),
    Floor("planted: tile edge", 4, "a lone peak on a tile edge"),
    Floor("planted: zero tiles", 3, "an all-zero residual on one side of a tile edge", interpreted=True),
    Floor("planted: last tile", 2, "a V not a multiple of the tile: the last partial tile must not let "
          "padding win (STAGES.md, the classic escape)"),
    Floor("planted: zero residual", 2, "every residual 0: the first zero (0)"),
    Floor("vocab: tile edge or real size", 10, "V = 8191, 8192, 8193 and 151936: tile edges and a real "
          "vocabulary", interpreted=True),
    Floor("reached: an out-of-vocabulary draft without draft probs (it zeroes no cell)", 6,
          "an out-of-vocabulary draft zeroes nothing (a clamped id would zero V - 1)"),
    Floor("draft_probs: none", 15, "without draft probs the draft's own cell is zeroed"),
    Floor("draft_probs: close", 10, "draft rows mostly equal to the target: many zero residuals"),
    Floor("max_spec_len: None", 4, "the host hint may be absent"),
    Floor("batch: B>1", 10, "one noise row per request, shared by its positions"),
    Floor(f"reached: a NaN ahead of its row's first maximum, in its tile of {NAN_TILE}", 3,
          "NaN never wins: vLLM's sample_recovered_tokens_kernel has a tile argmax a NaN breaks",
          tier="hazard", interpreted=True),
    Floor("reached: a NaN ahead of its row's first maximum 0", 2, "max(p - q, 0) keeps a NaN: a NaN-dropping "
          "max makes it a 0 that wins where every finite score is 0 (missed at seeds 2, 3 before)",
          tier="hazard", interpreted=True),
    Floor("hazard: zero noise", 5, "inv_q = inf: 0 * inf is NaN", tier="hazard"),
    Floor("hazard: oov drafts", 5, "out-of-vocabulary drafts where the residual is read", tier="hazard"),
)

EXPAND = (
    Floor("batch: a request with more than 128 drafts", 15, "vLLM's expand_kernel handles at most 128 tokens "
          "per request (MAX_SPEC_LEN); the contract has no limit", interpreted=True),
    Floor("batch: a request with no drafts", 15, "a request without tokens writes nothing"),
    Floor("batch: B=0", 8, "an empty batch"),
    Floor("expand: a span of more than 1024 tokens (one request over several tiles)", 3, "Triton: one request a "
          "program up to 8 requests, its span in tiles of at most 1024 tokens", interpreted=True),
    Floor("x: float32", 15, "float x: NaN, signed zeros, rounding of the replace values"),
    Floor("x: int32", 15, "int32 x"),
    Floor("x: int64", 15, "int64 x"),
    Floor("x: a NaN (never replaced)", 5, "a NaN is never replaced"),
    Floor("x: replace_from rounded to float32 first", 4, "replace_from is converted to float32 before the "
          "comparison (0.1 compared in f64 matches nothing)"),
    Floor("x: a zero of the other sign than replace_from 0.0 (equal to it)", 1, "-0.0 matches 0.0: a "
          "bit-pattern comparison fails on any such row"),
    Floor("x: replace_from the dtype's min or max", 8, "integer replace values at the dtype's range ends"),
)

SAMPLE = (
    LANE_TIES,
    Floor("reached: an out-of-vocabulary draft tested", 12, "vLLM's random kernel accepts an out-of-vocabulary "
          "draft whose next-row cells pass", interpreted=True),
    Floor(f"reached: an out-of-vocabulary draft tested, V <= {SMALL_VOCAB}", 6, "the same kernel: a "
          "small V makes the cells it reads large", interpreted=True),
    Floor("reached: an out-of-vocabulary draft rejected without draft probs, recovery maximum at V - 1", 3,
          "its recovery zeroes no cell: a kernel that takes the clamped id V - 1 zeroes the maximum"),
    Floor("drafts: first mismatch a placeholder", 6, "a -1 draft differs from the argmax and is rejected"),
    Floor("drafts: first mismatch out of the vocabulary", 5, "an out-of-vocabulary draft is rejected"),
    Floor("drafts: accepted prefix all", 10, "a fully accepted row writes its bonus, then -1"),
    Floor("planted: ties", 6, "greedy rows take the lowest index of equal maxima", interpreted=True),
    Floor("is_greedy: mixed", 15, "greedy and random rows in one call", interpreted=True),
    Floor("is_greedy: none", 4, "is_greedy None: the noise is not read"),
    Floor("batch: a request with more than 128 drafts", 8, "vLLM's MAX_SPEC_LEN is 128"),
    Floor(f"reached: a NaN ahead of its row's first maximum, in its tile of {NAN_TILE}", 3,
          "NaN never wins, in the argmax of greedy rows and the recovery scores", tier="hazard",
          interpreted=True),
    Floor("hazard: oov drafts", 5, "out-of-vocabulary drafts where probabilities are read", tier="hazard"),
)

GREEDY_PADDED = (
    Floor("layout: strided", 40, "every tensor may be a strided view", interpreted=True),
    Floor("layout: column step > 1", 40, "a column step other than 1 (a row read as contiguous fails)",
          interpreted=True),
    Floor("layout: transposed", 5, "views stored in another axis order", interpreted=True),
    Floor("padded: K=0", 3, "K = 0: every row emits just its bonus", interpreted=True),
    Floor("drafts: accepted prefix all", 10, "a fully accepted row ends with its bonus", interpreted=True),
    Floor("drafts: first mismatch a placeholder", 6, "a -1 draft always differs", interpreted=True),
    Floor("drafts: first mismatch out of the vocabulary", 8, "an out-of-vocabulary draft always differs"),
    Floor("is_greedy: mixed", 15, "rows that are not greedy are untouched in all three outputs",
          interpreted=True),
    Floor("is_greedy: none", 2, "is_greedy None: every row is greedy"),
)

SAMPLE_PADDED = (
    LANE_TIES,
    Floor("reached: an out-of-vocabulary draft tested", 12, "vLLM's random kernel accepts an out-of-vocabulary "
          "draft whose next-row cells pass", interpreted=True),
    Floor("drafts: first mismatch a placeholder", 10, "a -1 draft is rejected"),
    Floor("layout: strided", 50, "every input and output may be a strided view", interpreted=True),
    Floor("layout: transposed", 10, "views stored in another axis order", interpreted=True),
    Floor("padded: K=0", 2, "K = 0: every row emits just its bonus", interpreted=True),
    Floor("is_greedy: mixed", 20, "greedy and random rows in one call", interpreted=True),
    Floor("is_greedy: none", 2, "is_greedy None: the noise is not read"),
    Floor("drafts: accepted prefix all", 10, "a fully accepted row writes its bonus", interpreted=True),
    Floor("planted: zero residual", 3, "every residual 0: the first zero", interpreted=True),
    Floor("hazard: nan", 5, "NaN never wins; rows keep their invariants", tier="hazard"),
)

CHAIN_CDF = (
    Floor("chain: K=0 (bonus only)", 4, "K = 0 emits only the pick from p_0"),
    Floor("reached: every draft accepted (bonus pick)", 6, "the bonus pick reads p_K as it stands",
          interpreted=True),
    Floor("reached: an all-zero pick row (V - 1)", 8, "an all-zero residual picks V - 1 (FlashInfer writes -1)",
          interpreted=True),
    Floor("reached: t on a running sum", 10, "the pick is the first running sum that exceeds t, not reaches it",
          interpreted=True),
    Floor("reached: a rejection at a tie u * q == p", 8, "ties reject", interpreted=True),
    Floor("reached: a rejection at a placeholder", 3, "-1 drafts are rejected unread (SGLang reads column -1)",
          interpreted=True),
    Floor("reached: a rejection at an out-of-vocabulary draft", 6, "out-of-vocabulary drafts are rejected unread",
          interpreted=True),
    Floor("reached: a rejection at q > 1", 4, "q outside (0, 1] rejects (dialect snapshot accepts)",
          interpreted=True),
    Floor("reached: a rejection at q = 0", 2, "q = 0 rejects (dialect snapshot accepts when p > 0)"),
    Floor(f"reached: a pick past the first tile of {CDF_TILE}, the tile before it not empty", 2,
          "a walk tile by tile carries its running sum (missed at seeds 0, 2, 3 before)"),
    Floor("vocab: V=1", 8, "one id: every residual after a rejection is 0"),
    Floor("hazard: general floats", 5, "sums that depend on their order", tier="hazard"),
    Floor("hazard: nan", 4, "a NaN difference counts as 0; p_K is read as it stands", tier="hazard"),
    Floor("hazard: negative", 3, "negative cells of p and q", tier="hazard"),
    Floor("hazard: above one", 3, "q > 1 is zeroed in the residual", tier="hazard"),
)

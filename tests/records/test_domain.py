"""Declared domains: a declaration checked against the stage's record, drawing within it (every tier and the
corpus), the domain in every report, and `validates` asking the invalid tier of an outside implementation."""
import json
import pickle
import re
from dataclasses import replace

import pytest
from hypothesis import find, given, settings

from specverify.cli import main
from specverify.files import cases
from specverify.records import domain, registry
from specverify.records.backends import target
from specverify.records.domain import DomainError
from specverify.records.stage import DrawContext
from specverify.runs import shard
from specverify.runs.search import tier_strategy

STAGES = registry.all_stages()
NEXT = STAGES["eagle.next_token_padded"]
ROWS = {"fields": {"sampled_token_ids": {"layout": "rows", "reason": "the caller passes a contiguous [B, K+1]"}}}


def check(tmp_path, capsys, function, *extra):
    report = tmp_path / "report.json"
    status = main(["check", "--stage", "eagle.next_token_padded", "--impl", f"tests.domain_kernels:{function}",
                   "--device", "cpu", "--examples", "25", "--findings", str(tmp_path / "findings"),
                   "--json", str(report), "--markdown", str(tmp_path / "report.md"), *extra])
    return status, json.loads(report.read_text()) if report.exists() else None, capsys.readouterr().out


def declare(tmp_path, text):
    path = tmp_path / "declare.toml"
    path.write_text(text)
    return ["--declare", str(path)]


ROWS_TOML = """
[domain.fields.sampled_token_ids]
layout = "rows"
reason = "vLLM's caller passes a contiguous [B, K+1] tensor"
"""


def test_a_unit_column_kernel_fails_on_the_whole_contract_naming_the_field(tmp_path, capsys):
    status, report, out = check(tmp_path, capsys, "next_token_unit_columns", "--check", "valid")
    assert status == 1
    assert "sampled_token_ids" in out and "does not conform" in out
    assert "strides (elements): sampled_token_ids" in out   # the failing layout is named
    assert report["verdicts"][0]["domain"] == []


def test_a_unit_column_kernel_conforms_within_its_declared_rows_layout(tmp_path, capsys):
    status, report, out = check(tmp_path, capsys, "next_token_unit_columns", "--check", "valid",
                                *declare(tmp_path, ROWS_TOML))
    assert status == 0, out
    assert "conforms within its declared domain: `sampled_token_ids` unit column step" in out
    assert report["verdicts"][0]["domain"] == [
        "`sampled_token_ids` unit column step (vLLM's caller passes a contiguous [B, K+1] tensor)"]
    markdown = (tmp_path / "report.md").read_text()
    assert "## Declared domains" in markdown and "vLLM's caller passes" in markdown


@pytest.mark.parametrize("text,words", [
    ('[domain.fields.no_such]\nlayout = "rows"\nreason = "x"', "the record has no field 'no_such'"),
    ('[domain.fields.sampled_token_ids]\nlayout = "diagonal"\nreason = "x"', "unknown layout 'diagonal'"),
    ('[domain.fields.sampled_token_ids]\nlayout = "any"\nreason = "x"', "restricts nothing"),
    ('[domain.fields.discard_mask]\nlayout = "rows"\nreason = "x"', "discard_mask is never strided"),
    ('[domain.fields.sampled_token_ids]\nlayout = "rows"', "needs its reason"),
    ('[domain.bounds]\n"Q <= 8" = "x"', "Q is not a name this stage's draws can bound"),
    ('[domain.bounds]\n"vocab_size >= 0" = "x"', "widens the contract"),
    ('[domain.bounds]\n"B <= 0" = "x"', "leave no call"),
    ('[domain.bounds]\n"B <= two" = "x"', "no names"),
    ('[domain.bounds]\n"B <= ((2**64)**64)**64" = "x"', "a value past 2**64"),
    ('dialect = "sloppy"', "dialect 'sloppy': eagle.next_token_padded has no such dialect"),
    ('[domain]\nshapes = 1', "unknown domain key 'shapes'"),
    ('validates = "yes"', "validates must be true or false"),
    ('impl = "a:b"', "'impl' is given by --impl"),
    ('[domain', "not valid TOML"),
])
def test_a_declaration_the_record_does_not_allow_is_one_usage_line(tmp_path, capsys, text, words):
    status, _, out = check(tmp_path, capsys, "next_token_refusing", *declare(tmp_path, text))
    assert status == 2
    lines = out.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in out, out


def test_declare_needs_an_impl(tmp_path, capsys):
    assert main(["check", "--stage", "eagle.next_token_padded", *declare(tmp_path, ROWS_TOML)]) == 2
    assert "--declare describes an --impl" in capsys.readouterr().out


def bounds_of(stage):
    return {name: 8 if name != "pad_query_len" else None for name in stage.bounds}


@pytest.mark.parametrize("name", sorted(STAGES))
def test_a_declared_bound_is_honoured_by_every_tier(name):
    """B <= 8 (and every other bound the record allows) holds in every drawn example of every tier; in the
    invalid tier, outside the field the example breaks."""
    stage = STAGES[name]
    declared = {"bounds": {(f"{n} <= 8" if n != "pad_query_len" else f"{n} >= 1"): "the engine's scheduler"
                           for n in stage.bounds},
                "fields": {f.name: {"layout": "rows", "reason": "contiguous rows"}
                           for f in stage.inputs + stage.outputs if f.strided}}
    if not declared["bounds"] and not declared["fields"]:
        pytest.skip("nothing to declare")
    dom = domain.parse(stage, declared, "test")
    chosen = replace(target(stage, "oracle", "cpu"), domain=dom)
    for tier in ("valid", "hazard", "invalid"):
        if tier != "invalid" and stage.strategy(tier) is None:
            continue

        @settings(max_examples=15, database=None, deadline=None)
        @given(tier_strategy(chosen, tier))
        def drawn(example):
            outside = dom.outside(stage, example)
            if tier == "invalid":   # an invalid example may break a bound itself (a length, B <= capacity)
                outside = [o for o in outside if not o.startswith("`") or "<=" not in o and ">=" not in o]
            assert not outside, (tier, outside, example)
        drawn()


def test_a_bound_is_honoured_by_the_corpus_check(tmp_path, capsys):
    """Cases outside the declared domain are counted, not replayed."""
    stage = STAGES["rejection.expand"]
    small = find(stage.valid(DrawContext(small=True)), lambda e: len(e.inputs["cu_num_tokens"]) == 1)
    large = find(stage.valid(DrawContext(small=True)), lambda e: len(e.inputs["cu_num_tokens"]) > 3)
    for example in (small, large):
        cases.save(tmp_path / "cases", stage.name, example, {"failure": "a test case"})
    report = tmp_path / "r.json"
    run = ["check", "--stage", stage.name, "--impl", stage.impls["torch"], "--device", "cpu", "--check", "corpus",
           "--cases", str(tmp_path / "cases"), "--json", str(report)]
    assert main(run + declare(tmp_path, '[domain.bounds]\n"B <= 2" = "one request at a time"\n')) == 0
    corpus = json.loads(report.read_text())["outcomes"][0]
    assert len(corpus["replays"]) == 1
    assert "1 case(s) outside the declared domain (`B <= 2`): not replayed" in corpus["notes"]
    assert main(run) == 0
    assert len(json.loads(report.read_text())["outcomes"][0]["replays"]) == 2
    capsys.readouterr()


def test_validates_asks_the_invalid_tier_and_catches_a_silent_kernel(tmp_path, capsys):
    status, report, out = check(tmp_path, capsys, "next_token_silent", "--check", "invalid")
    assert status == 3   # not asked of an outside implementation: nothing checked
    status, report, out = check(tmp_path, capsys, "next_token_refusing", "--check", "invalid",
                                *declare(tmp_path, "validates = true\n"))
    assert status == 0, out
    assert report["outcomes"][0]["examples"] > 0
    status, report, out = check(tmp_path, capsys, "next_token_silent", "--check", "invalid",
                                *declare(tmp_path, "validates = true\n"))
    assert status == 1 and report["outcomes"][0]["status"] == "failed"


def test_a_vendor_table_declares_a_domain_and_travels_to_workers():
    from specverify.files import vendors
    entry = vendors.entry("eagle.next_token_padded", {"impl": "tests.domain_kernels:next_token_refusing",
                                                       "domain": ROWS, "validates": True})
    assert entry["impl"] == "tests.domain_kernels:next_token_refusing"
    declared = domain.declared(target(NEXT, "impl", "cpu", entry["impl"]),
                               {k: v for k, v in entry.items() if k != "impl"}, "vendor acme")
    assert declared.domain.validates and declared.domain.summary() == "`sampled_token_ids` unit column step"
    again = shard.rebuild(pickle.loads(pickle.dumps(shard.describe(declared))))
    assert again.domain == declared.domain
    with pytest.raises(DomainError, match="unknown key 'dialekt'"):
        domain.declared(target(NEXT, "impl", "cpu", entry["impl"]), {"dialekt": "x"}, "vendor acme")


def test_a_vendor_declares_the_domain_in_its_mapping(tmp_path, capsys):
    report = tmp_path / "r.json"
    status = main(["check", "--vendor", "tests.domain_kernels", "--device", "cpu", "--examples", "20",
                   "--check", "valid", "--json", str(report), "--findings", str(tmp_path / "f")])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "conforms within its declared domain: `sampled_token_ids` unit column step; `B <= 16`" in out
    assert json.loads(report.read_text())["verdicts"][0]["domain"][1] == "`B <= 16` (the engine's max_num_seqs)"
    assert main(["check", "--vendor", "tests.domain_kernels:NOT_JSON", "--device", "cpu"]) == 2
    assert "must be JSON-safe data" in capsys.readouterr().out


OPTIONAL = [(s.name, f.name) for s in STAGES.values() for f in s.inputs if domain.declarable(s)["fields"][f.name]["optional"]]


@pytest.mark.parametrize("presence", [False, True], ids=["absent", "given"])
@pytest.mark.parametrize("name,field", OPTIONAL)
def test_an_optional_input_declared_absent_or_given_is_drawn_so_and_the_draws_stay_valid(name, field, presence):
    from specverify.judge import harness
    stage = STAGES[name]
    dom = domain.parse(stage, {"fields": {field: {"given": presence, "reason": "the engine's only caller"}}}, "t")
    for tier in ("valid", "hazard") if stage.hazard else ("valid",):
        chosen = replace(target(stage, "oracle", "cpu"), domain=dom)

        @settings(max_examples=15, database=None, deadline=None)
        @given(tier_strategy(chosen, tier))
        def drawn(example):
            assert (example.inputs[field] is not None) == presence
            if tier == "valid":
                harness.expect(stage, example)   # the oracle accepts it: still a valid call
        drawn()


DTYPED = [(s.name, f.name, d) for s in STAGES.values() for f in s.inputs + s.outputs
          if not domain.declarable(s)["fields"][f.name]["dtype_follows"]
          for d in domain.declarable(s)["fields"][f.name]["dtypes"]]


@pytest.mark.parametrize("name,field,dtype", DTYPED)
def test_a_declared_dtype_is_the_only_one_drawn_in_every_tier_and_the_draws_stay_valid(name, field, dtype):
    from specverify.judge import harness
    stage = STAGES[name]
    dom = domain.parse(stage, {"fields": {field: {"dtypes": [dtype], "reason": "the engine's tensors"}}}, "t")
    assert dom.summary() == f"`{field}` {dtype}"
    for tier in ("valid", "hazard") if stage.hazard else ("valid",):
        chosen = replace(target(stage, "oracle", "cpu"), domain=dom)

        @settings(max_examples=12, database=None, deadline=None)
        @given(tier_strategy(chosen, tier))
        def drawn(example):
            value = example.inputs.get(field)
            found = example.outputs[field].dtype if field in example.outputs else \
                None if value is None else str(value.dtype)
            assert found in (None, dtype), (tier, found)
            for follower, leader in stage.dtype_follows.items():
                if leader == field and example.inputs.get(follower) is not None:
                    assert str(example.inputs[follower].dtype) == dtype, follower
            if tier == "valid":
                harness.expect(stage, example)
        drawn()


def test_a_declared_dtype_must_narrow_the_records():
    stage = STAGES["eagle.copy_and_expand_inputs"]
    for dtypes, words in [(["int16"], "dtypes: 'int16' is not one the contract allows (int32, int64)"),
                          (["int64", "int32"], "are every one the contract allows: they restrict nothing"),
                          ([], "must be a non-empty list")]:
        with pytest.raises(DomainError, match=re.escape(words)):
            domain.parse(stage, {"fields": {"query_start_loc": {"dtypes": dtypes, "reason": "x"}}}, "t")
    with pytest.raises(DomainError, match="out_positions has the dtype of target_positions by the contract"):
        domain.parse(stage, {"fields": {"out_positions": {"dtypes": ["int32"], "reason": "x"}}}, "t")
    with pytest.raises(DomainError, match="has one dtype in the contract"):
        domain.parse(STAGES["rejection.random"], {"fields": {"target_probs": {"dtypes": ["float32"], "reason": "x"}}},
                     "t")


def test_a_stored_case_of_another_dtype_is_outside_the_declared_domain():
    stage = STAGES["eagle.copy_and_expand_inputs"]
    example = stage.worked()
    dtype = example.inputs["query_start_loc"].dtype.name
    other = "int32" if dtype == "int64" else "int64"
    dom = domain.parse(stage, {"fields": {"query_start_loc": {"dtypes": [other], "reason": "x"}}}, "t")
    assert dom.outside(stage, example) == [f"`query_start_loc` {other}"]
    assert dom.outside(stage, dom.project(example)) == []


def test_an_optional_input_whose_presence_follows_from_others_cannot_be_declared_absent():
    with pytest.raises(DomainError, match="inv_q is not an optional input whose presence a domain may fix"):
        domain.parse(STAGES["rejection.sample"], {"fields": {"inv_q": {"given": False, "reason": "x"}}}, "t")


def test_information_draws_say_what_happens_outside_the_domain(tmp_path, capsys):
    status, report, out = check(tmp_path, capsys, "next_token_unit_columns", "--check", "valid",
                                *declare(tmp_path, ROWS_TOML))
    assert status == 0
    [outside] = report["verdicts"][0]["outside"]
    assert outside["restriction"] == "`sampled_token_ids` unit column step" and outside["judged"] > 0
    assert "sampled_token_ids" in outside["failed"], outside
    assert report["verdicts"][0]["unneeded"] == []
    assert "outside the domain (`sampled_token_ids` unit column step): " in (tmp_path / "report.md").read_text()


def test_a_restriction_whose_excluded_draws_all_pass_is_reported_unneeded(tmp_path, capsys):
    status, report, out = check(tmp_path, capsys, "next_token_refusing", "--check", "valid",
                                *declare(tmp_path, ROWS_TOML))
    assert status == 0   # information only: the exit status is unchanged
    assert report["verdicts"][0]["unneeded"] == ["`sampled_token_ids` unit column step"]
    assert "Not needed, its excluded draws pass: `sampled_token_ids` unit column step" in out
    assert "its 25 excluded draws pass (valid): the restriction is not needed" in (tmp_path / "report.md").read_text()


def test_a_restriction_is_not_needed_only_after_as_many_excluded_draws_as_the_valid_tier(tmp_path, capsys):
    """vLLM's random kernel, declared without out-of-vocabulary drafts, was told the restriction is not needed
    after 10 excluded draws (seed 8: each of them passed), though it emits such ids when more are drawn."""
    report = tmp_path / "r.json"
    status = main(["check", "--stage", "rejection.random", "--impl",
                   "tests.domain_kernels:random_reading_oov_from_the_next_row", "--device", "cpu", "--seed", "8",
                   "--examples", "30", "--check", "valid", "--json", str(report), "--findings", str(tmp_path / "f"),
                   *declare(tmp_path, NO_OOV_DRAFTS)])
    capsys.readouterr()
    [verdict] = json.loads(report.read_text())["verdicts"]
    [outside] = verdict["outside"]
    assert status == 0 and verdict["unneeded"] == [], verdict
    assert outside["wanted"] == 30 and outside["failed"], outside


def test_information_draws_keep_a_share_of_the_targets_time(tmp_path, capsys):
    """SGLang's kernel's time ran out in its valid search, and its information draws then started at the
    deadline: "no excluded draw in 120". They keep a share of the time now, and a restriction whose share
    is spent says so."""
    from specverify.runs import beyond_domain
    from specverify.runs.profiles import PROFILES
    from specverify.runs.protocol import Context

    status = main(["check", "--stage", "eagle.next_token_padded", "--impl", "tests.slow_kernels:next_token_slowly",
                   "--device", "cpu", "--check", "valid", "--target-timeout", "8", "--json", str(tmp_path / "s.json"),
                   "--findings", str(tmp_path / "f"), *declare(tmp_path, ROWS_TOML)])
    capsys.readouterr()
    slow = json.loads((tmp_path / "s.json").read_text())
    [verdict], [found] = slow["verdicts"], slow["verdicts"][0]["outside"]
    assert status == 4 and verdict["summary"].startswith("incomplete"), verdict
    assert found["judged"] >= 1 and found["stopped"] == "time" and verdict["unneeded"] == [], found
    assert "no excluded draw" not in " ".join(slow["outcomes"][0]["notes"])
    chosen = replace(target(NEXT, "impl", "cpu", "tests.domain_kernels:next_token_refusing"),
                     domain=domain.parse(NEXT, ROWS, "test"))
    spent = Context(PROFILES["ci"], 0, 25, None, None, False, deadline=0.0)
    assert beyond_domain.notes(beyond_domain.explore(chosen, spent)) == [
        "outside the domain (`sampled_token_ids` unit column step): not run: no time left"]


HINT_TOML = """
[domain.fields.max_spec_len]
given = true
reason = "vLLM's sampler passes the batch's max_spec_len from its metadata"
"""


def test_a_host_hint_restriction_is_not_called_unneeded_on_bytes_alone(tmp_path, capsys):
    """A host hint matters to no-sync only: on the CPU, where no-sync is not asked, its excluded draws passing
    byte for byte say nothing about whether the hint is needed."""
    report = tmp_path / "r.json"
    status = main(["check", "--stage", "rejection.recovered", "--impl",
                   "tests.hint_grid_kernel:recovered_on_a_request_grid", "--device", "cpu", "--examples", "30",
                   "--check", "valid", "--json", str(report), "--findings", str(tmp_path / "f"),
                   *declare(tmp_path, HINT_TOML)])
    out = capsys.readouterr().out
    [verdict] = json.loads(report.read_text())["verdicts"]
    assert status == 0 and verdict["unneeded"] == [], verdict
    assert "it could not be judged: `max_spec_len` is a host hint: it matters to the no-sync check, which is " \
           "not asked here" in out, out


@pytest.mark.parametrize("name,hint", [("rejection.recovered", "max_spec_len"),
                                       ("eagle.copy_and_expand_inputs", "max_query_len")])
def test_a_host_hint_below_the_data_is_refused_naming_it_and_drawn_present_or_none(name, hint):
    from specverify.judge import harness
    stage = STAGES[name]
    example = stage.worked()
    assert example.inputs[hint] is not None
    harness.expect(stage, example)
    with pytest.raises(harness.OracleError, match=f"ValueError: {hint}: a host hint must be at least"):
        harness.oracle_outputs(stage, replace(example, inputs={**example.inputs, hint: example.inputs[hint] - 1}))
    seen = set()

    @settings(max_examples=200, database=None, deadline=None, derandomize=True)
    @given(stage.valid(DrawContext(small=True)))
    def drawn(example):
        seen.add(example.inputs[hint] is None)
    drawn()
    assert seen == {True, False}


def test_the_invalid_tier_catches_a_validating_kernel_that_ignores_its_hint(tmp_path, capsys):
    report = tmp_path / "r.json"
    status = main(["check", "--stage", "rejection.recovered", "--impl", "tests.domain_kernels:recovered_without_hint",
                   "--device", "cpu", "--examples", "40", "--check", "invalid", "--json", str(report),
                   "--findings", str(tmp_path / "f"), *declare(tmp_path, "validates = true\n")])
    outcome = json.loads(report.read_text())["outcomes"][0]
    assert status == 1 and "max_spec_len" in outcome["headline"], outcome["headline"]
    capsys.readouterr()


NO_OOV = """
[domain.excludes]
oov_ids = "the engine's sampler draws from [0, V) only"
"""


def test_an_excluded_input_class_is_never_drawn_and_a_kernel_without_it_conforms(tmp_path, capsys):
    stage = NEXT
    dom = domain.parse(stage, {"excludes": {"oov_ids": "x", "discarded_rows": "y"}}, "t")
    chosen = replace(target(stage, "oracle", "cpu"), domain=dom)

    @settings(max_examples=40, database=None, deadline=None)
    @given(tier_strategy(chosen, "valid"))
    def drawn(example):
        x = example.inputs
        assert not (x["sampled_token_ids"] >= x["vocab_size"]).any() and not x["discard_mask"].any()
    drawn()
    assert check(tmp_path, capsys, "next_token_in_vocab_only", "--check", "valid")[0] == 1
    status, report, out = check(tmp_path, capsys, "next_token_in_vocab_only", "--check", "valid",
                                *declare(tmp_path, NO_OOV))
    assert status == 0, out
    assert "conforms within its declared domain: no `oov_ids`" in out
    [outside] = report["verdicts"][0]["outside"]
    assert outside["judged"] and outside["failed"], outside   # outside the domain it counts an OOV id as valid
    with pytest.raises(DomainError, match="excludes 'oov_drafts': not an input class of this stage's record"):
        domain.parse(stage, {"excludes": {"oov_drafts": "x"}}, "t")


NO_OOV_DRAFTS = """
[domain.excludes]
oov_drafts = "the engine's drafter proposes ids in [0, V) only"
"""


@pytest.mark.parametrize("name", [n for n, s in STAGES.items() if "oov_drafts" in s.classes])
def test_excluded_draft_classes_are_never_drawn_in_any_tier(name):
    stage = STAGES[name]
    dom = domain.parse(stage, {"excludes": {"oov_drafts": "x", "placeholder_drafts": "y"}}, "t")
    for tier in ("valid", "hazard"):
        chosen = replace(target(stage, "oracle", "cpu"), domain=dom)

        @settings(max_examples=25, database=None, deadline=None)
        @given(tier_strategy(chosen, tier))
        def drawn(example):
            drafts, vocab = example.inputs["draft_token_ids"], example.inputs["target_probs"].shape[-1]
            assert ((drafts >= 0) & (drafts < vocab)).all(), drafts
        drawn()


def test_a_kernel_reading_an_oov_draft_from_the_next_row_conforms_only_where_drafts_stay_in_vocabulary(
        tmp_path, capsys):
    def run(*extra):
        report = tmp_path / "r.json"
        status = main(["check", "--stage", "rejection.random", "--impl",
                       "tests.domain_kernels:random_reading_oov_from_the_next_row", "--device", "cpu",
                       "--examples", "60", "--check", "valid", "--json", str(report),
                       "--findings", str(tmp_path / "f"), *extra])
        return status, json.loads(report.read_text()), capsys.readouterr().out
    status, report, out = run()
    assert status == 1 and "output_token_ids" in report["outcomes"][0]["headline"], report["outcomes"][0]
    status, report, out = run(*declare(tmp_path, NO_OOV_DRAFTS))
    assert status == 0, out
    assert "conforms within its declared domain: no `oov_drafts`" in out
    [outside] = report["verdicts"][0]["outside"]
    assert outside["judged"] and outside["failed"], outside   # outside the domain it emits an OOV draft


HINT_GIVEN = """
[domain.fields.max_spec_len]
given = true
reason = "vLLM's sampler passes the batch's max_spec_len from its metadata"
"""


def grid_check(tmp_path, capsys, device, checks, *extra):
    report = tmp_path / "grid.json"
    status = main(["check", "--stage", "rejection.recovered", "--impl",
                   "tests.hint_grid_kernel:recovered_on_a_request_grid", "--device", device, "--examples", "30",
                   *[a for c in checks for a in ("--check", c)], "--json", str(report),
                   "--findings", str(tmp_path / "f"), *extra])
    return status, json.loads(report.read_text()), capsys.readouterr().out


def test_a_request_grid_kernel_sized_by_the_hint_conforms_with_and_without_it(tmp_path, capsys):
    status, report, out = grid_check(tmp_path, capsys, "cpu", ["valid"])
    assert status == 0, out
    status, report, out = grid_check(tmp_path, capsys, "cpu", ["valid"], *declare(tmp_path, HINT_GIVEN))
    assert status == 0 and "`max_spec_len` always given" in out, out


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="the no-sync check needs CUDA")
def test_the_host_hint_lets_a_request_grid_kernel_launch_without_a_device_read(tmp_path, capsys):
    status, report, out = grid_check(tmp_path, capsys, "cuda", ["valid", "no-sync"], *declare(tmp_path, HINT_GIVEN))
    assert status == 0, out
    [outside] = report["verdicts"][0]["outside"]      # its excluded draws are judged by no-sync: needed
    assert outside["checks"] == ["valid", "no-sync"] and "synchroniz" in outside["failed"], outside
    status, report, out = grid_check(tmp_path, capsys, "cuda", ["valid", "no-sync"])
    failed = {o["check"] for o in report["outcomes"] if o["status"] == "failed"}
    assert status == 1 and failed == {"no-sync"}, report["outcomes"]

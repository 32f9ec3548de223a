"""Declared value sets and the bounds engines' callers guarantee: `tree.build`'s `tree_mask_mode`, N and depth,
the most tokens of a `rejection.expand` request; drawn within the domain, the information draws outside it."""
import json

import numpy as np
import pytest
from hypothesis import given, settings

from specverify.cli import main
from specverify.records import domain, registry
from specverify.records.domain import DomainError
from specverify.records.stage import DrawContext

STAGES = registry.all_stages()
BUILD, EXPAND = STAGES["tree.build"], STAGES["rejection.expand"]
TWO_MODES = """
[domain.values.tree_mask_mode]
in = [0, 1]
reason = "SGLang's caller chooses FULL_MASK or QLEN_ONLY; its mask-size helper raises for any other mode"
"""


def run(tmp_path, capsys, stage, function, *extra):
    report = tmp_path / "report.json"
    status = main(["check", "--stage", stage, "--impl", f"tests.domain_kernels:{function}", "--device", "cpu",
                   "--examples", "25", "--check", "valid", "--findings", str(tmp_path / "findings"),
                   "--json", str(report), *extra])
    return status, json.loads(report.read_text()) if report.exists() else None, capsys.readouterr().out


def declare(tmp_path, text):
    path = tmp_path / "declare.toml"
    path.write_text(text)
    return ["--declare", str(path)]


def test_a_build_kernel_without_mode_2_conforms_within_its_declared_modes(tmp_path, capsys):
    status, report, out = run(tmp_path, capsys, "tree.build", "build_without_bitpacking")
    assert status == 1 and "tree_mask_mode 2" in out
    status, report, out = run(tmp_path, capsys, "tree.build", "build_without_bitpacking",
                              *declare(tmp_path, TWO_MODES))
    assert status == 0, out
    assert "conforms within its declared domain: `tree_mask_mode` in {0, 1}" in out
    [verdict] = report["verdicts"]
    assert verdict["domain"] == ["`tree_mask_mode` in {0, 1} (SGLang's caller chooses FULL_MASK or QLEN_ONLY; "
                                 "its mask-size helper raises for any other mode)"]
    [outside] = verdict["outside"]     # the information draws reach mode 2, and it fails there
    assert outside["restriction"] == "`tree_mask_mode` in {0, 1}" and "tree_mask_mode 2" in outside["failed"]


@pytest.mark.parametrize("text,words", [
    ('[domain.values.tree_mask_mod]\nin = [0, 1]\nreason = "x"', "did you mean 'tree_mask_mode'?"),
    ('[domain.values.topk]\nin = [1]\nreason = "x"', "topk is not a scalar whose values"),
    ('[domain.values.tree_mask_mode]\nin = [0, 3]\nreason = "x"', "'in': 3 is not one the contract allows (0, 1, 2)"),
    ('[domain.values.tree_mask_mode]\nin = [2, 1, 0]\nreason = "x"', "they restrict nothing"),
    ('[domain.values.tree_mask_mode]\nin = []\nreason = "x"', "'in' must be a non-empty list of integers"),
    ('[domain.values.tree_mask_mode]\nin = [0]', "needs its reason"),
    ('[domain.values.tree_mask_mode]\nin = [0]\nreasons = "x"', "unknown key 'reasons' (known: in, reason); "
                                                                "did you mean 'reason'?"),
    ('[domain.value.tree_mask_mode]\nin = [0]\nreason = "x"', "did you mean 'values'?"),
    ('[domain.bounds]\n"dept <= 4" = "x"', "did you mean 'depth'?"),
    ('[domain.values.tree_mask_mode]\nin = [2]\nreason = "x"\n[domain.bounds]\n"N >= 40" = "x"',
     "the domain leaves no call: a bound N >= 40 leaves mode 2"),
])
def test_a_bad_values_declaration_is_one_usage_line(tmp_path, capsys, text, words):
    status, _, out = run(tmp_path, capsys, "tree.build", "build_without_bitpacking", *declare(tmp_path, text))
    lines = out.strip().splitlines()
    assert status == 2 and len(lines) == 1 and words in lines[0] and "Traceback" not in out, out


def drawn(stage, declared, small=False, count=120):
    dom = domain.parse(stage, declared, "test") if declared else None
    found = []

    @settings(max_examples=count, database=None, deadline=None)
    @given(stage.valid(DrawContext(small=small, domain=dom)))
    def collect(example):
        found.append(example)
    collect()
    return dom, found


def test_declared_modes_n_and_depth_are_the_only_ones_drawn():
    _, whole = drawn(BUILD, None)
    assert {e.inputs["tree_mask_mode"] for e in whole} == {0, 1, 2}
    assert max(e.inputs["N"] for e in whole) > 8 and max(e.inputs["depth"] for e in whole) > 3
    dom, found = drawn(BUILD, {"values": {"tree_mask_mode": {"in": [1, 2], "reason": "r"}},
                               "bounds": {"N <= 8": "r", "depth <= 3": "r"}})
    assert {e.inputs["tree_mask_mode"] for e in found} == {1, 2}
    assert all(e.inputs["N"] <= 8 and e.inputs["depth"] <= 3 for e in found)
    assert not any(dom.outside(BUILD, e) for e in found)
    assert dom.outside(BUILD, next(e for e in whole if e.inputs["tree_mask_mode"] == 0)) == [
        "`tree_mask_mode` in {1, 2}"]
    dom, found = drawn(BUILD, {"bounds": {"N >= 24": "r", "depth >= 6": "r"}}, small=True)
    assert all(e.inputs["N"] >= 24 and e.inputs["depth"] >= 6 and e.inputs["tree_mask_mode"] in (0, 1, 2)
               for e in found)
    assert not any(dom.outside(BUILD, e) for e in found)


def most_tokens(example):
    return int(np.diff(example.inputs["cu_num_tokens"].astype(np.int64), prepend=0).max(initial=0))


def test_expands_tokens_per_request_bound_is_honoured_by_the_draws():
    _, whole = drawn(EXPAND, None, count=200)
    assert max(most_tokens(e) for e in whole) > 128
    dom, found = drawn(EXPAND, {"bounds": {"max_spec_len <= 128": "vLLM's rejection sampler asserts it"}}, count=200)
    assert max(most_tokens(e) for e in found) <= 128 and not any(dom.outside(EXPAND, e) for e in found)
    assert any(most_tokens(e) > 8 for e in found)
    assert dom.outside(EXPAND, max(whole, key=most_tokens)) == ["`max_spec_len <= 128`"]
    with pytest.raises(DomainError, match="only an upper bound"):
        domain.parse(EXPAND, {"bounds": {"max_spec_len >= 2": "r"}}, "test")


def test_a_kernel_capped_at_128_tokens_conforms_within_the_bound(tmp_path, capsys):
    status, _, out = run(tmp_path, capsys, "rejection.expand", "expand_capped_at_128", "--examples", "60")
    assert status == 1 and "expanded" in out
    bound = '[domain.bounds]\n"max_spec_len <= 128" = "vLLM asserts max_spec_len <= MAX_SPEC_LEN = 128"\n'
    status, report, out = run(tmp_path, capsys, "rejection.expand", "expand_capped_at_128", "--examples", "60",
                              *declare(tmp_path, bound))
    assert status == 0, out
    assert "conforms within its declared domain: `max_spec_len <= 128`" in out
    assert report["verdicts"][0]["outside"][0]["failed"]

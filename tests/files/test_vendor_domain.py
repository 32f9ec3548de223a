"""The second example vendor, examples/vendor_domain: kernels that conform within the domain they declare and
by the `strict` dialect, the notes on what happens outside each restriction, and the committed report."""
import json
from pathlib import Path

import pytest

from specverify.cli import main
from tests.files.test_vendor import dist_info, entry_points_of

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "examples" / "vendor_domain"


@pytest.fixture
def installed(tmp_path, monkeypatch):
    site = tmp_path / "site"
    dist_info(site, "vendor-domain", "0.1.0", entry_points_of(FOLDER / "pyproject.toml"))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(FOLDER))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def verdicts(report: dict) -> dict:
    return {v["stage"]: v for v in report["verdicts"]}


def test_the_domain_vendor_conforms_within_its_declared_domains(installed, capsys):
    status = main(["check", "--vendor", "vendor_domain", "--device", "cpu", "--examples", "30",
                   "--report", "r.json"])
    out = capsys.readouterr().out
    assert status == 0, out
    found = verdicts(json.loads((installed / "r.json").read_text()))
    assert set(found) == {"rejection.random", "eagle.next_token_padded"}
    random, nxt = found["rejection.random"], found["eagle.next_token_padded"]
    assert random["dialect"] == "strict" and "under dialect strict" in out
    assert "conforms within its declared domain: `draft_probs` always given; no `oov_drafts`" in out
    assert "conforms within its declared domain: `sampled_token_ids` unit column step; no `discarded_rows`" in out
    assert nxt["unneeded"] == ["no `discarded_rows`"] and random["unneeded"] == []
    failed = {o["restriction"] for v in (random, nxt) for o in v["outside"] if o["failed"]}
    assert failed == {"`draft_probs` always given", "no `oov_drafts`", "`sampled_token_ids` unit column step"}


def test_without_its_declaration_the_strict_kernel_fails_the_records_rule_and_its_domain(installed, capsys):
    status = main(["check", "--stage", "rejection.random", "--impl", "vendor_domain.rejection:random",
                   "--device", "cpu", "--examples", "60", "--check", "valid", "--report", "r.json"])
    capsys.readouterr()
    assert status == 1
    assert json.loads((installed / "r.json").read_text())["outcomes"][0]["status"] == "failed"


def test_the_committed_report_is_the_readmes_run():
    report = json.loads((FOLDER / "reports" / "report.json").read_text())
    assert report["vendor"]["name"] == "vendor_domain" and report["vendor"]["distribution"] == "vendor-domain 0.1.0"
    assert {v["stage"]: v["dialect"] for v in report["verdicts"]} == {"rejection.random": "strict",
                                                                      "eagle.next_token_padded": ""}
    readme = (FOLDER / "README.md").read_text()
    assert "specverify check --vendor vendor_domain --device cpu \\\n    --report reports/report.json" in readme

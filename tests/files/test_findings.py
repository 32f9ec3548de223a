"""Run findings apart from the shipped corpus: where a run's cases go, `specverify corpus add | list`, and
the one run plan the CLI and the pytest plugin build alike."""
import json
from pathlib import Path

import pytest

from specverify.cli import main, options, selection
from specverify.files import cases, corpus_admin
from specverify.files.cases import suite_corpus
from specverify.pytest_plugin import run_plan, run_stage_check
from specverify.records import registry

GREEDY = registry.all_stages()["rejection.greedy"]
EXPAND = registry.all_stages()["rejection.expand"]
PLANTED = "tests.planted_greedy:bonus_even_after_reject"


class Config:
    """What the plugin reads of pytest's config: its options (defaults unless given), rootpath, stash."""

    def __init__(self, rootpath: Path, **given):
        self.rootpath, self.stash = rootpath, pytest.Stash()
        self.options = {"--specverify-profile": "ci", "--specverify-seed": None, "--specverify-examples": None,
                        "--specverify-findings": None, "--specverify-cases": None, "--specverify-waivers": None,
                        **given}

    def getoption(self, name):
        return self.options.get(name)


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    """The current folder looks like a clone's root (cases/, oracles/, kernels/); no SPECVERIFY_FINDINGS."""
    for folder in ("cases", "oracles", "kernels"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cases.FINDINGS_ENV, raising=False)
    return tmp_path


def test_a_failing_impl_run_from_a_checkout_leaves_its_corpus_alone(checkout, capsys):
    status = main(["check", "--stage", GREEDY.name, "--impl", PLANTED, "--device", "cpu", "--examples", "30",
                   "--json", "r.json"])
    out = capsys.readouterr().out
    assert status == 1, out
    assert list((checkout / "cases").iterdir()) == []
    [case] = (checkout / "specverify-findings" / GREEDY.name).glob("*.npz")
    assert "findings to specverify-findings/" in out
    assert f"specverify replay {case.relative_to(checkout)} --impl {PLANTED} --device cpu" in out
    # the report, read away from the run, names the folder and the case by absolute path
    report = json.loads((checkout / "r.json").read_text())
    assert report["cases_dir"] == str(Path.cwd() / "specverify-findings")
    [replay] = [f["replay"] for o in report["outcomes"] for f in o["failures"]]
    assert replay == f"specverify replay {Path.cwd() / case.relative_to(checkout)} --impl {PLANTED} --device cpu"


def test_the_plugins_stage_tests_never_write_into_cases(checkout, monkeypatch):
    import specverify.kernels.torch.rejection as torch_rejection
    from tests import planted_greedy

    monkeypatch.setattr(torch_rejection, "greedy", planted_greedy.bonus_even_after_reject)
    config = Config(checkout, **{"--specverify-examples": 30})
    with pytest.raises(pytest.fail.Exception, match="replay: specverify replay specverify-findings/"):
        run_stage_check(config, GREEDY.name, "torch", "cpu", "valid")
    assert list((checkout / "cases").iterdir()) == []
    assert len(list((checkout / "specverify-findings" / GREEDY.name).glob("*.npz"))) == 1


def test_the_cli_and_the_plugin_resolve_the_same_findings_folder(checkout, monkeypatch):
    def both(cli_args: list[str], **plugin_options) -> tuple[Path, Path]:
        return (selection.plan(options.parser().parse_args(["check", *cli_args])).findings,
                run_plan(Config(checkout, **plugin_options)).findings)

    assert both([]) == (Path("specverify-findings"),) * 2
    assert both(["--findings", "mine"], **{"--specverify-findings": Path("mine")}) == (Path("mine"),) * 2
    monkeypatch.setenv(cases.FINDINGS_ENV, str(checkout / "elsewhere"))
    assert both([]) == (checkout / "elsewhere",) * 2


def test_findings_in_the_suite_corpus_are_bad_usage(capsys, monkeypatch, tmp_path):
    inside = suite_corpus() / EXPAND.name
    assert main(["check", "--stage", EXPAND.name, "--findings", str(inside)]) == 2
    monkeypatch.setenv(cases.FINDINGS_ENV, str(suite_corpus()))
    assert main(["check", "--stage", EXPAND.name]) == 2
    first, second = capsys.readouterr().out.strip().splitlines()
    assert first.startswith(f"specverify check: error: --findings {inside}: inside the suite's corpus")
    assert second.startswith(f"specverify check: error: {cases.FINDINGS_ENV}={suite_corpus()}: inside the suite's")
    with pytest.raises(pytest.UsageError, match="--specverify-findings .*inside the suite's corpus"):
        run_plan(Config(tmp_path, **{"--specverify-findings": inside}))
    assert not inside.exists()


def test_a_cases_folder_that_does_not_exist_is_bad_usage(capsys, tmp_path):
    assert main(["check", "--stage", EXPAND.name, "--cases", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().out.strip() == (f"specverify check: error: --cases {tmp_path / 'nope'}: not a folder "
                                               "(the case folder the corpus check replays)")


def found_case(tmp_path) -> Path:
    return cases.save(tmp_path / "found", EXPAND.name, EXPAND.worked(), {"backend": "torch", "device": "cpu"})


def test_corpus_add_copies_a_case_once(tmp_path, capsys):
    case, corpus = found_case(tmp_path), tmp_path / "corpus"
    assert main(["corpus", "add", str(case), "--to", str(corpus)]) == 0
    copied = corpus / EXPAND.name / case.name
    assert capsys.readouterr().out.strip() == f"added {case} as {copied}"
    assert copied.read_bytes() == case.read_bytes()
    assert [(f["backend"], f["device"]) for f in cases.failures_of(copied)] == [("torch", "cpu")]
    written = copied.stat().st_mtime_ns
    assert main(["corpus", "add", str(case), "--to", str(corpus)]) == 0
    assert capsys.readouterr().out.strip() == f"already there: {copied} (from {case}): nothing written"
    assert copied.stat().st_mtime_ns == written
    assert main(["corpus", "list", "--from", str(corpus)]) == 0
    assert f"{EXPAND.name}/{case.name}  {EXPAND.worked().tier} tier  failed on: torch/cpu" in capsys.readouterr().out


def test_corpus_add_refuses_a_damaged_case_and_copies_nothing(tmp_path, capsys):
    good, bad, corpus = found_case(tmp_path), tmp_path / "bad.npz", tmp_path / "corpus"
    bad.write_bytes(b"not a case")
    assert main(["corpus", "add", str(good), str(bad), "--to", str(corpus)]) == 2
    out = capsys.readouterr().out.strip()
    assert out.startswith("specverify corpus: error: ") and str(bad) in out and len(out.splitlines()) == 1
    assert not corpus.exists()


def test_corpus_add_without_to_refuses_an_installed_corpus(tmp_path, capsys, monkeypatch):
    installed = tmp_path / "site" / "specverify" / "suite_cases"
    installed.mkdir(parents=True)
    monkeypatch.setattr(corpus_admin, "suite_corpus", lambda: installed)
    assert main(["corpus", "add", str(found_case(tmp_path))]) == 2
    out = capsys.readouterr().out.strip()
    assert out == (f"specverify corpus: error: the suite's corpus is not a checkout folder ({installed} is an "
                   "installed package's copy): run from a clone, or name a corpus folder with --to DIR")
    assert list(installed.iterdir()) == []


def test_corpus_list_names_an_unreadable_file_and_exits_2(tmp_path, capsys):
    case, corpus = found_case(tmp_path), tmp_path / "corpus"
    assert main(["corpus", "add", str(case), "--to", str(corpus)]) == 0
    (corpus / EXPAND.name / "0000000000000000.npz").write_bytes(b"not a case")
    capsys.readouterr()
    assert main(["corpus", "list", "--from", str(corpus)]) == 2
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0] == f"corpus {corpus}: 2 case(s)" and len(lines) == 3
    assert lines[1].startswith(f"  {EXPAND.name}/0000000000000000.npz  unreadable: ")
    assert main(["corpus", "list", "--from", str(tmp_path / "nope")]) == 2
    assert capsys.readouterr().out.strip() == f"specverify corpus: error: --from {tmp_path / 'nope'}: not a folder"

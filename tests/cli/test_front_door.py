"""One front door: `specverify check --vendor` and `pytest --specverify-vendor` resolve their options with the
same function and give the same verdicts, notes, reports and exit status; both refuse a bad declaration
with the same line; near misses get "did you mean"; an outside implementation that names nothing is one line
before anything runs."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from specverify.cli import main, options
from tests.files.test_vendor import dist_info, entry_points_of

ROOT = Path(__file__).resolve().parents[2]
DOMAIN = ROOT / "examples" / "vendor_domain"


def environment(site: Path, *extra: Path) -> dict:
    path = [str(site), str(ROOT), *map(str, extra), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def specverify(argv: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specverify", *argv], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def pytest_run(argv: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """pytest in a vendor's repository: no conftest, the plugin from its pytest11 entry point."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def vendor_repo(tmp_path):
    """A vendor repository with specverify's plugin and vendor_domain installed (their entry points)."""
    site = tmp_path / "site"
    dist_info(site, "specverify", "0.1.0", {"pytest11": entry_points_of(ROOT / "pyproject.toml")["pytest11"]})
    dist_info(site, "vendor-domain", "0.1.0", entry_points_of(DOMAIN / "pyproject.toml"))
    repo = tmp_path / "repo"
    repo.mkdir()
    return repo, environment(site, DOMAIN)


def comparable(report: dict) -> list:
    """What a report says of each target, without times, worker names and the run's own start."""
    return [{k: v for k, v in verdict.items()} for verdict in report["verdicts"]] + \
        [(o["stage"], o["check"], o["status"], o["examples"], o["headline"], o["notes"]) for o in report["outcomes"]]


def test_pytest_and_the_cli_give_one_verdict_on_a_declared_domain(vendor_repo):
    repo, env = vendor_repo
    common = ["--device", "cpu", "--examples", "20", "--findings", str(repo / "findings")]
    cli = specverify(["check", "--vendor", "vendor_domain", *common, "--report", "cli.json"], repo, env)
    as_pytest = [f"--specverify-{a[2:]}" if a.startswith("--") else a for a in common]
    tests = pytest_run(["--specverify-vendor", "vendor_domain", *as_pytest, "--specverify-report", "pytest.json",
                        "-n", "2"], repo, env)
    assert cli.returncode == 0, cli.stdout[-3000:]
    assert tests.returncode == 0, tests.stdout[-3000:]
    by_cli, by_pytest = (json.loads((repo / name).read_text()) for name in ("cli.json", "pytest.json"))
    assert comparable(by_pytest) == comparable(by_cli)
    assert by_pytest["exit_status"] == by_cli["exit_status"] == 0
    verdict_lines = [line.strip() for line in cli.stdout.splitlines() if "conforms" in line]
    assert len(verdict_lines) == 2 and all(line in tests.stdout for line in verdict_lines)
    notes = [line for line in cli.stdout.splitlines() if line.startswith("note: ")]
    assert notes and all(line in tests.stdout for line in notes)
    collected = [line for line in tests.stdout.splitlines() if "collected" in line or "items" in line]
    assert not any("collected 0 items" in line for line in collected), collected


def test_a_bad_declaration_is_the_same_line_from_pytest_and_the_cli(vendor_repo):
    repo, env = vendor_repo
    (repo / "typo_vendor.py").write_text(
        'IMPLEMENTATIONS = {"rejection.expand": {"impl": "specverify.kernels.torch.rejection:expand", '
        '"domian": {}}}\n')
    env = {**env, "PYTHONPATH": os.pathsep.join([str(repo), env["PYTHONPATH"]])}
    cli = specverify(["check", "--vendor", "typo_vendor", "--device", "cpu"], repo, env)
    tests = pytest_run(["--specverify-vendor", "typo_vendor", "--specverify-device", "cpu"], repo, env)
    assert cli.returncode == 2 and tests.returncode == pytest.ExitCode.USAGE_ERROR
    [line] = cli.stdout.strip().splitlines()
    said = line.removeprefix("specverify check: error: ")
    assert "unknown key 'domian'" in said and "did you mean 'domain'?" in said
    assert said in tests.stderr + tests.stdout


def test_near_misses_get_did_you_mean(capsys):
    for argv, words in ((["check", "--backend", "tritn"], "did you mean 'triton'?"),
                        (["check", "--profile", "nightli"], "did you mean 'nightly'?"),
                        (["check", "--check", "hazrd"], "did you mean 'hazard'?"),
                        (["check", "--device", "cdua"], "did you mean 'cuda'?")):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and words in err, err
    for argv, words in ((["check", "--stage", "rejection.randm"], "did you mean 'rejection.random'"),
                        (["check", "--stage", "rejection.random", "--dialect", "strikt"], "did you mean 'strict'?")):
        assert main(argv) == 2
        out = capsys.readouterr().out.strip()
        assert len(out.splitlines()) == 1 and words in out, out


def test_an_impl_that_names_nothing_is_one_line_before_anything_runs(capsys):
    for impl, words in (("tests.hostile:nope", "module tests.hostile has no attribute 'nope'"),
                        ("no_such_package.kernels:f", "no module named 'no_such_package'")):
        assert main(["check", "--stage", "rejection.expand", "--impl", impl, "--device", "cpu"]) == 2
        out = capsys.readouterr().out.strip()
        assert out.startswith(f"specverify check: error: --impl {impl}: {words}") and "\n" not in out, out
    assert main(["check", "--impl", "tests.hostile:exit_zero"]) == 2
    assert capsys.readouterr().out.strip() == "specverify check: error: --impl needs --stage NAME: the stage it implements"


def test_every_check_option_reaches_pytest_with_the_same_parser():
    """The table builds both front ends: pytest takes every check option it lists, parsed alike."""
    import argparse

    group = argparse.ArgumentParser().add_argument_group()
    group.addoption = group.add_argument
    options.pytest_options(group)
    taken = {a.option_strings[0] for a in group._group_actions}
    assert {f"--specverify-{o.name}" for o in options.of("pytest")} == taken
    assert {"--specverify-report", "--specverify-declare", "--specverify-impl", "--specverify-timeout"} <= taken


def test_stages_run_in_the_order_asked():
    from specverify.cli import selection

    names = [s.name for s in selection.stages(["graph.step_context", "graph.*", "rejection.expand"])]
    assert names[:2] == ["graph.step_context", "graph.fill_common_inputs"] and names[-1] == "rejection.expand"
    assert len(names) == len(set(names))

"""Vendor conformance end to end, on the example vendor package of examples/vendor_demo: one name for a
whole vendor (entry point and module path), the corpus replayed first, waivers, levels in the verdict, the
JSON, JUnit and Markdown reports, and pytest as a front door."""
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import JUnitXml

from specverify.cli import main
from specverify.files import vendors
from specverify.judge import worker
from specverify.records import registry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "vendor_demo"
IMPLEMENTED = ["eagle.next_token_padded", "eagle.extend_queries", "rejection.recovered", "rejection.expand"]


def dist_info(site: Path, name: str, version: str, groups: dict) -> None:
    """An installed distribution's metadata (what pip writes), so importlib.metadata finds its entry points."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for group, eps in groups.items()))


def entry_points_of(pyproject: Path) -> dict:
    return tomllib.loads(pyproject.read_text())["project"]["entry-points"]


@pytest.fixture
def demo(tmp_path, monkeypatch):
    """The example vendor importable and registered as if pip-installed (its own pyproject's entry point),
    run from a scratch folder with a copy of its case folder."""
    site = tmp_path / "site"
    dist_info(site, "vendor-demo", "0.1.0", entry_points_of(DEMO / "pyproject.toml"))
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(DEMO))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SPECVERIFY_FINDINGS")       # the default findings folder, as in the demo's README
    shutil.copytree(DEMO / "cases", tmp_path / "cases")
    shutil.copy(DEMO / "waivers.toml", tmp_path / "waivers.toml")
    return tmp_path


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_the_example_vendor_report(demo, capsys):
    status = main(["check", "--vendor", "vendor_demo", "--device", "cpu", "--examples", "40",
                   "--waivers", "waivers.toml", "--cases", "cases", "--report", "r.json", "--junit", "r.xml",
                   "--markdown", "r.md"])
    out = capsys.readouterr().out
    report = json.loads((demo / "r.json").read_text())
    assert status == 1 == report["exit_status"], out
    assert report["vendor"]["name"] == "vendor_demo" and report["vendor"]["distribution"] == "vendor-demo 0.1.0"
    assert report["vendor"]["implements"] == IMPLEMENTED
    assert report["vendor"]["not_implemented"] == [s for s in registry.all_stages() if s not in IMPLEMENTED]

    # levels: what passes, what fails and where, what is waived; the crash is reported and the rest ran
    verdicts = {v["stage"]: v for v in report["verdicts"]}
    assert {s: v["summary"] for s, v in verdicts.items()} == {
        "eagle.next_token_padded": "does not conform", "eagle.extend_queries": "does not conform",
        "rejection.recovered": "conforms (waived: robustness)", "rejection.expand": "conforms"}
    levels = {s: {lv["name"]: lv for lv in v["levels"]} for s, v in verdicts.items()}
    assert levels["eagle.next_token_padded"]["contract"]["state"] == "FAILS"
    assert "next_token_ids" in levels["eagle.next_token_padded"]["contract"]["headline"]
    assert levels["eagle.extend_queries"]["contract"]["state"] == "FAILS"
    assert "killed by SIGABRT" in levels["eagle.extend_queries"]["contract"]["headline"]
    recovered = levels["rejection.recovered"]
    assert recovered["contract"]["state"] == "passes" and recovered["robustness"]["state"] == "failed as expected"
    assert recovered["robustness"]["waivers"] == ["waiver #1 (vendor-demo#7)"]
    assert recovered["arguments"]["state"] == "not asked"
    assert levels["rejection.expand"]["contract"]["state"] == "passes"

    # the corpus ran first for every stage, and the vendor's known failures showed on their first case
    outcomes = report["outcomes"]
    assert [o["stage"] for o in outcomes if o["check"] == "corpus"] == IMPLEMENTED
    for stage in IMPLEMENTED:
        assert [o["check"] for o in outcomes if o["stage"] == stage][0] == "corpus"
    corpus = {o["stage"]: o for o in outcomes if o["check"] == "corpus"}
    committed = {p.stem for p in (DEMO / "cases" / "eagle.next_token_padded").glob("*.npz")}
    assert committed and {f["case"] for f in corpus["eagle.next_token_padded"]["failures"]} == committed
    assert corpus["eagle.next_token_padded"]["status"] == "failed" and corpus["eagle.next_token_padded"]["found_after"] == 1
    assert corpus["eagle.extend_queries"]["status"] == "failed" and "SIGABRT" in corpus["eagle.extend_queries"]["headline"]
    assert corpus["rejection.recovered"]["status"] == "xfailed"
    # replay commands name the corpus file replayed, or the finding saved in ./specverify-findings (never cases/),
    # by absolute path
    folder = {True: "cases/", False: "specverify-findings/"}
    assert all(f["replay"].startswith(f"specverify replay {Path.cwd()}/{folder[o['check'] == 'corpus']}")
               for o in outcomes for f in o["failures"])
    assert list((demo / "specverify-findings" / "eagle.next_token_padded").glob("*.npz"))
    assert sorted(p.stem for p in (demo / "cases").rglob("*.npz")) == sorted(p.stem for p in (DEMO / "cases").rglob("*.npz"))
    assert {(o["stage"], o["check"]): o["status"] for o in outcomes if o["check"] != "corpus"} == {
        ("eagle.next_token_padded", "valid"): "failed", ("eagle.extend_queries", "valid"): "failed",
        ("rejection.recovered", "valid"): "passed", ("rejection.recovered", "hazard"): "xfailed",
        ("rejection.expand", "valid"): "passed"}

    # waivers: the one that applies is used, the other is stale
    states = {w["index"]: w["state"] for w in report["waivers"]["entries"]}
    assert states == {1: "expected", 2: "stale"}
    assert "waiver #2 (vendor-demo#3) [expect-fail] rejection.greedy: STALE: matches nothing" in out

    # provenance: the oracles' and the implementations' source hashes
    assert {o["module"]: o["sha256"] for o in report["oracles"]} == {
        "specverify.oracles.eagle": sha256(ROOT / "oracles" / "eagle.py"),
        "specverify.oracles.rejection": sha256(ROOT / "oracles" / "rejection.py")}
    assert {i["stage"]: i["sha256"] for i in report["implementations"]} == {
        s: sha256(DEMO / "vendor_demo" / f"{s.split('.')[0]}.py") for s in IMPLEMENTED}
    assert report["totals"]["failed"] == 4 and report["totals"]["xfailed"] == 2 and report["totals"]["stale_waivers"] == 1

    # JUnit: read back by a JUnit XML parser; one suite per target and one for the waivers
    xml = JUnitXml.fromfile(str(demo / "r.xml"))
    suites = {s.name: s for s in xml}
    assert len(suites) == 5 and xml.failures == 4 and xml.errors == 0
    cases = {c.name: c for c in suites["eagle.extend_queries on impl/cpu"]}
    assert "killed by SIGABRT" in cases["valid[impl-cpu]"].result[0].message
    waived = [c for c in suites["waivers waivers.toml"] if c.result]
    assert [c.result[0].type for c in waived] == ["stale"]

    # Markdown: the verdict table names every stage with its levels
    text = (demo / "r.md").read_text()
    assert "| `rejection.recovered` | `vendor_demo.rejection:recovered` | cpu | conforms (waived: robustness) | passes" in text
    assert "STALE: matches nothing" in text and "**Result: FAILED** (exit status 1)" in text


def test_a_skip_waiver_never_starts_a_worker(demo, capsys, monkeypatch):
    (demo / "skip.toml").write_text('[[waiver]]\nstage = "eagle.extend_queries"\nmode = "skip"\n'
                                    'reason = "aborts the process on an empty batch"\n')

    def no_worker(self):
        raise AssertionError("a worker was started for a check a skip waiver names")
    monkeypatch.setattr(worker.Isolated, "start", no_worker)
    status = main(["check", "--vendor", "vendor_demo.specverify_vendor", "--stage", "eagle.extend_queries",
                   "--device", "cpu", "--waivers", "skip.toml", "--cases", "cases", "--report", "r.json"])
    report = json.loads((demo / "r.json").read_text())
    assert status == 3, capsys.readouterr().out       # nothing was checked: everything was waived
    assert report["vendor"]["declaration"] == "vendor_demo.specverify_vendor:IMPLEMENTATIONS"
    assert [(o["check"], o["status"]) for o in report["outcomes"]] == [("corpus", "waived"), ("valid", "waived")]
    assert report["waivers"]["entries"][0]["state"] == "skipped"


def test_a_waiver_that_is_no_longer_needed_fails_loudly(demo, capsys):
    (demo / "w.toml").write_text('[[waiver]]\nstage = "rejection.expand"\ncheck = "valid"\nmode = "expect-fail"\n'
                                 'issue = "vendor-demo#1"\n')
    status = main(["check", "--vendor", "vendor_demo", "--stage", "rejection.expand", "--device", "cpu",
                   "--examples", "5", "--waivers", "w.toml", "--cases", "cases"])
    assert status == 1
    assert "waiver #1 (vendor-demo#1) [expect-fail] rejection.expand check=valid: NO LONGER NEEDED" in \
        capsys.readouterr().out


def test_damaged_corpus_files_are_one_line_each_and_the_rest_is_replayed(demo, capsys):
    folder = demo / "cases" / "rejection.expand"
    folder.mkdir()
    (folder / "0000000000000000.npz").write_bytes(b"not a case")
    stage = registry.all_stages()["rejection.expand"]
    from specverify.files import cases

    cases.save(demo / "cases", stage.name, stage.worked(), {"backend": "torch"})
    status = main(["check", "--vendor", "vendor_demo", "--stage", "rejection.expand", "--check", "corpus",
                   "--device", "cpu", "--cases", "cases", "--report", "r.json"])
    [outcome] = json.loads((demo / "r.json").read_text())["outcomes"]
    assert status == 0 and outcome["status"] == "passed" and outcome["examples"] == 1
    [note] = outcome["notes"]
    assert "0000000000000000.npz: not a readable case file" in note
    assert "Traceback" not in capsys.readouterr().out


@pytest.mark.parametrize("text,words", [
    ('[[waiver]]\nstage = "rejection.expand"\nmode = "skip"\n', "cites no issue and gives no reason"),
    ('[[waiver]]\nstage = "rejection.expand"\nissue = "x#1"\n', "mode must be one of expect-fail, skip"),
    ('[[waiver]]\nstage = "rejection.expand"\nmode = "skip"\nissue = "x#1"\ntier = "valid"\n', "unknown key 'tier'"),
    ('[[waiver]]\nstage = "rejection.expand"\nmode = "skip"\nissue = "x#1"\ncheck = "speed"\n', "unknown check"),
    ("[[waiver]\n", "not valid TOML"),
])
def test_a_bad_waiver_file_is_one_line_and_exit_2(tmp_path, capsys, text, words):
    (tmp_path / "w.toml").write_text(text)
    assert main(["check", "--stage", "rejection.expand", "--impl", "x:y", "--waivers", str(tmp_path / "w.toml")]) == 2
    out = capsys.readouterr().out.strip()
    assert words in out and len(out.splitlines()) == 1, out


def test_a_vendor_that_resolves_to_nothing_is_bad_usage(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "not_a_mapping.py").write_text("IMPLEMENTATIONS = 3\n")
    (tmp_path / "unknown_stage.py").write_text('IMPLEMENTATIONS = {"rejection.nope": "m:f"}\n')
    for name, words in (("no_such_vendor", "no module named 'no_such_vendor'"), ("not a name!", "not a module path"),
                        ("not_a_mapping", "is not a mapping of stage names"), ("unknown_stage", "does not know: rejection.nope")):
        assert main(["check", "--vendor", name]) == 2
        out = capsys.readouterr().out.strip()
        assert words in out and len(out.splitlines()) == 1 and "Error:" not in out, out
    with pytest.raises(vendors.VendorError):
        vendors.resolve("no_such_vendor", list(registry.all_stages()))


def test_pytest_is_a_front_door_in_a_vendor_repository(tmp_path):
    """A fresh folder with no conftest: the plugin comes from the pytest11 entry point, the vendor from
    its entry point; -k picks stages, -m checks, and --junitxml just works."""
    site = tmp_path / "site"
    dist_info(site, "specverify", "0.1.0", {"pytest11": entry_points_of(ROOT / "pyproject.toml")["pytest11"]})
    dist_info(site, "vendor-demo", "0.1.0", entry_points_of(DEMO / "pyproject.toml"))
    repo = tmp_path / "repo"
    repo.mkdir()
    path = [str(site), str(ROOT), str(DEMO), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--specverify-vendor",
                           "vendor_demo", "--specverify-device", "cpu", "--specverify-examples", "5",
                           "--specverify-findings", str(tmp_path / "findings"), "-k", "expand or next_token",
                           "-m", "not corpus", "--junitxml", "out.xml", "-q"],
                          cwd=repo, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-3000:]
    assert "1 failed, 1 passed, 7 deselected" in done.stdout, done.stdout[-3000:]
    xml = JUnitXml.fromfile(str(repo / "out.xml"))
    results = {case.name: [type(r).__name__ for r in case.result] for suite in xml for case in suite}
    assert results == {"eagle.next_token_padded[valid-cpu]": ["Failure"], "rejection.expand[valid-cpu]": []}


def test_the_suite_corpus_is_replayed_on_an_outside_implementation_once_per_case(tmp_path, capsys):
    """Our own corpus (the checkout's cases/) and the --cases folder together, a case in both replayed once."""
    folders = sorted(p for p in (ROOT / "cases").iterdir() if p.is_dir() and list(p.glob("*.npz")))
    if not folders:
        pytest.skip("the suite's corpus is empty")
    stage, ours = folders[0].name, {p.stem for p in folders[0].glob("*.npz")}
    local = tmp_path / "cases" / stage
    local.mkdir(parents=True)
    shutil.copy(sorted(folders[0].glob("*.npz"))[0], local)
    status = main(["check", "--stage", stage, "--impl", registry.all_stages()[stage].impls["torch"], "--check",
                   "corpus", "--device", "cpu", "--cases", str(tmp_path / "cases"), "--report", str(tmp_path / "r.json")])
    [outcome] = json.loads((tmp_path / "r.json").read_text())["outcomes"]
    assert status == 0, capsys.readouterr().out
    assert sorted(r["case"] for r in outcome["replays"]) == sorted(ours)
    assert {r["origin"] for r in outcome["replays"]} == {"suite"}

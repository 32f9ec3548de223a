"""`specverify mutate`'s runner, reports and CLI, on hand-made mutants of small Torch kernels of the
`rejection.expand` stage (vendor_demo's, and ours): a mutant that breaks the kernel is killed (its check
and examples recorded), the planted equivalent one survives and is judged so, a crash, a hang and a
syntax error each get their own outcome and the run goes on; the judge never imports a mutant.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from specverify.cli import main
from specverify.mutation import mutants
from specverify.mutation import mutation_run as mutate
from specverify.mutation.mutants import Mutant
from specverify.pages import mutation_report
from tests.files.test_vendor import dist_info, entry_points_of

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "vendor_demo"
SOURCE = DEMO / "vendor_demo" / "rejection.py"
IMPL = "vendor_demo.rejection:expand"
EQUIVALENT = DEMO / "mutants-equivalent.toml"
PLANTED = "vendor_demo.rejection:expand:off-by-one:cu_num_tokens.shape[0] - 1#1"
FAST = dict(examples=5, device="cpu")


@pytest.fixture(scope="session")
def short_tmp():
    """One short folder under /tmp for this session's check processes: their forkserver sockets lie in
    it, and a Unix socket's path is limited to about 107 bytes (pytest's tmp_path under xdist uses most of
    them). It is kept, as tmp_path is: a forkserver started by one test serves the next ones."""
    return Path(tempfile.mkdtemp(prefix="svm-"))


@pytest.fixture
def scratch_tmp(short_tmp):
    """This test's own folder in `short_tmp` (a process it left behind is found by this name)."""
    folder = short_tmp / f"t{len(list(short_tmp.iterdir()))}"
    folder.mkdir()
    return folder


@pytest.fixture(autouse=True)
def demo_on_path(monkeypatch, tmp_path, scratch_tmp):
    """The check processes import this checkout's specverify and vendor_demo; their temporary folders lie
    in this test's own (so a process left behind can be found by its environment)."""
    site = tmp_path / "site"                     # vendor_demo registered as if pip-installed (a clean
    dist_info(site, "vendor-demo", "0.1.0", entry_points_of(DEMO / "pyproject.toml"))   # checkout has not)
    path = [str(ROOT), str(DEMO), str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(path))
    monkeypatch.syspath_prepend(str(site))       # and in this process
    monkeypatch.syspath_prepend(str(DEMO))
    monkeypatch.setenv("TMPDIR", str(scratch_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)


def hand_made(before: str, after: str, name: str, source: Path = SOURCE, module: str = "vendor_demo.rejection",
              mutant_id: str | None = None) -> Mutant:
    original = source.read_text()
    assert original.count(before) == 1, before
    line = original[:original.index(before)].count("\n") + 1
    return Mutant(mutant_id or f"{module}:expand:{name}:{before}#0", module, str(source), line, 4, "expand", name,
                  before, after, original.replace(before, after))


KILLING = hand_made("torch.where(x == old, new, x)", "torch.where(x != old, new, x)", "compare-flip")
EQUIVALENT_ONE = hand_made("cu_num_tokens.shape[0] - 1)", "cu_num_tokens.shape[0] - 0)", "off-by-one",
                           mutant_id=PLANTED)
TOO_TIGHT = hand_made("cu_num_tokens.shape[0] - 1)", "cu_num_tokens.shape[0] - 2)", "off-by-one")
CRASHING = hand_made("    if num_tokens == 0:\n        return\n    old", "    import os\n    os._exit(3)\n    old", "exit")
HANGING = hand_made("    if num_tokens == 0:\n        return\n    old",
                    "    import time\n    time.sleep(10**6)\n    old", "sleep")
BROKEN = hand_made("def expand(*,", "def expand((*,", "syntax")


def left_behind(folder: Path) -> list[int]:
    """Pids of processes whose environment names a mutant under `folder`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(folder).encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def test_outcomes_of_hand_made_mutants(tmp_path, scratch_tmp):
    options = mutate.Options(**FAST, jobs=2, deadline=25.0, out=tmp_path / "out")
    equivalent = mutate.load_equivalent(EQUIVALENT)
    found = [HANGING, KILLING, EQUIVALENT_ONE, TOO_TIGHT, CRASHING, BROKEN]
    run = mutate.run_mutants(mutate.Subject("rejection.expand", IMPL), found, options, equivalent)
    assert run.baseline == "passed"
    by_id = {r.mutant.id: r for r in run.results}
    assert [r.mutant.id for r in run.results] == [m.id for m in found]
    killed = by_id[KILLING.id]
    assert (killed.outcome, killed.check) == ("killed", "valid") and killed.examples >= 1
    assert killed.case and Path(killed.case).is_file() and (tmp_path / "out") in Path(killed.case).parents
    assert Path(killed.case).with_suffix(".json").is_file()
    assert by_id[TOO_TIGHT.id].outcome == "killed"
    planted = by_id[PLANTED]
    assert planted.outcome == "survived" and planted.equivalent and "never changes" in planted.judged
    assert by_id[CRASHING.id].outcome == "crashed" and "status 3" in by_id[CRASHING.id].headline
    assert by_id[HANGING.id].outcome == "timed out" and "deadline" in by_id[HANGING.id].headline
    assert by_id[BROKEN.id].outcome == "does not import" and "SyntaxError" in by_id[BROKEN.id].headline
    counts = run.counts()
    assert (counts["killed"], counts["crashed"], counts["timed out"], counts["equivalent"], counts["survived"],
            counts["does not import"]) == (2, 1, 1, 1, 0, 1)
    assert mutate.kill_rates(counts) == (1.0, 0.5)
    # the judge (this process) never loaded a mutant; nothing the hanging one started is left
    assert not [n for n, m in list(sys.modules.items()) if "specverify-mutant-" in str(getattr(m, "__file__", ""))]
    assert not left_behind(scratch_tmp)


def test_our_own_kernel_is_mutated_in_the_worker_only(tmp_path):
    """A kernel of the suite's own (the forkserver preloads the suite) is loaded from the mutant there."""
    source = ROOT / "kernels" / "torch" / "rejection.py"
    mutant = hand_made("torch.index_select(replaced, 0, request, out=expanded)",
                       "torch.index_select(x, 0, request, out=expanded)", "hand", source,
                       "specverify.kernels.torch.rejection")
    run = mutate.run_mutants(mutate.Subject("rejection.expand", "specverify.kernels.torch.rejection:expand"),
                             [mutant], mutate.Options(**FAST, out=tmp_path))
    assert run.baseline == "passed"
    assert run.results[0].outcome == "killed" and run.results[0].check == "valid"
    loaded = sys.modules.get("specverify.kernels.torch.rejection")
    assert loaded is None or Path(loaded.__file__).resolve() == source.resolve()


def finished(outcome: dict | None, status: int | None = 1, output: str = "") -> mutate.Finished:
    report = None if outcome is None else {"outcomes": [{"check": "corpus", "status": "skipped", "headline":
                                                         "no corpus case"}, outcome]}
    return mutate.Finished(status, report, output, 1.0)


@pytest.mark.parametrize("outcome, expected", [
    ({"check": "valid", "status": "failed", "kind": "wrong"}, "killed"),
    ({"check": "valid", "status": "failed", "kind": "raised", "headline": "raised IndexError: out of range"}, "killed"),
    ({"check": "valid", "status": "failed", "kind": "timeout", "headline": "timed out after 2 s"}, "timed out"),
    ({"check": "valid", "status": "incomplete", "kind": "timeout",
      "headline": "incomplete: the target's time limit (9 s) was spent before the valid check started"}, "timed out"),
    ({"check": "valid", "status": "incomplete", "kind": "timeout",
      "headline": "incomplete: the target's time limit was spent after 3 of 100 example(s)"}, "timed out"),
    ({"check": "valid", "status": "failed", "kind": "signal", "headline": "killed by SIGSEGV"}, "crashed"),
    ({"check": "valid", "status": "failed", "kind": "lost", "headline": "answered out of protocol"}, "crashed"),
    ({"check": "valid", "status": "failed", "kind": "load", "headline": "could not be loaded"}, "does not import"),
    ({"check": "valid", "status": "failed", "kind": "raised",
      "headline": "x raised CompilationError: at 3:4: unsupported"}, "does not compile"),
    ({"check": "valid", "status": "failed", "kind": "raised",
      "headline": "x raised InterpreterError: ValueError('arange's range must be a power of 2')"}, "does not compile"),
    ({"check": "valid", "status": "failed", "kind": "raised",   # Triton 3.6's interpreter, a store let out of range
      "headline": "x raised InterpreterError: TypeError('only 0-dimensional arrays can be converted to Python "
                  "scalars')"}, "killed"),
    ({"check": "valid", "status": "error", "headline": "the valid check broke"}, "error"),
    ({"check": "valid", "status": "xfailed", "kind": "wrong"}, "survived"),
])
def test_judging_a_check_report(outcome, expected):
    assert mutate.judge(finished(outcome), 10.0)[0] == expected


def test_judging_a_check_process_without_report():
    assert mutate.judge(finished(None, None), 10.0)[0] == "timed out"
    gone = "specverify check: error: --impl vendor_demo.rejection:expand: module has no attribute 'expand'"
    assert mutate.judge(finished(None, 2, gone), 10.0)[0] == "does not import"
    assert mutate.judge(finished(None, -9, "Traceback ..."), 10.0)[0] == "error"


def test_equivalence_file(tmp_path):
    assert mutate.load_equivalent(EQUIVALENT)[PLANTED][1] == ("rejection.expand",)
    listed = tmp_path / "listed.toml"
    listed.write_text('[[mutant]]\nid = "a"\nreason = "r"\nstage = ["x.y", "x.z"]\n')
    assert mutate.load_equivalent(listed) == {"a": ("r", ("x.y", "x.z"))}
    bad = tmp_path / "eq.toml"
    for text, words in [('[[mutant]]\nid = "a"\n', "reason must be a non-empty string"),
                        ('[[mutant]]\nid = "a"\nreason = "r"\nwhy = 1\n', "only the keys"),
                        ('[[mutant]]\nid = "a"\nreason = "r"\n[[mutant]]\nid = "a"\nreason = "s"\n', "listed twice"),
                        ('[[mutant]]\nid = "a"\nreason = "r"\nstage = []\n', "a stage name or a list"),
                        ('[[mutant]]\nid = "a"\nreason = "r"\nstage = 3\n', "a stage name or a list"),
                        ('mutant = 3\n', "holds only"), ("[[mutant\n", "not TOML")]:
        bad.write_text(text)
        with pytest.raises(mutate.EquivalentError, match=words):
            mutate.load_equivalent(bad)
    with pytest.raises(mutate.EquivalentError, match="cannot be read"):
        mutate.load_equivalent(tmp_path / "missing.toml")
    assert mutate.stale({"a": ("r", None), "b": ("r", None)}, {"b", "c"}) == ["a"]
    assert [m.id for m in mutate.sample([KILLING, CRASHING, BROKEN], 2, 0)] == \
        [m.id for m in mutate.sample([KILLING, CRASHING, BROKEN], 2, 0)]
    assert len(mutate.sample([KILLING, CRASHING, BROKEN], 2, 1)) == 2


def made_run(tmp_path) -> mutate.MutationRun:
    stage = mutate.StageRun(mutate.Subject("rejection.expand", IMPL), "passed", 2.0, 9, [
        mutate.Result(KILLING, "killed", "valid", "wrong value", 3, str(tmp_path / "c.npz"), 1.5),
        mutate.Result(TOO_TIGHT, "killed", "valid", "wrong value", 7),
        mutate.Result(EQUIVALENT_ONE, "survived", judged="no index reaches the bound"),
        mutate.Result(CRASHING, "survived"),
        mutate.Result(BROKEN, "does not import", "valid", "SyntaxError")])
    failing = mutate.StageRun(mutate.Subject("eagle.extend_queries", "vendor_demo.eagle:extend_queries"),
                              "valid: killed by SIGABRT", 1.0, 4)
    return mutate.MutationRun([stage, failing], mutate.Options(examples=5), "eq.toml", ["gone#0"], "now")


def test_reports_say_the_same(tmp_path):
    run = made_run(tmp_path)
    data = mutation_report.to_json(run)
    assert data["format"] == mutation_report.FORMAT and data["stale"] == ["gone#0"]
    first = data["stages"][0]
    assert first["counts"]["killed"] == 2 and first["counts"]["equivalent"] == 1 and first["counts"]["survived"] == 1
    assert first["kill_rate"] == pytest.approx(2 / 3) and first["median_examples"] == 5
    by_id = {m["id"]: m for m in first["mutants"]}
    assert by_id[PLANTED]["equivalent"] == "no index reaches the bound"
    assert "+    import os" in by_id[CRASHING.id]["diff"] and by_id[KILLING.id]["diff"] is None
    text = "\n".join(mutation_report.lines(run))
    assert "SURVIVED" in text and "+    os._exit(3)" in text and "not mutated" in text and "STALE: gone#0" in text
    assert f"{SOURCE}:{KILLING.line}" in text and "x == old, new, x) → torch.where(x != old" in text
    md = mutation_report.markdown(run)
    assert "| 67% | 67% | 5 |" in md and "equivalent (judged): no index reaches the bound" in md
    assert "+    os._exit(3)" in md and "`gone#0`" in md and "## Not mutated" in md


def test_reports_written_whole(tmp_path):
    run = made_run(tmp_path)
    json_path, md_path = tmp_path / "r" / "m.json", tmp_path / "r" / "m.md"
    json_path.parent.mkdir()
    json_path.write_text("old")
    assert mutation_report.write(run, json_path, md_path) == []
    assert json.loads(json_path.read_text())["format"] == mutation_report.FORMAT
    assert md_path.read_text().startswith("# specverify mutate")
    assert sorted(p.name for p in json_path.parent.iterdir()) == ["m.json", "m.md"]   # no temporary left
    (tmp_path / "file").write_text("")
    problems = mutation_report.write(run, tmp_path / "file" / "m.json", None)
    assert len(problems) == 1 and "could not be written" in problems[0]


@pytest.mark.parametrize("argv, words", [
    (["--stage", "rejection.expand"], "give one of --impl"),
    (["--stage", "rejection.expand", "--impl", IMPL, "--vendor", "vendor_demo"], "give one of --impl"),
    (["--stage", "rejection.*", "--impl", IMPL], "--impl mutates one stage"),
    (["--stage", "rejection.expand", "--impl", IMPL, "--operator", "no-such"], "not an operator"),
    (["--stage", "rejection.expand", "--impl", IMPL, "--mutant", "no-such#0"], "no mutant of the chosen stages"),
    (["--vendor", "vendor_demo", "--stage", "tree.*"], "selects no stage that vendor vendor_demo implements"),
])
def test_usage_errors(argv, words, capsys, monkeypatch):
    monkeypatch.setattr(mutants, "OPERATORS", {"compare-flip": "a comparison flipped"}, raising=False)
    assert main(["mutate", *argv]) == 2
    out = capsys.readouterr().out.strip()
    assert words in out and len(out.splitlines()) == 1


def test_usage_error_of_the_equivalence_file(tmp_path, capsys):
    bad = tmp_path / "eq.toml"
    bad.write_text('[[mutant]]\nid = "a"\n')
    assert main(["mutate", "--stage", "rejection.expand", "--impl", IMPL, "--equivalent", str(bad)]) == 2
    assert "mutant #1: reason must be a non-empty string" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        main(["mutate", "--stage", "rejection.expand", "--impl", IMPL, "--jobs", "0"])
    assert stop.value.code == 2


def test_no_check_starts_once_the_run_is_ending(tmp_path):
    """After end_all (an interrupt), a mutant's next check (its next dialect view) is not started: before, it ran
    to its deadline while the interrupted run waited for it."""
    mutate.end_all()
    try:
        with pytest.raises(mutate.Ended):
            mutate.run_check([sys.executable, "-c", "pass"], tmp_path, 5, {})
        assert not (tmp_path / "output.log").read_bytes()
    finally:
        mutate.ENDING.clear()
    assert mutate.run_check([sys.executable, "-c", "pass"], tmp_path, 5, {}).seconds >= 0


def test_list_runs_nothing(monkeypatch, capsys):
    monkeypatch.setattr(mutants, "mutants", lambda impl, operators=None: [KILLING, CRASHING], raising=False)
    assert main(["mutate", "--stage", "rejection.expand", "--impl", IMPL, "--list", "--sample", "1"]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 mutant(s)" in out and out.count(f"{SOURCE}:") == 1


def test_list_of_chosen_ids(monkeypatch, capsys):
    monkeypatch.setattr(mutants, "mutants", lambda impl, operators=None: [KILLING, CRASHING], raising=False)
    assert main(["mutate", "--stage", "rejection.expand", "--impl", IMPL, "--list", "--mutant", CRASHING.id]) == 0
    out = capsys.readouterr().out
    assert "1 of 2 mutant(s)" in out and CRASHING.id in out and KILLING.id not in out


def test_cli_writes_the_reports(tmp_path, monkeypatch, capsys):
    """--vendor: the vendor's stage is mutated; an equivalent survivor the file names passes, one it does
    not name fails the run (exit 1); a stale entry is reported."""
    unjudged = hand_made("cu_num_tokens.shape[0] - 1)", "cu_num_tokens.shape[0] + 5)", "hand")
    monkeypatch.setattr(mutants, "mutants", lambda impl, operators=None: [KILLING, EQUIVALENT_ONE, unjudged],
                        raising=False)
    judged = tmp_path / "eq.toml"
    planted = mutate.load_equivalent(EQUIVALENT)[PLANTED][0].replace('"', "'")
    judged.write_text(f'[[mutant]]\nid = "{PLANTED}"\nreason = "{planted}"\n'
                      '\n[[mutant]]\nid = "gone#0"\nreason = "was equivalent"\n')
    argv = ["mutate", "--vendor", "vendor_demo", "--stage", "rejection.expand", "--device", "cpu", "--examples", "5",
            "--equivalent", str(judged), "--json", str(tmp_path / "m.json"), "--markdown", str(tmp_path / "m.md"),
            "--out", str(tmp_path / "out")]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "SURVIVED" in out and "STALE: gone#0" in out and "equivalent (judged)" in out
    data = json.loads((tmp_path / "m.json").read_text())
    stage = data["stages"][0]
    assert (stage["stage"], stage["vendor"], stage["baseline"]) == ("rejection.expand", "vendor_demo", "passed")
    assert [m["outcome"] for m in stage["mutants"]] == ["killed", "survived", "survived"]
    assert stage["kill_rate"] == 0.5 and data["stale"] == ["gone#0"]
    assert "## Survivors" in (tmp_path / "m.md").read_text()


def test_the_matrix_shows_mutants_killed(tmp_path, capsys):
    """A mutation report beside check reports: the figure in the cell of its implementation and stage, in
    both pages; one that matches no row is listed; a damaged one is a usage error."""
    demo = ROOT / "examples" / "vendor_demo" / "reports" / "report.json"
    run = made_run(tmp_path)
    run.stages[0].subject = mutate.Subject("rejection.expand", IMPL, "vendor_demo")
    run.stages[1].subject = mutate.Subject("eagle.extend_queries", "vendor_demo.eagle:extend_queries", "vendor_demo")
    mutation = tmp_path / "mutation.json"
    mutation_report.write(run, mutation, None)
    assert main(["matrix", str(demo), str(mutation), "--out", str(tmp_path / "out")]) == 0
    figure = "mutants killed: 2 of 3 (67%, killed alone 67%); 1 judged equivalent; 1 counted apart"
    html, md = (tmp_path / "out" / "matrix.html").read_text(), (tmp_path / "out" / "matrix.md").read_text()
    assert figure in html and "mutants: not run (the unmutated implementation fails)" in html
    assert figure.replace("(", "\\(").replace(")", "\\)") in md
    assert "no cell" not in html
    run.stages[0].subject = mutate.Subject("rejection.expand", "acme.rejection:expand")
    mutation_report.write(run, mutation, None)
    assert main(["matrix", str(demo), str(mutation), "--out", str(tmp_path / "out")]) == 0
    assert "Mutation figures with no cell of these reports: acme.rejection:expand on cpu: rejection.expand" in \
        (tmp_path / "out" / "matrix.html").read_text()
    data = json.loads(mutation.read_text())
    data["stages"][0]["counts"]["killed"] = "two"
    mutation.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["matrix", str(demo), str(mutation), "--out", str(tmp_path / "out")]) == 2
    assert "report.stages[0].counts.killed must be an integer" in capsys.readouterr().out

"""`specverify matrix`: reports read side by side, the page rendered by headless Chromium, damaged reports.

The browser test skips when `chromium` is missing, unless SPECVERIFY_REQUIRE_BROWSER is set (`.ci/run`
installs Chromium and sets it, so CI never goes green without the page having been rendered).
"""
from __future__ import annotations

import copy
import json
import os
import shlex
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from specverify.cli import main
from specverify.pages import matrix, matrix_page

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "vendor_demo" / "reports" / "report.json"
HOSTILE = "<script>document.title='owned'</script><img src=x onerror=alert(1)>"


def demo() -> dict:
    return json.loads(DEMO.read_text())


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def verdict(data: dict, stage: str) -> dict:
    return next(v for v in data["verdicts"] if v["stage"] == stage)


def outcome(data: dict, stage: str, check: str) -> dict:
    return next(o for o in data["outcomes"] if o["stage"] == stage and o["check"] == check)


def other_vendor(data: dict) -> dict:
    """A second vendor from the demo's report: a declared domain and dialect on a passing stage, a timed-out
    stage, a hostile headline, another oracle hash (not comparable)."""
    data = copy.deepcopy(data)
    data["vendor"]["name"], data["vendor"]["distribution"] = f"rival{HOSTILE}", "rival 2.0"
    expand = verdict(data, "rejection.expand")
    expand["domain"], expand["dialect"] = [f"`x` contiguous {HOSTILE}", f"`{HOSTILE}` in a code span"], "strict-tie"
    crash = outcome(data, "eagle.extend_queries", "valid")
    crash["kind"], crash["headline"] = "timeout", f"eagle.extend_queries on impl/cpu timed out {HOSTILE}"
    crash["failures"][0]["headline"] = crash["headline"]
    crash["report"] = f"FAILED {crash['headline']}\n  ``` ~~~ {HOSTILE}"
    corpus = outcome(data, "eagle.extend_queries", "corpus")
    corpus["kind"] = "timeout"
    data["oracles"][0]["sha256"] = "f" * 64
    return data


def categories(found: matrix.Matrix) -> list[dict[str, str]]:
    return [{s: row.cells[s].category for s in found.stages} for row in found.rows]


# --- the cells -------------------------------------------------------------------------------------------


def test_cells_are_the_verdict_by_level(tmp_path):
    first = matrix.load(DEMO)
    second = matrix.load(write(tmp_path / "rival.json", other_vendor(demo())))
    found = matrix.build([first, second])
    assert found.stages == ["eagle.next_token_padded", "eagle.extend_queries", "rejection.recovered",
                            "rejection.expand"]
    assert categories(found) == [
        {"eagle.next_token_padded": "contract", "eagle.extend_queries": "crashed",
         "rejection.recovered": "robustness", "rejection.expand": "conforms"},
        {"eagle.next_token_padded": "contract", "eagle.extend_queries": "timeout",
         "rejection.recovered": "robustness", "rejection.expand": "domain"}]
    demo_row, rival = found.rows
    assert (demo_row.name, demo_row.version, demo_row.device) == ("vendor_demo", "vendor-demo 0.1.0", "cpu (x86_64)")
    assert demo_row.cells["rejection.recovered"].waivers == ["waiver #1 (vendor-demo#7)"]
    assert rival.cells["rejection.expand"].dialect == "strict-tie"
    assert demo_row.comparable and not rival.comparable and found.unchecked[0] == "eagle.prepare_inputs_padded"
    assert rival.differs == [f"oracle specverify.oracles.eagle ffffffffffff, "
                             f"not {first.oracles['specverify.oracles.eagle'][:12]}"]
    crash = demo_row.cells["eagle.extend_queries"]
    assert crash.anchor == "d0-1" and crash.failures[0].case == "a7cd6a0461955ad1"
    assert crash.failures[0].replay.startswith("specverify replay cases/eagle.extend_queries/a7cd6a0461955ad1.npz")
    assert not crash.failures[0].anywhere     # the demo's report predates absolute case paths


def test_a_stage_a_vendor_does_not_implement_is_a_cell_where_another_row_checked_it(tmp_path):
    data = demo()
    data["verdicts"] = [v for v in data["verdicts"] if v["stage"] != "rejection.expand"]
    data["vendor"]["not_implemented"].append("rejection.expand")
    found = matrix.build([matrix.load(DEMO), matrix.load(write(tmp_path / "r.json", data))])
    assert found.rows[1].cells["rejection.expand"].category == "absent"
    only = matrix.build([matrix.load(tmp_path / "r.json")])
    assert "rejection.expand" not in only.stages and "rejection.expand" in only.unchecked


def test_a_vendor_run_that_checked_nothing_still_has_its_row(tmp_path):
    data = demo()
    data["vendor"]["not_implemented"] += [v["stage"] for v in data["verdicts"]]
    data["verdicts"], data["outcomes"] = [], []
    found = matrix.build([matrix.load(DEMO), matrix.load(write(tmp_path / "r.json", data))])
    assert found.rows[1].name == "vendor_demo" and set(categories(found)[1].values()) == {"absent"}


def test_another_suite_version_is_not_comparable(tmp_path):
    data = demo()
    data["suite"]["version"] = "9.9.9"
    found = matrix.build([matrix.load(DEMO), matrix.load(write(tmp_path / "r.json", data))])
    assert found.rows[1].differs == ["specverify 9.9.9, not 0.1.0"] and not found.comparable
    assert "Not comparable" in matrix_page.markdown(found) and "Not comparable" in matrix_page.html(found)
    same = matrix.build([matrix.load(DEMO), matrix.load(DEMO)])
    assert same.comparable and "Not comparable" not in matrix_page.html(same)


def test_report_text_is_escaped_in_both_pages(tmp_path):
    found = matrix.build([matrix.load(write(tmp_path / "r.json", other_vendor(demo())))])
    page, twin = matrix_page.html(found), matrix_page.markdown(found)
    assert "<script" not in page and "<img" not in page and "&lt;script&gt;" in page
    assert "<code>x</code> contiguous &lt;script&gt;" in page and "<code>&lt;script&gt;" in page
    rendered = MarkdownIt("commonmark", {"html": True}).enable("table").render(twin)   # raw HTML let through
    assert "<script" not in rendered and "<img" not in rendered and "&lt;script&gt;" in rendered
    assert "<code>x</code> contiguous &lt;script&gt;" in rendered and "<code>&lt;script&gt;" in rendered
    assert rendered.count("<table>") == 2 and 'href="#d0-1"' in rendered and '<a id="d0-1">' in rendered


# --- damaged reports -------------------------------------------------------------------------------------


def damaged(tmp_path) -> dict[str, tuple[Path, str]]:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 40 + "]" * 40)
    wrong_type, unknown_stage, no_levels = demo(), demo(), demo()
    wrong_type["verdicts"][0]["levels"][0]["state"] = 3
    unknown_stage["verdicts"][0]["stage"] = "rejection.nope"
    del no_levels["verdicts"][1]["levels"]
    (tmp_path / "text.json").write_text("not json")
    (tmp_path / "folder.json").mkdir()
    return {
        "text": (tmp_path / "text.json", "not a specverify report (not JSON"),
        "foreign": (write(tmp_path / "foreign.json", {"format": "junit", "tests": []}),
                    "not a specverify report: its format is not 'specverify-report/2'"),
        "deep": (deep, "not read: nested deeper than 32"),
        "type": (write(tmp_path / "type.json", wrong_type),
                 "not a specverify report: report.verdicts[0].levels[0].state must be a string"),
        "stage": (write(tmp_path / "stage.json", unknown_stage),
                  "report.verdicts[0].stage: 'rejection.nope' is not a stage of this suite"),
        "missing": (write(tmp_path / "missing.json", no_levels), "report.verdicts[1].levels is missing"),
        "folder": (tmp_path / "folder.json", "not read: not a regular file (a folder)"),
    }


def test_a_damaged_or_foreign_report_is_one_line_and_exit_2(tmp_path, capsys):
    for name, (path, words) in damaged(tmp_path).items():
        assert main(["matrix", str(DEMO), str(path), "--out", str(tmp_path / "out")]) == 2, name
        out = capsys.readouterr().out
        assert out.count("\n") == 1 and out.startswith(f"specverify matrix: error: {path}: "), (name, out)
        assert words in out, (name, out)
    assert not (tmp_path / "out").exists()


def test_an_oversized_report_is_refused_before_it_is_parsed(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(matrix, "MAX_BYTES", 100)
    assert main(["matrix", str(DEMO), "--out", str(tmp_path / "out")]) == 2
    assert "bytes (at most 100)" in capsys.readouterr().out


def test_out_must_be_a_folder(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    with pytest.raises(SystemExit) as stop:
        main(["matrix", str(DEMO), "--out", str(tmp_path / "file")])
    assert stop.value.code == 2 and "not a folder" in capsys.readouterr().err
    assert main(["matrix", str(DEMO), "--out", str(tmp_path / "file" / "sub")]) == 2
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith(f"specverify matrix: error: --out {tmp_path / 'file' / 'sub'}: "
                                                     "matrix.html could not be written: ")


# --- in a browser ----------------------------------------------------------------------------------------


class Dom(HTMLParser):
    """What the test reads of the rendered page: cells by row (text, links, code elements), the row
    headers' text, links, ids, scripts, the banner's text, the replay commands of the failures."""

    def __init__(self):
        super().__init__()
        self.rows, self.links, self.ids, self.scripts, self.banner = [], [], set(), 0, ""
        self.heads: list[str] = []
        self.replays: list[str] = []
        self.stack: list[tuple[str, dict]] = []
        self.cell: dict | None = None
        self.head: list[str] | None = None
        self.code: list[str] | None = None
        self.term = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.stack.append((tag, attrs))
        self.scripts += tag == "script"
        if "id" in attrs:
            self.ids.add(attrs["id"])
        if tag == "tr":
            self.rows.append([])
        if tag == "th" and "impl" in (attrs.get("class") or "") and attrs.get("scope") == "row":
            self.head = []
        if tag == "td" and "cell" in (attrs.get("class") or ""):
            self.cell = {"category": attrs.get("data-category"), "text": "", "links": [], "codes": []}
            self.rows[-1].append(self.cell)
        if tag == "a" and "href" in attrs:
            self.links.append(attrs["href"])
            if self.cell is not None:
                self.cell["links"].append(attrs["href"])
        if tag == "code":
            self.code = []
        if tag == "dt":
            self.term = ""

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()[0] != tag:
            pass
        if tag == "td":
            self.cell = None
        if tag == "th" and self.head is not None:
            self.heads.append(" ".join("".join(self.head).split()))
            self.head = None
        if tag == "code" and self.code is not None:
            if self.cell is not None:
                self.cell["codes"].append("".join(self.code))
            if any(t == "dd" for t, _ in self.stack) and self.term == "replay":
                self.replays.append("".join(self.code))
            self.code = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell["text"] += data
        if self.head is not None:
            self.head.append(data + " ")
        if self.code is not None:
            self.code.append(data)
        if self.stack and self.stack[-1][0] == "dt":
            self.term += data
        if any("banner" in (a.get("class") or "") for _, a in self.stack):
            self.banner += data


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        if os.environ.get("SPECVERIFY_REQUIRE_BROWSER"):
            pytest.fail("chromium is not installed, and SPECVERIFY_REQUIRE_BROWSER is set (.ci/run installs it)")
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return found


def browse(page: Path, tmp_path: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-extensions",
                           f"--user-data-dir={tmp_path / 'profile'}", *flags, page.as_uri()],
                          capture_output=True, text=True, timeout=60, check=True)


def test_the_page_renders_in_headless_chromium(tmp_path):
    chromium()
    own = tmp_path / "torch.json"
    assert main(["check", "--stage", "rejection.expand", "--backend", "torch", "--device", "cpu", "--examples", "3",
                 "--findings", str(tmp_path / "findings"), "--report", str(own)]) == 0
    rival = write(tmp_path / "rival.json", other_vendor(demo()))
    assert main(["matrix", str(DEMO), str(rival), str(own), "--out", str(tmp_path / "out")]) == 0
    page = tmp_path / "out" / "matrix.html"
    dom = Dom()
    dom.feed(browse(page, tmp_path, "--dump-dom").stdout)
    rows = [r for r in dom.rows if r]
    assert [[c["category"] for c in r] for r in rows] == [
        ["contract", "crashed", "robustness", "conforms"], ["contract", "timeout", "robustness", "domain"],
        ["missing", "missing", "missing", "conforms"]]
    assert rows[0][1]["text"].startswith("crashed") and "SIGABRT" in rows[0][1]["text"]
    assert rows[1][3]["text"].startswith("conforms within its declared domain")
    assert "strict-tie" in rows[1][3]["text"] and HOSTILE in rows[1][3]["text"]   # shown as text, not run
    assert dom.scripts == 0 and "rival" in dom.banner and "not comparable" in dom.banner.lower()
    for cell in rows[0][:3] + rows[1][:3]:
        assert len(cell["links"]) == 1 and cell["links"][0].lstrip("#") in dom.ids
    assert not any(link.startswith(("http", "//")) for link in dom.links)
    shot = tmp_path / "matrix.png"
    browse(page, tmp_path, f"--screenshot={shot}", "--window-size=1400,900")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_impl_rows_name_their_source_code_renders_and_replays_run_from_anywhere(tmp_path, monkeypatch, capsys):
    """Two `--impl` reports of one module and a vendor's: each row names its source, code spans of report
    text are `<code>` (no backtick shown), and a failure's replay command, copied off the page, runs in
    another folder (the findings folder has a space in its name)."""
    chromium()
    run, elsewhere = tmp_path / "the run", tmp_path / "elsewhere"
    run.mkdir(), elsewhere.mkdir()
    monkeypatch.chdir(run)
    reports = []
    for function in ("writes_one_past_the_end", "patch_the_judge"):
        reports.append(str(run / f"{function}.json"))
        assert main(["check", "--stage", "rejection.greedy", "--impl", f"tests.hostile:{function}", "--device", "cpu",
                     "--examples", "20", "--findings", "my findings", "--report", reports[-1]]) == 1
    domain = str(ROOT / "examples" / "vendor_domain" / "reports" / "report.json")
    assert main(["matrix", *reports, domain, "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    dom = Dom()
    dom.feed(browse(tmp_path / "out" / "matrix.html", tmp_path, "--dump-dom").stdout)
    past, judge, vendor = dom.heads
    assert past.startswith("tests.hostile:writes_one_past_the_end module sha256 ")
    assert judge.startswith("tests.hostile:patch_the_judge module sha256 ") and past.split()[3] == judge.split()[3]
    assert vendor.startswith("vendor_domain vendor-domain 0.1.0 ")
    cells = [c for row in dom.rows for c in row]
    assert not [c["text"] for c in cells if "`" in c["text"]]
    [failed] = [c for c in [r for r in dom.rows if r][0] if c["category"] == "contract"]
    assert "write past the end of output_token_ids by 1 element" in failed["text"]
    assert failed["codes"] == ["output_token_ids"]
    assert {"draft_probs", "oov_drafts", "discarded_rows"} <= {code for c in cells for code in c["codes"]}
    assert len(dom.replays) == 2 and "--impl tests.hostile:writes_one_past_the_end " in dom.replays[0]
    words = shlex.split(dom.replays[0])
    assert words[:2] == ["specverify", "replay"] and words[2].startswith(str(run / "my findings"))
    assert "its case path is relative" not in (tmp_path / "out" / "matrix.html").read_text()
    monkeypatch.chdir(elsewhere)
    assert main(words[1:]) == 1
    assert "write past the end of `output_token_ids`" in capsys.readouterr().out


def test_the_committed_matrix_is_what_the_readme_command_writes(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    inputs = ["examples/vendor_demo/reports/report.json", "examples/vendor_domain/reports/report.json",
              "docs/matrix/specverify-torch.json", "examples/vendor_demo/reports/mutants.json",
              "examples/vendor_domain/reports/mutants.json"]
    assert main(["matrix", *inputs, "--out", str(tmp_path)]) == 0
    for name in ("matrix.html", "matrix.md"):
        assert (tmp_path / name).read_text() == (ROOT / "docs" / "matrix" / name).read_text(), name
    assert f"specverify matrix {' '.join(inputs)} --out docs/matrix" in (ROOT / "README.md").read_text()


def test_the_committed_page_shows_the_demo_vendor_in_headless_chromium(tmp_path):
    dom = Dom()
    dom.feed(browse(ROOT / "docs" / "matrix" / "matrix.html", tmp_path, "--dump-dom").stdout)
    rows = [r for r in dom.rows if r]
    # columns: eagle.next_token_padded, eagle.extend_queries, rejection.random, rejection.recovered, rejection.expand
    assert [[c["category"] for c in r] for r in rows] == [
        ["contract", "crashed", "absent", "robustness", "conforms"],     # vendor_demo
        ["domain", "absent", "domain", "absent", "absent"],              # vendor_domain
        ["conforms"] * 5,                                                # our Torch kernels
        ["missing", "missing", "conforms", "missing", "missing"],        # ... of dialect strict
        ["missing", "missing", "conforms", "missing", "missing"]]        # ... of dialect strict_q0
    assert [c["links"] for c in rows[0]] == [["#d0-0"], ["#d0-1"], [], ["#d0-3"], []]
    assert {"d0-0", "d0-1", "d0-3"} <= dom.ids and not dom.banner and dom.scripts == 0
    within = rows[1][2]["text"]
    assert "dialect: strict" in within and "draft_probs always given" in within and "no oov_drafts" in within
    assert rows[1][2]["codes"] == ["draft_probs", "oov_drafts"] and "`" not in within
    assert "not needed, its excluded draws pass: no discarded_rows" in rows[1][0]["text"]
    assert dom.heads[:2] == ["vendor_demo vendor-demo 0.1.0 cpu (x86_64) suite: specverify 0.1.0 oracles eagle "
                             "2d247f0caf3c, rejection 4409bd04bba4",
                             "vendor_domain vendor-domain 0.1.0 cpu (x86_64) suite: specverify 0.1.0 oracles eagle "
                             "2d247f0caf3c, rejection 4409bd04bba4"]
    # its reports predate absolute case paths: each replay says where it runs
    assert len(dom.replays) == 6 and all(r.startswith("specverify replay cases/") or r.startswith(
        "specverify replay specverify-findings/") for r in dom.replays)

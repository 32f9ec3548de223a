"""The conformance matrix as one self-contained HTML page and its Markdown twin.

The page needs nothing from the network and runs no script: its style sheet is inline and it names
only fonts the system has. Each cell says its verdict in words (the colour repeats it), the declared
domain and the dialect where the report has them, a mutation report's "mutants killed" figure, and
links to an anchor further down with the failure: the level, the case id, the headline, the replay
command (where its case path is relative, the page says where to run it) and the report of the first
failure.
Every text from a report is escaped (`html.escape` on the page; backslash escapes and code spans
whose fence outgrows any backtick run in the Markdown); its code spans (`name`, as reports write field
names) become `<code>` on the page and stay code spans in the Markdown.
"""
from __future__ import annotations

import re
from html import escape

from specverify.pages.matrix import CATEGORIES, Cell, Matrix, Row

MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~&$])")
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")    # a Markdown code span: equal backtick runs
REPLAY_WORDS = ("A replay command names its case file by absolute path: it runs from any folder of the machine "
                "that ran the check (elsewhere, copy the case file and give its path).")
RELATIVE_WORDS = (" Reports that predate absolute case paths give them relative to the folder their check ran in: "
                  "such a command says so, and runs only there.")
RELATIVE = "its case path is relative to the folder the check ran in: run it there"

STYLE = """
body { font-family: system-ui, "DejaVu Sans", "Liberation Sans", Arial, sans-serif; margin: 24px;
       color: #1d1d1f; background: #fff; font-size: 14px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 28px 0 8px; }
p.lead { margin: 0 0 14px; color: #444; } p.aside { font-size: 12px; color: #555; max-width: 1100px; }
.banner { border: 2px solid #b45309; background: #fff7ed; padding: 10px 14px; margin: 0 0 14px; }
.banner strong { color: #9a3412; }
table.matrix { border-collapse: collapse; table-layout: fixed; }
table.matrix th, table.matrix td { border: 1px solid #c9ccd1; padding: 7px 9px; vertical-align: top; }
table.matrix thead th { background: #f1f3f5; font-weight: 600; text-align: left; width: 190px; }
table.matrix thead th .family { display: block; font-weight: 400; color: #555; font-size: 12px; }
table.matrix th.impl { width: 250px; text-align: left; background: #fafbfc; }
th.impl .name { font-size: 15px; display: block; } th.impl .meta { display: block; font-weight: 400;
    color: #444; font-size: 12px; } th.impl code { font-size: 11px; }
th.impl .mark { display: inline-block; margin-top: 4px; color: #9a3412; border: 1px solid #b45309;
    padding: 0 4px; font-size: 12px; }
td.cell .verdict { font-weight: 700; display: block; }
td.cell .note { display: block; font-size: 12px; margin-top: 3px; }
td.cell a { color: inherit; font-size: 12px; }
td.cell ul { margin: 3px 0 0 16px; padding: 0; font-size: 12px; }
.conforms { background: #dcfce7; color: #14532d; } .domain { background: #e0f2f1; color: #134e4a; }
.contract { background: #fee2e2; color: #7f1d1d; } .robustness { background: #ffedd5; color: #7c2d12; }
.property { background: #fef9c3; color: #713f12; } .crashed { background: #fecdd3; color: #881337;
    border-left: 5px solid #be123c !important; }
.timeout { background: #ede9fe; color: #4c1d95; } .incomplete { background: #e0e7ff; color: #312e81; }
.unchecked { background: #f1f5f9; color: #334155; }
.absent, .missing { background: #fff; color: #6b7280; }
ul.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 6px; margin: 0 0 16px; }
ul.legend li { padding: 3px 8px; border: 1px solid #c9ccd1; font-size: 12px; }
section.failure { border: 1px solid #c9ccd1; padding: 8px 14px; margin: 0 0 12px; }
section.failure h3 { font-size: 15px; margin: 4px 0 8px; }
dl { display: grid; grid-template-columns: max-content auto; gap: 3px 12px; margin: 0 0 8px; }
dt { font-weight: 600; } dd { margin: 0; } dd .where { display: block; font-size: 12px; color: #9a3412; }
td.cell code, dd code { font-size: 12px; background: rgba(0, 0, 0, 0.06); padding: 0 2px; }
pre { background: #f6f8fa; padding: 8px; overflow-x: auto; font-size: 12px; }
table.reports { border-collapse: collapse; font-size: 12px; }
table.reports th, table.reports td { border: 1px solid #c9ccd1; padding: 4px 8px; text-align: left;
    vertical-align: top; }
"""

MEANINGS = {"conforms": "every level asked passes", "domain": "passes, on the domain the vendor declared",
            "contract": "the valid tier: an output byte differs from the oracle's, or a stray write",
            "robustness": "the hazard tier: pathological input breaks an invariant",
            "property": "wide-offsets, no-sync, launches, graph-replay, stream-order or cross-device",
            "crashed": "the process died (a signal, an exit, a broken answer)",
            "timeout": "a call ran past its time limit",
            "incomplete": "every example that ran passed, but the target's time ran out before all were drawn",
            "unchecked": "the contract was not run",
            "absent": "the vendor does not implement this stage", "missing": "this report has no verdict for it"}


def spans(text: str) -> list[tuple[str, bool]]:
    """Untrusted text on one line, cut into plain runs and code spans: (text, is code)."""
    text, found, pos = " ".join(str(text).split()), [], 0
    for m in CODE_SPAN.finditer(text):
        code = m[2][1:-1] if len(m[2]) > 2 and m[2][0] == m[2][-1] == " " and m[2].strip() else m[2]
        found += [(text[pos:m.start()], False), (code, True)]
        pos = m.end()
    return [(part, code) for part, code in found + [(text[pos:], False)] if part]


def cell_notes(cell: Cell) -> list[str]:
    notes = [f"dialect: {cell.dialect}"] if cell.dialect else []
    notes += [f"not needed, its excluded draws pass: {', '.join(cell.unneeded)}"] if cell.unneeded else []
    notes += [cell.detail] if cell.detail else []
    notes += [cell.mutants] if cell.mutants else []
    notes += [f"expected by {w}" for w in cell.waivers]
    return notes


def row_meta(row: Row) -> list[str]:
    return [row.version, row.device, f"suite: specverify {row.report.suite}"]


def hashes(row: Row) -> str:
    return ", ".join(f"{m.rsplit('.', 1)[-1]} {sha[:12]}" for m, sha in sorted(row.report.oracles.items()))


def replay_words(matrix: Matrix) -> str:
    """Where the failures' replay commands run."""
    relative = any(f.replay and not f.anywhere for row in matrix.rows for cell in row.cells.values()
                   for f in cell.failures)
    return REPLAY_WORDS + (RELATIVE_WORDS if relative else "")


def failure_title(row: Row, stage: str, cell: Cell) -> str:
    return f"{row.name} on {row.device}: {stage}: {cell.label}"


# --- HTML ------------------------------------------------------------------------------------------------


def html_text(text: str) -> str:
    """Untrusted text as HTML: escaped, its code spans in `<code>`."""
    return "".join(f"<code>{escape(part)}</code>" if code else escape(part) for part, code in spans(text))


def html_cell(cell: Cell) -> str:
    e, t = escape, html_text
    parts = [f'<span class="verdict">{e(cell.label)}</span>']
    if cell.domain:
        parts.append('<span class="note">within:</span><ul class="domain">'
                     + "".join(f"<li>{t(d)}</li>" for d in cell.domain) + "</ul>")
    parts += [f'<span class="note">{t(n)}</span>' for n in cell_notes(cell)]
    if cell.anchor:
        parts.append(f'<a class="detail" href="#{cell.anchor}">the failure: case and replay</a>')
    return f'<td class="cell {cell.category}" data-category="{cell.category}">{"".join(parts)}</td>'


def html_row(row: Row, stages: list[str]) -> str:
    e = escape
    mark = "" if row.comparable else (f'<span class="mark" title="{e("; ".join(row.differs))}">'
                                      "not comparable</span>")
    head = (f'<th class="impl" scope="row"><span class="name">{html_text(row.name)}</span>'
            + "".join(f'<span class="meta">{html_text(m)}</span>' for m in row_meta(row))
            + f'<span class="meta">oracles <code>{e(hashes(row))}</code></span>{mark}</th>')
    return "<tr>" + head + "".join(html_cell(row.cells[s]) for s in stages) + "</tr>"


def html_failures(matrix: Matrix) -> list[str]:
    e, out = escape, []
    for row in matrix.rows:
        for stage in matrix.stages:
            cell = row.cells[stage]
            if not cell.anchor:
                continue
            out.append(f'<section class="failure" id="{cell.anchor}"><h3>{e(failure_title(row, stage, cell))}</h3>')
            for f in cell.failures:
                expected = f" (failed as expected: {f.waiver})" if f.waiver else ""
                where = f'<span class="where">{e(RELATIVE)}</span>' if f.replay and not f.anywhere else ""
                out.append(f"<dl><dt>level</dt><dd>{e(f.level + expected)}</dd>"
                           f"<dt>case</dt><dd><code>{e(f.case or 'no case file')}</code></dd>"
                           f"<dt>failure</dt><dd>{html_text(f.headline)}</dd><dt>replay</dt>"
                           f"<dd><code>{e(f.replay or 'no case file to replay')}</code>{where}</dd></dl>")
                if f.story:
                    out.append(f"<pre>{e(f.story)}</pre>")
            out.append("</section>")
    return out


def html(matrix: Matrix) -> str:
    e = escape
    lines = ['<!DOCTYPE html>', '<html lang="en"><head><meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             "<title>specverify conformance matrix</title>", f"<style>{STYLE}</style></head><body>",
             "<h1>specverify conformance matrix</h1>",
             f'<p class="lead">{len(matrix.rows)} implementation(s) from {len({id(r.report) for r in matrix.rows})}'
             " report(s): one row per implementation, one column per stage a report checked. Each cell is the"
             " verdict in words; the colour repeats it.</p>"]
    if not matrix.comparable:
        lines.append('<div class="banner" role="alert"><strong>Not comparable.</strong> These reports were made'
                     " by different suite versions or oracles; rows marked <em>not comparable</em> differ from the"
                     " first report: " + e("; ".join(f"{r.name} ({', '.join(r.differs)})"
                                                      for r in matrix.rows if not r.comparable)) + ".</div>")
    lines.append('<ul class="legend">' + "".join(f'<li class="{k}"><strong>{e(CATEGORIES[k])}</strong>: '
                                                 f"{e(MEANINGS[k])}</li>" for k in CATEGORIES) + "</ul>")
    lines.append('<table class="matrix"><thead><tr><th class="impl">implementation</th>' + "".join(
        f'<th scope="col"><span class="family">{e(s.split(".", 1)[0])}</span>{e(s.split(".", 1)[-1])}</th>'
        for s in matrix.stages) + "</tr></thead><tbody>")
    lines += [html_row(row, matrix.stages) for row in matrix.rows]
    lines.append("</tbody></table>")
    if matrix.unchecked:
        lines.append(f'<p class="aside">Not checked by any of these reports: {e(", ".join(matrix.unchecked))}.</p>')
    if matrix.unmatched:
        lines.append('<p class="aside">Mutation figures with no cell of these reports: '
                     f'{e("; ".join(matrix.unmatched))}.</p>')
    failures = html_failures(matrix)
    if failures:
        lines += ["<h2>Failures</h2>", f'<p class="aside">{e(replay_words(matrix))}</p>'] + failures
    lines += ["<h2>Reports</h2>", '<table class="reports"><thead><tr><th>implementation</th><th>report</th>'
              "<th>run</th><th>oracles (sha256)</th></tr></thead><tbody>"]
    for row in matrix.rows:
        r = row.report
        lines.append(f"<tr><td>{e(row.name)}</td><td>{e(str(r.path))}</td><td>{e(r.started)}, profile "
                     f"{e(r.profile)}, seed {r.seed}</td><td>" + "<br>".join(
                         f"{e(m)} <code>{e(sha)}</code>" for m, sha in sorted(r.oracles.items())) + "</td></tr>")
    lines += ["</tbody></table>", "</body></html>"]
    return "\n".join(lines) + "\n"


# --- Markdown --------------------------------------------------------------------------------------------


def md_text(text: str) -> str:
    """Untrusted text as Markdown that shows it literally: one line, every markup character escaped."""
    return MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def md_inline(text: str) -> str:
    """Untrusted text as Markdown on one line: plain runs escaped, code spans kept as code spans."""
    return "".join(md_code(part) if code else MARKDOWN_SPECIAL.sub(r"\\\1", part) for part, code in spans(text))


def md_code(text: str, in_table: bool = True) -> str:
    """A code span that holds `text` literally (in a table, pipes escaped: GFM unescapes them there)."""
    text = " ".join(str(text).split())
    text = text.replace("|", "\\|") if in_table else text
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}"


def md_cell(cell: Cell) -> str:
    parts = [f"**{cell.label}**"]
    if cell.domain:
        parts.append("within: " + "; ".join(md_inline(d) for d in cell.domain))
    parts += [md_inline(n) for n in cell_notes(cell)]
    if cell.anchor:
        parts.append(f"[the failure](#{cell.anchor})")
    return "<br>".join(parts)


def markdown(matrix: Matrix) -> str:
    lines = ["# specverify conformance matrix", "",
             f"{len(matrix.rows)} implementation(s): one row per implementation, one column per stage a report "
             "checked.", ""]
    if not matrix.comparable:
        lines += ["> **Not comparable.** These reports were made by different suite versions or oracles; rows "
                  "marked *not comparable* differ from the first report: " + md_text("; ".join(
                      f"{r.name} ({', '.join(r.differs)})" for r in matrix.rows if not r.comparable)) + ".", ""]
    lines += [f"- **{CATEGORIES[k]}**: {MEANINGS[k]}" for k in CATEGORIES] + [""]
    lines += ["| implementation | " + " | ".join(f"`{s}`" for s in matrix.stages) + " |",
              "|---" * (len(matrix.stages) + 1) + "|"]
    for row in matrix.rows:
        head = "<br>".join([f"**{md_inline(row.name)}**"] + [md_inline(m) for m in row_meta(row)]
                           + [f"oracles {md_code(hashes(row))}"] + ([] if row.comparable else ["**not comparable**"]))
        lines.append(f"| {head} | " + " | ".join(md_cell(row.cells[s]) for s in matrix.stages) + " |")
    if matrix.unchecked:
        lines += ["", "Not checked by any of these reports: " + ", ".join(f"`{s}`" for s in matrix.unchecked) + "."]
    if matrix.unmatched:
        lines += ["", "Mutation figures with no cell of these reports: " + md_text("; ".join(matrix.unmatched)) + "."]
    sections = [(row, stage, row.cells[stage]) for row in matrix.rows for stage in matrix.stages
                if row.cells[stage].anchor]
    if sections:
        lines += ["", "## Failures", "", md_text(replay_words(matrix))]
    for row, stage, cell in sections:
        lines += ["", f'<a id="{cell.anchor}"></a>', "", f"### {md_text(failure_title(row, stage, cell))}", ""]
        for f in cell.failures:
            expected = f" (failed as expected: {f.waiver})" if f.waiver else ""
            where = f" ({md_text(RELATIVE)})" if f.replay and not f.anywhere else ""
            lines += [f"- {md_text(f.level + expected)}, case {md_code(f.case or 'no case file', False)}: "
                      f"{md_inline(f.headline)}", f"  replay: {md_code(f.replay or 'no case file to replay', False)}"
                      + where]
            if f.story:
                fence = "`" * max(3, max((len(run) for run in re.findall("`+", f.story)), default=0) + 1)
                lines += ["", f"{fence}text", f.story, fence, ""]
    lines += ["", "## Reports", "", "| implementation | report | run | oracles (sha256) |", "|---|---|---|---|"]
    for row in matrix.rows:
        r = row.report
        lines.append(f"| {md_text(row.name)} | {md_code(r.path)} | {md_text(r.started)}, profile "
                     f"{md_text(r.profile)}, seed {r.seed} | "
                     + "<br>".join(f"{md_text(m)} {md_code(sha)}" for m, sha in sorted(r.oracles.items())) + " |")
    return "\n".join(lines) + "\n"

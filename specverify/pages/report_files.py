"""Reports of a run for machines and people: JSON (`--report`), JUnit XML (`--junit`), Markdown
(`--markdown`). All three say the same things: the suite's version, the profile and seed, the device and
library versions, the sha256 of every oracle module and implementation module judged, the verdict of each
target by level, every (target, check) outcome with its examples, failures (case ids and replay commands),
the waivers used, stale and no longer needed, the stages a vendor does not implement, and totals.

A report is read away from the run (`specverify matrix`, CI pages), so it names every case file and the
findings folder (`cases_dir`) by absolute path, and every replay command in it runs from any folder of
the machine that ran the check; the terminal keeps the paths as the run was given them.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

import specverify
from specverify import env
from specverify.judge.failure_report import replay_line
from specverify.judge.provenance import machine, module_fingerprint
from specverify.records import registry
from specverify.runs.beyond_domain import notes as outside_notes
from specverify.runs.protocol import short
from specverify.runs.verdicts import Run, incomplete_counts, not_asked, verdicts
from specverify.runs.waivers import STATE_WORDS

FORMAT = "specverify-report/2"
TOTAL_WORDS = {"checks": "checks", "passed": "passed", "failed": "failed", "error": "broke", "xfailed":
               "failed as expected", "waived": "not launched (waived)", "skipped": "skipped",
               "incomplete": "incomplete (time ran out)", "examples": "examples drawn",
               "corpus_cases": "corpus cases replayed", "stale_waivers": "stale waiver(s)",
               "unneeded_waivers": "waiver(s) no longer needed"}


def oracles(run: Run) -> list[dict]:
    stages = registry.all_stages() if run.outcomes else {}
    names = sorted({stages[o.stage].oracle.__module__ for o in run.outcomes if o.stage in stages})
    return [module_fingerprint(n) for n in names]


def implementations(run: Run) -> list[dict]:
    found: dict[tuple, dict] = {}
    for o in run.outcomes:
        if o.check != "-":
            found.setdefault((o.stage, o.backend, o.device, o.source), {
                "stage": o.stage, "backend": o.backend, "device": o.device, "source": o.source, **o.fingerprint})
    return list(found.values())


def absolute(path) -> str:
    return os.path.abspath(path)


def replay(o, path) -> str:
    """The command that replays case file `path` on the outcome's target, from any folder."""
    return replay_line(absolute(path), o.backend, o.source, o.device, o.dialect)


def failures(o) -> list[dict]:
    """Every failure of an outcome (expected ones included): case id, tier, headline, replay command."""
    if o.replays:
        return [{"case": r.case_id, "tier": r.tier, "origin": r.origin, "status": r.status, "headline": r.headline,
                 "waiver": r.waiver, "replay": replay(o, r.path)}
                for r in o.replays if r.status in ("failed", "xfailed")]
    if o.status in ("failed", "xfailed", "error"):
        return [{"case": o.case.stem if o.case else None, "tier": o.check, "status": o.status,
                 "headline": o.headline, "waiver": o.waiver, "replay": replay(o, o.case) if o.case else None}]
    return []


def story(o) -> str:
    """The outcome's failure report as the terminal printed it, its replay commands made absolute."""
    text = o.report
    for path in {r.path for r in o.replays} | ({o.case} if o.case else set()):
        printed = replay_line(path, o.backend, o.source, o.device, o.dialect)
        text = text.replace(f"replay: {printed}", f"replay: {replay(o, path)}")
    return text


def outcome_json(o) -> dict:
    return {"stage": o.stage, "backend": o.backend, "device": o.device, "check": o.check, "status": o.status,
            "source": o.source, "dialect": o.dialect, "randomness": o.randomness, "acceptance": o.acceptance,
            "examples": o.examples, "planned": o.planned,
            "found_after": o.found_after,
            "seconds": round(o.seconds, 3), "kind": o.kind, "headline": o.headline, "report": story(o),
            "case": absolute(o.case) if o.case else None, "coverage": dict(o.coverage), "measures": o.measures,
            "timing": o.timing, "worker": o.worker, "waiver": o.waiver,
            "notes": o.notes, "failures": failures(o), "domain": o.domain,
            "replays": [{"case": r.case_id, "path": absolute(r.path), "tier": r.tier, "origin": r.origin,
                         "status": r.status, "waiver": r.waiver} for r in o.replays]}


def waiver_json(w) -> dict:
    return {"index": w.index, "stage": w.stage, "check": w.check, "device": w.device, "case": w.case,
            "mode": w.mode, "issue": w.issue, "reason": w.reason, "state": w.state, "label": w.label}


def totals(run: Run) -> dict:
    status = Counter(o.status for o in run.outcomes if o.check != "-")
    return {"checks": sum(status.values()), **{s: status.get(s, 0) for s in
                                               ("passed", "failed", "error", "xfailed", "waived", "skipped",
                                                "incomplete")},
            "examples": sum(o.examples for o in run.outcomes if o.check != "corpus"),
            "corpus_cases": sum(o.examples for o in run.outcomes if o.check == "corpus"),
            "stale_waivers": len(run.stale()), "unneeded_waivers": len(run.unneeded())}


def to_json(run: Run) -> dict[str, Any]:
    vendor = None
    if run.vendor is not None:
        v = run.vendor
        vendor = {"name": v.name, "declaration": v.declaration, "distribution": v.distribution,
                  "implements": list(v.implementations), "not_implemented": run.not_implemented}
    waivers = None
    if run.waivers is not None:
        waivers = {"file": str(run.waivers.path), "entries": [waiver_json(w) for w in run.waivers.entries]}
    return {"format": FORMAT, "suite": {"name": "specverify", "version": specverify.__version__},
            "started": run.started, "interrupted": run.interrupted, "profile": run.profile, "seed": run.seed, "exit_status": run.exit_status,
            "versions": env.versions(), "machine": machine(run.device),
            "cases_dir": absolute(run.cases_dir) if run.cases_dir else None,
            "oracles": oracles(run), "implementations": implementations(run), "vendor": vendor,
            "verdicts": [{"stage": v.stage, "backend": v.backend, "device": v.device, "source": v.source,
                          "dialect": v.dialect, "rule": v.rule, "summary": v.summary, "domain": v.domain,
                          "outside": v.outside, "unneeded": v.unneeded, "rules": v.rules, "follows": v.follows,
                          "levels": [vars(lv) for lv in v.levels]} for v in verdicts(run.outcomes)],
            "outcomes": [outcome_json(o) for o in run.outcomes], "waivers": waivers, "totals": totals(run)}


def junit(run: Run) -> JUnitXml:
    """One test suite per target (a test case per check), and one for the waiver file."""
    xml = JUnitXml("specverify")
    owner = run.vendor.name if run.vendor is not None else "specverify"
    suites: dict[tuple, TestSuite] = {}
    for o in run.outcomes:
        key = (o.stage, o.backend, o.device, o.source, o.dialect)
        if key not in suites:
            under = f" under dialect {o.dialect}" if o.dialect else ""
            suites[key] = suite = TestSuite(f"{o.stage} on {o.backend}/{o.device}{under}")
            suite.add_property("source", o.source)
            suite.add_property("sha256", str(o.fingerprint.get("sha256")))
            if o.randomness:
                suite.add_property("randomness", o.randomness)
        case = TestCase(f"{o.check}[{o.backend}-{o.device}]", classname=f"{owner}.{o.stage}", time=round(o.seconds, 3))
        if o.status in ("failed", "error"):
            result = (Failure if o.status == "failed" else Error)(o.headline, o.kind or o.status)
            result.text = story(o) or o.headline
            case.result = [result]
        elif o.status != "passed":
            words = {"xfailed": f"failed as expected ({o.waiver}): {o.headline}", "waived": o.headline,
                     "incomplete": short(o.headline, o.stage, o.backend, o.device)}
            case.result = [Skipped(words.get(o.status, o.headline), o.status)]
        lines = [f"{o.examples} example(s)"] + [f"{f['case']}: {f['status']}: {f['replay']}" for f in failures(o)]
        case.system_out = "\n".join(lines + o.notes)
        suites[key].add_testcase(case)
    if run.waivers is not None:
        suite = TestSuite(f"waivers {run.waivers.path}")
        for w in run.waivers.entries:
            case = TestCase(f"waiver #{w.index} {w.scope}", classname=f"{owner}.waivers")
            if w.state == "passed":
                case.result = [Failure(f"{w.label}: {STATE_WORDS[w.state]}", "unneeded-waiver")]
            elif w.state in ("stale", "not in this run"):
                case.result = [Skipped(f"{w.label}: {STATE_WORDS[w.state]}", w.state)]
            suite.add_testcase(case)
        suites["waivers"] = suite
    for suite in suites.values():
        suite.add_property("specverify", specverify.__version__)
        suite.update_statistics()
        xml.add_testsuite(suite)
    xml.update_statistics()
    return xml


def cell(text: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(headers: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return out + ["| " + " | ".join(cell(x) for x in row) + " |" for row in rows]


def result_words(o: dict) -> str:
    """An outcome's result in the Markdown checks table."""
    if o["status"] == "incomplete":
        return f"incomplete ({incomplete_counts(o['examples'], o['planned'])})"
    return o["status"] + (f" ({o['waiver']})" if o["waiver"] else "")


def markdown(run: Run) -> str:
    data = to_json(run)
    title = f"vendor `{run.vendor.name}`" if run.vendor is not None else "specverify check"
    versions = ", ".join(f"{k} {v}" for k, v in data["versions"].items() if k != "specverify")
    m = data["machine"]
    words = {0: "passed", 1: "FAILED", 2: "bad usage", 3: "nothing checked",
             4: "incomplete (every check that ran passed; a target's time ran out)"}[run.exit_status]
    lines = [f"# Conformance report: {title}", "",
             f"specverify {specverify.__version__}, profile `{run.profile}`, seed {run.seed}, "
             f"device `{m['device']}` ({m.get('gpu', m['machine'])}); {versions}.", "",
             f"**Result: {words}** (exit status {run.exit_status}). " + ", ".join(
                 f"{v} {TOTAL_WORDS[k]}" for k, v in data["totals"].items() if v) + ".", ""]
    if run.interrupted:
        lines += [f"**Interrupted by {run.interrupted}**: this report holds the checks that finished.", ""]
    if run.vendor is not None:
        v = data["vendor"]
        lines += [f"Declared by `{v['declaration']}`" + (f" ({v['distribution']})" if v["distribution"] else "")
                  + f": {len(v['implements'])} stage(s) implemented.", ""]
    lines += ["## Verdict by level", "",
              "The contract is the valid tier (byte identity with the oracle); robustness the hazard tier; "
              "arguments the invalid tier. Corpus cases count at the level of their tier.", ""]
    rows, found = [], verdicts(run.outcomes)
    for v in found:
        levels = {lv.name: lv for lv in v.levels}
        under = f" under {v.rule}" if v.rule else ""
        rows.append([f"`{v.stage}`{under}", f"`{v.source}`", v.device, v.summary] +
                    [levels[n].text().split(": ", 1)[1] if n in levels else "" for n in ("contract", "robustness",
                                                                                            "arguments")])
    lines += table(["stage", "implementation", "device", "verdict", "contract", "robustness", "arguments"], rows)
    lines += [""] + [f"- {line}." for line in not_asked(found)]
    declared = [(v, text) for v in found for text in v.domain]
    if declared:
        lines += ["", "## Declared domains", "",
                  "Each verdict above holds within the domain its implementation declares (the search draws "
                  "only inside it; corpus cases outside it are not replayed):", ""]
        lines += [f"- `{v.stage}` (`{v.source}`): {cell(text)}" for v, text in declared]
        outside = [(v, line) for v in found for line in outside_notes(v.outside)]
        if outside:
            lines += ["", "Information draws outside each restriction (never a failure):", ""]
            lines += [f"- `{v.stage}` (`{v.source}`): {cell(line)}" for v, line in outside]
    if run.vendor is not None:
        lines += ["", f"**Not implemented** ({len(run.not_implemented)} of {len(registry.all_stages())} stages): "
                  + (", ".join(f"`{s}`" for s in run.not_implemented) or "none") + "."]
    lines += ["", "## Checks", ""]
    lines += table(["stage", "check", "examples", "result", "time"],
                   [[o["stage"], o["check"], o["examples"], result_words(o),
                     f"{o['seconds']:.1f} s"] for o in data["outcomes"] if o["check"] != "-"])
    fails = [(o, f) for o in data["outcomes"] for f in o["failures"]]
    if fails:
        lines += ["", "## Failures", ""]
        for o, f in fails:
            expected = f" (failed as expected: {f['waiver']})" if f["status"] == "xfailed" else ""
            headline = short(f["headline"], o["stage"], o["backend"], o["device"])
            lines += [f"- `{o['stage']}` {o['check']}, {f['tier']} tier, case `{f['case']}`{expected}: "
                      f"{cell(headline)}", f"  replay: `{f['replay']}`" if f["replay"] else "  (no case file)"]
    notes = [(o, n) for o in data["outcomes"] for n in o["notes"]]
    if notes:
        lines += ["", "## Notes", ""] + [f"- `{o['stage']}` {o['check']}: {cell(n)}" for o, n in notes]
    if run.waivers is not None:
        lines += ["", f"## Waivers (`{run.waivers.path}`)", ""]
        lines += table(["#", "scope", "mode", "cites", "state"],
                       [[w.index, w.scope, w.mode, w.issue or w.reason, STATE_WORDS[w.state]]
                        for w in run.waivers.entries])
    lines += ["", "## Sources", ""]
    lines += table(["module", "sha256"], [[f"`{f['module']}` (oracle)", f"`{f['sha256']}`"] for f in data["oracles"]]
                   + [[f"`{f['source']}`", f"`{f.get('sha256')}`"] for f in data["implementations"]])
    return "\n".join(lines) + "\n"


def write(run: Run, json_path: Path | None, junit_path: Path | None, markdown_path: Path | None) -> list[str]:
    """Write the reports asked for; returns one line per report that could not be written."""
    from specverify.files.cases import write_atomic

    problems = []
    for path, render in ((json_path, lambda: json.dumps(to_json(run), indent=1).encode()),
                         (junit_path, lambda: b'<?xml version="1.0" encoding="utf-8"?>\n' + junit(run).tostring()),
                         (markdown_path, lambda: markdown(run).encode())):
        if path is None:
            continue
        try:
            data = render()
            write_atomic(Path(path), data if isinstance(data, bytes) else data.encode())
        except OSError as exc:
            problems.append(f"the report could not be written to {path}: {exc.strerror or exc}")
    return problems

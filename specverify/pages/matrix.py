"""The conformance matrix: several JSON reports of `specverify check` read side by side.

`load` reads one report (`reports.to_json`'s format) and refuses anything else with one line naming the
file and the rule (`ReportError`): not a regular file, over MAX_BYTES, nested deeper than
`bounded.MAX_NESTING`, not JSON, another format, a missing or mistyped field, a stage this suite does not
have. Every text taken from a report stays untrusted: the renderers (`specverify.pages.matrix_page`) escape it.

`build` makes one row per implementation (a vendor's run, an outside `module:function`, or one of the
suite's backends, on one device), named by its source (the vendor and its version, the `--impl` path and
its module's sha256, the backend), and one column per stage that any row has a verdict for, in registry
order. A cell is one category:

- `conforms`, `domain` (conforms within its declared domain: the verdict carries a `domain`),
- `contract` (fails the contract: the valid tier), `robustness` (fails the hazard tier), `property`
  (fails another level: wide-offsets, no-sync, launches, graph-replay, stream-order,
  cross-device),
- `crashed` (a failure of kind signal, exit or lost), `timeout` (of kind timeout),
- `incomplete` (nothing failed, but the target's time ran out before a level's examples were done),
- `unchecked` (the contract was not run, was skipped by a waiver, or the suite broke),
- `absent` (the vendor does not implement the stage), `missing` (the report does not cover it).

A mutation report (`specverify mutate --json`, `mutate_report.FORMAT`) read beside them adds to each cell
of the same implementation, device and stage a "mutants killed" figure (`Cell.mutants`); one that matches
no row is listed in `Matrix.unmatched`.

A failure an expect-fail waiver covers keeps its category; the cell names the waiver. Rows are compared
with the first report's: a report of another suite version, or with another sha256 for an oracle module
both list, is marked not comparable.
"""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from specverify import bounded
from specverify.pages.report_files import FORMAT
from specverify.records import backends, registry

MUTATION_FORMAT = "specverify-mutation/1"    # what `specverify mutate --json` writes (mutate_report.FORMAT)

MAX_BYTES = 64 * 2**20        # a nightly report of every stage is a few MiB
MAX_DETAIL = 4000             # characters of a failure's report shown on the page

CATEGORIES = {"conforms": "conforms", "domain": "conforms within its declared domain",
              "contract": "fails the contract", "robustness": "fails robustness",
              "property": "fails a device property", "crashed": "crashed", "timeout": "timed out",
              "incomplete": "incomplete", "unchecked": "not checked", "absent": "not implemented",
              "missing": "not in this report"}
CRASH_KINDS = ("signal", "exit", "lost")
FAILED_STATES = ("FAILS", "failed as expected")


class ReportError(ValueError):
    """A file that is not a specverify report: one line naming the file and the rule."""


# --- reading -------------------------------------------------------------------------------------------


def need(obj: dict, key: str, kinds: tuple, where: str, optional: bool = False):
    """obj[key], checked to be one of `kinds` (None allowed when `optional`)."""
    if not isinstance(obj, dict):
        raise ReportError(f"{where} must be an object")
    if key not in obj or obj[key] is None:
        if optional:
            return None
        raise ReportError(f"{where}.{key} is missing")
    value = obj[key]
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
        names = " or ".join({str: "a string", list: "a list", dict: "an object", int: "an integer"}[k]
                            for k in kinds)
        raise ReportError(f"{where}.{key} must be {names}")
    return value


def strings(obj: dict, key: str, where: str, optional: bool = False) -> list[str]:
    found = need(obj, key, (list,), where, optional) or []
    if not all(isinstance(s, str) for s in found):
        raise ReportError(f"{where}.{key} must be a list of strings")
    return found


def items(obj: dict, key: str, where: str) -> list[tuple[str, dict]]:
    found = need(obj, key, (list,), where)
    for i, item in enumerate(found):
        if not isinstance(item, dict):
            raise ReportError(f"{where}.{key}[{i}] must be an object")
    return [(f"{key}[{i}]", item) for i, item in enumerate(found)]


@dataclass
class Report:
    """What the matrix takes from one report file (checked on reading)."""
    path: Path
    suite: str
    profile: str
    seed: int
    started: str
    device: str
    hardware: str                                  # the GPU's name, or the CPU's architecture
    oracles: dict[str, str]                        # module -> sha256
    sources: dict[str, str]                        # an implementation's source ("module:function") -> its sha256
    vendor: dict | None
    verdicts: list[dict]
    outcomes: list[dict]


@dataclass
class Mutation:
    """What the matrix takes from one mutation report: its device and, per stage, the figure to show."""
    path: Path
    device: str
    stages: list[tuple[str, str, str]]             # (row name, stage, "mutants killed: ...")


def load(path: Path) -> Report | Mutation:
    """Read and check one report (a check report, or a mutation report); ReportError (one line naming
    `path`) when it is not one."""
    data = bounded.read_data(path, MAX_BYTES, "json", str(path), ReportError,
                             lambda exc: f"not a specverify report (not JSON: {exc})")
    try:
        if isinstance(data, dict) and data.get("format") == MUTATION_FORMAT:
            return mutation_parsed(path, data)
        return parsed(path, data)
    except ReportError as exc:
        raise ReportError(f"{path}: not a specverify report: {exc}") from None


def parsed(path: Path, data: object) -> Report:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReportError(f"its format is not {FORMAT!r}")
    stages = registry.all_stages()
    suite = need(data, "suite", (dict,), "report")
    machine = need(data, "machine", (dict,), "report")
    oracles = {need(o, "module", (str,), f"report.{w}"): need(o, "sha256", (str,), f"report.{w}")
               for w, o in items(data, "oracles", "report")}
    sources = {}
    for i, implementation in enumerate(need(data, "implementations", (list,), "report", optional=True) or []):
        where = f"report.implementations[{i}]"
        sha = need(implementation, "sha256", (str,), where, optional=True)
        sources[need(implementation, "source", (str,), where)] = sha or ""
    vendor = need(data, "vendor", (dict,), "report", optional=True)
    if vendor is not None:
        need(vendor, "name", (str,), "report.vendor")
        need(vendor, "distribution", (str,), "report.vendor", optional=True)
        for stage in strings(vendor, "not_implemented", "report.vendor"):
            if stage not in stages:
                raise ReportError(f"report.vendor.not_implemented: {stage!r} is not a stage of this suite")
    verdicts = []
    for w, v in items(data, "verdicts", "report"):
        where = f"report.{w}"
        for key in ("stage", "backend", "device", "source"):
            need(v, key, (str,), where)
        if v["stage"] not in stages:
            raise ReportError(f"{where}.stage: {v['stage']!r} is not a stage of this suite")
        strings(v, "domain", where, optional=True)
        strings(v, "unneeded", where, optional=True)
        need(v, "dialect", (str,), where, optional=True)
        for lw, level in items(v, "levels", where):
            for key in ("name", "check", "state", "headline"):
                need(level, key, (str,), f"{where}.{lw}")
            strings(level, "case_ids", f"{where}.{lw}")
            strings(level, "waivers", f"{where}.{lw}")
        verdicts.append(v)
    outcomes = []
    for w, o in items(data, "outcomes", "report"):
        where = f"report.{w}"
        for key in ("stage", "backend", "device", "source", "check", "status", "kind", "headline", "report"):
            need(o, key, (str,), where)
        for fw, f in items(o, "failures", where):
            for key in ("tier", "status", "headline"):
                need(f, key, (str,), f"{where}.{fw}")
            for key in ("case", "replay", "waiver"):
                need(f, key, (str,), f"{where}.{fw}", optional=True)
        outcomes.append(o)
    return Report(path, need(suite, "version", (str,), "report.suite"), need(data, "profile", (str,), "report"),
                  need(data, "seed", (int,), "report"), need(data, "started", (str,), "report"),
                  need(machine, "device", (str,), "report.machine"),
                  machine.get("gpu") or need(machine, "machine", (str,), "report.machine"),
                  oracles, sources, vendor, verdicts, outcomes)


def mutation_parsed(path: Path, data: dict) -> Mutation:
    from specverify.mutation.mutation_run import \
        OUTCOMES  # the runner's outcome names (imported here: it loads the runner)

    stages = registry.all_stages()
    found = []
    for w, entry in items(data, "stages", "report"):
        where = f"report.{w}"
        stage, impl = need(entry, "stage", (str,), where), need(entry, "impl", (str,), where)
        if stage not in stages:
            raise ReportError(f"{where}.stage: {stage!r} is not a stage of this suite")
        vendor = need(entry, "vendor", (str,), where, optional=True)
        baseline = need(entry, "baseline", (str,), where)
        counts = need(entry, "counts", (dict,), where)
        for key in (*OUTCOMES, "equivalent"):
            need(counts, key, (int,), f"{where}.counts")
        found.append((vendor or implementation_name(impl), stage, mutation_figure(baseline, counts)))
    return Mutation(path, need(data, "device", (str,), "report"), found)


def implementation_name(impl: str) -> str:
    """The row name of an implementation a mutation report names by import path (as `row_key` names it)."""
    for backend in ("torch", "triton"):
        if impl.startswith(f"specverify.kernels.{backend}."):
            return f"specverify {backend}"
    return impl


def mutation_figure(baseline: str, counts: dict[str, int]) -> str:
    from specverify.mutation.mutation_run import APART, kill_rates, kills_of

    if baseline != "passed":
        return "mutants: not run (the unmutated implementation fails)"
    (kills, total), (rate, killed) = kills_of(counts), kill_rates(counts)
    rate = f" ({100 * rate:.0f}%, killed alone {100 * killed:.0f}%)" if total else ""
    apart = sum(counts[o] for o in APART)
    return (f"mutants killed: {kills} of {total}{rate}" + (f"; {counts['equivalent']} judged equivalent"
                                                           if counts["equivalent"] else "")
            + (f"; {apart} counted apart" if apart else ""))


# --- the matrix ----------------------------------------------------------------------------------------


@dataclass
class Failure:
    """One failure behind a cell: the level, the case and how to replay it, what differed first."""
    level: str
    case: str
    headline: str
    replay: str
    waiver: str
    story: str                                      # the failure's report: first difference, inputs

    @property
    def anywhere(self) -> bool:
        """Whether the replay command runs from any folder: its case path is absolute (older reports give
        it relative to the folder the check ran in)."""
        try:
            words = shlex.split(self.replay)
        except ValueError:
            return False
        return len(words) > 2 and words[:2] == ["specverify", "replay"] and os.path.isabs(words[2])


@dataclass
class Cell:
    category: str
    detail: str = ""                                # the first failure's headline, or why not checked
    domain: list[str] = field(default_factory=list)
    unneeded: list[str] = field(default_factory=list)   # declared restrictions whose excluded draws pass
    dialect: str = ""
    waivers: list[str] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    anchor: str = ""                                # the id of the failure's detail on the page
    mutants: str = ""                               # a mutation report's figure for this cell

    @property
    def label(self) -> str:
        return CATEGORIES[self.category]


@dataclass
class Row:
    name: str
    version: str
    device: str
    report: Report
    cells: dict[str, Cell]
    comparable: bool = True
    differs: list[str] = field(default_factory=list)   # why not comparable with the first report


@dataclass
class Matrix:
    rows: list[Row]
    stages: list[str]                               # the columns
    unchecked: list[str]                            # stages of the registry no row has a verdict for
    unmatched: list[str] = field(default_factory=list)   # mutation figures no row and column take

    @property
    def comparable(self) -> bool:
        return all(r.comparable for r in self.rows)


def short(headline: str, verdict: dict) -> str:
    """A headline without its leading target label (as `conformance.short`)."""
    label = f"{verdict['stage']} on {verdict['backend']}/{verdict['device']}"
    rest = headline[len(label):] if headline.startswith(label) else headline
    return rest.lstrip(":, ").strip()


def failures_of(verdict: dict, outcomes: list[dict]) -> tuple[list[Failure], dict[str, str]]:
    """The failures of a verdict's target, and the failure kind found for each tier."""
    levels = {lv["check"]: lv["name"] for lv in verdict["levels"]}
    found, kinds = [], {}
    for o in outcomes:
        if any(o[k] != verdict[k] for k in ("stage", "backend", "device", "source")) or not o["failures"] \
                or (o.get("dialect") or "") != (verdict.get("dialect") or ""):
            continue
        tier = o["check"] if o["check"] != "corpus" else o["failures"][0]["tier"]
        kinds.setdefault(tier, o["kind"])
        story = o["report"] if len(o["report"]) <= MAX_DETAIL else o["report"][:MAX_DETAIL] + " ... (cut)"
        for i, f in enumerate(o["failures"]):
            found.append(Failure(levels.get(f["tier"], f["tier"]), f["case"] or "", short(f["headline"], verdict),
                                 f["replay"] or "", f["waiver"] or "" if f["status"] == "xfailed" else "",
                                 story if i == 0 else ""))
    return found, kinds


def cell_of(verdict: dict, outcomes: list[dict]) -> Cell:
    levels = {lv["name"]: lv for lv in verdict["levels"]}
    failures, kinds = failures_of(verdict, outcomes)
    failed = [lv for lv in verdict["levels"] if lv["state"] in FAILED_STATES]
    cell = Cell("conforms", domain=list(verdict.get("domain") or []), unneeded=list(verdict.get("unneeded") or []),
                dialect=verdict.get("dialect") or "",
                failures=failures, waivers=sorted({w for lv in failed for w in lv["waivers"]}))
    contract = levels.get("contract", {"state": "not run", "headline": ""})
    broke = next((lv for lv in verdict["levels"] if lv["state"] == "broke"), None)
    crashed = [lv for lv in failed if kinds.get(lv["check"]) in CRASH_KINDS]
    timed_out = [lv for lv in failed if kinds.get(lv["check"]) == "timeout"]
    incomplete = [lv for lv in verdict["levels"] if lv["state"] == "incomplete"]
    first = lambda found: f"{found[0]['name']}: {found[0]['headline']}"  # noqa: E731
    if broke is not None:
        cell.category, cell.detail = "unchecked", f"the suite broke ({broke['name']}): {broke['headline']}"
    elif crashed or timed_out:
        cell.category, cell.detail = ("crashed", first(crashed)) if crashed else ("timeout", first(timed_out))
    elif contract["state"] in FAILED_STATES:
        cell.category, cell.detail = "contract", contract["headline"]
    elif contract["state"] not in ("passes", "incomplete"):
        cell.category, cell.detail = "unchecked", f"contract {contract['state']}"
    elif failed:
        robustness = [lv for lv in failed if lv["name"] == "robustness"]
        cell.category = "robustness" if robustness else "property"
        cell.detail = robustness[0]["headline"] if robustness else first(failed)
    elif incomplete:
        cell.category, cell.detail = "incomplete", "; ".join(f"{lv['name']}: {lv['headline']}" for lv in incomplete)
    elif cell.domain:
        cell.category = "domain"
    return cell


def row_key(report: Report, verdict: dict) -> tuple[str, str]:
    """(implementation, device): a vendor's name, an outside module, or one of the suite's backends (its
    kernels of a rule dialect are another implementation: a row of their own)."""
    if report.vendor is not None:
        return report.vendor["name"], verdict["device"]
    if backends.outside(verdict["backend"]):
        return verdict["source"], verdict["device"]
    dialect = verdict.get("dialect") or ""
    return f"specverify {verdict['backend']}" + (f", dialect {dialect}" if dialect else ""), verdict["device"]


def version_of(report: Report, verdict: dict) -> str:
    """What a row says of its version: the vendor's distribution, an outside module's sha256, or ours."""
    if report.vendor is not None:
        return report.vendor.get("distribution") or "version not declared"
    if not backends.outside(verdict["backend"]):
        return "the suite's own kernels"
    sha = report.sources.get(verdict["source"])
    return f"module sha256 {sha[:12]}, no version declared" if sha else "version not declared"


def differences(report: Report, first: Report) -> list[str]:
    """Why `report` cannot be compared with `first`: another suite version, another oracle."""
    found = [f"specverify {report.suite}, not {first.suite}"] if report.suite != first.suite else []
    found += [f"oracle {module} {sha[:12]}, not {first.oracles[module][:12]}"
              for module, sha in sorted(report.oracles.items())
              if module in first.oracles and first.oracles[module] != sha]
    return found


def build(given: list[Report | Mutation]) -> Matrix:
    """The matrix of the reports, rows in the order given (a report's own rows in its order), with the
    mutation reports' figures in the cells they name."""
    found = [r for r in given if isinstance(r, Report)]
    rows: list[Row] = []
    for report in found:
        mine: dict[tuple, Row] = {}
        for verdict in report.verdicts:
            name, device = row_key(report, verdict)
            row = mine.setdefault((name, device), Row(name, version_of(report, verdict),
                                                      f"{device} ({report.hardware})", report, {}))
            row.cells[verdict["stage"]] = cell_of(verdict, report.outcomes)
        if report.vendor is not None:
            if not mine:   # a vendor run that checked nothing still has its row
                mine[(report.vendor["name"], report.device)] = Row(
                    report.vendor["name"], report.vendor.get("distribution") or "version not declared",
                    f"{report.device} ({report.hardware})", report, {})
            for row in mine.values():
                for stage in report.vendor["not_implemented"]:
                    row.cells.setdefault(stage, Cell("absent"))
        rows += mine.values()
    checked = {s for row in rows for s, c in row.cells.items() if c.category != "absent"}
    order = list(registry.all_stages())
    stages = [s for s in order if s in checked]
    for i, row in enumerate(rows):
        row.differs = differences(row.report, found[0]) if found else []
        row.comparable = not row.differs
        for j, stage in enumerate(stages):
            cell = row.cells.setdefault(stage, Cell("missing"))
            if cell.failures:
                cell.anchor = f"d{i}-{j}"
    unmatched = []
    for mutation in (r for r in given if isinstance(r, Mutation)):
        for name, stage, figure in mutation.stages:
            cells = [row.cells[stage] for row in rows if row.name == name and stage in stages
                     and row.device.startswith(f"{mutation.device} (")]
            for cell in cells:
                cell.mutants = figure
            if not cells:
                unmatched.append(f"{name} on {mutation.device}: {stage}: {figure} ({mutation.path})")
    return Matrix(rows, stages, [s for s in order if s not in checked], unmatched)

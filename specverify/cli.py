"""The command line: `specverify list | check | replay | show | bench | corpus | matrix | mutate`.

Exit status: 0 when everything checked passed (failures every one covered by an expect-fail waiver
included), 1 on any other failure or a waiver that is no longer needed, 2 on bad usage (a bad waiver
file, a vendor that resolves to nothing, an empty --impl or --vendor, a --cases path that is a file, a
time limit that is not finite or over MAX_SECONDS), an unreadable or damaged case or report (`matrix`), a
report or matrix that could not be written, 3 when nothing was checked (every target skipped).
`mutate`: 0 when every mutant was killed, timed out, crashed, was counted apart (does not import or
compile) or is judged equivalent; 1 when one survived that no equivalence entry names, a stage's baseline
fails (it is not mutated) or a mutant's check broke; 2 on bad usage; 3 when no mutant was run.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
import warnings
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

import specverify
from specverify import backends, cases, dialects, domain, env, registry, reports, session, vendors, waivers
from specverify.checks import CHECKS, Outcome
from specverify.conformance import FAILED, NOTHING_CHECKED, PASSED, Run, exit_status, not_asked, verdicts
from specverify.harness import Failure, OracleError
from specverify.profiles import PROFILES
from specverify.report import coverage_tables, failure_report, replay_command, summary_table

USAGE = 2   # bad usage, an unreadable case, a report not written (the others: specverify.conformance)
MAX_SECONDS = 7 * 24 * 3600.0   # the longest time limit taken (a week): larger values overflow timers

console = Console(highlight=False, soft_wrap=True, emoji=False)   # "hostile2:OK" stays text
if not console.is_terminal:  # logs and pipes: wide enough that tables never fold a stage name
    console.width = max(console.width, 132)


class UsageError(Exception):
    """Bad usage: reported in one line, exit status 2."""


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="specverify", description=__doc__.splitlines()[0])
    top.add_argument("--version", action="version", version=f"specverify {specverify.__version__}")
    sub = top.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="stages x backends x devices, and what runs here")

    chk = sub.add_parser("check", help="search for inputs where an implementation differs from the oracle")
    chk.add_argument("--stage", action="append", metavar="NAME", help="stage name or glob (repeatable)")
    chk.add_argument("--backend", action="append", choices=backends.BUILT_IN, help="(repeatable)")
    chk.add_argument("--device", choices=backends.DEVICES)
    chk.add_argument("--examples", type=positive, metavar="N", help="valid-tier examples per stage and backend")
    chk.add_argument("--seed", type=int, metavar="S", help="run seed (default: 0, or fresh for nightly)")
    chk.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    chk.add_argument("--impl", type=named, metavar="MODULE:FUNCTION",
                     help="check an outside implementation (one --stage)")
    chk.add_argument("--vendor", type=named, metavar="NAME",
                     help="check every stage a vendor implements (an entry point of group specverify.vendors, "
                          "or MODULE[:ATTR])")
    chk.add_argument("--waivers", type=Path, metavar="PATH", help="the vendor's waiver file (TOML)")
    chk.add_argument("--dialect", metavar="NAME", help="judge by this rule dialect of the stage ('' the record's "
                                                       "rule; default: our backends under every rule they follow)")
    chk.add_argument("--declare", type=Path, metavar="PATH",
                     help="what the --impl declares (TOML: domain, dialect, validates; see specverify.domain)")
    chk.add_argument("--check", action="append", choices=list(CHECKS), metavar="CHECK",
                     help=f"only these checks (repeatable; {', '.join(CHECKS)})")
    chk.add_argument("--first-failure", action="store_true",
                     help="stop a target's checks at its first failing one (mutation runs use it)")
    chk.add_argument("--cases", type=Path, default=None, metavar="DIR",
                     help="your own case folder, replayed (read only) by the corpus check after the suite's")
    chk.add_argument("--findings", type=folder, default=None, metavar="DIR",
                     help=f"where the cases this run finds go (default ${cases.FINDINGS_ENV}, else "
                          f"./{cases.FINDINGS_DEFAULT}; never the suite's corpus)")
    chk.add_argument("--report", "--json", dest="json", type=Path, metavar="PATH", help="write the JSON report")
    chk.add_argument("--junit", type=Path, metavar="PATH", help="write a JUnit XML report")
    chk.add_argument("--markdown", type=Path, metavar="PATH", help="write a Markdown report")
    chk.add_argument("--coverage", action="store_true", help="print what the draws covered, per stage")
    chk.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                     help="run implementations in worker processes (default: the profile's; always for --impl)")
    chk.add_argument("--timeout", type=seconds, metavar="S",
                     help=f"time limit per call, and for importing an outside implementation, at most "
                          f"{MAX_SECONDS:g} s (a week; default: the profile's)")
    chk.add_argument("--memory", type=memory_size, metavar="SIZE",
                     help="address space a worker on the CPU may map, such as 4G or 512M (default: the profile's, 8G)")
    chk.add_argument("--devices", metavar="all|I,J|cpu:N",
                     help="spread the targets over worker processes, one pinned to each GPU (all, or indices "
                          "such as 0,1; repeat one for two workers on it), or N unpinned workers (cpu:N)")
    chk.add_argument("--ray", metavar="auto|ADDRESS",
                     help="spread the targets over a Ray cluster, one task per GPU (CPU tasks without GPUs); "
                          "needs pip install specverify[ray]")
    chk.add_argument("--target-timeout", type=seconds, metavar="S",
                     help=f"time limit per target, all its checks, at most {MAX_SECONDS:g} s (default: the profile's)")

    bch = sub.add_parser("bench", help="time every stage's implementations on its benchmark input (checked first)")
    bch.add_argument("--stage", action="append", metavar="NAME", help="stage name or glob (repeatable)")
    bch.add_argument("--backend", action="append", choices=[b for b in backends.BUILT_IN if b != "oracle"],
                     help="our backends to bench (repeatable; default: every one the stage has)")
    bch.add_argument("--batch", nargs="+", type=int_list, metavar="B", help="batch sizes (default 1 16 64 256 512 1024)")
    bch.add_argument("--vocab", nargs="+", type=int_list, metavar="V",
                     help="vocabularies of the stages that read probabilities (default 32000 151936); the "
                          "others take the last")
    bch.add_argument("--device", choices=backends.DEVICES, help="default: cuda when present, else cpu")
    bch.add_argument("--calls", type=positive, default=20, metavar="N", help="calls per graph and per timed loop")
    bch.add_argument("--replays", type=positive, default=5, metavar="N", help="graph replays per measurement")
    bch.add_argument("--repeat", type=positive, default=5, metavar="N", help="host-timed loops per measurement")
    bch.add_argument("--impl", type=named, metavar="MODULE:FUNCTION",
                     help="bench an outside implementation beside ours (one --stage)")
    bch.add_argument("--vendor", type=named, metavar="NAME", help="bench every stage a vendor implements beside ours")
    bch.add_argument("--out", type=Path, metavar="DIR", help="where results.json and the PNGs go (default bench/results)")
    bch.add_argument("--json", action=argparse.BooleanOptionalAction, default=True, help="write results.json")
    bch.add_argument("--plots", action=argparse.BooleanOptionalAction, default=True, help="draw PNGs (matplotlib)")
    bch.add_argument("--plot-from", type=Path, metavar="PATH", help="only draw the PNGs of a results.json")
    bch.add_argument("--seed", type=int, default=0, metavar="S", help="seed of the benchmark inputs")
    bch.add_argument("--timeout", type=seconds, default=600.0, metavar="S",
                     help=f"time limit of an outside call, at most {MAX_SECONDS:g} s")

    shw = sub.add_parser("show", help="print stage contracts: fields, semantics, tiers, a worked example")
    shw.add_argument("stage", nargs="*", metavar="STAGE",
                     help="names or globs; none: every stage and the shared conventions")

    cor = sub.add_parser("corpus", help="the suite's regression corpus: add case files to it, or list it")
    actions = cor.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="validate case files and copy them into the corpus (by content hash)")
    add.add_argument("case", nargs="+", type=Path, metavar="CASE", help="case files (.npz)")
    add.add_argument("--to", type=Path, metavar="DIR", help="another corpus folder (default: the suite's, "
                                                            "in a checkout)")
    lst = actions.add_parser("list", help="the corpus's cases by stage, one line each")
    lst.add_argument("--from", dest="source", type=Path, metavar="DIR", help="another corpus folder")

    rep = sub.add_parser("replay", help="re-run a case file on every backend (or one) and print the diff")
    rep.add_argument("path", type=Path)
    rep.add_argument("--backend", choices=backends.BUILT_IN)
    rep.add_argument("--device", choices=backends.DEVICES)
    rep.add_argument("--impl", type=named, metavar="MODULE:FUNCTION")
    rep.add_argument("--dialect", metavar="NAME", help="judge by this rule dialect ('' the record's rule)")
    rep.add_argument("--timeout", type=seconds, metavar="S",
                     help=f"time limit of an --impl call, at most {MAX_SECONDS:g} s (default 120)")

    mtx = sub.add_parser("matrix", help="several JSON reports side by side: an HTML page and a Markdown twin")
    mtx.add_argument("report", nargs="+", type=Path, metavar="REPORT.json", help="reports of specverify check, and of specverify mutate (a "
                                                                       "'mutants killed' figure in their cells)")
    mtx.add_argument("--out", type=folder, required=True, metavar="DIR",
                     help="where matrix.html and matrix.md are written")
    mut = sub.add_parser("mutate", help="plant first-order bugs (mutants) in an implementation's own source and "
                                        "report which the checks catch")
    mut.add_argument("--stage", action="append", metavar="NAME", help="stage name or glob (repeatable; one with --impl)")
    mut.add_argument("--impl", type=named, metavar="MODULE:FUNCTION", help="the implementation to mutate (one --stage)")
    mut.add_argument("--vendor", type=named, metavar="NAME", help="mutate every stage a vendor implements")
    mut.add_argument("--backend", choices=[b for b in backends.BUILT_IN if b != "oracle"],
                     help="mutate our own kernels of this backend, every stage --stage selects (the nightly gate)")
    mut.add_argument("--device", choices=backends.DEVICES)
    mut.add_argument("--profile", choices=sorted(PROFILES), default="ci", help="the checks' budget (default ci)")
    mut.add_argument("--examples", type=positive, metavar="N", help="valid-tier examples per check (default: the profile's)")
    mut.add_argument("--seed", type=int, default=0, metavar="S", help="run seed of every check, and of --sample")
    mut.add_argument("--jobs", type=positive, default=1, metavar="N", help="mutants checked at once (default 1)")
    mut.add_argument("--sample", type=positive, metavar="N", help="check N of the mutants, chosen by --seed")
    mut.add_argument("--operator", action="append", metavar="OP", help="only mutants of this operator (repeatable)")
    mut.add_argument("--list", action="store_true", help="list the mutants and run nothing")
    mut.add_argument("--equivalent", type=Path, metavar="FILE",
                     help="TOML of [[mutant]] id, reason (and stage): survivors judged equivalent")
    mut.add_argument("--deadline", type=seconds, metavar="S",
                     help="wall time per mutant (default: 4 x the baseline's, plus 30 s)")
    mut.add_argument("--timeout", type=seconds, metavar="S", help="time limit per call (default: the profile's)")
    mut.add_argument("--waivers", type=Path, metavar="PATH", help="the vendor's waiver file, passed to every check")
    mut.add_argument("--cases", type=Path, metavar="DIR", help="the vendor's case folder, replayed by every check")
    mut.add_argument("--json", type=Path, metavar="PATH", help="write the JSON report")
    mut.add_argument("--markdown", type=Path, metavar="PATH", help="write a Markdown report")
    mut.add_argument("--out", type=folder, default=Path("specverify-mutants"), metavar="DIR",
                     help="where the killing cases are copied (default ./specverify-mutants)")
    return top


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def int_list(text: str) -> list[int]:
    """ "16" or "1,16,64": positive integers."""
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers (1,16,64 or 1 16 64)") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every value must be at least 1")
    return values


def memory_size(text: str) -> int:
    """ "8G", "512M", "1048576": bytes, at least 64 MiB."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    number, unit = (text[:-1], units[text[-1].upper()]) if text and text[-1].upper() in units else (text, 1)
    try:
        value = int(float(number) * unit)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a size such as 4G or 512M") from None
    if value < 64 << 20:
        raise argparse.ArgumentTypeError(f"{text!r}: at least 64M")
    return value


def seconds(text: str) -> float:
    """A time limit: a finite number of seconds in (0, MAX_SECONDS]."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds") from None
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a positive number of seconds, at most {MAX_SECONDS:g}")
    return value


def named(text: str) -> str:
    """A name (--impl, --vendor): not empty."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def folder(text: str) -> Path:
    """--findings, matrix --out: a folder, or a path that does not exist yet (it is made when a case is saved)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: not a folder")
    return path


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if hasattr(sys.stdout, "reconfigure"):   # a killed run still shows what it did, in a pipe too
        sys.stdout.reconfigure(line_buffering=True)
    try:
        with warnings.catch_warnings():   # kernels' and interpreters' warnings are not the run's output
            warnings.simplefilter("ignore")
            return {"list": cmd_list, "check": cmd_check, "replay": cmd_replay, "show": cmd_show,
                    "bench": cmd_bench, "corpus": cmd_corpus, "matrix": cmd_matrix,
                    "mutate": cmd_mutate}[args.command](args)
    except (UsageError, LookupError, cases.CaseError, waivers.WaiverError, session.PlanError) as exc:
        console.print(f"specverify {args.command}: error: {exc}", markup=False)
        return USAGE


def cmd_list(args) -> int:
    env.prepare()
    columns = [("oracle", "cpu"), ("numpy", "cpu"), ("torch", "cpu"), ("torch", "cuda"),
               ("triton", "cpu"), ("triton", "cuda")]
    table = Table("stage", *[f"{b}/{d}" for b, d in columns], title="stages x backends x devices")
    reasons: dict[str, str] = {}
    for stage in registry.all_stages().values():
        cells = []
        for backend, device in columns:
            if backend not in backends.stage_backends(stage):
                cells.append("")
                continue
            why = backends.unavailable(backend, device)
            if why is None:
                cells.append("yes")
            else:
                key = reasons.setdefault(why, f"[{len(reasons) + 1}]")
                cells.append(f"no {key}")
        table.add_row(stage.name, *cells)
    console.print(table)
    for why, key in reasons.items():
        console.print(f"{key} {why}", markup=False)
    return PASSED


def impl_device(args) -> str:
    """Where an outside implementation runs: --device (which must be here), else CUDA when present."""
    device = args.device or ("cuda" if env.cuda_available() else "cpu")
    why = backends.unavailable("torch", device)
    if why:
        raise UsageError(f"--device {device}: {why}")
    return device


def resolve_targets(args, vendor: vendors.Vendor | None = None) -> tuple[list, list[Outcome]]:
    if args.declare and not args.impl:
        raise UsageError("--declare describes an --impl: give one (a vendor declares in its mapping)")
    stages = registry.select(args.stage)
    if args.dialect is not None:
        if vendor is not None:
            raise UsageError("--dialect and --vendor exclude each other (a vendor's declaration names its dialects)")
        having = [s for s in stages if dialects.problem(s, args.dialect) is None]
        if not having:
            raise UsageError(dialects.problem(stages[0], args.dialect))
        stages = having
    if vendor is not None:
        chosen = {s.name for s in stages}
        device = impl_device(args)
        targets = [domain.declared(backends.target(registry.all_stages()[name], "impl", device, source),
                                   vendor.declarations.get(name, {}), f"vendor {vendor.name}")
                   for name, source in vendor.implementations.items() if name in chosen]
        if not targets:
            raise UsageError(f"--stage selects no stage that vendor {vendor.name} implements "
                             f"({', '.join(vendor.implementations)})")
        return targets, []
    if args.impl:
        if len(stages) != 1:
            raise UsageError(f"--impl checks one stage; --stage selects {len(stages)}")
        if args.backend:
            raise UsageError("--impl and --backend exclude each other")
        chosen = backends.target(stages[0], "impl", impl_device(args), args.impl, args.dialect or "")
        if args.declare:
            chosen = domain.declared(chosen, domain.load(args.declare), f"--declare {args.declare}")
        return [chosen], []
    if args.device:
        why = backends.unavailable("torch", args.device)
        if why:
            raise UsageError(f"--device {args.device}: {why}")
    runnable, skipped = [], []
    for stage, backend, device, why in backends.matrix(stages, args.backend, [args.device] if args.device else None,
                                                       args.dialect):
        if why is None:
            runnable.append(backends.target(stage, backend, device))
        elif args.backend or args.device:  # asked for: say why it does not run
            skipped.append(Outcome(stage.name, backend, device, "-", status="skipped", headline=why,
                                   dialect=stage.dialect))
    if not runnable and not skipped:
        raise UsageError("nothing to check: no selected stage has the selected backend")
    return runnable, skipped


class ProgressListener(session.Listener):
    """A live display: every (target, check) pair, and the examples of the check each lane is running."""

    def __init__(self, progress: Progress, total: int):
        self.bar = progress
        self.overall = progress.add_task("checks", total=total)
        self.tasks: dict[str, tuple[tuple[str, str], object]] = {}    # lane -> ((target, check), task)

    def check_started(self, target, check, planned, lane="") -> None:
        self.drop(lane)
        where = f"[{lane}] " if lane else ""
        self.tasks[lane] = ((target.label, check), self.bar.add_task(f"  {where}{target.label}: {check}",
                                                                      total=planned))

    def progress(self, done: int, lane="") -> None:
        if lane in self.tasks:
            self.bar.update(self.tasks[lane][1], completed=done)

    def drop(self, lane: str) -> None:
        if lane in self.tasks:
            self.bar.remove_task(self.tasks.pop(lane)[1])

    def check_done(self, target, outcome) -> None:
        for lane, (key, _) in list(self.tasks.items()):
            if key == (target.label, outcome.check):
                self.drop(lane)
        self.bar.advance(self.overall)
        mark = {"passed": "ok", "failed": "FAILED", "error": "ERROR", "skipped": "skip", "xfailed": "xfail",
                "waived": "waived"}[outcome.status]
        where = f"  [{outcome.worker}]" if outcome.worker else ""
        self.bar.console.print(f"{mark:6} {target.label}: {outcome.check}  ({outcome.examples} examples, "
                               f"{outcome.seconds:.1f}s){where}", markup=False)


def check_plan(args, waiver_set=None) -> session.RunPlan:
    """The run plan of `specverify check` (session.PlanError for a findings folder in the suite's corpus)."""
    return session.RunPlan.build(args.profile, seed=args.seed, examples=args.examples, isolate=args.isolate,
                                 timeout=args.timeout, target_timeout=args.target_timeout, findings=args.findings,
                                 cases=args.cases, checks=args.check, waivers=waiver_set, memory=args.memory,
                                 first_failure=args.first_failure)


def cmd_check(args) -> int:
    waiver_set = waivers.load(args.waivers) if args.waivers else None
    if args.vendor and (args.impl or args.backend):
        raise UsageError("--vendor excludes --impl and --backend")
    plan = check_plan(args, waiver_set)
    profile = plan.profile
    vendor = vendors.resolve(args.vendor, list(registry.all_stages()), plan.per_call or vendors.READ_TIMEOUT) \
        if args.vendor else None
    targets, outcomes = resolve_targets(args, vendor)
    total = session.planned(targets, plan)
    outside = bool(args.impl or vendor)
    mode = ("isolated" if plan.isolated or outside else "in process") + spread(args, targets, plan)
    if vendor is not None:
        console.print(f"vendor {vendor.name}: {vendor.declaration}"
                      f"{f' ({vendor.distribution})' if vendor.distribution else ''}: "
                      f"{len(vendor.implementations)} stage(s) implemented", markup=False)
    console.print(f"specverify check: profile {profile.name}, seed {plan.run_seed}, {len(targets)} target(s), "
                  f"{total} check(s), {mode}, findings to {plan.findings}/", markup=False)
    interrupted = None
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress, stopped_by_signals():
        try:
            outcomes += run_targets(targets, plan, args, ProgressListener(progress, total))
        except session.Interrupted as stop:
            outcomes += stop.outcomes
            interrupted = stop.why
        except session.ImplementationNotFound as exc:
            raise UsageError(f"--impl {exc}") from None
        except ValueError as exc:     # shard.DevicesError, cluster.RayError: --devices or --ray
            if type(exc).__name__ not in ("DevicesError", "RayError"):
                raise
            raise UsageError(str(exc)) from None
    implemented = set(vendor.implementations) if vendor is not None else None
    if waiver_set is not None:
        waiver_set.finish(set(registry.all_stages()), implemented)
    run = Run(outcomes, profile.name, plan.run_seed, targets[0].device if targets else (args.device or "cpu"),
              vendor, waiver_set, [s for s in registry.all_stages() if implemented is not None
                                   and s not in implemented], str(plan.findings))
    run.exit_status = FAILED if interrupted else exit_status(outcomes, waiver_set)
    run.interrupted = interrupted
    print_run(run, args, outside)
    problems = reports.write(run, args.json, args.junit, args.markdown)
    for line in problems:
        console.print(f"specverify check: error: {line}", markup=False)
    return run.exit_status if run.exit_status == FAILED or not problems else USAGE


@contextmanager
def stopped_by_signals():
    """SIGTERM and Ctrl-C end the run with the report of what finished (session.Interrupted), in the main
    thread; the previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(number, frame):
        raise session.Interrupted(signal.Signals(number).name)

    previous = {number: signal.signal(number, stop) for number in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def spread(args, targets: list, plan: session.RunPlan) -> str:
    """How the run is spread, for its first line; bad --devices or --ray values are usage errors here."""
    if args.devices and args.ray:
        raise UsageError("--devices and --ray exclude each other")
    if args.ray:
        return f", Ray ({args.ray})"
    from specverify import shard

    try:
        chosen = shard.spread(args.devices, targets, plan)
    except shard.DevicesError as exc:
        raise UsageError(str(exc)) from None
    return f", {len(chosen)} worker(s): {', '.join(lane.name for lane in chosen)}" if chosen else ""


def run_targets(targets: list, plan: session.RunPlan, args, listener) -> list[Outcome]:
    """Over Ray (--ray), or over local workers (--devices; by default one per core where every target runs
    on the CPU) or in this process (`shard.run`)."""
    if args.ray:
        from specverify import cluster

        return cluster.run(targets, plan, args.ray, listener)
    from specverify import shard

    return shard.run(targets, plan, args.devices, listener)


def print_run(run: Run, args, outside: bool) -> None:
    """The summary table, every failure's report, and for outside implementations the verdict by level,
    the stages not implemented and the waivers' states."""
    console.print(summary_table(run.outcomes))
    for o in run.outcomes:
        if o.status in ("failed", "error"):
            console.print(o.report or o.headline, markup=False)
        for note in o.notes:
            console.print(f"note: {o.stage} {o.check}: {note}", markup=False)
    if args.coverage:
        for table in coverage_tables(run.outcomes):
            console.print(table)
    if outside:
        console.print("verdict by level (contract = valid tier, robustness = hazard tier, arguments = invalid tier):",
                      markup=False)
        found = verdicts(run.outcomes)
        for line in [v.line() for v in found] + not_asked(found):
            console.print(f"  {line}", markup=False)
    if run.not_implemented:
        console.print(f"not implemented by {run.vendor.name} ({len(run.not_implemented)}): "
                      f"{', '.join(run.not_implemented)}", markup=False)
    if run.waivers is not None:
        console.print(f"waivers ({run.waivers.path}):", markup=False)
        for w in run.waivers.entries:
            console.print(f"  {w.label} [{w.mode}] {w.scope}: {reports.STATE_WORDS[w.state]}", markup=False)
    if run.exit_status == NOTHING_CHECKED:
        console.print("specverify check: nothing was checked: every target was skipped", markup=False)
    if run.interrupted:
        console.print(f"specverify check: interrupted by {run.interrupted}: the reports hold the "
                      f"{len(run.outcomes)} check(s) that finished", markup=False)


def cmd_replay(args) -> int:
    stage_name, example = cases.load(args.path)
    stages = registry.all_stages()
    if stage_name not in stages:
        raise UsageError(f"{args.path}: stage {stage_name!r} is not known to this version of specverify")
    stage = stages[stage_name]
    if args.dialect and dialects.problem(stage, args.dialect):
        raise UsageError(dialects.problem(stage, args.dialect))
    if args.impl:
        targets = [backends.target(stage, "impl", impl_device(args), args.impl, args.dialect or "")]
    else:
        targets = [backends.target(view, b, d) for view, b, d, why in
                   backends.matrix([stage], [args.backend] if args.backend else None,
                                   [args.device] if args.device else None, args.dialect) if why is None]
        if not targets:
            raise UsageError(f"no backend of {stage_name} runs here with the options given")
    console.print(f"replay {args.path}: {stage_name}, {example.tier} tier", markup=False)
    outside = sorted({f.get("source", "?") for f in cases.failures_of(args.path) if f.get("backend") == "impl"})
    if outside and not args.impl:
        console.print(f"  note: this case failed for an outside implementation ({', '.join(outside)}); "
                      f"replay it with --impl {outside[0]}. Our own backends:", markup=False)
    across = any(f.get("check") == "cross-device" for f in cases.failures_of(args.path))
    plan = session.RunPlan.build(timeout=args.timeout or session.REPLAY_TIMEOUT, keep_findings=False)
    failed = False
    for target in targets:
        devices = across and CHECKS["cross-device"].applies(target) is None
        if across and not devices:
            console.print(f"  note: this case failed the cross-device check; on {target.backend.name}/"
                          f"{target.device}: {CHECKS['cross-device'].applies(target)}", markup=False)
        try:
            session.verify_example(target, example, plan, devices)
            under = f" under {dialects.words(target.stage, target.dialect)}" if target.dialect else ""
            console.print(f"  passed  {target.backend.name}/{target.device}{under}", markup=False)
        except (Failure, OracleError) as exc:
            failed = True
            console.print(failure_report(target, example, exc, replay_command(args.path, target)), markup=False)
    return FAILED if failed else PASSED


def cmd_corpus(args) -> int:
    """`corpus add`: copy validated case files into a corpus folder; `corpus list`: its cases, one line each."""
    from specverify import corpus_admin

    if args.action == "list":
        folder = args.source or corpus_admin.suite_corpus()
        if folder is None or not Path(folder).is_dir():
            raise UsageError(f"--from {folder}: not a folder" if args.source
                             else "this installation has no suite corpus")
        found = corpus_admin.listing(folder)
        console.print(f"corpus {folder}: {len(found)} case(s)", markup=False)
        for line, _ in found:
            console.print(f"  {line}", markup=False)
        return USAGE if any(problem for _, problem in found) else PASSED
    try:
        folder = args.to or corpus_admin.writable_suite_corpus()
    except corpus_admin.CorpusError as exc:
        raise UsageError(str(exc)) from None
    for path in args.case:   # every file validated before any is copied
        cases.load(path)
    for path in args.case:
        added = corpus_admin.add(path, folder)
        console.print(f"added {path} as {added.path}" if added.new else
                      f"already there: {added.path} (from {path}): nothing written", markup=False)
    return PASSED


def cmd_matrix(args) -> int:
    """Read every report (each checked first), then write DIR/matrix.html and DIR/matrix.md whole."""
    from specverify import matrix, matrix_page

    try:
        found = matrix.build([matrix.load(path) for path in args.report])
    except matrix.ReportError as exc:
        raise UsageError(str(exc)) from None
    for name, text in (("matrix.html", matrix_page.html(found)), ("matrix.md", matrix_page.markdown(found))):
        try:
            cases.write_atomic(args.out / name, text.encode())
        except OSError as exc:
            raise UsageError(f"--out {args.out}: {name} could not be written: {exc.strerror or exc}") from None
        console.print(f"wrote {args.out / name}", markup=False)
    words = "" if found.comparable else "; NOT COMPARABLE: they differ in suite version or oracles"
    console.print(f"{len(found.rows)} implementation(s) x {len(found.stages)} stage(s){words}", markup=False)
    return PASSED


def cmd_show(args) -> int:
    """Print the contracts of the selected stages (Markdown; rendered when stdout is a terminal)."""
    from rich.markdown import Markdown

    from specverify import contract

    stages: dict = {}
    for pattern in args.stage:
        try:
            stages.update((s.name, s) for s in registry.select([pattern]))
        except LookupError:
            raise UsageError(f"{pattern!r} matches no stage (known: {', '.join(registry.all_stages())})") from None
    text = contract.show_text(list(stages.values()))
    if console.is_terminal:
        console.print(Markdown(text))
    else:
        sys.stdout.write(text)
    return PASSED


def cmd_bench(args) -> int:
    """Check, then time, every selected stage's implementations; a table, results.json and PNGs."""
    from specverify.bench import report, run

    if args.plot_from:
        try:
            results = report.read_json(args.plot_from)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return plot(results, args.out or args.plot_from.parent)
    if args.impl and args.vendor:
        raise UsageError("--impl and --vendor exclude each other")
    device = args.device or ("cuda" if env.cuda_available() else "cpu")
    why = backends.unavailable("torch", device)
    if why:
        raise UsageError(f"--device {device}: {why}")
    if not args.device and device == "cpu":
        console.print("specverify bench: no CUDA device: benching on the CPU (wall times)", markup=False)
    stages = registry.select(args.stage)
    outside: dict[str, str] = {}
    if args.vendor:
        vendor = vendors.resolve(args.vendor, list(registry.all_stages()))
        outside = {s.name: vendor.implementations[s.name] for s in stages if s.name in vendor.implementations}
        if not outside:
            raise UsageError(f"--stage selects no stage that vendor {vendor.name} implements")
        stages = [s for s in stages if s.name in outside]
    elif args.impl:
        if len(stages) != 1:
            raise UsageError(f"--impl benches one stage; --stage selects {len(stages)}")
        outside = {stages[0].name: args.impl}
    options = run.Options(device, tuple(sum(args.batch or [list(run.BATCHES)], [])),
                          tuple(sum(args.vocab or [list(run.VOCABS)], [])),
                          run.Settings(args.calls, args.replays, args.repeat), tuple(args.backend or ()) or None,
                          outside, session.RunPlan.build(seed=args.seed, isolate=False, timeout=args.timeout,
                                                         keep_findings=False))
    console.print(f"specverify bench: {len(stages)} stage(s) on {device}, B {list(options.batches)}, "
                  f"V {list(options.vocabs)}", markup=False)
    try:
        results = run.run(stages, options, bench_progress)
    except session.ImplementationNotFound as exc:
        raise UsageError(f"--impl {exc}") from None
    console.print(report.table(results))
    for line in report.reference_lines(results):
        console.print(line, markup=False)
    out = args.out or Path("bench/results")
    if args.json:
        report.write_json(results, out / "results.json")
        console.print(f"wrote {out / 'results.json'}", markup=False)
    if args.plots:
        plot(results, out)
    statuses = {r["status"] for r in results["rows"]}
    return NOTHING_CHECKED if not statuses else FAILED if statuses - {"ok"} else PASSED


def bench_progress(row: dict) -> None:
    where = f"{row['stage']} {row['backend']}/{row['device']} B={row['B']} V={row['V']}"
    if row["status"] != "ok":
        console.print(f"{row['status'].upper():6} {where}: {row.get('message', '')}", markup=False)
        return
    device = f"{row['device_us']:.3g} µs {row.get('device_method')}, " if row.get("device_us") is not None else ""
    console.print(f"ok     {where}: {device}{row['host_us']:.3g} µs host", markup=False)


def plot(results: dict, out: Path) -> int:
    from specverify.bench import figures

    notice = figures.missing()
    if notice:
        console.print(notice, markup=False)
        return PASSED
    for path in figures.draw(results, out):
        console.print(f"wrote {path}", markup=False)
    return PASSED


def mutate_subjects(args) -> list:
    """The (stage, implementation) pairs a `specverify mutate` covers."""
    from specverify.mutate import Subject

    if sum(map(bool, (args.impl, args.vendor, args.backend))) != 1:
        raise UsageError("give one of --impl (with one --stage), --vendor and --backend")
    if args.backend:
        found = [Subject(s.name, s.impls[args.backend]) for s in registry.select(args.stage) if args.backend in s.impls]
        if not found:
            raise UsageError(f"--stage selects no stage with a {args.backend} kernel")
        return found
    if args.impl:
        stages = registry.select(args.stage)
        if len(stages) != 1:
            raise UsageError(f"--impl mutates one stage; --stage selects {len(stages)}")
        return [Subject(stages[0].name, args.impl)]
    vendor = vendors.resolve(args.vendor, list(registry.all_stages()), args.timeout or vendors.READ_TIMEOUT)
    chosen = {s.name for s in registry.select(args.stage)}
    found = [Subject(name, source, args.vendor) for name, source in vendor.implementations.items() if name in chosen]
    if not found:
        raise UsageError(f"--stage selects no stage that vendor {vendor.name} implements "
                         f"({', '.join(vendor.implementations)})")
    return found


def cmd_mutate(args) -> int:
    """Enumerate the mutants of each subject, then (unless --list) run them and report."""
    import time

    from specverify import mutants, mutate, mutate_report

    for op in args.operator or ():
        if op not in mutants.OPERATORS:
            raise UsageError(f"--operator {op!r}: not an operator (known: {', '.join(mutants.OPERATORS)})")
    try:
        equivalent = mutate.load_equivalent(args.equivalent) if args.equivalent else {}
    except mutate.EquivalentError as exc:
        raise UsageError(str(exc)) from None
    options = mutate.Options(args.profile, args.examples, args.seed, impl_device(args), args.jobs, args.deadline,
                             args.timeout, args.waivers, args.cases, args.out)
    subjects = mutate_subjects(args)
    enumerated = [(subject, *mutate.enumerate_mutants(subject.impl, args.operator)) for subject in subjects]
    known = {m.id for _, everything, _ in enumerated for m in everything}
    if args.list:
        for subject, everything, chosen in enumerated:
            chosen = mutate.sample(chosen, args.sample, f"{args.seed}:{subject.stage}")
            console.print(f"{subject.stage} ({subject.impl}): {len(chosen)} of {len(everything)} mutant(s)", markup=False)
            for m in chosen:
                console.print(f"  {m.id}  {m.path}:{m.line}  [{m.operator}] {m.before} → {m.after}", markup=False)
        return PASSED
    console.print(f"specverify mutate: profile {options.profile}, seed {options.seed}, {len(subjects)} stage(s), "
                  f"{args.jobs} at a time, on {options.device}", markup=False)

    def heard(subject, result) -> None:
        console.print(f"{result.outcome:16} {subject.stage} {result.mutant.id} ({result.seconds:.1f}s)", markup=False)

    run = mutate.MutationRun([], options, str(args.equivalent) if args.equivalent else None,
                             mutate.stale(equivalent, known), time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    interrupted = False
    try:
        with stopped_by_signals():
            for subject, everything, chosen in enumerated:
                picked = mutate.sample(chosen, args.sample, f"{args.seed}:{subject.stage}")
                run.stages.append(mutate.run_mutants(subject, picked, options, equivalent, len(everything), heard))
    except session.Interrupted as stop:
        console.print(f"specverify mutate: interrupted by {stop.why}: the report holds the "
                      f"{len(run.stages)} stage(s) that finished", markup=False)
        run.stale, interrupted = [], True
    console.print(mutate_report.summary_table(run))
    for line in mutate_report.lines(run):
        console.print(line, markup=False)
    problems = mutate_report.write(run, args.json, args.markdown)
    for line in problems:
        console.print(f"specverify mutate: error: {line}", markup=False)
    ran = sum(len(s.results) for s in run.stages)
    status = FAILED if run.survivors or run.counts()["error"] or interrupted else \
        NOTHING_CHECKED if not ran else PASSED
    return USAGE if problems else status

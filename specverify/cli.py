"""The command line: `specverify list | check | replay`.

Exit status: 0 when everything checked passed, 1 on any failure, 2 on bad usage or an unreadable case.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from specverify import __version__, backends, cases, env, registry
from specverify.harness import Failure, OracleError, verify
from specverify.profiles import PROFILES
from specverify.report import outcome_from_json, write_json_report
from specverify.runner import Outcome, check, failure_report, replay_command

console = Console(highlight=False, soft_wrap=True)
if not console.is_terminal:  # logs and pipes: wide enough that tables never fold a stage name
    console.width = max(console.width, 132)


class UsageError(Exception):
    """Bad usage: reported in one line, exit status 2."""


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="specverify", description=__doc__.splitlines()[0])
    top.add_argument("--version", action="version", version=f"specverify {__version__}")
    sub = top.add_subparsers(dest="command", required=True)

    sub.add_parser("list", help="stages x backends x devices, and what runs here")

    chk = sub.add_parser("check", help="search for inputs where an implementation differs from the oracle")
    chk.add_argument("--stage", action="append", metavar="NAME", help="stage name or glob (repeatable)")
    chk.add_argument("--backend", action="append", choices=backends.BACKENDS, help="(repeatable)")
    chk.add_argument("--device", choices=backends.DEVICES)
    chk.add_argument("--examples", type=positive, metavar="N", help="valid-tier examples per stage and backend")
    chk.add_argument("--seed", type=int, metavar="S", help="run seed (default: 0, or fresh for nightly)")
    chk.add_argument("--profile", choices=sorted(PROFILES), default="ci")
    chk.add_argument("--impl", metavar="MODULE:FUNCTION", help="check an outside implementation (one --stage)")
    chk.add_argument("--cases", type=Path, default=None, metavar="DIR", help="where failing cases go")
    chk.add_argument("--json", type=Path, metavar="PATH", help="also write a machine-readable report")
    chk.add_argument("--coverage", action="store_true", help="print what the draws covered, per stage")
    chk.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)

    shw = sub.add_parser("show", help="print stage contracts: fields, semantics, tiers, a worked example")
    shw.add_argument("stage", nargs="*", metavar="STAGE",
                     help="names or globs; none: every stage and the shared conventions")

    rep = sub.add_parser("replay", help="re-run a case file on every backend (or one) and print the diff")
    rep.add_argument("path", type=Path)
    rep.add_argument("--backend", choices=backends.BACKENDS)
    rep.add_argument("--device", choices=backends.DEVICES)
    rep.add_argument("--impl", metavar="MODULE:FUNCTION")
    return top


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return {"list": cmd_list, "check": cmd_check, "replay": cmd_replay, "show": cmd_show}[args.command](args)
    except (UsageError, LookupError, cases.CaseError) as exc:
        console.print(f"specverify {args.command}: error: {exc}", markup=False)
        return 2


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
    return 0


def impl_device(args) -> str:
    """Where an outside implementation runs: --device, else CUDA when present."""
    return args.device or ("cuda" if env.cuda_available() else "cpu")


def resolve_targets(args):
    stages = registry.select(args.stage)
    if args.impl:
        if len(stages) != 1:
            raise UsageError(f"--impl checks one stage; --stage selects {len(stages)}")
        if args.backend:
            raise UsageError("--impl and --backend exclude each other")
        device = impl_device(args)
        why = backends.unavailable("torch", device)
        if why:
            raise UsageError(f"--device {device}: {why}")
        try:
            return [backends.target(stages[0], "impl", device, args.impl)], []
        except (ImportError, ValueError) as exc:
            raise UsageError(f"--impl {args.impl}: {exc}") from None
    runnable, skipped = [], []
    for stage, backend, device, why in backends.matrix(stages, args.backend,
                                                       [args.device] if args.device else None):
        if why is None:
            runnable.append(backends.target(stage, backend, device))
        elif (args.backend or args.device) and not args.in_process:  # asked for: say why it does not run
            skipped.append(Outcome(stage.name, backend, device, status="skipped", headline=why))
    if not runnable and not skipped:
        raise UsageError("nothing to check: no selected stage has the selected backend")
    return runnable, skipped


def cmd_check(args) -> int:
    profile = PROFILES[args.profile]
    targets, outcomes = resolve_targets(args)
    run_seed = profile.run_seed(args.seed)
    cases_dir = args.cases or cases.default_dir()
    console.print(f"specverify check: profile {profile.name}, seed {run_seed}, {len(targets)} target(s), "
                  f"cases to {cases_dir}/", markup=False)
    if profile.isolated and not args.in_process and not args.impl:
        outcomes += run_isolated(targets, args, run_seed, cases_dir)
    else:
        outcomes += run_here(targets, profile, args.examples, run_seed, cases_dir)
    if not args.in_process:  # a stage's own process reports to its parent through --json
        print_summary(outcomes)
        if args.coverage:
            print_coverage(outcomes)
    if args.json:
        write_json_report(args.json, outcomes, profile.name, run_seed)
    return 1 if any(o.status in ("failed", "error") for o in outcomes) else 0


def run_here(targets, profile, examples, run_seed, cases_dir) -> list[Outcome]:
    outcomes = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as progress:
        overall = progress.add_task("targets", total=len(targets))
        for target in targets:
            task = progress.add_task(f"  {target.label}", total=None)
            outcome = check(target, profile, examples, run_seed, cases_dir,
                            progress=lambda n, task=task: progress.update(task, completed=n))
            progress.remove_task(task)
            progress.advance(overall)
            mark = {"passed": "ok", "failed": "FAILED", "error": "ERROR"}[outcome.status]
            progress.console.print(f"{mark:6} {target.label}  ({outcome.total} examples, "
                                   f"{outcome.seconds:.1f}s)", markup=False)
            outcomes.append(outcome)
    return outcomes


def run_isolated(targets, args, run_seed, cases_dir) -> list[Outcome]:
    """Each stage in its own process: a kernel that crashes the interpreter fails its stage alone."""
    outcomes = []
    by_stage: dict[str, list] = {}
    for t in targets:
        by_stage.setdefault(t.stage.name, []).append(t)
    for name, group in by_stage.items():
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "report.json"
            cmd = [sys.executable, "-m", "specverify", "check", "--in-process", "--stage", name,
                   "--profile", args.profile, "--seed", str(run_seed), "--cases", str(cases_dir),
                   "--json", str(report)]
            for b in sorted({t.backend for t in group}):
                cmd += ["--backend", b]
            if args.device:
                cmd += ["--device", args.device]
            if args.examples:
                cmd += ["--examples", str(args.examples)]
            done = subprocess.run(cmd, env=dict(os.environ))
            if report.exists():
                outcomes += [outcome_from_json(o) for o in json.loads(report.read_text())["outcomes"]]
            else:
                for t in group:
                    outcomes.append(Outcome(name, t.backend, t.device, status="error",
                                            headline=f"the stage's process died (exit status {done.returncode})"))
    return outcomes


def print_summary(outcomes: list[Outcome]) -> None:
    table = Table("stage", "backend", "device", "examples", "result", "time", title="specverify check")
    for o in outcomes:
        result = {"passed": "passed", "failed": "[red]FAILED[/red]", "error": "[red]ERROR[/red]",
                  "skipped": f"skipped: {o.headline}"}[o.status]
        tiers = " ".join(f"{t[0]}{n}" for t, n in o.examples.items())
        found = f", failed at {o.found_after}" if o.found_after else ""
        table.add_row(o.stage, o.backend, o.device, f"{o.total} ({tiers}{found})" if o.total else "-", result,
                      f"{o.seconds:.1f}s")
    console.print(table)
    for o in outcomes:
        if o.status in ("failed", "error"):
            console.print(o.report or o.headline, markup=False)


def print_coverage(outcomes: list[Outcome]) -> None:
    """Each stage's equivalence classes (strategy labels) and how many draws fell in each."""
    by_stage: dict[str, Counter] = {}
    for o in outcomes:
        by_stage.setdefault(o.stage, Counter()).update(o.coverage)
    for stage, seen in by_stage.items():
        table = Table("class", "draws", title=f"{stage}: what the draws covered (all backends)")
        for name, count in sorted(seen.items()):
            table.add_row(name, str(count))
        console.print(table)


def cmd_replay(args) -> int:
    stage_name, example = cases.load(args.path)
    stages = registry.all_stages()
    if stage_name not in stages:
        raise UsageError(f"{args.path}: stage {stage_name!r} is not known to this version of specverify")
    stage = stages[stage_name]
    if args.impl:
        device = impl_device(args)
        targets = [backends.target(stage, "impl", device, args.impl)]
    else:
        targets = [backends.target(stage, b, d) for _, b, d, why in
                   backends.matrix([stage], [args.backend] if args.backend else None,
                                   [args.device] if args.device else None) if why is None]
        if not targets:
            raise UsageError(f"no backend of {stage_name} runs here with the options given")
    console.print(f"replay {args.path}: {stage_name}, {example.tier} tier", markup=False)
    failed = False
    for target in targets:
        try:
            verify(target, example)
            console.print(f"  passed  {target.backend}/{target.device}", markup=False)
        except (Failure, OracleError) as exc:
            failed = True
            console.print(failure_report(target, example, exc, replay_command(args.path, target)), markup=False)
    return 1 if failed else 0


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
    return 0

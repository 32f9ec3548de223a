"""The command line: `specverify list | check | replay | show | bench | corpus | matrix | mutate`, one module
per command (`specverify.cli.<command>`), every option from the one table in `specverify.cli.options`.

Exit status: 0 when everything checked passed (failures every one covered by an expect-fail waiver
included); 1 on any other failure, a waiver that is no longer needed, or a run ended by SIGINT or SIGTERM
(its reports hold what finished); 2 on bad usage (a bad option value, a waiver or declaration file, a
vendor or --impl that names nothing, a --cases path that is a file, an extra the command needs that is
not installed, a time limit that is not finite or
over a week), an unreadable or damaged case or report (`matrix`), a report or matrix that could not be
written: one line naming the option or file and the rule; 3 when nothing was checked (every target
skipped) or a worker could not be set up; 4 when incomplete: every check that ran passed, but some target's
time ran out before its examples were done (1 wins when anything failed). `mutate`: 0 when every mutant
was killed, timed out, crashed, was counted apart (does not import or compile) or is judged equivalent; 1 when one survived that no equivalence entry names, a stage's
baseline fails (it is not mutated) or a mutant's check broke; 2 on bad usage; 3 when no mutant was run.

SIGINT and SIGTERM are routed to `specverify.interrupts` before anything else is imported, so a signal at
any moment ends the run in one line.
"""
from __future__ import annotations

import atexit
import importlib
import os
import sys
import warnings

from specverify import interrupts

MODULES = {"list": "listing", "check": "check", "replay": "replay", "show": "show", "bench": "bench",
           "corpus": "corpus", "matrix": "matrix", "mutate": "mutate"}


def program() -> None:
    """The `specverify` executable (and `python -m specverify`): `main`, the exit handlers (multiprocessing's,
    Ray's), then an exit that skips the interpreter's teardown of the heap the run left (a second or more of
    garbage collection, and native libraries' complaints about objects alive at exit)."""
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(status)


def main(argv: list[str] | None = None) -> int:
    with interrupts.installed():
        args = None
        try:
            from specverify.cli import options

            if hasattr(sys.stdout, "reconfigure"):   # a killed run still shows what it did, in a pipe too
                sys.stdout.reconfigure(line_buffering=True)
            args = options.parser().parse_args(argv)
            return command(args)
        except interrupts.Interrupted as stop:
            interrupts.caught()
            with interrupts.deferred():
                return stopped_early(args or parsed(argv), stop.why)


def parsed(argv: list[str] | None):
    """The options, parsed again after a signal cut the first parse short (None when they are bad)."""
    from specverify.cli import options

    try:
        return options.parser().parse_args(argv)
    except SystemExit:
        return None


def command(args) -> int:
    from specverify import usage
    from specverify.extras import MissingExtra

    try:
        with warnings.catch_warnings():   # kernels' and libraries' warnings are not the run's output
            warnings.simplefilter("ignore")
            return importlib.import_module(f"specverify.cli.{MODULES[args.command]}").run(args)
    except (usage.UsageError, MissingExtra) as exc:
        print(f"specverify {args.command}: error: {exc}", flush=True)
        return usage.USAGE
    except BaseException as exc:
        calls = sys.modules.get("specverify.judge.calls")    # a worker could not be set up: an error of the run
        if calls is None or not isinstance(exc, calls.RunSetupError):
            raise
        print(f"specverify {args.command}: error: {exc}", flush=True)
        return usage.NOTHING_CHECKED


def stopped_early(args, why: str) -> int:
    """A signal before a command could take over (while the suite was imported): one line, and the reports
    `check` was asked for, holding nothing, marked interrupted. Exit status 1."""
    print(f"specverify: interrupted by {why} before anything was checked", flush=True)
    if args is not None and args.command == "check" and (args.json or args.junit or args.markdown):
        from specverify.pages import report_files
        from specverify.runs.verdicts import Run
        from specverify.usage import FAILED

        run = Run([], args.profile, args.seed or 0, args.device or "cpu", exit_status=FAILED, interrupted=why)
        for line in report_files.write(run, args.json, args.junit, args.markdown):
            print(f"specverify check: error: {line}", flush=True)
    return 1

"""The options of every front end, in one table: `specverify` commands (argparse) and pytest's
`--specverify-*` options are both built from `OPTIONS`.

A row names the option, the commands that take it ("pytest": the plugin takes it as `--specverify-NAME`),
how its text is parsed, its default, its help and the `session.RunPlan.build` keyword it sets (`plan`).
Names an option takes from a list (backends, devices, profiles, checks) are checked when parsed, and a
near miss is answered with "did you mean"; every parse error is one line. Nothing heavy is imported here:
the lists are read only when a value is checked.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from specverify.usage import unknown

MAX_SECONDS = 7 * 24 * 3600.0   # the longest time limit taken (a week): larger values overflow timers
PYTEST_PREFIX = "--specverify-"


# ------------------------------------------------------------------ parsing one value

def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be at least 1")
    return value


def integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number") from None


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
    """--findings, --out: a folder, or a path that does not exist yet (it is made when something is written)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text}: not a folder")
    return path


class OneOf:
    """Parses one of the names `known()` gives (read only when a value is parsed or help is shown); a miss
    is answered with "did you mean"."""

    def __init__(self, kind: str, known: Callable[[], Sequence[str]]):
        self.kind, self.known, self.__name__ = kind, known, kind

    def __call__(self, text: str) -> str:
        names = list(self.known())
        if text not in names:
            raise argparse.ArgumentTypeError(unknown(self.kind, text, names))
        return text


def _backends() -> list[str]:
    from specverify.records.backends import BUILT_IN
    return list(BUILT_IN)


def _kernel_backends() -> list[str]:
    from specverify.records.backends import BACKENDS
    return [name for name in _backends() if not BACKENDS[name].reference]


def _devices() -> list[str]:
    from specverify.records.backends import DEVICES
    return list(DEVICES)


def _profiles() -> list[str]:
    from specverify.runs.profiles import PROFILES
    return sorted(PROFILES)


def _checks() -> list[str]:
    from specverify.runs.catalogue import CHECKS
    return list(CHECKS)


# ------------------------------------------------------------------ the table

@dataclass(frozen=True)
class Option:
    name: str                          # --NAME (pytest: --specverify-NAME); a positional's dest
    commands: tuple[str, ...]          # the commands taking it; "pytest": the plugin's options too
    help: str
    parse: Callable[[str], Any] | dict | None = None   # one value from its text, or {command: parse}
    action: str | dict | None = None   # None (one value), "append", "store_true", "bool" (--x/--no-x), "many"
                                       # (one or more values), "positional", "positionals", "any"; or per command
    default: Any = None                # or {command: default}
    metavar: str | None = None
    dest: str | None = None            # the attribute of the parsed namespace (default: NAME with _)
    aliases: tuple[str, ...] = ()      # other spellings (--json for --report)
    plan: str | None = None            # the session.RunPlan.build keyword it sets
    required: tuple[str, ...] = ()     # the commands that require it

    @property
    def attr(self) -> str:
        return self.dest or self.name.replace("-", "_")

    def for_command(self, value, command: str):
        return value.get(command, value.get("*")) if isinstance(value, dict) else value


CHECK_LIKE = ("check", "pytest")
OPTIONS: tuple[Option, ...] = (
    # what is checked
    Option("stage", ("check", "bench", "mutate", "pytest"), "stage name or glob pattern (repeatable)",
           action="append", metavar="NAME"),
    Option("backend", ("check", "replay", "bench", "mutate"), "one of our backends (repeatable in check and bench)",
           parse={"check": OneOf("backend", _backends), "replay": OneOf("backend", _backends),
                  "*": OneOf("backend", _kernel_backends)},
           action={"check": "append", "bench": "append", "*": None}, metavar="B"),
    Option("device", ("check", "replay", "bench", "mutate", "pytest"),
           "where the targets run (default: every device here; an outside implementation: cuda when present)",
           parse=OneOf("device", _devices), metavar="D"),
    Option("impl", ("check", "replay", "bench", "mutate", "pytest"),
           "an outside implementation of one --stage, MODULE:FUNCTION", parse=named, metavar="MODULE:FUNCTION"),
    Option("declare", CHECK_LIKE,
           "what the --impl declares (TOML: domain, dialect, validates, interpreted, randomness)",
           parse=Path, metavar="PATH"),
    Option("vendor", ("check", "bench", "mutate", "pytest"),
           "every stage a vendor implements (an entry point of group specverify.files.vendors, or MODULE[:ATTR])",
           parse=named, metavar="NAME"),
    Option("waivers", ("check", "mutate", "pytest"), "the vendor's waiver file (TOML)", parse=Path, metavar="PATH",
           plan="waivers"),
    Option("dialect", ("check", "replay", "pytest"), "judge by this rule dialect of the stage ('' the record's "
           "rule; default: our backends under every rule they follow)", metavar="NAME"),
    Option("check", (*CHECK_LIKE, "mutate"), "only these checks (repeatable)", parse=OneOf("check", _checks),
           action="append", metavar="CHECK", plan="checks"),
    # how many, how reproducible, how long
    Option("profile", ("check", "mutate", "pytest"), "the examples drawn and their reproducibility (default ci)",
           parse=OneOf("profile", _profiles), default="ci", metavar="NAME", plan="profile"),
    Option("examples", ("check", "mutate", "pytest"), "valid-tier examples per stage and backend (the other tiers "
           "get N/4)", parse=positive, metavar="N", plan="examples"),
    Option("seed", ("check", "bench", "mutate", "pytest"), "run seed (check: default 0, or fresh for nightly)",
           parse=integer, default={"bench": 0, "mutate": 0}, metavar="S", plan="seed"),
    Option("timeout", ("check", "replay", "bench", "mutate", "pytest"),
           f"time limit per call, and for importing an outside implementation, at most {MAX_SECONDS:g} s "
           f"(default: the profile's; replay 120; bench 600)", parse=seconds, default={"bench": 600.0},
           metavar="S", plan="timeout"),
    Option("target-timeout", CHECK_LIKE, f"time limit per target, all its checks, at most {MAX_SECONDS:g} s "
           "(default: the profile's)", parse=seconds, metavar="S", plan="target_timeout"),
    Option("memory", CHECK_LIKE, "address space a worker on the CPU may map, such as 4G or 512M (default: the "
           "profile's, 8G; never more than this process may map)", parse=memory_size, metavar="SIZE",
           plan="memory"),
    Option("isolate", CHECK_LIKE, "run our implementations in worker processes too (default: the profile's; "
           "outside implementations always are)", action="bool", plan="isolate"),
    Option("first-failure", ("check",), "stop a target's checks at its first failing one (mutation runs use it)",
           action="store_true", plan="first_failure"),
    # cases and reports
    Option("cases", ("check", "mutate", "pytest"), "your own case folder, replayed (read only) by the corpus "
           "check after the suite's", parse=Path, metavar="DIR", plan="cases"),
    Option("findings", CHECK_LIKE, "where the cases this run finds go (default $SPECVERIFY_FINDINGS, else "
           "./specverify-findings; never the suite's corpus)", parse=folder, metavar="DIR", plan="findings"),
    Option("report", CHECK_LIKE, "write the JSON report", parse=Path, metavar="PATH", dest="json",
           aliases=("--json",)),
    Option("junit", CHECK_LIKE, "write a JUnit XML report (pytest's own --junitxml lists the tests)",
           parse=Path, metavar="PATH"),
    Option("markdown", ("check", "mutate", "pytest"), "write a Markdown report", parse=Path, metavar="PATH"),
    Option("coverage", ("check",), "print what the draws covered, per stage", action="store_true"),
    # where it runs
    Option("devices", ("check",), "spread the targets over worker processes: one pinned to each GPU (all, or "
           "indices such as 0,1; repeat one for two workers on it), or N unpinned workers (cpu:N)",
           metavar="all|I,J|cpu:N"),
    Option("ray", ("check",), "spread the targets over a Ray cluster, one task per GPU (CPU tasks without GPUs); "
           "needs pip install specverify[ray]", metavar="auto|ADDRESS"),
    # bench
    Option("batch", ("bench",), "batch sizes (default 1 16 64 256 512 1024)", parse=int_list, action="many",
           metavar="B"),
    Option("vocab", ("bench",), "vocabularies of the stages that read probabilities (default 32000 151936); the "
           "others take the last", parse=int_list, action="many", metavar="V"),
    Option("calls", ("bench",), "calls per graph and per timed loop", parse=positive, default=20, metavar="N"),
    Option("replays", ("bench",), "graph replays per measurement", parse=positive, default=5, metavar="N"),
    Option("repeat", ("bench",), "host-timed loops per measurement", parse=positive, default=5, metavar="N"),
    Option("json", ("bench",), "write results.json", action="bool", default=True),
    Option("plots", ("bench",), "draw PNGs (matplotlib)", action="bool", default=True),
    Option("plot-from", ("bench",), "only draw the PNGs of a results.json", parse=Path, metavar="PATH"),
    Option("out", ("bench", "matrix", "mutate"), "bench: where results.json and the PNGs go (default "
           "bench/results); matrix: where matrix.html and matrix.md go; mutate: where the killing cases are "
           "copied (default ./specverify-mutants)", parse={"bench": Path, "*": folder},
           default={"mutate": Path("specverify-mutants")}, metavar="DIR", required=("matrix",)),
    # mutate
    Option("jobs", ("mutate",), "mutants checked at once", parse=positive, default=1, metavar="N"),
    Option("sample", ("mutate",), "check N of the mutants, chosen by --seed", parse=positive, metavar="N"),
    Option("operator", ("mutate",), "only mutants of this operator (repeatable)", action="append", metavar="OP"),
    Option("mutant", ("mutate",), "only the mutant of this id, as --list and the reports print it (repeatable)",
           action="append", metavar="ID"),
    Option("list", ("mutate",), "list the mutants and run nothing", action="store_true"),
    Option("equivalent", ("mutate",), "TOML of [[mutant]] id, reason (and stage): survivors judged equivalent",
           parse=Path, metavar="FILE"),
    Option("deadline", ("mutate",), "wall time per mutant (default: 4 x the baseline's, plus 30 s)",
           parse=seconds, metavar="S"),
    Option("json", ("mutate",), "write the JSON report", parse=Path, metavar="PATH"),
    # show, corpus, replay, matrix
    Option("markdown", ("show",), "print Markdown (as docs/stages.md) instead of text wrapped to the terminal",
           action="store_true"),
    Option("stages", ("show",), "stage names or globs; none: every stage and the shared conventions",
           action="any", metavar="STAGE", dest="stage"),
    Option("case", ("corpus add",), "case files (.npz)", parse=Path, action="positionals", metavar="CASE"),
    Option("to", ("corpus add",), "another corpus folder (default: the suite's, in a checkout)", parse=Path,
           metavar="DIR"),
    Option("from", ("corpus list",), "another corpus folder", parse=Path, metavar="DIR", dest="source"),
    Option("path", ("replay",), "the case file (.npz)", parse=Path, action="positional", metavar="PATH"),
    Option("reports", ("matrix",), "reports of specverify check, and of specverify mutate (a 'mutants killed' "
           "figure in their cells)", parse=Path, action="positionals", metavar="REPORT.json", dest="report"),
)

COMMANDS = {
    "list": "stages x backends x devices, and what runs here",
    "check": "search for inputs where an implementation differs from the oracle",
    "replay": "re-run a case file on every backend (or one) and print the difference",
    "show": "print stage contracts: fields, semantics, tiers, a worked example",
    "bench": "time every stage's implementations on its benchmark input (checked first)",
    "corpus": "the suite's regression corpus: add case files to it, or list it",
    "corpus add": "validate case files and copy them into the corpus (by content hash)",
    "corpus list": "the corpus's cases by stage, one line each",
    "matrix": "several JSON reports side by side: an HTML page and a Markdown twin",
    "mutate": "plant first-order bugs (mutants) in an implementation's own source and report which the "
              "checks catch",
}


def of(command: str) -> list[Option]:
    return [o for o in OPTIONS if command in o.commands]


class Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line ("specverify check: error: ..."), exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


class Formatter(argparse.HelpFormatter):
    """Adds the names an option takes to its help (read only when help is shown)."""

    def _expand_help(self, action):
        text = super()._expand_help(action)
        return f"{text} ({', '.join(action.type.known())})" if isinstance(action.type, OneOf) else text


def add(target, option: Option, command: str, flag_prefix: str = "--") -> None:
    """Add `option` as `command` takes it to an argparse parser or a pytest option group (`target.addoption`)."""
    parse = option.for_command(option.parse, command)
    default = option.for_command(option.default, command)
    how = option.for_command(option.action, command)
    flags = [flag_prefix + option.name] + ([] if flag_prefix != "--" else list(option.aliases))
    kw: dict[str, Any] = {"help": option.help.replace("%", "%%"), "dest": option.attr}
    if how in ("positional", "positionals", "any"):
        kw.pop("dest")
        nargs = {"positional": None, "positionals": "+", "any": "*"}[how]
        target.add_argument(option.attr, type=parse, nargs=nargs, metavar=option.metavar, help=kw["help"])
        return
    if how == "store_true":
        kw.update(action="store_true", default=bool(default))
    elif how == "bool":
        kw.update(action=argparse.BooleanOptionalAction, default=default)
    else:
        kw.update(type=parse, default=default, metavar=option.metavar)
        if how == "append":
            kw["action"] = "append"
        elif how == "many":
            kw["nargs"] = "+"
    if command in option.required:
        kw["required"] = True
    if hasattr(target, "addoption"):
        target.addoption(*flags, **kw)
    else:
        target.add_argument(*flags, **kw)


def parser() -> argparse.ArgumentParser:
    """The `specverify` command line, every command's options from OPTIONS."""
    import specverify

    top = Parser(prog="specverify", description="Differential testing and conformance for the kernels around "
                                                "speculative decoding.", formatter_class=Formatter)
    top.add_argument("--version", action="version", version=f"specverify {specverify.__version__}")
    sub = top.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command, text in COMMANDS.items():
        if " " in command:
            continue
        cmd = sub.add_parser(command, help=text, description=text, formatter_class=Formatter)
        if command == "corpus":
            actions = cmd.add_subparsers(dest="action", required=True, parser_class=Parser)
            for full in ("corpus add", "corpus list"):
                inner = actions.add_parser(full.split()[1], help=COMMANDS[full], formatter_class=Formatter)
                for option in of(full):
                    add(inner, option, full)
            continue
        for option in of(command):
            add(cmd, option, command)
    return top


def pytest_options(group) -> None:
    """pytest's `--specverify-*` options: the rows that name "pytest", as `check` takes them."""
    for option in of("pytest"):
        add(group, option, "check", PYTEST_PREFIX)


def from_pytest(config) -> argparse.Namespace:
    """The options pytest parsed, as the namespace `specverify check` would have (every check option
    present; those pytest does not take at their defaults)."""
    values = {"command": "check"}
    for option in of("check"):
        if "pytest" in option.commands:
            values[option.attr] = config.getoption(PYTEST_PREFIX + option.name)
        else:
            default = option.for_command(option.default, "check")
            values[option.attr] = bool(default) if option.action == "store_true" else default
    return argparse.Namespace(**values)


def plan_keywords(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """The `session.RunPlan.build` keywords the options set (those given: None leaves the profile's)."""
    found = {}
    for option in of(command):
        if option.plan and hasattr(args, option.attr):
            found[option.plan] = getattr(args, option.attr)
    return found

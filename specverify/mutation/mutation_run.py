"""Mutation runs: would the suite have seen a bug in this implementation? (`specverify mutate`)

`run_mutants` takes one `Subject` (a stage and the implementation checked for it) and a list of
`mutants.Mutant`. It first runs the stage's checks on the unmutated implementation (the baseline, at the
same profile, seed and example count); when that fails, nothing is mutated (a kill would mean nothing).
Then each mutant runs as its own `python -m specverify check --isolate --first-failure` process, with
`worker.MUTANT_ENV` naming a JSON file that points at the mutated source in a temporary folder: only the
check's worker process loads the mutated module, never that check's judge nor this process. `jobs` mutants
run at once; each has a wall deadline (given, else DEADLINE_FACTOR x the baseline's time plus
DEADLINE_SLACK seconds), after which its process tree is ended and the run goes on.

A mutant's outcome (`OUTCOMES`), read from its check report: "killed" (a check failed: the check, its
headline, the examples its search drew until the first failure, the shrunk case copied under the run's
`out` folder), "timed out" (the per-call limit fired, or the deadline), "crashed" (the worker died: a
signal, an exit, a broken protocol), "survived" (every check passed), and counted apart: "does not import"
(the worker could not load it), "does not compile" (Triton refused it: a CompilationError, or under the
interpreter an InterpreterError wrapping a TypeError/ValueError/... of the language, NumPy's run-time
array-to-scalar conversion excepted), "error" (the check process itself broke). A survivor the vendor's
equivalence file (`load_equivalent`) names is "judged equivalent" and left out of the kill rate:
(killed + timed out + crashed) / (those + other survivors).
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Callable

try:
    import tomllib
except ImportError:          # Python 3.10
    import tomli as tomllib

from specverify.judge.worker import MUTANT_ENV
from specverify.mutation.mutants import Mutant

OUTCOMES = ("killed", "timed out", "crashed", "survived", "does not import", "does not compile", "error")
KILLS = ("killed", "timed out", "crashed")
APART = ("does not import", "does not compile", "error")
DEADLINE_FACTOR = 4.0      # a mutant's default deadline: this many times the baseline's wall time ...
DEADLINE_SLACK = 30.0      # ... plus this many seconds (process start-up, a busy machine)
GRACE = 10.0               # seconds a check process has to end its workers after SIGTERM
CRASH_KINDS = ("signal", "exit", "lost")
COMPILE = re.compile(r"\b(CompilationError|CompileTimeAssertionFailure|UnsupportedLanguageConstruct)\b|"
                     r"InterpreterError: (TypeError|ValueError|NotImplementedError|AssertionError|AttributeError|"
                     r"NameError)\b")
# ... but not NumPy's array-to-scalar conversion, which some interpreter versions (Triton 3.6 with NumPy 2)
# raise at run time for a store or a loop over lanes a mutant let out of range: that is a kill
RUNTIME_IN_INTERPRETER = re.compile(r"arrays? can be converted to Python scalars")
OUTPUT_TAIL = 2000         # characters of a check process's output kept when it broke


LIVE: set[subprocess.Popen] = set()    # the check processes running now (ended when a run is interrupted)
LIVE_LOCK = threading.Lock()
ENDING = threading.Event()              # set by end_all: no check process starts until the next run_mutants


class Ended(Exception):
    """A check was not started: the run is being interrupted (`end_all`)."""


class EquivalentError(ValueError):
    """An equivalence file that cannot be used: one line naming the file, the entry and the rule."""


@dataclass(frozen=True)
class Subject:
    """One stage of one implementation, as mutated and checked."""
    stage: str
    impl: str                       # "module:function" (the entry whose reachable code is mutated)
    vendor: str | None = None       # checked as this vendor's (`check --vendor`: its declarations apply)
    # our backends: (dialect, "module:function") of each dialect of ours; a mutant the record's rule lets
    # through is checked under each of them in turn (code only a dialect reaches is judged there)
    views: tuple[tuple[str, str], ...] = ()
    validates: bool = False         # refuses invalid arguments (our backends): its checks ask the invalid tier


@dataclass(frozen=True)
class Options:
    """How every check of a mutation run is made (None: the profile's or the check's default)."""
    profile: str = "ci"
    examples: int | None = None
    seed: int = 0
    device: str = "cpu"
    jobs: int = 1
    deadline: float | None = None   # seconds per mutant (None: from the baseline's time)
    timeout: float | None = None    # seconds per call (check --timeout)
    waivers: Path | None = None     # the vendor's waiver file (check --waivers)
    cases: Path | None = None       # the vendor's case folder (check --cases)
    out: Path = Path("specverify-mutants")   # the killing cases are copied under out/cases/
    checks: tuple[str, ...] = ()    # only these checks (check --check; empty: the target's default checks)


@dataclass
class Result:
    """One mutant's outcome (`OUTCOMES`); `judged`: the equivalence file's reason, for a survivor it names."""
    mutant: Mutant
    outcome: str
    check: str = ""                 # the check that failed first
    headline: str = ""
    examples: int | None = None     # examples drawn until the first failure
    case: str | None = None         # the shrunk case (copied under Options.out) or corpus case that failed
    seconds: float = 0.0
    judged: str = ""

    @property
    def equivalent(self) -> bool:
        return self.outcome == "survived" and bool(self.judged)


@dataclass
class StageRun:
    """A stage's mutation run: the baseline, then one Result per mutant run (in the order given)."""
    subject: Subject
    baseline: str                   # "passed", or what failed (then no mutant ran)
    baseline_seconds: float
    enumerated: int                 # mutants found (before --operator and --sample)
    results: list[Result] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = {o: 0 for o in OUTCOMES}
        for r in self.results:
            found[r.outcome] += 1
        found["equivalent"] = sum(r.equivalent for r in self.results)
        found["survived"] -= found["equivalent"]
        return found


@dataclass
class MutationRun:
    """A whole `specverify mutate`: its stages, how they were checked, the equivalence file's stale ids."""
    stages: list[StageRun]
    options: Options
    equivalent_file: str | None = None
    stale: list[str] = field(default_factory=list)
    started: str = ""

    def counts(self) -> dict[str, int]:
        found: dict[str, int] = {}
        for stage in self.stages:
            for key, n in stage.counts().items():
                found[key] = found.get(key, 0) + n
        return found or {o: 0 for o in (*OUTCOMES, "equivalent")}

    @property
    def survivors(self) -> int:
        """Survivors no one judged equivalent, and stages whose baseline failed: what exit status 1 means."""
        return self.counts()["survived"] + sum(s.baseline != "passed" for s in self.stages)


def kills_of(counts: dict[str, int]) -> tuple[int, int]:
    """(kills, kills + survivors not judged equivalent) of a run's outcome counts."""
    kills = sum(counts[o] for o in KILLS)
    return kills, kills + counts["survived"]


def kill_rates(counts: dict[str, int]) -> tuple[float | None, float | None]:
    """(kill rate, killed alone): over kills and survivors not judged equivalent (None when there are none)."""
    kills, total = kills_of(counts)
    return (kills / total, counts["killed"] / total) if total else (None, None)


def median_examples(results: list[Result]) -> float | None:
    found = [r.examples for r in results if r.outcome == "killed" and r.examples is not None]
    return median(found) if found else None


# --- the vendor's judgement: mutants it holds equivalent -----------------------------------------------

def load_equivalent(path: Path) -> dict[str, tuple[str, tuple[str, ...] | None]]:
    """The equivalence file: `[[mutant]]` tables of `id`, `reason` (both required) and `stage` (optional: only
    there; a stage name or a list of them). Returns id -> (reason, the stages or None for every stage)."""
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise EquivalentError(f"--equivalent {path}: cannot be read ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise EquivalentError(f"--equivalent {path}: not TOML ({exc})") from None
    if set(data) - {"mutant"} or not isinstance(data.get("mutant", []), list):
        raise EquivalentError(f"--equivalent {path}: holds only [[mutant]] tables (id, reason, stage)")
    found: dict[str, tuple[str, tuple[str, ...] | None]] = {}
    for i, entry in enumerate(data.get("mutant", []), 1):
        where = f"--equivalent {path}: mutant #{i}"
        if not isinstance(entry, dict) or set(entry) - {"id", "reason", "stage"}:
            raise EquivalentError(f"{where}: only the keys id, reason and stage are allowed")
        for key in ("id", "reason"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise EquivalentError(f"{where}: {key} must be a non-empty string")
        stages = entry.get("stage")
        stages = [stages] if isinstance(stages, str) else stages
        if stages is not None and (not isinstance(stages, list) or not stages
                                   or not all(isinstance(x, str) for x in stages)):
            raise EquivalentError(f"{where}: stage must be a stage name or a list of them")
        if entry["id"] in found:
            raise EquivalentError(f"{where}: id {entry['id']!r} is listed twice")
        found[entry["id"]] = (entry["reason"].strip(), None if stages is None else tuple(stages))
    return found


def stale(equivalent: dict[str, tuple[str, tuple[str, ...] | None]], known: set[str]) -> list[str]:
    """Ids of the equivalence file that name no mutant of the run's implementations."""
    return sorted(i for i in equivalent if i not in known)


def sample(found: list[Mutant], n: int | None, seed: int | str) -> list[Mutant]:
    """`n` of the mutants, chosen by `seed`, in their original order (all of them when n is None or larger).
    The CLI seeds each stage's sample with the run seed and the stage's name, so stages whose kernels share
    code do not all get the same picks."""
    if n is None or n >= len(found):
        return list(found)
    chosen = set(random.Random(seed).sample(range(len(found)), n))
    return [m for i, m in enumerate(found) if i in chosen]


# --- one check process ---------------------------------------------------------------------------------

def check_command(subject: Subject, options: Options, folder: Path, view: tuple[str, str] | None = None) -> list[str]:
    """The `specverify check` of one mutant (or the baseline), its report and findings in `folder`; `view`: under
    that dialect of the subject's, its implementation."""
    if subject.validates:       # declared as our kernels are: they validate, under the dialect of the view
        declaration = folder / "declare.toml"
        declaration.write_text("validates = true\n" + (f'dialect = "{view[0]}"\n' if view else ""))
        chosen = ["--impl", view[1] if view else subject.impl, "--declare", str(declaration)]
    else:
        chosen = ["--impl", view[1], "--dialect", view[0]] if view else \
            ["--vendor", subject.vendor] if subject.vendor else ["--impl", subject.impl]
    command = [sys.executable, "-m", "specverify", "check", "--stage", subject.stage, *chosen,
               "--device", options.device, "--profile", options.profile, "--seed", str(options.seed),
               "--isolate", "--first-failure", "--json", str(folder / "report.json"),
               "--findings", str(folder / "findings")]
    if options.examples is not None:
        command += ["--examples", str(options.examples)]
    if options.timeout is not None:
        command += ["--timeout", repr(options.timeout)]
    if options.waivers is not None:
        command += ["--waivers", str(options.waivers)]
    if options.cases is not None:
        command += ["--cases", str(options.cases)]
    for name in options.checks:
        command += ["--check", name]
    return command


@dataclass
class Finished:
    """What one check process left: its exit status (None: ended at the deadline), report and output."""
    status: int | None
    report: dict | None
    output: str
    seconds: float


def run_check(command: list[str], folder: Path, deadline: float | None, extra_env: dict[str, str]) -> Finished:
    """Run one check process in a session of its own; at the deadline SIGTERM (it ends its workers and
    writes what finished), then after GRACE seconds SIGKILL to its whole group."""
    log = folder / "output.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        with LIVE_LOCK:         # not after end_all: a mutant's next dialect view would run to its deadline
            if ENDING.is_set():
                raise Ended("the run is being interrupted")
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       env={**os.environ, **extra_env}, start_new_session=True)
            LIVE.add(process)
        try:
            status = process.wait(deadline)
        except subprocess.TimeoutExpired:
            status = None
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(GRACE)
            except subprocess.TimeoutExpired:
                pass
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)   # the forkserver and anything else left in its group
            except OSError:
                pass
            process.wait()
            with LIVE_LOCK:
                LIVE.discard(process)
    seconds = time.monotonic() - started
    try:
        report = json.loads((folder / "report.json").read_text())
    except (OSError, ValueError):
        report = None
    output = log.read_text(errors="replace")[-OUTPUT_TAIL:]
    return Finished(status, report if isinstance(report, dict) else None, output, seconds)


def first_failure(report: dict) -> dict | None:
    """The first outcome of a check report that failed, broke or ran out of the target's time (xfailed ones
    are the waivers' business)."""
    for outcome in report.get("outcomes", []):
        if outcome.get("status") in ("failed", "error", "incomplete"):
            return outcome
    return None


def judge(finished: Finished, deadline: float | None) -> tuple[str, dict | None, str]:
    """(outcome, the failing check's outcome or None, headline) of one mutant's check process."""
    if finished.status is None:
        return "timed out", None, f"still running at the mutant's deadline ({deadline:g} s): ended"
    if finished.report is None:
        last = finished.output.strip().splitlines()[-1:] or ["no output"]
        if finished.status == 2 and "--impl" in last[0]:
            return "does not import", None, last[0][:300]
        return "error", None, f"the check process exited with status {finished.status}: {last[0][:300]}"
    failing = first_failure(finished.report)
    if failing is None:
        return "survived", None, ""
    kind, headline, status = failing.get("kind", ""), str(failing.get("headline", "")), failing.get("status")
    if status == "incomplete" or kind == "timeout":
        return "timed out", failing, headline
    if status == "error":
        return "error", failing, headline
    if kind == "load":
        return "does not import", failing, headline
    if kind in CRASH_KINDS:
        return "crashed", failing, headline
    if kind == "raised" and COMPILE.search(headline) and not RUNTIME_IN_INTERPRETER.search(headline):
        return "does not compile", failing, headline
    return "killed", failing, headline


def keep_case(failing: dict, out: Path, mutant_id: str) -> str | None:
    """The killing case: a search's shrunk case (and its sidecar) copied to out/cases/<mutant>/, or the
    corpus case that failed (left where it is)."""
    for replay in failing.get("replays", []):
        if replay.get("status") in ("failed", "xfailed"):
            return replay.get("path")
    case = failing.get("case")
    if not case or not Path(case).is_file():
        return None
    digest = hashlib.sha256(mutant_id.encode()).hexdigest()[:10]
    name = re.sub(r"[^\w.-]+", "_", mutant_id)[:80]
    folder = out / "cases" / f"{name}-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    for source in (Path(case), Path(case).with_suffix(".json")):
        if source.is_file():
            shutil.copyfile(source, folder / source.name)
    return str(folder / Path(case).name)


def write_mutant(mutant: Mutant, folder: Path) -> Path:
    """The mutated module in `folder` (same file name as the original) and the JSON file naming it."""
    source = Path(mutant.path)
    (folder / "src").mkdir()
    mutated = folder / "src" / source.name
    mutated.write_text(mutant.source)
    named = folder / "mutant.json"
    named.write_text(json.dumps({"module": mutant.module, "path": str(mutated), "id": mutant.id,
                                 "package": str(source.parent) if source.name == "__init__.py" else None}))
    return named


def run_mutant(subject: Subject, mutant: Mutant, options: Options, deadline: float | None) -> Result:
    """The record's rule first; a survivor then under each dialect view of the subject's, until one kills it."""
    folder = Path(tempfile.mkdtemp(prefix="specverify-mutant-"))
    try:
        named = write_mutant(mutant, folder)
        seconds = 0.0
        for view in (None, *subject.views):
            report = folder / "report.json"
            report.unlink(missing_ok=True)
            finished = run_check(check_command(subject, options, folder, view), folder, deadline,
                                 {MUTANT_ENV: str(named)})
            outcome, failing, headline = judge(finished, deadline)
            seconds += finished.seconds
            if outcome != "survived":
                break
        if view is not None and outcome != "survived":
            headline = f"under dialect {view[0]}: {headline}"
        result = Result(mutant, outcome, headline=headline, seconds=seconds)
        if failing is not None:
            result.check = str(failing.get("check", ""))
            result.examples = failing.get("found_after") or failing.get("examples") or None
            if outcome == "killed":
                result.case = keep_case(failing, options.out, mutant.id)
        return result
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def baseline(subject: Subject, options: Options) -> tuple[str, float]:
    """("passed" or what failed, wall seconds) of the unmutated implementation's checks (each dialect view's too;
    the seconds are the longest one's, a mutant's deadline being per check)."""
    longest = 0.0
    for view in (None, *subject.views):
        status, seconds = view_baseline(subject, options, view)
        longest = max(longest, seconds)
        if status != "passed":
            return (f"under dialect {view[0]}: {status}" if view else status), longest
    return "passed", longest


def view_baseline(subject: Subject, options: Options, view: tuple[str, str] | None) -> tuple[str, float]:
    folder = Path(tempfile.mkdtemp(prefix="specverify-baseline-"))
    try:
        finished = run_check(check_command(subject, options, folder, view), folder, None, {})
        if finished.report is None:
            last = (finished.output.strip().splitlines() or ["no output"])[-1]
            return f"the check process exited with status {finished.status}: {last[:300]}", finished.seconds
        failing = first_failure(finished.report)
        if failing is not None:
            return f"{failing.get('check')}: {str(failing.get('headline'))[:300]}", finished.seconds
        if finished.status != 0:
            return f"the check exited with status {finished.status} (nothing checked, or a waiver no longer " \
                   f"needed)", finished.seconds
        return "passed", finished.seconds
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_mutants(subject: Subject, found: list[Mutant], options: Options,
                equivalent: dict[str, tuple[str, tuple[str, ...] | None]] | None = None, enumerated: int | None = None,
                progress: Callable[[Subject, Result], None] | None = None) -> StageRun:
    """The baseline, then every mutant of `found` (`options.jobs` at a time): one StageRun, results in
    the order of `found`. `equivalent`: `load_equivalent`'s mapping; `progress` hears of each result."""
    ENDING.clear()
    status, seconds = baseline(subject, options)
    run = StageRun(subject, status, seconds, len(found) if enumerated is None else enumerated)
    if status != "passed":
        return run
    deadline = options.deadline or DEADLINE_FACTOR * seconds + DEADLINE_SLACK

    def one(mutant: Mutant) -> Result:
        result = run_mutant(subject, mutant, options, deadline)
        reason, stages = (equivalent or {}).get(mutant.id, ("", None))
        if result.outcome == "survived" and reason and (stages is None or subject.stage in stages):
            result.judged = reason
        if progress is not None:
            progress(subject, result)
        return result

    pool = ThreadPoolExecutor(max_workers=max(1, options.jobs))
    try:
        run.results = list(pool.map(one, found))
    except BaseException:    # interrupted: end the checks running now (they end their workers), wait for them
        pool.shutdown(wait=False, cancel_futures=True)
        end_all()
        raise
    finally:
        pool.shutdown(wait=True)
    return run


def end_all() -> None:
    """SIGTERM to every check process running now (each ends its workers; run_check reaps it); none starts
    after it (`Ended`) until the next run_mutants."""
    with LIVE_LOCK:
        ENDING.set()
        for process in LIVE:
            try:
                process.send_signal(signal.SIGTERM)
            except OSError:
                pass


def enumerate_mutants(impl: str, operators: list[str] | None = None,
                      ids: list[str] | None = None) -> tuple[list[Mutant], list[Mutant]]:
    """(every mutant of the implementation, those of the chosen operators and ids) from
    `specverify.mutation.mutants`."""
    from specverify.mutation import mutants

    everything = mutants.mutants(impl)
    chosen = [m for m in everything if (not operators or m.operator in operators) and (not ids or m.id in ids)]
    return everything, chosen

"""What the command line prints: one console, the live progress of a check run, and lines a person reads."""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from specverify.runs import session

console = Console(highlight=False, soft_wrap=True, emoji=False)   # "hostile2:OK" stays text
if not console.is_terminal:  # logs and pipes: wide enough that tables never fold a stage name
    console.width = max(console.width, 132)

MARKS = {"passed": "ok", "failed": "FAILED", "error": "ERROR", "skipped": "skip", "xfailed": "xfail",
         "waived": "waived", "incomplete": "INCOMPLETE"}


def say(line: str) -> None:
    """One line, as it is (no markup)."""
    console.print(line, markup=False)


def named(target) -> str:
    """A target as the progress lines name it: "rejection.random (dialect strict) on torch/cpu"."""
    under = f" (dialect {target.dialect})" if target.dialect else ""
    return f"{target.stage.name}{under} on {target.backend.name}/{target.device}"


def progress_bar() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True)


class ProgressListener(session.Listener):
    """A live display: every (target, check) pair, and the examples of the check each lane is running; a
    line for every check that finished."""

    def __init__(self, progress: Progress, total: int):
        self.bar = progress
        self.overall = progress.add_task("checks", total=total)
        self.tasks: dict[str, tuple[tuple[str, str], object]] = {}    # lane -> ((target, check), task)

    def check_started(self, target, check, planned, lane="") -> None:
        self.drop(lane)
        where = f"[{lane}] " if lane else ""
        self.tasks[lane] = ((named(target), check), self.bar.add_task(f"  {where}{named(target)}: {check}",
                                                                       total=planned))

    def progress(self, done: int, lane="") -> None:
        if lane in self.tasks:
            self.bar.update(self.tasks[lane][1], completed=done)

    def drop(self, lane: str) -> None:
        if lane in self.tasks:
            self.bar.remove_task(self.tasks.pop(lane)[1])

    def check_done(self, target, outcome) -> None:
        for lane, (key, _) in list(self.tasks.items()):
            if key == (named(target), outcome.check):
                self.drop(lane)
        self.bar.advance(self.overall)
        where = f"  [{outcome.worker}]" if outcome.worker else ""
        self.bar.console.print(f"{MARKS.get(outcome.status, outcome.status):6} {named(target)}: {outcome.check}  "
                               f"({outcome.examples} examples, {outcome.seconds:.1f}s){where}", markup=False)

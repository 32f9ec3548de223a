"""`specverify mutate`: plant first-order bugs in an implementation's own source and report which the checks
catch. Exit status 0 when every mutant was killed, timed out, crashed, was counted apart or is judged
equivalent; 1 a survivor no entry names, a stage whose baseline fails, or a mutant whose check broke; 2 bad
usage; 3 no mutant ran."""
from __future__ import annotations

import time

from specverify import interrupts
from specverify.cli import selection
from specverify.cli.output import console, say
from specverify.usage import FAILED, NOTHING_CHECKED, PASSED, USAGE, UsageError


def subjects(args) -> list:
    """The (stage, implementation) pairs a `specverify mutate` covers."""
    from specverify.mutation.mutation_run import Subject

    if sum(map(bool, (args.impl, args.vendor, args.backend))) != 1:
        raise UsageError("give one of --impl (with one --stage), --vendor and --backend")
    stages = selection.stages(args.stage)
    if args.backend:
        found = [Subject(s.name, s.impls[args.backend], views=tuple(
                     (name, rule.impls[args.backend]) for name, rule in s.dialects.items()
                     if args.backend in rule.impls), validates=True) for s in stages if args.backend in s.impls]
        if not found:
            raise UsageError(f"--stage selects no stage with a {args.backend} kernel")
        return found
    outside, vendor = selection.outside_sources(args, stages, "mutate", args.timeout)
    return [Subject(name, source, args.vendor) if vendor else Subject(name, source)
            for name, source in outside.items()]


def run(args) -> int:
    """Enumerate the mutants of each subject, then (unless --list) run them and report."""
    from specverify.mutation import mutants
    from specverify.mutation import mutation_run as mutate
    from specverify.pages import mutation_report

    for op in args.operator or ():
        if op not in mutants.OPERATORS:
            raise UsageError(f"--operator {op!r}: not an operator (known: {', '.join(mutants.OPERATORS)})")
    try:
        equivalent = mutate.load_equivalent(args.equivalent) if args.equivalent else {}
    except mutate.EquivalentError as exc:
        raise UsageError(str(exc)) from None
    options = mutate.Options(args.profile, args.examples, args.seed, selection.outside_device(args), args.jobs,
                             args.deadline, args.timeout, args.waivers, args.cases, args.out, tuple(args.check or ()))
    chosen = subjects(args)
    enumerated = [(subject, *mutate.enumerate_mutants(subject.impl, args.operator, args.mutant)) for subject in chosen]
    known = {m.id for _, everything, _ in enumerated for m in everything}
    for wanted in args.mutant or ():
        if wanted not in known:
            raise UsageError(f"--mutant {wanted!r}: no mutant of the chosen stages has this id (see --list)")
    if args.mutant:             # only the stages that hold one of them
        enumerated = [row for row in enumerated if row[2]]
    if args.list:
        for subject, everything, picked in enumerated:
            picked = mutate.sample(picked, args.sample, f"{args.seed}:{subject.stage}")
            say(f"{subject.stage} ({subject.impl}): {len(picked)} of {len(everything)} mutant(s)")
            for m in picked:
                say(f"  {m.id}  {m.path}:{m.line}  [{m.operator}] {m.before} → {m.after}")
        return PASSED
    say(f"specverify mutate: profile {options.profile}, seed {options.seed}, {len(chosen)} stage(s), "
        f"{args.jobs} at a time, on {options.device}")

    def heard(subject, result) -> None:
        say(f"{result.outcome:16} {subject.stage} {result.mutant.id} ({result.seconds:.1f}s)")

    run = mutate.MutationRun([], options, str(args.equivalent) if args.equivalent else None,
                             mutate.stale(equivalent, known), time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    interrupted = False
    try:
        for subject, everything, picked in enumerated:
            picked = mutate.sample(picked, args.sample, f"{args.seed}:{subject.stage}")
            run.stages.append(mutate.run_mutants(subject, picked, options, equivalent, len(everything), heard))
    except interrupts.Interrupted as stop:
        interrupts.caught()
        say(f"specverify mutate: interrupted by {stop.why}: the report holds the {len(run.stages)} stage(s) "
            f"that finished")
        run.stale, interrupted = [], True
    with interrupts.deferred():
        interrupts.caught()             # a signal from here on is read below
        console.print(mutation_report.summary_table(run))
        for line in mutation_report.lines(run):
            say(line)
        problems = mutation_report.write(run, args.json, args.markdown)
    for line in problems:
        say(f"specverify mutate: error: {line}")
    ran = sum(len(s.results) for s in run.stages)
    status = FAILED if run.survivors or run.counts()["error"] or interrupted or interrupts.pending() else \
        NOTHING_CHECKED if not ran else PASSED
    return USAGE if problems else status

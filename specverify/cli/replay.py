"""`specverify replay PATH`: re-run a case file on every backend that runs here (or one, or an --impl) and
print the difference. Exit status 0 when every target passed, 1 when one failed, 2 for a case file that
is unreadable or damaged."""
from __future__ import annotations

from specverify.cli import selection
from specverify.cli.output import say
from specverify.files import cases
from specverify.judge.failure_report import failure_report, replay_command
from specverify.judge.harness import Failure, OracleError
from specverify.records import backends, registry
from specverify.records.dialects import words
from specverify.runs import session
from specverify.runs.catalogue import CHECKS
from specverify.usage import FAILED, PASSED, UsageError


def run(args) -> int:
    try:
        stage_name, example = cases.load(args.path)
    except cases.CaseError as exc:
        raise UsageError(str(exc)) from None
    stage = registry.all_stages().get(stage_name)
    if stage is None:
        raise UsageError(f"{args.path}: stage {stage_name!r} is not known to this version of specverify")
    try:
        cases.check_values(args.path, stage, example)   # a case the oracle refuses is damaged, not a failure
    except cases.CaseError as exc:
        raise UsageError(str(exc)) from None
    targets = selection.replay_targets(args, stage)
    say(f"replay {args.path}: {stage_name}, {example.tier} tier")
    failures = cases.failures_of(args.path)
    outside = sorted({f.get("source", "?") for f in failures if backends.outside(f.get("backend", ""))})
    if outside and not args.impl:
        say(f"  note: this case failed for an outside implementation ({', '.join(outside)}); "
            f"replay it with --impl {outside[0]}. Our own backends:")
    across = any(f.get("check") == "cross-device" for f in failures)
    plan = session.RunPlan.build(timeout=args.timeout or session.REPLAY_TIMEOUT, keep_findings=False)
    failed = False
    for target in targets:
        devices = across and CHECKS["cross-device"].applies(target) is None
        if across and not devices:
            say(f"  note: this case failed the cross-device check; on {target.backend.name}/"
                f"{target.device}: {CHECKS['cross-device'].applies(target)}")
        try:
            session.verify_example(target, example, plan, devices)
            under = f" under {words(target.stage, target.dialect)}" if target.dialect else ""
            say(f"  passed  {target.backend.name}/{target.device}{under}")
        except (Failure, OracleError) as exc:
            failed = True
            say(failure_report(target, example, exc, replay_command(args.path, target)))
    return FAILED if failed else PASSED

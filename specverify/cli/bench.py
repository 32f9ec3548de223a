"""`specverify bench`: time every selected stage's implementations on its benchmark input, each checked
first; a table, results.json and PNGs. Exit status 0, 1 when an implementation was wrong (not timed),
2 bad usage, 3 nothing was timed."""
from __future__ import annotations

from pathlib import Path

from specverify import env
from specverify.cli import selection
from specverify.cli.output import console, say
from specverify.records import backends
from specverify.runs import session
from specverify.usage import FAILED, NOTHING_CHECKED, PASSED, UsageError


def run(args) -> int:
    from specverify.bench import results, sweep

    if args.plot_from:
        try:
            measured = results.read_json(args.plot_from)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        return plot(measured, args.out or args.plot_from.parent)
    device = args.device or ("cuda" if env.cuda_available() else "cpu")
    why = backends.unavailable("torch", device)
    if why:
        raise UsageError(f"--device {device}: {why}")
    if not args.device and device == "cpu":
        say("specverify bench: no CUDA device: benching on the CPU (wall times)")
    stages = selection.stages(args.stage)
    outside, _ = selection.outside_sources(args, stages, "bench", args.timeout)
    if outside:
        stages = [s for s in stages if s.name in outside]
    options = sweep.Options(device, tuple(sum(args.batch or [list(sweep.BATCHES)], [])),
                            tuple(sum(args.vocab or [list(sweep.VOCABS)], [])),
                            sweep.Settings(args.calls, args.replays, args.repeat),
                            tuple(args.backend or ()) or None, outside,
                            session.RunPlan.build(seed=args.seed, isolate=False, timeout=args.timeout,
                                                  keep_findings=False))
    say(f"specverify bench: {len(stages)} stage(s) on {device}, B {list(options.batches)}, V {list(options.vocabs)}")
    try:
        measured = sweep.run(stages, options, progress)
    except session.ImplementationNotFound as exc:
        raise UsageError(f"--impl {exc}") from None
    console.print(results.table(measured))
    for line in results.reference_lines(measured):
        say(line)
    out = args.out or Path("bench/results")
    if args.json:
        results.write_json(measured, out / "results.json")
        say(f"wrote {out / 'results.json'}")
    if args.plots:
        plot(measured, out)
    statuses = {r["status"] for r in measured["rows"]}
    return NOTHING_CHECKED if not statuses else FAILED if statuses - {"ok"} else PASSED


def progress(row: dict) -> None:
    where = f"{row['stage']} {row['backend']}/{row['device']} B={row['B']} V={row['V']}"
    if row["status"] != "ok":
        say(f"{row['status'].upper():6} {where}: {row.get('message', '')}")
        return
    device = f"{row['device_us']:.3g} µs {row.get('device_method')}, " if row.get("device_us") is not None else ""
    say(f"ok     {where}: {device}{row['host_us']:.3g} µs host")


def plot(results: dict, out: Path) -> int:
    from specverify.bench import figures

    notice = figures.missing()
    if notice:
        say(notice)
        return PASSED
    for path in figures.draw(results, out):
        say(f"wrote {path}")
    return PASSED

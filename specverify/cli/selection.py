"""What a run checks: the one resolution of a front end's options into stages, targets and a run plan.

`specverify check`, `replay`, `bench`, `mutate` and the pytest plugin all resolve their options here, from the
namespace `specverify.cli.options` parses (pytest: `options.from_pytest`): the stages (names or globs, a near
miss answered with "did you mean"), our backends and devices, an `--impl` with its `--declare` file, a
`--vendor` with the declarations of its mapping, dialects, `validates`, waivers and the run plan. Outside
implementations are looked up before anything runs (in a contained worker: the judge never imports them), so
a path that names nothing is one line naming the module or attribute. Every problem is an
`usage.UsageError`: one line.
"""
from __future__ import annotations

import argparse
import fnmatch
from dataclasses import dataclass, field

from specverify import env
from specverify.cli.options import plan_keywords
from specverify.files import vendors
from specverify.records import backends, dialects, domain, registry
from specverify.records.backends import Target
from specverify.records.stage import Stage
from specverify.runs import session, waivers
from specverify.runs.protocol import Outcome
from specverify.runs.verdicts import Run, exit_status
from specverify.usage import FAILED, UsageError, did_you_mean

VERBS = {"check": "checks", "bench": "benches", "mutate": "mutates"}


@dataclass
class Selection:
    """A run's targets and plan, resolved once."""
    plan: session.RunPlan
    stages: list[Stage]
    targets: list[Target] = field(default_factory=list)
    skipped: list[Outcome] = field(default_factory=list)   # asked for with --device, and not runnable here
    notes: list[str] = field(default_factory=list)         # what was left out unasked, one line each
    vendor: vendors.Vendor | None = None
    outside: dict[str, str] = field(default_factory=dict)  # stage -> "module:function" of an outside implementation
    device: str = "cpu"                                    # where the run's targets run

    @property
    def judges_outside(self) -> bool:
        return bool(self.outside)

    def finished(self, outcomes: list[Outcome], interrupted: str | None = None) -> Run:
        """The run these outcomes make: waivers settled, the stages a vendor does not implement, the exit status
        (an interrupted run: FAILED)."""
        implemented = set(self.vendor.implementations) if self.vendor is not None else None
        if self.plan.waivers is not None:
            self.plan.waivers.finish(set(registry.all_stages()), implemented)
        run = Run(outcomes, self.plan.profile.name, self.plan.run_seed, self.device, self.vendor, self.plan.waivers,
                  [s for s in registry.all_stages() if implemented is not None and s not in implemented],
                  str(self.plan.findings) if self.plan.findings else None)
        run.exit_status = FAILED if interrupted else exit_status(outcomes, self.plan.waivers)
        run.interrupted = interrupted
        return run


def stages(patterns: list[str] | None, prefix: str = "--") -> list[Stage]:
    """The stages the names or glob patterns select, in the order asked (a pattern's matches in the suite's
    order; each stage once); every stage, in the suite's order, for none."""
    known = registry.all_stages()
    if not patterns:
        return list(known.values())
    chosen: dict[str, Stage] = {}
    for pattern in patterns:
        matched = [name for name in known if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            raise UsageError(f"{prefix}stage {pattern!r} matches no stage{did_you_mean(pattern, list(known))} "
                             f"(`specverify list` lists them)")
        chosen.update((name, known[name]) for name in matched if name not in chosen)
    return list(chosen.values())


def outside_device(args: argparse.Namespace, prefix: str = "--") -> str:
    """Where an outside implementation runs: --device (which must be here), else CUDA when present."""
    device = args.device or ("cuda" if env.cuda_available() else "cpu")
    why = backends.unavailable("torch", device)
    if why:
        raise UsageError(f"{prefix}device {device}: {why}")
    return device


def plan(args: argparse.Namespace, command: str = "check", prefix: str = "--", **fixed) -> session.RunPlan:
    """The run plan the options set (`fixed`: keywords a command sets itself)."""
    keywords = {k: v for k, v in plan_keywords(args, command).items() if k not in fixed}
    if keywords.get("waivers") is not None:
        try:
            keywords["waivers"] = waivers.load(keywords["waivers"])
        except waivers.WaiverError as exc:
            raise UsageError(str(exc)) from None
    try:
        return session.RunPlan.build(**keywords, **fixed, option_prefix=prefix)
    except session.PlanError as exc:
        raise UsageError(str(exc)) from None


def vendor(args: argparse.Namespace, timeout: float | None, prefix: str = "--") -> vendors.Vendor:
    try:
        return vendors.resolve(args.vendor, list(registry.all_stages()), timeout or vendors.READ_TIMEOUT)
    except vendors.VendorError as exc:
        raise UsageError(str(exc).replace("--vendor", f"{prefix}vendor", 1)) from None


def outside_sources(args: argparse.Namespace, chosen: list[Stage], command: str, timeout: float | None,
                    prefix: str = "--") -> tuple[dict[str, str], vendors.Vendor | None]:
    """{stage: "module:function"} of the outside implementations asked for (--impl of one --stage, or a
    --vendor's among the chosen stages), each looked up in a contained worker first."""
    if args.impl and getattr(args, "vendor", None):
        raise UsageError(f"{prefix}impl and {prefix}vendor exclude each other")
    found: dict[str, str] = {}
    chosen_vendor = None
    if args.impl or getattr(args, "vendor", None):
        outside_device(args, prefix)      # a device that is not here is said first: it needs no worker
    if getattr(args, "vendor", None):
        chosen_vendor = vendor(args, timeout, prefix)
        names = {s.name for s in chosen}
        found = {name: source for name, source in chosen_vendor.implementations.items() if name in names}
        if not found:
            raise UsageError(f"{prefix}stage selects no stage that vendor {chosen_vendor.name} implements "
                             f"({', '.join(chosen_vendor.implementations)})")
    elif args.impl:
        if not getattr(args, "stage", None):
            raise UsageError(f"{prefix}impl needs {prefix}stage NAME: the stage it implements")
        if len(chosen) != 1:
            raise UsageError(f"{prefix}impl {VERBS[command]} one stage; {prefix}stage selects {len(chosen)} "
                             f"({', '.join(s.name for s in chosen[:4])}{', ...' if len(chosen) > 4 else ''})")
        found = {chosen[0].name: args.impl}
    look_up(found.values(), timeout, f"vendor {chosen_vendor.name}:" if chosen_vendor else f"{prefix}impl")
    return found, chosen_vendor


def look_up(sources, timeout: float | None, where: str) -> None:
    """UsageError naming the first outside implementation whose module or function does not exist."""
    for source, problem in vendors.missing_sources(sorted(set(sources)), timeout or vendors.READ_TIMEOUT).items():
        raise UsageError(f"{where} {source}: {problem}")


def dialect_problem(stage: Stage, name: str) -> str | None:
    why = dialects.problem(stage, name)
    return why and why + did_you_mean(name, dialects.dialect_names(stage))


def select(args: argparse.Namespace, prefix: str = "--") -> Selection:
    """`specverify check` and pytest's outside tests: stages, targets (declarations applied) and the plan."""
    if args.declare and not args.impl:
        raise UsageError(f"{prefix}declare describes an {prefix}impl: give one (a vendor declares in its mapping)")
    if getattr(args, "vendor", None) and getattr(args, "backend", None):
        raise UsageError(f"{prefix}vendor excludes {prefix}backend")
    if args.impl and getattr(args, "backend", None):
        raise UsageError(f"{prefix}impl and {prefix}backend exclude each other")
    if args.dialect is not None and getattr(args, "vendor", None):
        raise UsageError(f"{prefix}dialect and {prefix}vendor exclude each other (a vendor's declaration names "
                         f"its dialects)")
    run_plan = plan(args, "check", prefix)
    chosen = stages(args.stage, prefix)
    if args.dialect is not None:
        having = [s for s in chosen if dialects.problem(s, args.dialect) is None]
        if not having:
            raise UsageError(dialect_problem(chosen[0], args.dialect))
        chosen = having
    outside, chosen_vendor = outside_sources(args, chosen, "check", run_plan.per_call, prefix)
    if outside:
        device = outside_device(args, prefix)
        targets = [declared(name, source, device, args, chosen_vendor, prefix) for name, source in outside.items()]
        return Selection(run_plan, chosen, targets, vendor=chosen_vendor, outside=outside, device=device)
    return ours(args, run_plan, chosen, prefix)


def declared(name: str, source: str, device: str, args, chosen_vendor, prefix: str) -> Target:
    """The outside target of stage `name`, with what its vendor's mapping or --declare file declares."""
    stage = registry.all_stages()[name]
    try:
        if chosen_vendor is not None:
            return domain.declared(backends.target(stage, "impl", device, source),
                                   chosen_vendor.declarations.get(name, {}), f"vendor {chosen_vendor.name}")
        found = backends.target(stage, "impl", device, source, args.dialect or "")
        return domain.declared(found, domain.load(args.declare), f"{prefix}declare {args.declare}") \
            if args.declare else found
    except (domain.DomainError, dialects.UnknownDialect) as exc:
        raise UsageError(str(exc)) from None


def ours(args, run_plan: session.RunPlan, chosen: list[Stage], prefix: str) -> Selection:
    """Our backends of the chosen stages: those that run here; those asked for by --device that do not are
    skipped outcomes; those not asked for are one note."""
    if args.device:
        why = backends.unavailable("torch", args.device)
        if why:
            raise UsageError(f"{prefix}device {args.device}: {why}")
    found = Selection(run_plan, chosen, device=args.device or ("cuda" if env.cuda_available() else "cpu"))
    elsewhere: dict[str, set[str]] = {}
    for stage, backend, device, why in backends.matrix(chosen, args.backend, [args.device] if args.device else None,
                                                       args.dialect):
        if why is None:
            found.targets.append(backends.target(stage, backend, device))
        elif args.device:
            found.skipped.append(Outcome(stage.name, backend, device, "-", status="skipped", headline=why,
                                         dialect=stage.dialect))
        elif args.backend:
            elsewhere.setdefault(f"{backend}/{device}: {why}", set()).add(stage.name)
    found.notes = [f"not checked here: {what} ({len(names)} stage(s))" for what, names in elsewhere.items()]
    if not found.targets and not found.skipped:
        raise UsageError("nothing to check: no selected stage has the selected backend here"
                         + (f" ({'; '.join(found.notes)})" if found.notes else ""))
    return found


def replay_targets(args: argparse.Namespace, stage: Stage) -> list[Target]:
    """`specverify replay`: the case's stage on --impl, or on our backends that run here (--backend, --device,
    --dialect narrow them)."""
    if args.dialect and dialect_problem(stage, args.dialect):
        raise UsageError(dialect_problem(stage, args.dialect))
    if args.impl:
        device = outside_device(args)
        look_up([args.impl], args.timeout, "--impl")
        return [backends.target(stage, "impl", device, args.impl, args.dialect or "")]
    found = [backends.target(view, b, d) for view, b, d, why in
             backends.matrix([stage], [args.backend] if args.backend else None, [args.device] if args.device else None,
                             args.dialect) if why is None]
    if not found:
        raise UsageError(f"no backend of {stage.name} runs here with the options given")
    return found

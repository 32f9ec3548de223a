"""A sharded run over a Ray cluster (the optional extra `pip install specverify[ray]`).

Each target with its checks is one Ray task (`shard`'s work function and split: checks that
compare devices stay in the driver). With GPUs in the cluster a task asks for one (`num_gpus=1`: Ray sets
its CUDA_VISIBLE_DEVICES, and a fresh worker process per task keeps CUDA from being touched before that);
without, one CPU. A task gets a scratch folder of its own: a copy of the stage's case files from the
driver's `--cases` folder (for the corpus check) and an empty findings folder, whose files it returns as
bytes: the driver saves them into the plan's findings folder and points the outcomes at its own folders. Every node needs specverify
installed (the same version) in the Python environment Ray starts its workers with.
"""
from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from specverify import env
from specverify.files import cases
from specverify.judge.calls import error_text
from specverify.records.backends import Target
from specverify.runs import shard
from specverify.runs.protocol import Outcome
from specverify.runs.session import Listener, RunPlan


class RayError(ValueError):
    """Ray is not installed, or no cluster could be reached (bad usage)."""


def connect(address: str):
    """Ray, connected: "auto" joins the cluster this machine knows of (RAY_ADDRESS, or one started with
    `ray start`) or starts one here; anything else is a cluster address."""
    try:
        import ray
    except ImportError:
        raise RayError("--ray needs Ray: pip install 'specverify[ray]'") from None
    if not ray.is_initialized():
        try:
            ray.init(address=None if address == "auto" else address, log_to_driver=False,
                     include_dashboard=False)
        except Exception as exc:  # an unreachable address, a cluster that refuses us
            raise RayError(f"--ray {address}: {type(exc).__name__}: {exc}") from None
    return ray


def bundle(folder: Path | None, stage: str) -> dict[str, bytes]:
    """The stage's case files in the driver's --cases folder, by path relative to it."""
    if folder is None or not (Path(folder) / stage).is_dir():
        return {}
    return {f"{stage}/{p.name}": p.read_bytes() for p in sorted((Path(folder) / stage).iterdir())
            if p.suffix in (".npz", ".json")}


def task(index: int, spec: tuple, plan: RunPlan, names: set[str], seeded: dict[str, bytes]):
    """One target's checks on a Ray worker: (index, outcomes, skip waivers' uses, the case files it found,
    its scratch folder)."""
    import ray

    env.prepare()
    gpus = ray.get_gpu_ids()
    lane = f"ray {ray.util.get_node_ip_address()}" + (f" gpu {','.join(map(str, gpus))}" if gpus else "")
    scratch = Path(tempfile.mkdtemp(prefix="specverify-ray-"))
    for name, data in seeded.items():
        (scratch / "cases" / name).parent.mkdir(parents=True, exist_ok=True)
        (scratch / "cases" / name).write_bytes(data)
    local = dataclasses.replace(plan, cases=scratch / "cases" if plan.cases is not None else None,
                                findings=scratch / "findings" if plan.findings is not None else None)
    _, outcomes, uses = shard.work(index, spec, local, names, lane, Listener())
    found = {str(p.relative_to(scratch / "findings")): p.read_bytes() for p in (scratch / "findings").rglob("*")
             if p.suffix in (".npz", ".json")}
    return index, outcomes, uses, found, str(scratch)


def land(found: dict[str, bytes], scratch: str, plan: RunPlan, outcomes: list[Outcome]) -> None:
    """Save a task's findings into the driver's findings folder and point its outcomes at the driver's
    folders (findings, and the --cases files it replayed)."""
    if plan.findings is not None:
        with tempfile.TemporaryDirectory(prefix="specverify-ray-") as tmp:
            for name, data in found.items():
                (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
                (Path(tmp) / name).write_bytes(data)
            for path in Path(tmp).rglob("*.npz"):
                stage, example = cases.load(path)
                for record in cases.failures_of(path):
                    cases.save(plan.findings, stage, example, record)
    moved = {str(Path(scratch) / "findings"): plan.findings, str(Path(scratch) / "cases"): plan.cases}

    def at_driver(path):
        for remote, local in moved.items():
            if local is not None and path is not None and str(path).startswith(remote):
                return Path(local) / Path(path).relative_to(remote)
        return path

    for o in outcomes:
        o.case = at_driver(o.case)
        for remote, local in moved.items():
            if local is not None:
                o.report = o.report.replace(remote, str(local))
        for r in o.replays:
            r.path = at_driver(r.path)


def run(targets: list[Target], plan: RunPlan, address: str, listener: Listener | None = None) -> list[Outcome]:
    """The run over Ray; outcomes in the order of a run in one process."""
    env.prepare()
    ray = connect(address)
    gather = shard.Gather(targets, plan, listener or Listener())
    remote, here = shard.split(targets, plan)
    gpus = ray.cluster_resources().get("GPU", 0) >= 1
    resources = {"num_gpus": 1, "max_calls": 1} if gpus else {"num_cpus": 1}
    function = ray.remote(**resources)(task)
    shipped = shard.shipping(plan)
    pending, seeded = {}, {}
    for i, names in remote:
        seeded[i] = bundle(plan.cases, targets[i].stage.name) if "corpus" in names else {}
        pending[function.remote(i, shard.describe(targets[i]), shipped, names, seeded[i])] = i
    shard.run_here(targets, plan, here, gather)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        i = pending.pop(done[0])
        try:
            index, outcomes, uses, found, folder = ray.get(done[0])
            land(found, folder, plan, outcomes)
            gather.add(index, outcomes, uses)
        except Exception as exc:  # the task failed (a worker died, a node was lost)
            gather.broke(i, "remote", error_text(exc))
    return gather.outcomes()

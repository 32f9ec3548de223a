"""A sharded run over a Ray cluster (the optional extra `pip install specverify[ray]`).

Each target with its checks is one Ray task, as in `shard` (same work function, same split: checks that
compare devices stay in the driver). With GPUs in the cluster a task asks for one (`num_gpus=1`: Ray sets
its CUDA_VISIBLE_DEVICES, and a fresh worker process per task keeps CUDA from being touched before that);
without, one CPU. A task writes the cases it finds into a folder of its own, seeded with the stage's
case files from the driver's `--cases` folder (for the corpus check), and returns the new files' bytes: the
driver saves them into its own folder and points the outcomes at them. Every node needs specverify
installed (the same version) in the Python environment Ray starts its workers with.
"""
from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

from specverify import cases, env, shard
from specverify.backends import Target
from specverify.checks import Outcome
from specverify.session import Listener, Options


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


def bundle(cases_dir: Path | None, stage: str) -> dict[str, bytes]:
    """The stage's case files in the driver's folder, by path relative to it."""
    if cases_dir is None or not (Path(cases_dir) / stage).is_dir():
        return {}
    return {f"{stage}/{p.name}": p.read_bytes() for p in sorted((Path(cases_dir) / stage).iterdir())
            if p.suffix in (".npz", ".json")}


def task(index: int, spec: tuple, options: Options, names: set[str], seeded: dict[str, bytes]):
    """One target's checks on a Ray worker: (index, outcomes, skip waivers' uses, new case files, folder)."""
    import ray

    env.prepare()
    gpus = ray.get_gpu_ids()
    lane = f"ray {ray.util.get_node_ip_address()}" + (f" gpu {','.join(map(str, gpus))}" if gpus else "")
    folder = Path(tempfile.mkdtemp(prefix="specverify-ray-"))
    for name, data in seeded.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    local = dataclasses.replace(options, cases_dir=folder if options.cases_dir is not None else None)
    _, outcomes, uses = shard.work(index, spec, local, names, lane, Listener())
    found = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*")
             if p.suffix in (".npz", ".json") and seeded.get(str(p.relative_to(folder))) != p.read_bytes()}
    return index, outcomes, uses, found, str(folder)


def land(found: dict[str, bytes], seeded: dict[str, bytes], remote: str, cases_dir: Path | None,
         outcomes: list[Outcome]) -> None:
    """Save a task's new cases into the driver's folder and point its outcomes there."""
    if cases_dir is None:
        return
    with tempfile.TemporaryDirectory(prefix="specverify-ray-") as tmp:
        for name, data in found.items():
            (Path(tmp) / name).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / name).write_bytes(data)
        for path in Path(tmp).rglob("*.npz"):
            stage, example = cases.load(path)
            known = seeded.get(str(path.relative_to(tmp).with_suffix(".json")))
            old = json.loads(known).get("failures", []) if known is not None else []
            for record in cases.failures_of(path):
                if record not in old:
                    cases.save(cases_dir, stage, example, record)
    for o in outcomes:
        if o.case is not None and str(o.case).startswith(remote):
            o.case = Path(cases_dir) / Path(o.case).relative_to(remote)
        o.report = o.report.replace(remote, str(cases_dir))
        for r in o.replays:
            if str(r.path).startswith(remote):
                r.path = Path(cases_dir) / Path(r.path).relative_to(remote)


def run(targets: list[Target], options: Options, address: str, listener: Listener | None = None) -> list[Outcome]:
    """The run over Ray; outcomes in the order of a run in one process."""
    env.prepare()
    ray = connect(address)
    gather = shard.Gather(targets, options, listener or Listener())
    remote, here = shard.split(targets, options)
    gpus = ray.cluster_resources().get("GPU", 0) >= 1
    resources = {"num_gpus": 1, "max_calls": 1} if gpus else {"num_cpus": 1}
    function = ray.remote(**resources)(task)
    shipped = shard.shipping(options)
    pending, seeded = {}, {}
    for i, names in remote:
        seeded[i] = bundle(options.cases_dir, targets[i].stage.name) if "corpus" in names else {}
        pending[function.remote(i, shard.describe(targets[i]), shipped, names, seeded[i])] = (i, names)
    shard.run_here(targets, options, here, gather)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=1)
        i, names = pending.pop(done[0])
        try:
            index, outcomes, uses, found, folder = ray.get(done[0])
            land(found, seeded[i], folder, options.cases_dir, outcomes)
            gather.add(index, outcomes, uses)
        except Exception as exc:  # the task failed (a worker died, a node was lost)
            gather.broke(i, names, exc)
    return gather.outcomes()

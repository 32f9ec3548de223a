"""What a bench run shows and keeps: the terminal table, the reference lines, the JSON, the machine record."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from rich.markup import escape
from rich.table import Table

import specverify
from specverify import env
from specverify.judge import provenance


def machine(device: str) -> dict:
    """GPU (or CPU), driver, library versions, Python and the checkout's commit."""
    found = {**provenance.machine(device), **env.versions()}
    found["driver"] = gpu_driver() if device == "cuda" else None
    found["commit"] = commit()
    return found


def run_text(args: list[str]) -> str | None:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def gpu_driver() -> str | None:
    found = run_text(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    if found:
        return found.splitlines()[0]
    try:
        return Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None


def commit() -> str | None:
    """HEAD of the checkout specverify runs from, with "+dirty" when tracked files changed."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(specverify.__file__)))
    head = run_text(["git", "-C", root, "rev-parse", "HEAD"])
    if head is None:
        return None
    dirty = run_text(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"])
    return head + ("+dirty" if dirty else "")


def us(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if value < 100 else f"{value:.0f}"


def ratio(value) -> str:
    return "-" if value is None else f"{value:.2g}x" if value < 10 else f"{value:.0f}x"


def with_ratio(value: str, r) -> str:
    return value if r is None else f"{value} ({ratio(r)})"


def table(results: dict) -> Table:
    """One line per (stage, implementation, B, V); each figure beside its ratio to the reference."""
    cpu = results["settings"]["device"] != "cuda"
    out = Table("stage", "impl", "B", "V", "status", ("wall" if cpu else "device") + " µs (x floor)",
                "host µs (x floor)", "launches", "GB/s (x copy)", "note",
                title=f"specverify bench on {results['machine'].get('gpu') or 'the CPU'} "
                      f"(K = {results['settings']['spec']})")
    out.columns[0].no_wrap = True
    for row in results["rows"]:
        ok = row["status"] == "ok"
        note = row.get("message", "") if not ok else ""
        if ok and row.get("device_method") == "events":
            note = "not captured: events around eager calls"
        if "x_baseline" in row:
            note = f"host {ratio(row['x_baseline'])} naive"
        bandwidth = with_ratio(f"{row['gbps']:.0f}", row.get("gbps_x_copy")) if row.get("memory_bound") else "-"
        out.add_row(row["stage"], row["backend"], str(row["B"]), str(row["V"]),
                    row["status"] if ok else f"[red]{row['status']}[/red]",
                    with_ratio(us(row.get("device_us")), row.get("device_x_floor")),
                    with_ratio(us(row.get("host_us")), row.get("host_x_floor")),
                    str(row.get("launches", "-")), bandwidth, escape(note))
    return out


def reference_lines(results: dict) -> list[str]:
    """The references, the goals, what was left out, how times were taken."""
    floor, copy = results["floor"], results["copy"]
    lines = [results["device_time"],
             f"launch floor ({floor.get('kernel', 'empty Triton kernel')}): device {us(floor.get('device_us'))} µs, "
             f"host {us(floor.get('host_us'))} µs per launch" + (f" ({floor['note']})" if floor.get("note") else ""),
             f"copy bandwidth: {copy['gbps']:.0f} GB/s ({copy['method']}, {copy['bytes'] >> 20} MiB, read + write)",
             "GB/s shown where the stage is memory-bound: its bytes at the copy bandwidth take at least the "
             "floor's device time"]
    for goal in results["goals"]:
        ratios = ", ".join(f"B={b}: {r:.2f}x" for b, r in goal["ratios"].items())
        lines.append(f"{goal['stage']} {goal['backend']} / {goal['baseline']} host time: {ratios} "
                     f"(goal <= {goal['goal']}x at B <= {goal['max_batch']}: "
                     f"{'met' if goal['met'] else 'NOT met'})")
    lines += results["notes"]
    return lines


def write_json(results: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(results, indent=1))
    tmp.replace(path)


def read_json(path: Path) -> dict:
    """A results file written by `write_json`; ValueError when it is not one."""
    try:
        results = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable bench results file ({type(exc).__name__}: {exc})") from None
    if not isinstance(results, dict) or results.get("specverify_bench") != 1 or not isinstance(results.get("rows"),
                                                                                                  list):
        raise ValueError(f"{path}: not a specverify bench results file")
    return results

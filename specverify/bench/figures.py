"""PNG figures of a bench run (matplotlib, imported only here): one figure per stage family, one panel
per stage, time per call against B on log axes, one line per implementation and vocabulary, the launch
floor drawn dashed. Device stages show the device time (the wall time on the CPU), host stages the
host time beside their naive baseline and the floor's host cost."""
from __future__ import annotations

import math
from pathlib import Path


def missing() -> str | None:
    """None when matplotlib imports, else a one-line notice."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return ("matplotlib is not installed: no plots (pip install 'specverify[bench]', then draw them with "
                "`specverify bench --plot-from results.json`)")
    return None


def draw(results: dict, out: Path) -> list[Path]:
    """Write one PNG per family under `out`; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results["rows"] if r.get("status") == "ok"]
    cpu = results["settings"]["device"] != "cuda"
    floor = results["floor"]
    families: dict[str, dict[str, list[dict]]] = {}
    for row in rows:
        families.setdefault(row["family"], {}).setdefault(row["stage"], []).append(row)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for family, stages in families.items():
        cols = min(3, len(stages))
        nrows = math.ceil(len(stages) / cols)
        fig, axes = plt.subplots(nrows, cols, figsize=(5.2 * cols, 3.9 * nrows), squeeze=False)
        for ax in axes.flat[len(stages):]:
            ax.set_visible(False)
        for ax, (stage, mine) in zip(axes.flat, stages.items()):
            host = mine[0]["host_stage"]
            ax.set_xscale("log")
            key = "host_us" if host else "device_us"
            series: dict[tuple[str, int], list[tuple[int, float]]] = {}
            vocabs = sorted({r["V"] for r in mine})
            for r in mine:
                if r.get(key) is not None:
                    series.setdefault((r["backend"], r["V"]), []).append((r["B"], r[key]))
            names = sorted({b for b, _ in series})
            for (backend, vocab), points in sorted(series.items()):
                points.sort()
                dashed = len(vocabs) > 1 and vocab != vocabs[-1]
                ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color=f"C{names.index(backend)}",
                        linestyle="--" if dashed else "-", label=backend + (f" V={vocab}" if len(vocabs) > 1 else ""))
            batches = sorted({r["B"] for r in mine})
            ax.set_xticks(batches, [str(b) for b in batches])
            level = floor.get("host_us" if host else "device_us")
            if level:
                ax.axhline(level, color="gray", linestyle=":", label="launch floor" + (" (host)" if host else ""))
            ax.set_yscale("log")
            ax.set_title(stage + (" (host stage)" if host else ""), fontsize=10)
            ax.set_xlabel("B (requests)")
            ax.set_ylabel("host µs per call" if host else ("wall µs per call (CPU)" if cpu else "device µs per call"))
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle(f"specverify bench: {family} ({results['machine'].get('gpu') or 'CPU'})", fontsize=11)
        fig.tight_layout()
        path = out / f"{family}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written

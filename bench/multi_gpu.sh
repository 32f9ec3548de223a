#!/usr/bin/env bash
# On a machine with two or more GPUs: the same nightly run spread over every GPU and on one GPU, timed,
# their outcomes compared (the examples checked must not depend on the number of workers), and the
# cross-device check. Usage: bench/multi_gpu.sh [EXAMPLES] [SEED] [STEPS]
#   STEPS: comma-separated, default all,one,same,cross (all: --devices all; one: --devices 0; same:
#   --devices 0,0, two workers on one GPU; cross: --check cross-device in one process); also all4:
#   --devices all:4, four workers per GPU (more host cores for the oracles).
# Run from the repository root; results (logs, JSON reports, timings.txt, compare.txt) go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
examples=${1:-200}
seed=${2:-1}
steps=${3:-all,one,same,cross}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
nvidia-smi -L > "$out/gpus.txt" 2>&1
status=0

run() {  # run NAME ARGS...: one timed check run, its log, JSON report and wall time
    local name=$1; shift
    local start end
    start=$EPOCHREALTIME
    python3 -m specverify check --profile nightly --examples "$examples" --seed "$seed" --findings "$out/cases_$name" \
        --json "$out/$name.json" "$@" > "$out/$name.txt" 2>&1
    local rc=$?
    end=$EPOCHREALTIME
    printf '%s rc=%s wall_s=%s args=%s\n' "$name" "$rc" "$(awk "BEGIN{printf \"%.1f\", $end - $start}")" "$*" \
        | tee -a "$out/timings.txt"
    [ "$rc" -le 1 ] || status=$rc
}

for step in ${steps//,/ }; do
    case $step in
        all) run all --devices all ;;
        one) run one --devices 0 ;;
        same) run same --devices 0,0 ;;
        all4) run all4 --devices all:4 ;;
        cross) run cross --device cuda --check cross-device ;;
        *) echo "unknown step $step" >&2; exit 2 ;;
    esac
done

python3 - "$out" > "$out/compare.txt" 2>&1 <<'EOF'
"""The runs' outcomes side by side (statuses, example counts, case ids), and where the time went."""
import json, sys
from collections import Counter
from pathlib import Path

out = Path(sys.argv[1])
runs = {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}
key = lambda o: (o["stage"], o["backend"], o["device"], o["check"])
seen = {name: {key(o): (o["status"], o["examples"], o["case"] and Path(o["case"]).name)
               for o in r["outcomes"]} for name, r in runs.items()}
names = [n for n in ("all", "one", "same", "all4") if n in seen]
for a, b in zip(names, names[1:]):
    diff = [k for k in seen[a].keys() | seen[b].keys() if seen[a].get(k) != seen[b].get(k)]
    print(f"{a} vs {b}: {len(seen[a])} outcomes, {len(diff)} differ" + "".join(
        f"\n  {k}: {seen[a].get(k)} / {seen[b].get(k)}" for k in sorted(diff)[:20]))
for name, r in runs.items():
    spent, by_worker = Counter(), Counter()
    for o in r["outcomes"]:
        spent.update(o.get("timing") or {})
        by_worker[o.get("worker") or "-"] += o["seconds"]
    total = sum(spent.values()) or 1
    print(f"{name}: totals {r['totals']}")
    print(f"  time in checks by phase: " + ", ".join(f"{k} {v:.1f}s ({100 * v / total:.0f}%)" for k, v in spent.items()))
    print(f"  check seconds by worker: " + ", ".join(f"{k} {v:.1f}s" for k, v in sorted(by_worker.items())))
    fails = [(o["stage"], o["backend"], o["device"], o["check"], o["headline"][:160]) for o in r["outcomes"]
             if o["status"] in ("failed", "error")]
    print("  failures: " + ("none" if not fails else "".join(f"\n    {f}" for f in fails)))
EOF
cat "$out/timings.txt" "$out/compare.txt"
for d in "$out"/cases_*; do [ -d "$d" ] && tar czf "$d.tgz" -C "$out" "$(basename "$d")" && rm -rf "$d"; done
exit "$status"

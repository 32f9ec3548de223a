#!/usr/bin/env bash
# On a CUDA machine (the project's lent H200): check every stage on the GPU backends, then the test
# suite. Usage: bench/device_check.sh [PROFILE] [SEED]. Results go to $OUT (default ./out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
profile=${1:-ci}
seed=${2:-0}
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || echo "pip install failed: running from the checkout"
export PYTHONUNBUFFERED=1
python3 -m specverify list
python3 -m specverify check --device cuda --profile "$profile" --seed "$seed" --findings "$out/cases" \
    --json "$out/check_cuda.json" 2>&1 | tee "$out/check_cuda.txt"
status=${PIPESTATUS[0]}
python3 -m pytest -q -n 8 -p no:cacheprovider 2>&1 | tail -20 | tee "$out/pytest.txt"
[ -d "$out/cases" ] && tar czf "$out/cases.tgz" -C "$out" cases && rm -rf "$out/cases"
exit "$status"

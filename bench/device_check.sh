#!/usr/bin/env bash
# On a CUDA machine (the project's lent H200): `specverify check --device cuda` and the test suite twice,
# in its own order and reversed (SPECVERIFY_TEST_ORDER), all three at once (16 cores: 7 workers per
# suite). Usage: bench/device_check.sh [PROFILE] [SEED] [LIMIT_S]. Results go to $OUT (default ./out);
# run from the checkout with PYTHONPATH naming it (the package need not be installed).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
profile=${1:-ci}
seed=${2:-0}
limit=${3:-480}
export PYTHONUNBUFFERED=1
timeout -s INT "$limit" python3 -m specverify check --device cuda --profile "$profile" --seed "$seed" \
    --findings "$out/cases" --json "$out/check_cuda.json" > "$out/check_cuda.txt" 2>&1 &
check=$!
for order in forward reverse; do
    SPECVERIFY_TEST_ORDER=$([ $order = reverse ] && echo reverse) timeout -s INT "$limit" \
        python3 -m pytest -q -n 7 -p no:cacheprovider tests > "$out/pytest_$order.txt" 2>&1 &
    eval "pid_$order=$!"
done
wait $check; status=$?
wait "$pid_forward"; forward=$?
wait "$pid_reverse"; reverse=$?
echo "check rc=$status, pytest forward rc=$forward, reverse rc=$reverse" | tee "$out/summary.txt"
[ -d "$out/cases" ] && tar czf "$out/cases.tgz" -C "$out" cases && rm -rf "$out/cases"
[ "$status" = 0 ] && [ "$forward" = 0 ] && [ "$reverse" = 0 ]

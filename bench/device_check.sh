#!/usr/bin/env bash
# On a CUDA machine (the project's lent H200), one of:
#   bench/device_check.sh check [PROFILE] [SEED]   `specverify check --device cuda`
#   bench/device_check.sh forward|reverse|shuffle:N   the test suite, `pytest -n 8`, in its own order, reversed
#                                                  or shuffled with seed N (SPECVERIFY_TEST_ORDER)
# each under LIMIT_S seconds (environment, default 570: one call of the lent machine lasts at most 600 s).
# Results go to $OUT (default ./out); run from the checkout with PYTHONPATH naming it (the package need not
# be installed). Exits with the run's status.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
what=${1:?usage: device_check.sh check|forward|reverse|shuffle:N [PROFILE] [SEED]}
limit=${LIMIT_S:-570}
export PYTHONUNBUFFERED=1
started=$(date +%s)
if [ "$what" = check ]; then
    timeout -s INT "$limit" python3 -m specverify check --device cuda --profile "${2:-ci}" --seed "${3:-0}" \
        --findings "$out/cases" --json "$out/check_cuda.json" > "$out/check_cuda.txt" 2>&1
    status=$?
    [ -d "$out/cases" ] && tar czf "$out/cases.tgz" -C "$out" cases && rm -rf "$out/cases"
else
    order=$([ "$what" = forward ] || echo "$what")
    SPECVERIFY_TEST_ORDER=$order timeout -s INT "$limit" \
        python3 -m pytest -q -n 8 -p no:cacheprovider tests > "$out/pytest_$what.txt" 2>&1
    status=$?
fi
echo "$what: rc=$status in $(( $(date +%s) - started )) s" | tee -a "$out/summary.txt"
exit "$status"

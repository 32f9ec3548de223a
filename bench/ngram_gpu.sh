#!/usr/bin/env bash
# One call of the lent CUDA machine for the ngram family (and the seeded sampler's first GPU run), all at once:
# `specverify check --device cuda` of ngram.* and seeded.* (every check), `specverify bench` of ngram.propose at
# B = 1, 64, 1024 (Torch and Triton), and the GPU-touching tests of both with `pytest -n 8`. Results go to $OUT
# (default ./out); run from the checkout (PYTHONPATH names it). LIMIT_S bounds each part (default 540).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
limit=${LIMIT_S:-540}
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-.}
# the machine lacks two of the test extra's packages: their wheels travel in .whl/ (carry it)
[ -d .whl ] && python3 -m pip install -q --no-index --find-links .whl junitparser libcst > "$out/pip.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/machine.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> "$out/machine.txt"
git rev-parse --short HEAD >> "$out/machine.txt" 2>/dev/null
(timeout -s INT "$limit" python3 -m specverify check --stage 'ngram.*' --stage 'seeded.*' --device cuda \
    --json "$out/check_cuda.json" > "$out/check_cuda.txt" 2>&1; echo "check: rc=$?" >> "$out/summary.txt") &
(timeout -s INT "$limit" python3 -m specverify bench --stage ngram.propose --device cuda --batch 1 64 1024 \
    --no-plots --out "$out/bench" > "$out/bench.txt" 2>&1; echo "bench: rc=$?" >> "$out/summary.txt") &
(timeout -s INT "$limit" python3 -m pytest -q -n 8 -p no:cacheprovider tests -k "ngram or seeded" \
    > "$out/pytest_gpu.txt" 2>&1; echo "pytest: rc=$?" >> "$out/summary.txt") &
wait
cat "$out/summary.txt"

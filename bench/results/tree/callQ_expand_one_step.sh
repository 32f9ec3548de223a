#!/usr/bin/env bash
# issue 31: expand's one-step tile (no loop up to 1024 tokens): the chain variant sweep with A/A, the chain table
# beside the engines' shape, expand's CUDA checks (pytest -n 8)
set -u
T0=$SECONDS
mkdir -p /tmp/site; for w in .whl/*.whl; do python -m zipfile -e $w /tmp/site; done
export PYTHONPATH=.:/tmp/site
R=$OUT/r; mkdir -p $R
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv > $R/gpu.txt 2>&1
(OUT=$R timeout 120 python bench/chain_variants.py > $R/chain_variants.log 2>&1; echo "rc=$? t=$((SECONDS-T0))" >> $R/chain_variants.log)
(OUT=$R timeout 100 python bench/engine_shapes.py --batch 1 64 1024 --rounds 7 > $R/engine_shapes.txt 2>&1; echo "rc=$? t=$((SECONDS-T0))" >> $R/engine_shapes.txt)
(timeout 150 python -m pytest -n 8 -q -p no:cacheprovider tests/stages/test_stages.py -k "cuda and rejection.expand" > $R/pytest_q.log 2>&1; echo "rc=$? t=$((SECONDS-T0))" >> $R/pytest_q.log)
cat $R/gpu.txt $R/engine_shapes.txt
grep '"variant"' $R/chain_variants.log | python3 -c "
import sys,json
for l in sys.stdin:
    r=json.loads(l); print(r['stage'], r['B'], r['variant'], r.get('byte_equal'), round(r.get('ours_us',0),3), round(r.get('engine_shape_us',0),3), round(r.get('ours_x_engine_shape',0),3), r.get('error',''))"
tail -1 $R/chain_variants.log; grep -E "FAILED|passed|failed" $R/pytest_q.log | tail -5

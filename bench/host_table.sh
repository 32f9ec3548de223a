#!/usr/bin/env bash
# On a CUDA machine: the host and device times of our Triton kernels for the stages issue 20 compares with
# the engines' (B = 1, 512, 1024; the vocabulary stages at B = 1, where host time is not device-bound),
# then where a prepared call's host time goes (bench/launch_path.py, at the same B) and the device-time laggards
# beside kernels of the engines' shape (bench/engine_shapes.py). Results go to $OUT (default ./out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
names=(rejection.greedy rejection.expand rejection.greedy_padded eagle.next_token_padded
       eagle.prepare_inputs_padded eagle.step_slot_mapping eagle.copy_and_expand_inputs
       eagle.verify_and_prepare_padded graph.fill_common_inputs graph.dsa_indexer_metadata rejection.random)
vocab=(rejection.recovered rejection.sample rejection.sample_padded)
stages=()
for s in "${names[@]}"; do stages+=(--stage "$s"); done
timeout -s INT 300 python3 -m specverify bench --device cuda --backend triton --batch 1 512 1024 --vocab 151936 \
    "${stages[@]}" --out "$out/host" --no-plots > "$out/host.txt" 2>&1
timeout -s INT 120 python3 -m specverify bench --device cuda --backend triton --batch 1 --vocab 151936 \
    --stage "${vocab[0]}" --stage "${vocab[1]}" --stage "${vocab[2]}" --out "$out/vocab" --no-plots > "$out/vocab.txt" 2>&1
OUT="$out" timeout -s INT 150 python3 bench/launch_path.py --calls 300 --rounds 5 --batch 1 512 1024 \
    --stage "${names[@]}" "${vocab[@]}" > "$out/launch_path.txt" 2>&1
tail -n 3 "$out/host.txt" "$out/vocab.txt" "$out/launch_path.txt"
OUT="$out" timeout -s INT 150 python3 bench/engine_shapes.py > "$out/engine_shapes.txt" 2>&1
tail -n 12 "$out/engine_shapes.txt"

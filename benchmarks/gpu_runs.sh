#!/usr/bin/env bash
# The GPU measurements, in the order one device lease runs them. Each phase fits one command of
# the device tool (10 minutes); results land in $OUT (default benchmarks/results/gpu).
#
#   bash benchmarks/gpu_runs.sh tests synth      # GPU tests, then synth over KernelBench L1-3
#   bash benchmarks/gpu_runs.sh throughput       # verify throughput against a serial harness
#   bash benchmarks/gpu_runs.sh serial           # the serial harness alone, 15 pairs
#   bash benchmarks/gpu_runs.sh memory           # workers replaced for kept memory, or not
#   bash benchmarks/gpu_runs.sh hostile fp       # hostile fixtures, then false positives
#   bash benchmarks/gpu_runs.sh gates            # both in one verify pass (needs $CANDS;
#                                                # PATHS=@file: only those candidates)
#   bash benchmarks/gpu_runs.sh build            # README command 1 (curate build) on the GPU
#
# Needs: KernelBench in $CURATE_KERNELBENCH (levels 1-3), curate importable (PYTHONPATH).
set -uo pipefail
OUT=${OUT:-benchmarks/results/gpu}
KB=${CURATE_KERNELBENCH:?set CURATE_KERNELBENCH to the KernelBench folder}
CANDS=${CANDS:-/tmp/curate-kb-candidates.parquet}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
for phase in "$@"; do
  echo "== $phase $(date -u +%H:%M:%S)"
  case $phase in
    tests)
      # CUDA extensions take ~70 s each to build on the H200 machine (nvcc, cold cache)
      timeout "${TESTS_TIMEOUT:-330}" python3 -m pytest -v -s -m gpu -p no:cacheprovider \
        --timeout 200 tests/ > "$OUT/gpu_tests.log" 2>&1
      grep -E "PASSED|FAILED|ERROR|passed|failed|speedup|Error" "$OUT/gpu_tests.log" | tail -40 ;;
    synth)
      timeout $(( ${SYNTH_DEADLINE:-390} + 20 )) python3 benchmarks/synth_kernelbench.py --kb "$KB" --device cuda \
        --deadline "${SYNTH_DEADLINE:-390}" --synth-share 0.6 --workers 12 --check-workers 8 \
        --table "$CANDS" --out "$OUT/synth_kernelbench_h200.json" > "$OUT/synth.log" 2>&1
      tail -30 "$OUT/synth.log"; cp "$CANDS" "$OUT/" 2>/dev/null ;;
    build)
      # README command 1 on the GPU: ingest -> synth (Triton) -> dedup -> verify -> keep
      rm -rf /tmp/curate-gpu-build
      timeout 400 python3 -m curate build --threshold 2.0 --out /tmp/curate-gpu-build \
        > "$OUT/build.log" 2>&1; echo "build exit $?"
      tail -15 "$OUT/build.log"; cp /tmp/curate-gpu-build/stats.json "$OUT/build_stats.json" ;;
    throughput)
      # SERIAL_FROM=<a `serial` phase's JSON>: the serial figures come from there
      timeout $(( ${DEADLINE:-575} + 15 )) python3 benchmarks/verify_throughput.py --kernelbench "$KB" --n 60 \
        --serial 15 --serial-budget "${SERIAL_BUDGET:-330}" --deadline "${DEADLINE:-575}" \
        ${SERIAL_FROM:+--serial-from "$SERIAL_FROM"} \
        --out "$OUT/verify_throughput_h200.json" 2>&1 | tee "$OUT/throughput.log" \
        | grep -v "^\[" | tail -40 ;;
    memory)
      # what workers keep between tasks: replaced above 1 GiB kept, or never (only reported);
      # one verify run each over the first $LIMIT candidates of the seeded sample ($CANDS)
      for keep in 1.0 none; do
        timeout "${MEMORY_TIMEOUT:-240}" python3 benchmarks/verify_throughput.py --kernelbench "$KB" \
          --pairs "$CANDS" --limit "${LIMIT:-20}" --runs 1 --serial 0 --keep-idle-gb $keep \
          --out "$OUT/verify_memory_keep_$keep.json" > "$OUT/memory_keep_$keep.log" 2>&1
        echo "keep_idle_gb=$keep exit $?"; grep -v "^\[" "$OUT/memory_keep_$keep.log" | tail -28
      done ;;
    serial)
      # the naive serial harness alone on 15 of the same sample (it does not fit beside the rest)
      timeout $(( ${DEADLINE:-575} + 15 )) python3 benchmarks/verify_throughput.py --kernelbench "$KB" \
        --n 60 --serial 15 --serial-only --serial-budget 9999 --deadline "${DEADLINE:-575}" \
        --out "$OUT/verify_serial_h200.json" 2>&1 | tail -5 ;;
    hostile)
      timeout 200 python3 benchmarks/hostile_table.py --device cuda \
        --out "$OUT/hostile_gpu.json" 2>&1 | tail -50 ;;
    fp)
      timeout "${FP_TIMEOUT:-570}" python3 benchmarks/hostile_table.py --device cuda \
        --skip-fixtures --candidates "$CANDS" --out "$OUT/gates_fp_kernelbench_h200.json" \
        2>&1 | tail -20 ;;
    gates)
      # hostile fixtures and every honest candidate in one verify pass (their builds overlap)
      timeout "${FP_TIMEOUT:-570}" python3 benchmarks/hostile_table.py --device cuda \
        --candidates "$CANDS" ${PATHS:+--paths "$PATHS"} --out "$OUT/gates_h200.json" 2>&1 | tail -70 ;;
    *) echo "unknown phase $phase"; exit 2 ;;
  esac
done
echo "== done $(date -u +%H:%M:%S)"

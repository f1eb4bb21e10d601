#!/usr/bin/env bash
# A session's GPU measurements as named phases, each with its own limit, inside one device
# command (10 minutes). What a phase makes stays in $RES (/tmp/gpu_session, kept while the
# machine is warm, else restored from a carried .kb/session/), and all of $RES is packed into
# $OUT/session.tgz at the end: the device tool brings back 8 files at most.
#
#   bash benchmarks/gpu_session.sh mixed                  # synthesize KernelBench pairs, mixed run
#   bash benchmarks/gpu_session.sh alone throughput       # honest and hostile alone; sandbox off/auto
#   bash benchmarks/gpu_session.sh tests build            # pytest -m gpu; README command 1 on the GPU
#
# Phases: synth (synth inductor on 8 problems under the sandbox), mixed, alone, honest, hostile
# (issue 15: benchmarks/hostile_mix.py), throughput (issue 17:
# verify_throughput.py with the sandbox off, then auto, on the same pairs), tests, build, llm
# (llm_replay_build.sh), scrape (scrape_gpu.sh). Carry .kb (KernelBench levels 1-2) and .whl.
set -u
export PYTHONPATH=$PWD CURATE_KERNELBENCH=$PWD/.kb
RES=${RES:-/tmp/gpu_session}
OUT=${OUT:-benchmarks/results/gpu}
TOTAL_S=${TOTAL_S:-575}
mkdir -p "$RES" "$OUT"
[ -d .kb/session ] && cp -n .kb/session/* "$RES/" 2>/dev/null
# hostile_mix's runs land in $OUT as they come (a call cut at its limit still brings them back);
# the runs of an earlier call are read from there
cp "$RES"/hostile_mix.*.json "$OUT/" 2>/dev/null
LOG=$OUT/run.log
T0=$(date +%s)
left() { echo $(( TOTAL_S - ($(date +%s) - T0) )); }
# run PHASE LIMIT CMD...: the command under `timeout`, cut to what is left of the call
run() {
  local name=$1 limit=$2; shift 2
  local avail=$(( $(left) - 25 ))
  [ "$limit" -gt "$avail" ] && limit=$avail
  if [ "$limit" -lt 30 ]; then echo "== $name skipped: ${avail}s left" >>"$LOG"; return; fi
  echo "== $name ${limit}s $(date -u +%T)" >>"$LOG"
  timeout "$limit" "$@" >>"$LOG" 2>&1
  echo "== $name exit $? at +$(( $(date +%s) - T0 ))s" >>"$LOG"
}
bash benchmarks/whl_install.sh >>"$LOG" 2>&1
export PATH="$(python3 -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null):$PATH"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)"
  git log --oneline -1 2>/dev/null; } >>"$LOG" 2>&1
MIX=(python3 benchmarks/hostile_mix.py --device cuda --kernelbench .kb --n "${N:-60}"
     --pairs-cache "$RES/kb_pairs.jsonl" --out "$OUT/hostile_mix.json" --cache-dir "$RES/cc")
for phase in "$@"; do
  case $phase in
    mixed) run mixed "${MIX_S:-540}" "${MIX[@]}" --runs mixed ;;
    alone) run alone "${ALONE_S:-330}" "${MIX[@]}" --runs honest,hostile ;;
    honest|hostile) run "$phase" "${ALONE_S:-330}" "${MIX[@]}" --runs "$phase" ;;
    table) run table 60 "${MIX[@]}" --runs none ;;
    throughput) # issue 16's benchmark (the seeded 60-problem sample, synthesized once) with
                # the sandbox off, then on (issue 17)
      # TP_RUNS: sandbox:transport pairs (auto: what verify picks; memfd against cuda_fd
      # under the sandbox shows what the host round trip costs)
      for run_spec in ${TP_RUNS:-off:auto auto:auto auto:memfd}; do
        sb=${run_spec%%:*}; tr=${run_spec#*:}
        if [ -s "$RES/tp_pairs.jsonl" ]; then src=(--pairs "$RES/tp_pairs.jsonl")
        else src=(--pairs-out "$RES/tp_pairs.jsonl"); fi
        run "throughput-$sb-$tr" "${TP_S:-130}" python3 benchmarks/verify_throughput.py \
          --device cuda --kernelbench .kb --n 60 "${src[@]}" --runs 1 --serial 0 \
          --sandbox "$sb" --transport "$tr" --cache-dir "$(mktemp -d "$RES/cc-tp-$sb-XXXX")" \
          --out "$OUT/throughput_${sb}_$tr.json"
      done ;;
    devtests) run devtests "${TESTS_S:-360}" python3 -m pytest -v -s -m gpu -p no:cacheprovider \
             --timeout 240 tests/ -k "${TESTS_K:-descriptor}" ;;
    synth) # synth's workers under the sandbox on the GPU (the fork server once initialized
           # CUDA there, and every row failed): eight KernelBench problems, counted
           python3 -m curate ingest .kb/level1/19_ReLU.py .kb/level1/23_Softmax.py \
             .kb/level1/26_GELU_.py .kb/level1/31_ELU.py .kb/level2/12_Gemm_Multiply_LeakyReLU.py \
             .kb/level2/59_Matmul_Swish_Scaling.py .kb/level1/41_Max_Pooling_1D.py \
             .kb/level1/24_LogSoftmax.py -o "$RES/synth_in.jsonl" >>"$LOG" 2>&1
           run synth "${SYNTH_S:-150}" python3 -m curate synth inductor "$RES/synth_in.jsonl" \
             -o "$RES/synth_out.jsonl" --device cuda
           python3 -c "import sys; from curate.tableio import read_rows; \
print('synth kept', len(read_rows(sys.argv[1])), 'of 8')" "$RES/synth_out.jsonl" >>"$LOG" 2>&1
           cp "$RES"/synth_out*.jsonl "$OUT/" 2>/dev/null ;;
    tests) run tests "${TESTS_S:-360}" python3 -m pytest -v -s -m gpu -p no:cacheprovider \
             --timeout 240 tests/ ;;
    build) rm -rf "$RES/build"
           run build "${BUILD_S:-400}" python3 -m curate build --threshold 2.0 --device cuda \
             --out "$RES/build"
           cp "$RES/build/stats.json" "$RES/build_stats.json" 2>/dev/null ;;
    llm) OUT=$RES/llm EXAMPLES="${EXAMPLES:-01 07 10 17 23}" DEADLINE=$(( $(left) - 60 )) \
           BUILD=$RES/llm-build run llm "$(( $(left) - 30 ))" bash benchmarks/llm_replay_build.sh ;;
    scrape) OUT=$RES/scrape BUILD=$RES/scrape-build BUILD_TIMEOUT=$(( $(left) - 60 )) \
              run scrape "$(( $(left) - 30 ))" bash benchmarks/scrape_gpu.sh ;;
    *) echo "unknown phase $phase" >>"$LOG" ;;
  esac
done
cp "$OUT"/hostile_mix*.json "$RES/" 2>/dev/null
tar czf "$OUT/session.tgz" -C "$RES" --exclude=./cc --exclude='*/ledger.sqlite*' . 2>/dev/null
grep -v "^\(mixed\|honest\|hostile\|run1\) +\|HTTP Request" "$LOG" | tail -60

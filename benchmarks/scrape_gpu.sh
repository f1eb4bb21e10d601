#!/usr/bin/env bash
# The scrape example on the GPU machine: torch's own nn.Module classes (@torch-nn of the torch
# installed there) -> KernelBench programs -> Triton candidates -> dedup -> verify -> keep.
# Results land in $OUT (default benchmarks/results/gpu).
#
#   bash benchmarks/scrape_gpu.sh            # build, then the kept pairs as JSON (~5-8 min)
#   bash benchmarks/scrape_gpu.sh yield      # only the scrape yield of torch-nn on that host
#
# Needs identify[license] (carried as wheels in .whl/ where the machine has no network).
set -uo pipefail
OUT=${OUT:-benchmarks/results/gpu}
BUILD=${BUILD:-/tmp/curate-scrape-build}
mkdir -p "$OUT"
python3 -c "import identify, ukkonen" 2>/dev/null || python3 -m pip install -q --no-deps \
  .whl/identify-*.whl .whl/ukkonen-*.whl .whl/cffi-*.whl .whl/pycparser-*.whl
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${1:-build}" = "build" ]; then
rm -rf "$BUILD"
echo "== build $(date -u +%H:%M:%S)"
timeout "${BUILD_TIMEOUT:-480}" python3 -m curate build --pipeline pipelines/scrape-example.yaml \
  --out "$BUILD" --device cuda > "$OUT/scrape_build.log" 2>&1
echo "build exit $?"
tail -25 "$OUT/scrape_build.log"
cp "$BUILD/stats.json" "$OUT/scrape_build_stats.json" 2>/dev/null
python3 - "$BUILD" > "$OUT/scrape_build_kept.json" <<'PY'
import json, sys
from pathlib import Path
from curate.tableio import read_rows
build = Path(sys.argv[1])
rows = [r for f in sorted((build / "data").glob("*.parquet")) for r in read_rows(f)]
keys = ("entry_point", "path", "license", "backend", "status", "speedup", "speedup_ci_low",
        "speedup_ci_high", "ref_ms", "kernel_ms", "gpu", "torch_version", "triton_version")
print(json.dumps({"kept": len(rows), "rows": [{k: r.get(k) for k in keys} for r in rows]},
                 indent=2, default=str))
PY
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('kept', d['kept']); [print(r['entry_point'], r['speedup'], r['speedup_ci_low']) for r in d['rows']]" "$OUT/scrape_build_kept.json"
fi
if [ "${1:-}" = "yield" ]; then
  echo "== yield $(date -u +%H:%M:%S)"
  timeout 300 python3 benchmarks/scrape_yield.py --targets torch-nn \
    --out "$OUT/scrape_yield_h200.json" 2>&1 | tail -6
fi

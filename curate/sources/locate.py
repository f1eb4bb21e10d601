"""Named data: the bundled examples and the KernelBench evaluation set, wherever they live."""

from __future__ import annotations

import os
from pathlib import Path

from ..datadirs import data_dir, repo_root
from ..errors import BadInput

KERNELBENCH_ENV = "CURATE_KERNELBENCH"


def kernelbench_path() -> Path | None:
    """The local KernelBench problems: $CURATE_KERNELBENCH, or a shared/data copy near the repo."""
    env = os.environ.get(KERNELBENCH_ENV)
    if env:
        return Path(env)
    root = repo_root()
    for base in ([root, root.parent] if root else []) + [Path.cwd(), Path.cwd().parent]:
        cand = base / "shared" / "data" / "kernelbench"
        if cand.is_dir():
            return cand
    return None


def named_path(name: str) -> Path:
    if name == "examples":
        return data_dir("examples")
    if name == "kernelbench":
        p = kernelbench_path()
        if p is None:
            raise BadInput("the KernelBench problems were not found",
                           fix=f"set {KERNELBENCH_ENV} to a KernelBench folder (level1/ ...)")
        return p
    raise BadInput(f"unknown named path @{name}", fix="use @examples or @kernelbench")

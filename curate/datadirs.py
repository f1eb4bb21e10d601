"""Find the data folders (schemas/, pipelines/, cards/) in a wheel or in a source checkout."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The folder `name`: inside the package when installed from a wheel, else at the repo root."""
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"curate data folder {name!r} not found next to {_PKG}")


def repo_root() -> Path | None:
    """The source checkout holding the package, when running from one (examples/ lives there)."""
    root = _PKG.parent
    return root if (root / "pyproject.toml").is_file() else None

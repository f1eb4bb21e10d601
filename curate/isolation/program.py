"""Load a program from its source text as a real module: the one loader every worker uses
(verify's candidate, judge and compile workers, synth's checks, infill's solvability check).

Runs only inside a sandboxed worker, never in the parent: importing a program runs its code.
The source goes to a file in the worker's working directory (its scratch) because Triton's
`@jit` and `inspect` read a function's source from its file.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path
from types import ModuleType

_counter = itertools.count()
_loaded: list[str] = []


def load_program(code: str, name: str, directory: str | Path | None = None) -> ModuleType:
    """Exec `code` as module `<name>_<n>` from `<directory>/<name>_<n>.py` (default: the working
    directory). Exceptions from the program propagate to the caller, which classifies them."""
    modname = f"{name}_{next(_counter)}"
    path = Path(directory or Path.cwd()) / f"{modname}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    _loaded.append(modname)
    spec.loader.exec_module(mod)
    return mod


def forget_programs() -> None:
    """Drop every loaded program from sys.modules (a worker that serves several tasks)."""
    while _loaded:
        sys.modules.pop(_loaded.pop(), None)


def to_device(x, device):
    """A program's value (tensors, nested in lists and tuples) on `device`; anything else as is.
    torch is imported here lazily: this module is imported before workers pick their device."""
    import torch
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    return x

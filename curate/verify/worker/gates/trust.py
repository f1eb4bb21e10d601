"""Which code is trusted, decided by identity before any program is loaded in the worker.

`capture()` runs in the worker's setup(): it records the exact files of every module loaded at
that moment, the directories of the top-level packages loaded then (torch, triton, numpy,
sympy, curate, ...: their lazily imported submodules lie there), the standard library and the
interpreter's own install directories (sysconfig purelib/platlib). Where a file lies does not
matter otherwise: a venv, a user site, `pip install --target` on PYTHONPATH and a system install
give the same answer. Nothing under a writable root (the scratch directory, TMPDIR, HOME, the
compile caches, /dev, /proc) is ever trusted, even inside such a directory.

The answer is frozen in closures (`is_trusted`, `is_stdlib` are rebound once, by capture()):
best effort only, since a candidate in the same process can still reach a closure's cells.
"""

from __future__ import annotations

import os
import sys
import sysconfig

_CACHE_VARS = ("TMPDIR", "HOME", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR",
               "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "XDG_CACHE_HOME",
               "CURATE_COMPILE_CACHE", "CURATE_WRITABLE")


def writable_roots() -> tuple[str, ...]:
    """Where a candidate may write: its scratch dir (cwd), TMPDIR, HOME, the cache dirs the
    harness named, and /dev (null, shm, the GPU's device files)."""
    roots = {os.getcwd(), "/dev", "/proc/self"}
    for var in _CACHE_VARS:
        for p in (os.environ.get(var) or "").split(os.pathsep):
            if p:
                roots.add(p)
    return tuple(sorted({os.path.realpath(r) for r in roots}))


def _under(path: str, roots) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(sorted({os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib")
                         if k in paths}))


def _loaded_code() -> tuple[set[str], set[str]]:
    """Files of every loaded module, and directories of every loaded top-level package."""
    files, dirs = set(), set()
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if isinstance(f, str) and f:
            files.add(os.path.realpath(f))
        if "." not in name:
            for p in list(getattr(mod, "__path__", None) or []):
                if isinstance(p, str) and p:
                    dirs.add(os.path.realpath(p))
    paths = sysconfig.get_paths()
    dirs.update(os.path.realpath(paths[k]) for k in ("purelib", "platlib") if k in paths)
    return files, dirs


class Trust:
    """The trusted code of this worker, as captured (read-only by convention)."""

    def __init__(self, files, dirs, stdlib, writable):
        self.writable = tuple(writable)
        self.files = frozenset(f for f in files if not _under(f, self.writable))
        self.dirs = tuple(sorted(d for d in dirs if not _under(d, self.writable)))
        self.stdlib = tuple(stdlib)


def _checkers(trust: Trust):
    """Closures over one frozen Trust: whether a code file is trusted, is the stdlib."""
    files, dirs, stdlib = trust.files, trust.dirs, trust.stdlib
    capture_writable = trust.writable
    real_cache: dict[str, str] = {}

    def real(filename: str) -> str:
        r = real_cache.get(filename)
        if r is None:
            r = real_cache[filename] = os.path.realpath(filename)
        return r

    def trusted(filename: str) -> bool:
        if filename.startswith("<"):
            return filename.startswith("<frozen")
        path = real(filename)
        if _under(path, capture_writable) or _under(path, WRITABLE[0]):
            return False
        return path in files or _under(path, dirs) or (
            _under(path, stdlib) and "-packages" + os.sep not in path)

    def in_stdlib(filename: str) -> bool:
        """The standard library (site-packages sits inside it on most installs, and is not)."""
        if filename.startswith("<frozen"):
            return True
        path = real(filename)
        return _under(path, stdlib) and "-packages" + os.sep not in path

    return trusted, in_stdlib


def _refuse(filename: str) -> bool:
    raise RuntimeError("trusted code was not captured: call trust.capture() in setup()")


is_trusted = _refuse
is_stdlib = _refuse
_captured: list[Trust] = []
WRITABLE: list[tuple[str, ...]] = [()]     # the writable roots as of install() (see set_writable)


def set_writable(roots: tuple[str, ...]) -> None:
    """The roots writable for this row's candidate (its scratch and caches are known by now)."""
    WRITABLE[0] = tuple(roots)


def capture() -> Trust:
    """Record the trusted code now (once per worker; later calls return the first answer)."""
    global is_trusted, is_stdlib
    if _captured:
        return _captured[0]
    files, dirs = _loaded_code()
    trust = Trust(files, dirs, _stdlib_dirs(), writable_roots())
    is_trusted, is_stdlib = _checkers(trust)
    _captured.append(trust)
    return trust


def checkers():
    """(is_trusted, is_stdlib) of the captured trust, for closures that must not look them up
    by name later (the audit hook)."""
    capture()
    return is_trusted, is_stdlib


def own_library(args, writable) -> bool:
    """A shared library the candidate built itself (under its scratch, TMPDIR or a cache)."""
    name = args[0] if args else None
    if not isinstance(name, (str, bytes, os.PathLike)):
        return False
    real = os.path.realpath(os.fsdecode(name))
    return any(real.startswith(r + os.sep) for r in writable)


def write_outside(args, writable) -> str | None:
    """The path an `open` audit event writes to, when it is outside every writable root."""
    try:
        path, mode, flags = args[0], args[1], args[2]
    except Exception:  # noqa: BLE001
        return None
    if not isinstance(path, (str, bytes, os.PathLike)):
        return None  # an fd
    writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
        (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
    if not writes:
        return None
    real = os.path.realpath(os.fsdecode(path))
    if _under(real, writable):
        return None
    return real

"""Write, network and signal confinement of a worker with Landlock (Linux >= 5.13, no root needed).

`plan(scratch, env, ...)` runs in the parent and decides the rules; `apply(plan)` runs in the
child between fork and exec (a `preexec_fn`) and is inherited by everything the worker starts
(ninja, nvcc, ptxas). What a confined worker can do:
- write only under its scratch directory, the cache directories named in its environment,
  the extra `writable` paths and /dev (null, shm, the GPU's device files);
- read everything except the home directories (/root, /home/*, the parent's $HOME), where
  tokens live (~/.cache/huggingface/token, ~/.netrc, ~/.ssh); the Python installation, sys.path,
  PATH and LD_LIBRARY_PATH entries stay readable even when they sit under a home directory;
- open no TCP connection and bind no TCP port (Landlock ABI >= 4);
- signal no process outside its own sandbox and reach no abstract unix socket (ABI >= 6).
Where Landlock is missing (old kernels, other OSes, seccomp filters that block the syscalls)
`apply` does nothing and `supported()` says so; docs/threat-model.md lists what then remains.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
from dataclasses import dataclass, field

_SYS_CREATE, _SYS_ADD_RULE, _SYS_RESTRICT = 444, 445, 446  # same numbers on x86_64 and arm64
_PR_SET_NO_NEW_PRIVS = 38
_RULE_PATH_BENEATH = 1

FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13      # ABI 2
FS_TRUNCATE = 1 << 14   # ABI 3
NET_BIND_TCP = 1 << 0   # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

_WRITE_V1 = (FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_CHAR | FS_MAKE_DIR |
             FS_MAKE_REG | FS_MAKE_SOCK | FS_MAKE_FIFO | FS_MAKE_BLOCK | FS_MAKE_SYM)
_READ = FS_READ_FILE | FS_READ_DIR

# environment variables that name directories the toolchain writes caches into
CACHE_VARS = ("TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR",
              "CUDA_CACHE_PATH", "XDG_CACHE_HOME", "TMPDIR", "HOME", "CURATE_COMPILE_CACHE",
              "CURATE_WRITABLE", "MPLCONFIGDIR", "PYTORCH_KERNEL_CACHE_PATH")


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def abi_version() -> int:
    """The kernel's Landlock ABI version; 0 where there is none."""
    if not sys.platform.startswith("linux") or platform.machine() not in (
            "x86_64", "aarch64", "arm64", "riscv64"):
        return 0
    try:
        libc = _libc()
        libc.syscall.restype = ctypes.c_long
        v = libc.syscall(_SYS_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
        return max(0, int(v))
    except Exception:  # noqa: BLE001
        return 0


def supported() -> bool:
    return abi_version() >= 1


@dataclass
class Plan:
    """The rules for one worker, decided in the parent (no allocation after fork)."""

    abi: int
    writable: list[str] = field(default_factory=list)
    readable: list[str] = field(default_factory=list)   # only used when hide_home
    hide_home: bool = True
    deny_tcp: bool = True
    scope: bool = True


def _home_dirs() -> set[str]:
    homes = {"/root", "/home"}
    for var in ("HOME",):
        if os.environ.get(var):
            homes.add(os.path.realpath(os.environ[var]))
    try:
        import pwd
        homes.add(os.path.realpath(pwd.getpwuid(os.getuid()).pw_dir))
    except Exception:  # noqa: BLE001
        pass
    return {h for h in homes if h not in ("/", "")}


def plan(scratch: str, env: dict[str, str], writable: tuple[str, ...] = (),
         readable: tuple[str, ...] = (), hide_home: bool = True) -> Plan | None:
    """Rules for a worker whose scratch dir is `scratch` and environment `env`; None when the
    kernel has no Landlock."""
    abi = abi_version()
    if abi < 1:
        return None
    w = {scratch, "/dev"}
    for var in CACHE_VARS:
        for p in (env.get(var) or "").split(os.pathsep):
            if p:
                w.add(p)
    w.update(writable)
    for p in list(w):
        if p.startswith(scratch):
            os.makedirs(p, exist_ok=True)
    w_real = sorted({os.path.realpath(p) for p in w if os.path.exists(p)})
    r: set[str] = set()
    if hide_home:
        homes = _home_dirs()
        for entry in os.listdir("/"):
            full = os.path.join("/", entry)
            if full in homes or os.path.realpath(full) in homes:
                continue
            r.add(full)
        # what the worker must read even under a home directory: the interpreter and its paths
        for p in [sys.prefix, sys.base_prefix, sys.exec_prefix,
                  os.path.dirname(os.path.realpath(sys.executable)), *sys.path,
                  *env.get("PATH", "").split(os.pathsep),
                  *env.get("LD_LIBRARY_PATH", "").split(os.pathsep),
                  *env.get("PYTHONPATH", "").split(os.pathsep),
                  env.get("CUDA_HOME", ""), env.get("CUDA_PATH", ""), *readable]:
            if p and os.path.exists(p):
                r.add(p)
                # a venv's interpreter links into a base installation
                real = os.path.realpath(p)
                r.add(real)
        try:
            import site
            for p in site.getsitepackages() + [site.getusersitepackages()]:
                if os.path.exists(p):
                    r.add(p)
        except Exception:  # noqa: BLE001
            pass
    r_real = sorted({os.path.realpath(p) for p in r if os.path.exists(p)})
    return Plan(abi=abi, writable=w_real, readable=r_real, hide_home=hide_home)


def apply(p: Plan | None) -> bool:
    """Restrict the calling process (and what it execs) to `p`. Best effort: False, and no
    restriction, where the kernel refuses."""
    if p is None or p.abi < 1:
        return False
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    write = _WRITE_V1 | (FS_REFER if p.abi >= 2 else 0) | (FS_TRUNCATE if p.abi >= 3 else 0)
    handled_fs = write | (_READ if p.hide_home else 0)
    attr = _RulesetAttr(handled_fs, 0, 0)
    size = 8
    if p.abi >= 4 and p.deny_tcp:
        attr.handled_access_net = NET_BIND_TCP | NET_CONNECT_TCP
        size = 16
    if p.abi >= 6 and p.scope:
        attr.scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL
        size = 24
    fd = libc.syscall(_SYS_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if fd < 0:
        return False
    rules = [(path, write | (_READ if p.hide_home else 0)) for path in p.writable]
    rules += [(path, _READ) for path in p.readable]
    try:
        for path, access in rules:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                if not os.path.isdir(path):
                    # rights on a file: only those that apply to files
                    access &= FS_WRITE_FILE | FS_READ_FILE | FS_TRUNCATE | FS_EXECUTE
                rule = _PathBeneath(access, pfd)
                libc.syscall(_SYS_ADD_RULE, ctypes.c_int(fd), ctypes.c_int(_RULE_PATH_BENEATH),
                             ctypes.byref(rule), ctypes.c_uint32(0))
            finally:
                os.close(pfd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            return False
        return libc.syscall(_SYS_RESTRICT, ctypes.c_int(fd), ctypes.c_uint32(0)) == 0
    finally:
        os.close(fd)

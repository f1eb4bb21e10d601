"""The audit hook: harness access while candidate code runs (frames, gc, ctypes, network,
processes, patches of library classes, writes outside the sandbox's writable roots).

Whose event it is comes from the calling frames: a frame is the candidate's when its file is not
trusted code (trust.py, captured before any program was loaded). Standard library frames and
the gates' own wrappers are transparent: the nearest frame outside them is the caller.
"""

from __future__ import annotations

import os
import re
import sys

from . import trust
from .state import STATE, TLS

_GC_EVENTS = {"gc.get_objects", "gc.get_referrers", "gc.get_referents"}
_FRAME_EVENTS = {"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile",
                 "sys._getframemodulename", "object.__getattr__"}
_CTYPES_EVENTS = {"ctypes.cdata",
                  "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at",
                  "ctypes.addressof", "ctypes.PyObj_FromPtr", "ctypes.get_errno"}
_NET_PREFIX = ("socket.", "urllib.", "http.", "ftplib.", "smtplib.", "nntplib.", "poplib.",
               "imaplib.", "telnetlib.", "webbrowser.")
_PROC_EVENTS = {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                "os.kill", "os.killpg", "subprocess.Popen", "pty.spawn", "os.startfile",
                "os.putenv", "os.unsetenv", "signal.pthread_kill", "resource.setrlimit",
                "resource.prlimit"}
_OTHER_EVENTS = {"sys.addaudithook", "exec", "compile", "open", "ctypes.dlopen",
                 "object.__setattr__", "object.__delattr__"}
_WATCHED = _GC_EVENTS | _FRAME_EVENTS | _CTYPES_EVENTS | _PROC_EVENTS | _OTHER_EVENTS
# events refused (PermissionError) besides being recorded
_REFUSED = _GC_EVENTS | _PROC_EVENTS | {"sys._getframe", "sys._current_frames", "open"}
_PATCHED_ROOTS = ("torch", "triton", "builtins", "time", "numpy", "math", "curate", "gc",
                  "threading", "json", "struct", "os", "sys")
_GATES_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

_COMPILER = re.compile(r"^(g\+\+|gcc|c\+\+|cc|clang\+\+|clang|nvcc|ld|[\w.-]*-(g\+\+|gcc))"
                       r"(-\d+)?$")


def _runs_compiler(event: str, args) -> bool:
    """A program that builds its own C++ kernels runs a compiler: that subprocess is fine."""
    if event not in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
        return False
    try:
        exe = args[0]
        argv = args[1]
        first = exe if exe else (argv[0] if isinstance(argv, (list, tuple)) else argv)
        return bool(_COMPILER.match(os.path.basename(os.fsdecode(first))))
    except Exception:  # noqa: BLE001
        return False


def _patch_reason(args) -> str | None:
    obj = args[0] if args else None
    mod = getattr(obj, "__module__", "") or ""
    if isinstance(obj, type) and mod.split(".")[0] in _PATCHED_ROOTS:
        return f"harness_access:patch:{mod}.{getattr(obj, '__name__', '?')}." \
               f"{args[1] if len(args) > 1 else '?'}"
    return None


def _reason(event: str, args, direct_untrusted: bool, near_untrusted: bool,
            direct: str) -> str | None:
    """The finding for one watched event, given whose frames raised it."""
    writable = trust.WRITABLE[0]
    if event in _FRAME_EVENTS:
        return "harness_access:frames" if direct_untrusted else None
    if event in ("exec", "compile"):
        # the harness execs the candidate (trusted frame); the candidate exec-ing is not fine
        return "harness_access:dynamic_code" if direct_untrusted and direct else None
    if not near_untrusted:
        return None
    if event in _GC_EVENTS:
        return "harness_access:gc"
    if event in _CTYPES_EVENTS:
        return "harness_access:ctypes"
    if event == "ctypes.dlopen":  # libc, libpython...: only libraries it built
        return None if trust.own_library(args, writable) else "harness_access:ctypes"
    if event.startswith(_NET_PREFIX):
        return "harness_access:network"
    if event in _PROC_EVENTS:
        return None if _runs_compiler(event, args) else "harness_access:process"
    if event == "sys.addaudithook":
        return "harness_access:audit"
    if event in ("object.__setattr__", "object.__delattr__"):
        return _patch_reason(args)
    if event == "open" and trust.write_outside(args, writable):
        return "sandbox_escape:write"
    return None


def _record(event: str, reason: str) -> None:
    STATE.violations.append((STATE.phase, reason))
    STATE.tainted = STATE.tainted or STATE.phase == "candidate"
    if STATE.phase == "candidate" and STATE.on_violation is not None:
        try:
            STATE.on_violation(reason)
        except Exception:  # noqa: BLE001, S110
            pass
    if event in _REFUSED or event.startswith(_NET_PREFIX):
        raise PermissionError(f"curate: {event} is not allowed in a candidate")


def make_audit():
    """The audit hook, bound to the trust captured at setup (not looked up by name later)."""
    is_trusted, is_stdlib = trust.checkers()

    def audit(event: str, args) -> None:
        if getattr(TLS, "busy", False) or STATE.phase == "idle":
            return
        if event not in _WATCHED and not event.startswith(_NET_PREFIX):
            return
        if event == "open" and not trust.write_outside(args, trust.WRITABLE[0]):
            return
        TLS.busy = True
        try:
            frames = []
            f = sys._getframe(1)
            while f is not None:
                frames.append(f.f_code.co_filename)
                f = f.f_back
            direct = frames[0] if frames else ""
            nearest = next((c for c in frames if not is_stdlib(c)
                            and not c.startswith(_GATES_DIR)), "")
            reason = _reason(event, args, not is_trusted(direct),
                             bool(nearest) and not is_trusted(nearest), direct)
            if reason:
                _record(event, reason)
        finally:
            TLS.busy = False

    return audit

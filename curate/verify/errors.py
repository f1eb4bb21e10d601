"""How verify reads an exception: out of memory, a broken device, a failed build, or an error of
the program's own; and the part of its message worth keeping in a row.

Shared by both sides of verify (the worker classifies what a program raised, the parent reads
statuses and trims errors): imports only the message types.
"""

from __future__ import annotations

import re
import traceback

from .messages import Failed

_OOM = re.compile(r"out of memory|CUDA out of memory|std::bad_alloc|Cannot allocate memory|"
                  r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED", re.IGNORECASE)
_CUDA_FATAL = re.compile(r"illegal memory access|misaligned address|unspecified launch failure|"
                         r"device-side assert|CUDA error|an illegal instruction|"
                         r"cudaErrorLaunch|AcceleratorError", re.IGNORECASE)
_BUILD = re.compile(r"Error building extension|CompilationError|ninja: build stopped|"
                    r"error: command .* failed|compilation terminated", re.IGNORECASE)
_CMD_LINE = re.compile(r"^\s*(\[\d+/\d+\]|FAILED:|ninja:|c\+\+ |g\+\+ |gcc |clang|/\S*nvcc |nvcc )")
_PATH = re.compile(r"(?:/[^\s:/'\"]+)+/([^\s:/'\"]+\.(?:cpp|cu|cuh|h|hpp|cc|py|ptx))")
_ERROR_WORD = re.compile(r"\berror\b", re.IGNORECASE)


def is_out_of_memory(exc: BaseException) -> bool:
    """The one reading of "ran out of memory", for programs and gates alike."""
    return (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
            or bool(_OOM.search(str(exc))))


def classify_exception(exc: BaseException, phase: str) -> Failed:
    """The failure for an exception a program raised in `phase` (`import`, `build`, `call`):
    its status and reasons, and whether the worker must be replaced (`recycle`). Ctrl-C is
    never a program's failure: it is raised again, here, for every caller."""
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    name, msg = type(exc).__name__, str(exc)
    reasons: list[str] = []
    recycle = isinstance(exc, RecursionError)   # the interpreter's stack may be left unusable
    if is_out_of_memory(exc):
        status, reasons, recycle = "runtime_error", ["out_of_memory"], True
    elif _CUDA_FATAL.search(msg) or name == "AcceleratorError":
        status, reasons, recycle = "runtime_error", ["cuda_error"], True
    elif isinstance(exc, SyntaxError) or _BUILD.search(f"{name}: {msg}") or phase == "import":
        status = "compile_error"
    else:
        status = "runtime_error"
    return Failed(status=status, reasons=reasons, recycle=recycle,
                  error=trim_error(exc, status))


def trim_error(exc: BaseException, status: str, limit: int = 2000) -> str:
    """The part of an error that matters: for build errors the compiler's diagnostics (each
    `error` line and the source lines under it, paths cut to file names, command lines
    dropped), else the exception and the program's innermost frame."""
    head = f"{type(exc).__name__}: "
    msg = str(exc)
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (line {exc.lineno}): {(exc.text or '').strip()}"[:limit]
    if status == "compile_error" and ("\n" in msg or _BUILD.search(msg)):
        return trim_compiler_output(head, msg, limit)
    # programs are loaded from curate_<role>_<tag>_<n>.py files in the worker's scratch
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "curate_" in f.filename]
    where = f" (at line {frames[-1].lineno}: {(frames[-1].line or '').strip()})" if frames else ""
    first = msg.strip().splitlines()[0] if msg.strip() else ""
    return (head + first)[:limit - len(where)] + where


def trim_compiler_output(head: str, msg: str, limit: int = 2000) -> str:
    lines = msg.splitlines()
    title = re.split(r":\s*\[\d+/\d+\]", lines[0])[0] if lines else ""
    if len(title) > 200:
        title = title[:200] + "..."
    keep: list[str] = []
    for i, line in enumerate(lines):
        if i == 0 or _CMD_LINE.match(line) or not _ERROR_WORD.search(line):
            continue
        keep.append(_PATH.sub(r"\1", line.rstrip()))
        for nxt in lines[i + 1:i + 3]:  # the source line and its caret
            if nxt.strip() and not _CMD_LINE.match(nxt) and not _ERROR_WORD.search(nxt):
                keep.append(_PATH.sub(r"\1", nxt.rstrip()))
    body = "\n".join(dict.fromkeys(keep)) if keep else "\n".join(
        _PATH.sub(r"\1", ln) for ln in lines[-12:] if not _CMD_LINE.match(ln))
    return (head + title + "\n" + body)[:limit]

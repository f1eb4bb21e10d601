"""`ast.parse` that is safe to call from several threads.

CPython 3.11 keeps the AST validator's recursion depth in interpreter-wide state; two threads
parsing at once (verify parses rows on a thread pool) can trip "SystemError: AST constructor
recursion depth mismatch" (python/cpython gh-106905). A lock around the call avoids it.
"""

from __future__ import annotations

import ast
import threading

_lock = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    with _lock:
        return ast.parse(source, filename, mode)

"""The harness-access gate: code that reaches past its kernel into the harness, the interpreter
around it, the worker's pipes or the outside. Each use gives `harness_access:<what>` (or
`timer_patched:<target>` for a patched clock).

Defence in depth: the runtime defences decide what the candidate can reach; this gate names the
ways in that an honest kernel program has no use for, before anything runs.
"""

from __future__ import annotations

import ast
import re

from .program import Program, dotted, last_name, root_name

# Modules whose import alone reaches into the harness or the process around the candidate.
FORBIDDEN_MODULES = {
    "gc": "gc", "inspect": "inspect", "ctypes": "ctypes", "builtins": "builtins",
    "importlib": "importlib", "pkgutil": "importlib", "runpy": "importlib",
    "zipimport": "importlib", "socket": "network", "urllib": "network", "http": "network",
    "requests": "network", "httpx": "network", "aiohttp": "network", "ftplib": "network",
    "smtplib": "network", "subprocess": "process", "multiprocessing": "process",
    "pty": "process", "signal": "process", "threading": "threading", "_thread": "threading",
    "concurrent": "threading", "asyncio": "threading", "unittest": "mock", "mock": "mock",
    "pickle": "pickle", "marshal": "pickle", "dill": "pickle", "cloudpickle": "pickle",
    "tracemalloc": "tracemalloc", "faulthandler": "process", "resource": "process",
    "mmap": "mmap", "fcntl": "fd", "termios": "fd", "select": "fd", "selectors": "fd",
    "curate": "harness", "sysconfig": None,
}
_CTYPES_HARMLESS = re.compile(r"^c_\w+$")  # inductor's `from ctypes import c_void_p, c_long`
# A program that carries its own C/C++ kernels (`extern "C"` sources) may build them with a
# compiler in a subprocess and load them with ctypes: these are all it may touch of ctypes.
_CTYPES_LOADER = re.compile(r"^(CDLL|c_\w+|ARRAY|Structure)$")
# Tags a native-kernel program may use for its build, unless a use is strict (see `_Uses`).
_NATIVE_BUILD_TAGS = {"ctypes", "process"}

FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_builtins", "f_code", "f_trace", "tb_frame",
               "tb_next", "gi_frame", "cr_frame", "ag_frame", "__globals__", "__closure__",
               "__code__", "__subclasses__", "__builtins__", "__self_class__", "co_consts",
               "__traceback__", "_getframe", "_current_frames", "currentframe", "walk_stack",
               "walk_tb", "extract_stack", "StackSummary", "TracebackException"}
_GC_ATTRS = {"get_objects", "get_referrers", "get_referents"}
_THREAD_ATTRS = {"Thread", "start_new_thread", "start_joinable_thread", "_start_new_thread",
                 "ThreadPoolExecutor", "ProcessPoolExecutor", "to_thread", "run_in_executor"}
SYS_FORBIDDEN = {"_getframe", "_current_frames", "settrace", "setprofile", "modules",
                 "addaudithook", "exc_info", "exception", "last_traceback", "meta_path",
                 "path_hooks", "_clear_type_cache", "monitoring", "setrecursionlimit"}
OS_FORBIDDEN = {"system", "popen", "fork", "forkpty", "kill", "killpg", "execv", "execve",
                "execvp", "execl", "execlp", "spawnv", "spawnl", "posix_spawn", "_exit",
                "setsid", "setpgid", "unshare", "setns", "register_at_fork"}
# The worker talks to the parent over inherited descriptors: nothing here touches a descriptor
# by number, duplicates one or opens a pipe.
OS_FD = {"dup", "dup2", "dup3", "fdopen", "write", "read", "pipe", "pipe2", "readv", "writev",
         "pread", "pwrite", "preadv", "pwritev", "splice", "sendfile", "openpty",
         "set_inheritable", "set_blocking", "memfd_create", "mkfifo", "eventfd", "login_tty",
         "copy_file_range", "fileno"}
_DYNAMIC_CODE = {"eval", "exec", "__import__", "compile", "breakpoint"}
# Patching any attribute of these modules changes what the harness measures or compares.
PATCH_ROOTS = {"torch", "time", "triton", "tl", "F", "nn", "np", "numpy", "math", "sys", "os",
               "gc", "builtins", "random", "cuda", "perf_counter", "functools"}
# Paths to the process's own descriptors and memory.
_FD_PATH = re.compile(r"/proc/(self|thread-self|\d+)/|/dev/fd\b|/dev/std(in|out|err)\b")
# Native sources (CUDA / C++ strings) that duplicate descriptors or start threads of their own.
_NATIVE_FD = re.compile(r"\b(dup[23]?|fdopen|pipe2?)\s*\(")
_NATIVE_THREAD = re.compile(r"\bpthread_create\b|\bstd::(thread|jthread|async)\b")
# A string that names a module path: `import_module("gc")`, `attrgetter("sys.modules")`.
_DOTTED = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*$")


class _Uses:
    """The reasons found, first use first. A strict use stays forbidden even for a program
    that builds native kernels (libc loaded by name, os.system, ...)."""

    def __init__(self, builds_native: bool):
        self.reasons: list[str] = []
        self.strict: set[str] = set()
        self.lenient = _NATIVE_BUILD_TAGS if builds_native else set()

    def add(self, what: str, strict: bool = False) -> None:
        reason = what if ":" in what else f"harness_access:{what}"
        if strict:
            self.strict.add(reason)
        if reason not in self.reasons:
            self.reasons.append(reason)

    def result(self) -> list[str]:
        return [r for r in self.reasons
                if r.split(":", 1)[-1] not in self.lenient or r in self.strict]


def _chain(prog: Program, node: ast.AST) -> list[str]:
    """`torch.sys.modules` -> ["torch", "sys", "modules"], the root through its import alias
    (`import os as o`, `from os import path`)."""
    names = []
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        node = node.func if isinstance(node, ast.Call) else node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    names.reverse()
    if names and names[0] in prog.module_aliases:
        names[:1] = prog.module_aliases[names[0]].split(".")
    return names


def _attribute(uses: _Uses, chain: list[str]) -> None:
    """One attribute read `chain[-1]` of the object `chain[:-1]` names."""
    attr, owners = chain[-1], chain[:-1]
    if attr in FRAME_ATTRS or (attr == "stack" and "inspect" in owners):
        uses.add("frames")
    if attr in _GC_ATTRS:
        uses.add("gc")
    if attr == "sys" and owners:  # torch.sys, os.sys: the sys module under another name
        uses.add("sys")
    if "sys" in owners and attr in SYS_FORBIDDEN and attr != "_getframe":
        uses.add("sys")
    if attr in _THREAD_ATTRS or (attr == "Timer" and "threading" in owners):
        uses.add("threading")
    if "os" in owners or "posix" in owners:
        if attr in OS_FORBIDDEN:
            uses.add("process", strict=True)
        if attr in OS_FD:
            uses.add("fd")
    if attr == "fileno":
        uses.add("fd")
    if owners and owners[0] == "ctypes" and not _CTYPES_HARMLESS.match(attr):
        uses.add("ctypes", strict=not _CTYPES_LOADER.match(attr))
    if attr == "import_module":
        uses.add("importlib")


def _module(uses: _Uses, name: str, members: list[str] | None = None) -> None:
    """An import of `name` (or of `members` from it)."""
    top = name.split(".")[0]
    tag = FORBIDDEN_MODULES.get(top)
    if name.startswith(("torch.testing", "torch._dynamo.eval")):
        uses.add("torch_testing")
    if tag == "ctypes" and members is not None:
        bad = [m for m in members if not _CTYPES_HARMLESS.match(m)]
        if bad:
            uses.add("ctypes", strict=any(not _CTYPES_LOADER.match(b) for b in bad))
    elif tag:
        uses.add(tag)
    for m in members or ():
        _attribute(uses, name.split(".") + [m])


def _string(uses: _Uses, text: str) -> None:
    """A string constant: a path to the process's descriptors, a module path named for a
    computed import or attribute lookup, or native source that works on descriptors."""
    if _FD_PATH.search(text):
        uses.add("fd")
    if _DOTTED.match(text):
        parts = text.split(".")
        if parts[0] == "traceback":
            uses.add("frames")
        elif parts[0] in ("curate", "gc", "inspect", "threading", "_thread", "importlib",
                          "builtins"):
            _module(uses, parts[0])
        if len(parts) > 1:
            _attribute(uses, parts)
        elif text in FRAME_ATTRS | _GC_ATTRS | {"sys"}:
            _attribute(uses, ["?", text])
    elif "\n" in text:
        if _NATIVE_FD.search(text):
            uses.add("fd")
        if _NATIVE_THREAD.search(text):
            uses.add("threading")


def _call(uses: _Uses, prog: Program, node: ast.Call) -> None:
    fn, args = node.func, node.args
    name = last_name(fn)
    builtin = isinstance(fn, ast.Name)
    const = [a.value if isinstance(a, ast.Constant) else None for a in args]
    if name in ("setattr", "delattr") and builtin and args:
        root = root_name(args[0])
        if root in PATCH_ROOTS or prog.module_aliases.get(root or "", "").split(".")[0] \
                in PATCH_ROOTS:
            attr = const[1] if len(args) > 1 and const[1] is not None else "?"
            uses.add(patch_reason(f"{dotted(args[0])}.{attr}"))
    if name in ("getattr", "setattr", "delattr", "hasattr") and builtin and len(args) >= 2:
        if isinstance(const[1], str):  # getattr(torch, "sys"): an attribute read all the same
            _attribute(uses, _chain(prog, args[0]) + [const[1]])
        elif name == "getattr" and root_name(args[0]) in PATCH_ROOTS:
            uses.add("dynamic_attribute")
    if name == "import_module" and args and not isinstance(const[0], str):
        uses.add("importlib")  # a computed name: any module, the harness's too
    if name in ("patch", "patch.object", "MonkeyPatch"):
        uses.add("mock")
    if name in ("CDLL", "PyDLL", "LoadLibrary") and (not args or const[0] is not None):
        uses.add("ctypes", strict=True)  # libc or another system library
    if name in ("set_float32_matmul_precision", "set_default_dtype"):
        uses.add(f"harness_access:patch:torch.{name}")
    if name in ("open", "FileIO") and args and isinstance(const[0], int):
        uses.add("fd")  # open(3): a descriptor by number
    if any(k.arg in ("closefd", "opener", "fileno") for k in node.keywords):
        uses.add("fd")
    if any(k.arg == "capture_locals" for k in node.keywords):
        uses.add("frames")


def _assignment(uses: _Uses, prog: Program, node: ast.AST) -> None:
    """Assigning to (or deleting) an attribute or item of a module the harness relies on."""
    targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
    for t in targets:
        for el in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
            if not isinstance(el, (ast.Attribute, ast.Subscript)):
                continue
            root = root_name(el)
            full = prog.module_aliases.get(root or "", root or "")
            if root in PATCH_ROOTS or full.split(".")[0] in PATCH_ROOTS:
                if root == "os" and "environ" in dotted(el):
                    continue  # setting build variables (TORCH_CUDA_ARCH_LIST) is fine
                uses.add(patch_reason(dotted(el)))


def patch_reason(target: str) -> str:
    timer = re.search(r"\b(time\.|perf_counter|monotonic|Event|elapsed_time|synchronize)", target)
    return f"timer_patched:{target}" if timer else f"harness_access:patch:{target}"


def _node(uses: _Uses, prog: Program, node: ast.AST) -> None:
    if isinstance(node, ast.Import):
        for a in node.names:
            _module(uses, a.name)
    elif isinstance(node, ast.ImportFrom):
        _module(uses, node.module or "", [a.name for a in node.names])
    elif isinstance(node, ast.Attribute):
        _attribute(uses, _chain(prog, node))
    elif isinstance(node, ast.Name):
        if node.id in ("__builtins__", "__loader__", "__spec__"):
            uses.add("builtins")
        if node.id in _DYNAMIC_CODE and isinstance(node.ctx, ast.Load):
            uses.add("dynamic_code")
    elif isinstance(node, ast.Call):
        _call(uses, prog, node)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        _string(uses, node.value)
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
        _assignment(uses, prog, node)


def harness_access(prog: Program, builds_native: bool = False) -> list[str]:
    """Reasons for code that reaches into the harness, the interpreter or the outside."""
    uses = _Uses(builds_native)
    docstrings = {id(n.value) for n in ast.walk(prog.tree) if isinstance(n, ast.Expr)
                  and isinstance(n.value, ast.Constant)}
    for node in ast.walk(prog.tree):
        if id(node) not in docstrings:
            _node(uses, prog, node)
    return uses.result()

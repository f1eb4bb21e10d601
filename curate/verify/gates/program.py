"""The model of one candidate program that every static gate reads: its functions, classes,
Triton kernels and compiled-kernel handles, found from the AST (the code is never run).

What counts as a custom kernel:
- Triton: a function decorated with `triton.jit` (or `jit`, `triton.autotune`, `triton.heuristics`),
  launched as `kernel[grid](...)`, `kernel.run(...)` or `kernel.warmup(...)`;
- CUDA / C++: the result of `load_inline`, `cpp_extension.load`, inductor's
  `async_compile.cpp_pybinding` / `.cpp` / `.triton` / `.cuda`, or `load_pybinding`, referenced
  from forward (`ext.fn(...)`, `self.ext.fn(...)`, `kernel(...)`).

Reachability is by name and over-approximates (a call `x.foo()` reaches every function named
`foo` in the file): a false "reached" costs nothing here because the dynamic gates check what
actually ran; a false "not reached" would reject honest code.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass, field

# Calls whose result is a compiled custom kernel (or a module of them).
KERNEL_FACTORIES = {"load_inline", "load", "cpp_pybinding", "cpp", "triton", "cuda",
                    "load_pybinding", "load_pybinding_async", "compile_kernel", "RawKernel",
                    "RawModule", "_cuda_compile", "CDLL"}
# `cpp`, `triton`, `cuda` and `load` are kernel factories only as methods of these objects.
_FACTORY_OWNERS = {"async_compile", "AsyncCompile", "cpp_extension", "CppCodeCache",
                   "CppPythonBindingsCodeCache", "extension", "cupy", "cp", "torch_ext"}
_AMBIGUOUS_FACTORIES = {"load", "cpp", "triton", "cuda"}


@dataclass
class Func:
    name: str
    node: ast.AST
    owner: str | None = None  # class name for methods
    refs: set[str] = field(default_factory=set)


class Program:
    """Names, functions, kernels and kernel handles of one candidate module."""

    def __init__(self, tree: ast.Module, code: str):
        self.tree, self.code = tree, code
        self.funcs: dict[str, list[Func]] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.triton_kernels: set[str] = set()
        self.handles: set[str] = set()       # names bound to compiled kernels / extensions
        self.factories: set[str] = set()     # local functions that return a compiled kernel
        self.aliases: dict[str, set[str]] = {}  # module-level `a = <expr>`: a -> names in expr
        self.module_aliases: dict[str, str] = {}  # `import numpy as np` -> np: numpy
        self._collect()

    # -- collection ------------------------------------------------------------------------
    def _collect(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self._add_func(item, node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    full = a.name if isinstance(node, ast.Import) else \
                        f"{node.module or ''}.{a.name}"
                    self.module_aliases[a.asname or a.name.split(".")[0]] = full
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    not any(node is f.node for fs in self.funcs.values() for f in fs):
                self._add_func(node, None)
        for fs in self.funcs.values():
            for f in fs:
                if self._is_triton(f.node):
                    self.triton_kernels.add(f.name)
        # kernel handles: names bound from a kernel factory, transitively through local helpers
        for _ in range(4):
            before = (len(self.handles), len(self.factories))
            for fs in self.funcs.values():
                for f in fs:
                    if f.name not in self.triton_kernels and f.name != "__init__" and \
                            self.makes_kernel(f.node):
                        self.factories.add(f.name)
            for node in ast.walk(self.tree):
                targets, value = assign_parts(node)
                if value is not None and self.makes_kernel(value):
                    for t in targets:
                        self.handles.update(target_names(t))
            if (len(self.handles), len(self.factories)) == before:
                break
        for node in self.tree.body:
            targets, value = assign_parts(node)
            if value is not None:
                refs = referenced_names(value)
                for t in targets:
                    for n in target_names(t):
                        self.aliases.setdefault(n, set()).update(refs)

    def _add_func(self, node, owner):
        f = Func(node.name, node, owner, referenced_names(node))
        self.funcs.setdefault(node.name, []).append(f)

    @staticmethod
    def _is_triton(node) -> bool:
        for d in getattr(node, "decorator_list", []):
            text = ast.unparse(d)
            if re.search(r"\b(jit|autotune|heuristics)\b", text) and "torch.jit" not in text:
                return True
        return False

    def makes_kernel(self, value: ast.AST) -> bool:
        for sub in ast.walk(value):
            if not isinstance(sub, ast.Call):
                continue
            fn = sub.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if \
                isinstance(fn, ast.Name) else None
            if name is None:
                continue
            if name in self.factories:
                return True
            if name not in KERNEL_FACTORIES:
                continue
            if name in _AMBIGUOUS_FACTORIES:
                owner = root_name(fn.value) if isinstance(fn, ast.Attribute) else None
                full = self.module_aliases.get(name, "") if isinstance(fn, ast.Name) else ""
                if (owner in _FACTORY_OWNERS or "cpp_extension" in ast.unparse(fn)
                        or "cpp_extension" in full):
                    return True
                continue
            return True
        return False

    # -- queries -----------------------------------------------------------------------------
    def entry_class(self) -> str | None:
        if "ModelNew" in self.classes:
            return "ModelNew"
        for name, node in self.classes.items():
            if any(isinstance(i, ast.FunctionDef) and i.name == "forward" for i in node.body):
                return name
        return None

    def reachable(self, start: list[Func]) -> tuple[list[Func], set[str]]:
        """Functions reachable from `start` and every name they reference."""
        seen_f: list[Func] = []
        names: set[str] = set()
        todo = list(start)
        seen_names: set[str] = set()
        while todo:
            f = todo.pop()
            if any(f is g for g in seen_f):
                continue
            seen_f.append(f)
            frontier = set(f.refs)
            while frontier:
                n = frontier.pop()
                if n in seen_names:
                    continue
                seen_names.add(n)
                names.add(n)
                frontier.update(self.aliases.get(n, ()))
                for g in self.funcs.get(n, []):
                    if g.name in self.triton_kernels:
                        continue  # a launch, not a Python call into the kernel
                    todo.append(g)
                if n in self.classes:  # MyFn.apply(...) reaches MyFn.forward/backward
                    for item in self.classes[n].body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            todo.extend(g for g in self.funcs.get(item.name, [])
                                        if g.owner == n)
        return seen_f, names

    def launches_in(self, node: ast.AST) -> set[str]:
        """Kernel names launched or handles used directly inside `node`."""
        hits = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Subscript) and isinstance(sub.value, (ast.Name, ast.Attribute)):
                n = last_name(sub.value)
                if n in self.triton_kernels:
                    hits.add(n)
            elif isinstance(sub, ast.Attribute) and sub.attr in ("run", "warmup", "launch") and \
                    last_name(sub.value) in self.triton_kernels:
                hits.add(last_name(sub.value))
            elif isinstance(sub, (ast.Name, ast.Attribute)):
                n = last_name(sub)
                if n in self.handles:
                    hits.add(n)
        return hits


def assign_parts(node) -> tuple[list[ast.AST], ast.AST | None]:
    if isinstance(node, ast.Assign):
        return node.targets, node.value
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
        return [node.target], node.value
    return [], None


def target_names(t: ast.AST) -> set[str]:
    if isinstance(t, ast.Name):
        return {t.id}
    if isinstance(t, ast.Attribute):
        return {t.attr}
    if isinstance(t, (ast.Tuple, ast.List)):
        out = set()
        for e in t.elts:
            out |= target_names(e)
        return out
    if isinstance(t, ast.Subscript):
        return target_names(t.value)
    return set()


def referenced_names(node: ast.AST) -> set[str]:
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
    return out


def root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def dotted(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return "?"


def code_text(tree: ast.Module) -> str:
    """The program without comments and docstrings (CUDA/C++ sources in strings stay): what the
    text gates read, so that a comment mentioning fp16 is not half precision."""
    t = copy.deepcopy(tree)
    for node in ast.walk(t):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [b for b in body if not (isinstance(b, ast.Expr) and isinstance(
                getattr(b, "value", None), ast.Constant) and isinstance(b.value.value, str))]
            node.body = kept or [ast.Pass()]
    try:
        return ast.unparse(t)
    except Exception:  # noqa: BLE001
        return ""


def string_constants(tree: ast.AST) -> str:
    return "\n".join(n.value for n in ast.walk(tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str))

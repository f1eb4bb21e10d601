"""The dependency closure of one class: everything it reads, gathered from the whole repository
into one standalone source text.

Starting from the class, every statement's free names (symtable) are followed to the statement
of the repository that binds them, through imports across files, `__init__` re-exports and star
imports; `alias.attr` uses of a repository module become direct names. Outside imports are kept,
in absolute form, only when the package can be found here. A top-level value read from outside
(parsed arguments, a YAML/JSON file, `open`) becomes a `_Mock`. Names that two files bind
differently are renamed apart. Statements come out dependencies first.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import symtable
from dataclasses import dataclass, field
from functools import lru_cache

from .mocks import MOCK_SOURCE, READER_CALLS
from .modules import TORCH_MODULE_BASES, ClassRef, ModuleInfo, Repository, Unit, absolute_module

RESERVED = ("torch", "Model", "get_inputs", "get_init_inputs", "_Mock", "_guess", "_unavailable",
            "_UnavailableType")
MAX_UNITS = 2000


@dataclass
class Closure:
    source: str            # the definitions, without the KernelBench tail
    class_name: str        # the class's name in `source` (renamed if it collided)
    missing: list[str] = field(default_factory=list)      # outside modules not found here
    unresolved: list[str] = field(default_factory=list)   # free names bound nowhere
    uses_mock: bool = False
    statements: int = 0


@lru_cache(maxsize=4096)
def importable(module: str) -> bool:
    """Can the top-level package be found here (nothing of it is executed)?"""
    top = module.split(".")[0]
    if not top:
        return False
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def free_names(node: ast.stmt) -> set[str]:
    """Module-level names a statement reads (its own bindings included)."""
    try:
        table = symtable.symtable(ast.unparse(node), "<unit>", "exec")
    except (SyntaxError, RecursionError, ValueError):
        return set()
    out: set[str] = set()

    def walk(t, top):
        for s in t.get_symbols():
            if s.is_referenced() and (top or s.is_global()):
                out.add(s.get_name())
        for child in t.get_children():
            walk(child, False)
    walk(table, True)
    return out


def _loads(nodes) -> set[str]:
    return {n.id for e in nodes if e is not None for n in ast.walk(e)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def _def_time(fn) -> list:
    """What a def evaluates when it runs: decorators, defaults, annotations."""
    a = fn.args
    return [*fn.decorator_list, *a.defaults, *a.kw_defaults, fn.returns,
            *(x.annotation for x in a.posonlyargs + a.args + a.kwonlyargs)]


def _called(nodes) -> set[str]:
    """Names called (or applied as decorators) in `nodes`: their bodies run right then."""
    out = set()
    for e in nodes:
        for sub in ast.walk(e) if e is not None else ():
            if isinstance(sub, ast.Call):
                chain = _attr_chain(sub.func)
                if chain:
                    out.add(chain[0])
    return out


def split_free_names(node: ast.stmt) -> tuple[set[str], set[str], set[str]]:
    """(names called when the statement runs, other names it reads then, names read only
    later inside function bodies): what must be defined, bodies included, before it; what must
    be defined before it; what may come after it."""
    every = free_names(node)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        parts = _def_time(node)
        decorators = node.decorator_list
    elif isinstance(node, ast.ClassDef):
        parts = [*node.bases, *(k.value for k in node.keywords), *node.decorator_list]
        decorators = list(node.decorator_list)
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                parts += _def_time(stmt)
                decorators += stmt.decorator_list
            else:
                parts.append(stmt)
    else:
        return every & _called([node]), every, set()
    now = every & _loads(parts)
    called = now & (_called(parts) | {c[0] for d in decorators if (c := _attr_chain(d))})
    return called, now - called, every - now


def _reads_outside(node: ast.stmt) -> bool:
    if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
        return False
    for sub in ast.walk(node.value):
        if isinstance(sub, ast.Call):
            f = sub.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) \
                else None
            if name in READER_CALLS:
                return True
    return False


def _attr_chain(node: ast.expr) -> list[str] | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id] + parts
    return None


class _Rename(ast.NodeTransformer):
    """Apply a unit's renames: names (unless a function makes them local) and `mod.attr`
    chains of repository modules."""

    def __init__(self, names: dict[str, str], chains: dict[tuple, str]):
        self.names, self.chains = names, chains
        self.shadow: list[set[str]] = []

    def visit_Attribute(self, node):
        chain = _attr_chain(node)
        if chain and tuple(chain) in self.chains and not self._shadowed(chain[0]):
            return ast.copy_location(ast.Name(self.chains[tuple(chain)], node.ctx), node)
        return self.generic_visit(node)

    def visit_Name(self, node):
        if node.id in self.names and not self._shadowed(node.id):
            node.id = self.names[node.id]
        return node

    def _shadowed(self, name: str) -> bool:
        return any(name in s for s in self.shadow)

    def _function(self, node):
        a = node.args
        local = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
        local |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
        if not isinstance(node, ast.Lambda):
            for sub in ast.walk(node):
                if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                    local.add(sub.id)
        for default in a.defaults + [d for d in a.kw_defaults if d is not None]:
            self.visit(default)
        for dec in getattr(node, "decorator_list", []):
            self.visit(dec)
        if getattr(node, "returns", None) is not None:
            self.visit(node.returns)
        self.shadow.append(local)
        body = node.body if isinstance(node.body, list) else [node.body]
        new = [self.visit(b) for b in body]
        self.shadow.pop()
        node.body = new if isinstance(node.body, list) else new[0]
        return node

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function


class ClosureBuilder:
    def __init__(self, repo: Repository):
        self.repo = repo
        self.emitted: dict = {}                 # key -> {bound name: emitted name}
        self.taken: dict[str, object] = {n: ("reserved", n) for n in RESERVED}
        self.taken["torch"] = "torch=torch"
        self.state: dict = {}
        self.imports: list[str] = ["import torch"]
        self.body: list[str] = []
        self.result = Closure("", "")
        self.dunders: set[str] = set()
        self.pending: list = []     # statements to emit after their readers
        self.strict: set = set()    # statements whose body's names are emitted before them
        self._mode = "now"          # strict: called at load; now: read at load; later: in bodies

    # -- names ---------------------------------------------------------------------------
    def _claim(self, key, names, owner=None) -> dict[str, str]:
        """Emitted names for what `key` binds. Statements of one module that bind the same
        name (a def and its try/except redefinition) share it: `owner` is that module."""
        out = {}
        for n in names:
            who = (owner, n) if owner is not None else key
            cand, i = n, 1
            while cand in self.taken and self.taken[cand] != who:
                i += 1
                cand = f"{n}_{i}"
            self.taken[cand] = who
            out[n] = cand
        self.emitted[key] = out
        return out

    # -- resolution ----------------------------------------------------------------------
    def resolve(self, mod: ModuleInfo, name: str, node: ast.stmt, chains: dict) -> str | None:
        """The emitted name that `name` of `mod` refers to (visiting what it needs)."""
        hit = self.repo.find(mod.name, name)
        if hit is None:
            if name.startswith("__"):
                self.dunders.add(name)
            elif not hasattr(builtins, name):
                self.result.unresolved.append(name)
            return None
        owner, _ = hit
        if f"{owner.name}.{name}" in TORCH_MODULE_BASES:  # a scan of torch: the real nn.Module
            imp = ast.ImportFrom(module="torch.nn", names=[ast.alias("Module", None)], level=0)
            return self._outside(imp, owner)
        got = None
        for idx in owner.bindings[name]:
            got = self._through(owner, owner.units[idx], name, node, chains) or got
        return got

    def _through(self, owner: ModuleInfo, unit: Unit, name: str, node: ast.stmt,
                 chains: dict) -> str | None:
        imp = unit.node
        if isinstance(imp, ast.Import):
            alias = imp.names[0]
            target = alias.name if alias.asname else alias.name.split(".")[0]
            return self._module_use(target, name, node, chains, lambda: self._outside(imp, owner))
        if isinstance(imp, ast.ImportFrom):
            src = absolute_module(owner, imp)
            alias = imp.names[0]
            if src in self.repo.modules or f"{src}.{alias.name}" in self.repo.modules:
                full = f"{src}.{alias.name}"
                # a package's own binding wins over its submodule of the same name (`from
                # .create_conv2d import create_conv2d` in __init__), as in Python
                if full in self.repo.modules and not (
                        src in self.repo.modules and self.repo.find(src, alias.name)
                        and not self._imports_submodule(src, alias.name)):
                    return self._module_use(full, name, node, chains, lambda: None)
                inner = self.repo.modules[src]
                return self.resolve(inner, alias.name, node, chains) if inner is not owner \
                    or alias.name != name else None
            return self._outside(imp, owner)
        if self._mode == "later":
            return self._later(owner, unit)[name]
        return self.visit(owner, unit, strict=self._mode == "strict")[name]

    def _imports_submodule(self, package: str, name: str) -> bool:
        """The package binds `name` only by importing its own submodule (`from . import
        functional` in an `__init__`): the name is that module, not a definition."""
        mod = self.repo.modules[package]
        nodes = [mod.units[i].node for i in mod.bindings.get(name, ())]
        return bool(nodes) and all(
            isinstance(n, ast.ImportFrom) and absolute_module(mod, n) == package
            and n.names[0].name == name for n in nodes)

    def _later(self, mod: ModuleInfo, unit: Unit) -> dict[str, str]:
        """Names for a statement read only inside function bodies: emitted after the reader."""
        key = (mod.name, unit.index)
        if key in self.state:
            return self.emitted[key]
        self.state[key] = "pending"
        self.pending.append((mod, unit))
        return self._claim(key, unit.binds, owner=mod.name)

    def _module_use(self, target: str, local: str, node: ast.stmt, chains: dict, outside):
        """`local` names the module `target`: repository modules through their attributes."""
        if target not in self.repo.modules and not any(
                m.startswith(target + ".") for m in self.repo.modules):
            return outside()
        found = False
        for sub in ast.walk(node):
            chain = _attr_chain(sub) if isinstance(sub, ast.Attribute) else None
            if not chain or chain[0] != local:
                continue
            path = target
            for i, part in enumerate(chain[1:], start=1):
                if f"{path}.{part}" in self.repo.modules:
                    path = f"{path}.{part}"
                    continue
                if path in self.repo.modules:
                    got = self.resolve(self.repo.modules[path], part, node, chains)
                    if got:
                        chains[tuple(chain[:i + 1])] = got
                        found = True
                break
        if not found and target not in self.repo.modules:
            return outside()  # `import torch` while scanning torch/nn: still the package
        return None

    def _outside(self, imp: ast.stmt, owner: ModuleInfo) -> str | None:
        """An import of an outside package: kept (absolute) when importable here."""
        alias = imp.names[0]
        if isinstance(imp, ast.Import):
            mod, bound = alias.name, alias.asname or alias.name.split(".")[0]
        else:
            mod, bound = absolute_module(owner, imp), alias.asname or alias.name
        if not importable(mod):
            if mod not in self.result.missing:
                self.result.missing.append(mod)
            return None
        # keyed by what the name means: `import torch.nn as nn` and `from torch import nn` agree
        target = alias.name if isinstance(imp, ast.Import) else f"{mod}.{alias.name}"
        key = f"{bound}={target}"
        if key in self.state:
            return self.emitted[key][bound]
        self.state[key] = "done"
        new = self._claim(key, [bound])[bound]
        if new != bound and isinstance(imp, ast.Import) and not alias.asname:
            new = self.emitted[key][bound] = bound  # `import a.b` binds `a`: not renamed
        if isinstance(imp, ast.Import):
            text = f"import {alias.name}" + (f" as {new}" if alias.asname or new != bound else "")
        else:
            text = f"from {mod} import {alias.name}" + (f" as {new}" if new != alias.name else "")
        if text not in self.imports:
            self.imports.append(text)
        return new

    # -- statements ----------------------------------------------------------------------
    def visit(self, mod: ModuleInfo, unit: Unit, strict: bool = False) -> dict[str, str]:
        """Emit a statement after what it needs. `strict`: it is called while the program
        loads, so what its function bodies read must come before it too."""
        key = (mod.name, unit.index)
        state = self.state.get(key)
        if state in ("done", "visiting"):
            if strict and state == "done" and key not in self.strict:
                self.strict.add(key)  # emitted already: what its bodies read comes next
                self._resolve_all(mod, unit, key, strict=True)
            return self.emitted[key]
        if len(self.state) > MAX_UNITS:
            raise RecursionError("closure too large")
        names = self.emitted[key] if state == "pending" else \
            self._claim(key, unit.binds, owner=mod.name)
        self.state[key] = "visiting"
        if strict:
            self.strict.add(key)
        node = unit.node
        if _reads_outside(node):  # a file, argv or a config read at import time
            self.result.uses_mock = True
            self.body.append("\n".join(f"{names[n]} = _Mock({n!r})" for n in unit.binds))
            self.state[key] = "done"
            return names
        renames, chains = self._resolve_all(mod, unit, key, strict)
        renames = {**names, **renames}
        if any(v != k for k, v in renames.items()) or chains:
            node = _Rename(renames, chains).visit(ast.parse(ast.unparse(node)).body[0])
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                node.name = names.get(node.name, node.name)
        self.body.append(ast.unparse(node))
        self.state[key] = "done"
        return names

    def _resolve_all(self, mod: ModuleInfo, unit: Unit, key, strict: bool):
        """Resolve (and so place) every name the statement reads: (renames, chains)."""
        cache = self.repo.free_names
        if key not in cache:  # the same statements recur in every class of a repository
            cache[key] = split_free_names(unit.node)
        called, now, later = cache[key]
        groups = [("strict", called | now | later)] if strict else \
            [("strict", called), ("now", now), ("later", later)]
        renames, chains, outer = {}, {}, self._mode
        for mode, frees in groups:
            self._mode = mode
            for free in sorted(frees - set(unit.binds)):
                got = self.resolve(mod, free, unit.node, chains)
                if got and got != free:
                    renames[free] = got
        self._mode = outer
        return renames, chains


def build_closure(repo: Repository, ref: ClassRef) -> Closure:
    """The standalone source of `ref` and what it reads."""
    b = ClosureBuilder(repo)
    mod = repo.modules[ref.module]
    unit = next(mod.units[i] for i in mod.bindings[ref.name]
                if isinstance(mod.units[i].node, ast.ClassDef))
    names = b.visit(mod, unit)
    while b.pending:
        b.visit(*b.pending.pop(0))
    res = b.result
    parts = ["\n".join(b.imports)]
    if "__file__" in b.dunders:  # read at import time: a program from text has none
        parts.append('__file__ = globals().get("__file__", "scraped.py")')
    if res.uses_mock:
        parts.append(MOCK_SOURCE.strip())
    parts += b.body
    res.source = "\n\n\n".join(parts) + "\n"
    res.class_name = names[ref.name]
    res.statements = len(b.body)
    return res

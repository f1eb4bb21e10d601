"""A repository's Python files as modules, and the nn.Module subclasses among their classes.

Nothing here imports or runs the repository: files are parsed with `ast`. Module names come
from the package folders (`__init__.py`) above each file, looked up beyond the scanned folder
too, so that a scan of `site-packages/torch/nn/modules` names `torch.nn.modules.conv` and its
relative imports resolve to real, importable modules.
"""

from __future__ import annotations

import ast
import logging
from dataclasses import dataclass, field
from pathlib import Path

from curate import pyast

log = logging.getLogger("curate")

MAX_FILE_BYTES = 1_000_000
SKIP_DIRS = {".git", "__pycache__", "node_modules", ".tox", ".venv", "venv", "build", "dist",
             "site-packages", ".eggs"}
TORCH_MODULE_BASES = {"torch.nn.Module", "torch.nn.modules.module.Module"}


@dataclass
class Unit:
    """One top-level statement (one name of an import) and the names it binds."""

    node: ast.stmt
    binds: tuple[str, ...]
    index: int


@dataclass
class ModuleInfo:
    name: str
    path: Path
    rel: str
    units: list[Unit] = field(default_factory=list)
    bindings: dict[str, list[int]] = field(default_factory=dict)  # name -> unit indexes
    star_imports: list[str] = field(default_factory=list)         # absolute module names
    exports: list[str] | None = None                              # __all__, when literal

    @property
    def is_package(self) -> bool:
        return self.path.name == "__init__.py"


def module_name(path: Path) -> str:
    """Dotted name from the package folders above `path` (found beyond the scan root too)."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    d = path.parent
    while (d / "__init__.py").is_file() and d != d.parent:
        parts.insert(0, d.name)
        d = d.parent
    return ".".join(parts) or path.stem


def python_files(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).parts
        if any(part in SKIP_DIRS or part.startswith(".") for part in rel[:-1]):
            continue
        out.append(p)
    return out


def _bound_names(node: ast.stmt) -> list[str]:
    """Names a top-level statement binds (imports are split per alias before this)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
    names = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.append(sub.id)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(sub.name)
        elif isinstance(sub, (ast.Import, ast.ImportFrom)):
            names += [(a.asname or a.name).split(".")[0] for a in sub.names if a.name != "*"]
    return list(dict.fromkeys(names))


def absolute_module(mod: ModuleInfo, node: ast.ImportFrom) -> str:
    """`from ..x import y` in `mod` -> the absolute name of `..x`."""
    if not node.level:
        return node.module or ""
    base = mod.name.split(".")
    if not mod.is_package:
        base = base[:-1]
    base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
    return ".".join(base + ([node.module] if node.module else []))


def _split_imports(node: ast.stmt) -> list[ast.stmt]:
    if isinstance(node, ast.Import) and len(node.names) > 1:
        return [ast.copy_location(ast.Import(names=[a]), node) for a in node.names]
    if isinstance(node, ast.ImportFrom) and len(node.names) > 1:
        return [ast.copy_location(ast.ImportFrom(module=node.module, names=[a], level=node.level),
                                  node) for a in node.names]
    return [node]


def _is_main_guard(node: ast.stmt) -> bool:
    """`if __name__ == "__main__":`: a script's entry, never part of a class's closure."""
    return (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
            and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__")


def load_module(path: Path, root: Path) -> ModuleInfo | None:
    """Parse one file; None for files too large, not UTF-8 or not Python 3."""
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            return None
        tree = pyast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return None
    mod = ModuleInfo(module_name(path.resolve()), path, path.relative_to(root).as_posix())
    for top in tree.body:
        if _is_main_guard(top):
            continue
        for node in _split_imports(top):
            if isinstance(node, ast.ImportFrom) and node.names[0].name == "*":
                mod.star_imports.append(absolute_module(mod, node))
                continue
            unit = Unit(node, tuple(_bound_names(node)), len(mod.units))
            mod.units.append(unit)
            for n in unit.binds:
                mod.bindings.setdefault(n, []).append(unit.index)
            if isinstance(node, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
                try:
                    mod.exports = [str(x) for x in ast.literal_eval(node.value)]
                except (ValueError, TypeError, SyntaxError):
                    pass
    return mod


@dataclass
class Repository:
    """Every parsed module of one checkout, by dotted name."""

    root: Path
    modules: dict[str, ModuleInfo]
    files_scanned: int = 0
    free_names: dict = field(default_factory=dict)  # (module, unit) -> names it reads

    @classmethod
    def scan(cls, root: Path) -> "Repository":
        root = Path(root)
        files = python_files(root) if root.is_dir() else [root]
        base = root if root.is_dir() else root.parent
        mods: dict[str, ModuleInfo] = {}
        for f in files:
            m = load_module(f, base)
            if m is not None:
                mods.setdefault(m.name, m)
        return cls(root, mods, len(files))

    def find(self, module: str, name: str, seen: frozenset = frozenset()
             ) -> tuple[ModuleInfo, str] | None:
        """The module that defines `name` as seen from `module`, following star imports."""
        mod = self.modules.get(module)
        if mod is None or module in seen:
            return None
        if name in mod.bindings:
            return mod, name
        for star in mod.star_imports:
            target = self.modules.get(star)
            if target is not None and (target.exports is None or name in target.exports):
                hit = self.find(star, name, seen | {module})
                if hit:
                    return hit
        return None


@dataclass(frozen=True)
class ClassRef:
    module: str
    name: str


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    if isinstance(node, ast.Subscript):  # Generic[T]-style bases
        return _dotted(node.value)
    return None


class BaseResolver:
    """Answers `is this class an nn.Module?` with bases resolved across the repository's files."""

    def __init__(self, repo: Repository):
        self.repo = repo
        self._memo: dict[ClassRef, bool] = {}

    def qualify(self, mod: ModuleInfo, dotted: str, depth: int = 0) -> str | ClassRef | None:
        """A base expression -> a class of the repo (ClassRef) or an outside dotted name."""
        head, _, rest = dotted.partition(".")
        hit = self.repo.find(mod.name, head)
        if hit is None or depth > 20:
            return None
        owner, _ = hit
        for idx in owner.bindings[head]:
            node = owner.units[idx].node
            if isinstance(node, ast.ClassDef) and not rest:
                return ClassRef(owner.name, head)
            if isinstance(node, ast.Import):
                alias = node.names[0]
                full = alias.name if alias.asname else alias.name.split(".")[0]
                return self._follow(full + ("." + rest if rest else ""), depth)
            if isinstance(node, ast.ImportFrom):
                src = absolute_module(owner, node)
                full = f"{src}.{node.names[0].name}" + ("." + rest if rest else "")
                return self._follow(full, depth)
            if isinstance(node, ast.Assign) and not rest:  # Base = nn.Module
                d = _dotted(node.value)
                if d:
                    return self.qualify(owner, d, depth + 1)
        return None

    def _follow(self, full: str, depth: int) -> str | ClassRef | None:
        """`a.b.C` -> the repo class when `a.b` is a repo module, else the outside name."""
        parts = full.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            modname = ".".join(parts[:cut])
            if modname in self.repo.modules:
                rest = ".".join(parts[cut:])
                return self.qualify(self.repo.modules[modname], rest, depth + 1)
        return full

    def is_module(self, ref: ClassRef, stack: frozenset = frozenset()) -> bool:
        if ref in self._memo:
            return self._memo[ref]
        if f"{ref.module}.{ref.name}" in TORCH_MODULE_BASES:  # a scan of torch itself
            return True
        if ref in stack:
            return False
        mod = self.repo.modules.get(ref.module)
        node = _class_node(mod, ref.name) if mod else None
        ok = False
        for base in (node.bases if node is not None else []):
            d = _dotted(base)
            target = self.qualify(mod, d) if d else None
            if isinstance(target, ClassRef):
                ok = self.is_module(target, stack | {ref})
            elif isinstance(target, str):
                ok = outside_is_module(target)
            if ok:
                break
        self._memo[ref] = ok
        return ok


def _class_node(mod: ModuleInfo, name: str) -> ast.ClassDef | None:
    for idx in mod.bindings.get(name, []):
        node = mod.units[idx].node
        if isinstance(node, ast.ClassDef):
            return node
    return None


def outside_is_module(dotted: str) -> bool:
    """Is the outside class `torch.nn.Conv2d` an nn.Module? torch's own classes are looked up
    in torch (trusted, already imported by the parent); other packages are not imported."""
    if dotted in TORCH_MODULE_BASES:
        return True
    if not dotted.startswith("torch."):
        return False
    import importlib
    import torch
    modname, _, attr = dotted.rpartition(".")
    try:
        obj = getattr(importlib.import_module(modname), attr)
    except Exception:  # noqa: BLE001 - not a torch name
        return False
    return isinstance(obj, type) and issubclass(obj, torch.nn.Module)


def find_module_classes(repo: Repository) -> list[ClassRef]:
    """Every top-level class of the repo that is an nn.Module, directly or through bases
    defined in other files of the repo."""
    res = BaseResolver(repo)
    out = []
    for mod in repo.modules.values():
        for unit in mod.units:
            if isinstance(unit.node, ast.ClassDef):
                ref = ClassRef(mod.name, unit.node.name)
                if f"{ref.module}.{ref.name}" not in TORCH_MODULE_BASES and res.is_module(ref):
                    out.append(ref)
    return out

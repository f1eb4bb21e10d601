"""The house's layering, held by a test: the parent side of verify never imports the worker
side; the worker side imports only itself and the modules both sides share; isolation knows
nothing of verify; verify/ and isolation/ keep their size budgets; no import circle in curate."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "curate"
SHARED = {"curate.verify.messages", "curate.verify.findings", "curate.verify.errors"}
# what a sandboxed verify worker may import from curate besides its own package
WORKER_MAY = SHARED | {"curate.isolation.worker", "curate.isolation.program",
                       "curate.isolation.protocol",
                       "curate.synth.interpret", "curate.verify", "curate.verify.worker"}
MAX_FILE, MAX_FUNC = 400, 60


def _modname(path: Path) -> str:
    rel = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    return rel.removesuffix(".__init__")


MODULES = {_modname(p): p for p in PKG.rglob("*.py")}


def _imports(name: str, path: Path) -> set[str]:
    """Every curate module `path` imports, anywhere in it (lazy imports count)."""
    tree = ast.parse(path.read_text())
    base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                mod = ".".join(base[: len(base) - node.level + 1] + ([mod] if mod else []))
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.add(sub if sub in MODULES else mod)
    return {m for m in out if m in MODULES and m != name}


GRAPH = {m: _imports(m, p) for m, p in MODULES.items()}


def test_the_parent_side_of_verify_never_imports_the_worker_side():
    bad = [(m, i) for m, deps in GRAPH.items()
           if m.startswith("curate.verify") and not m.startswith("curate.verify.worker")
           for i in deps if i.startswith("curate.verify.worker")]
    assert not bad, f"parent-side modules importing worker code: {bad}"


def test_the_worker_side_imports_only_itself_and_the_shared_modules():
    workers = [m for m in GRAPH if m.startswith("curate.verify.worker")]
    assert workers, "curate/verify/worker/ is missing"
    bad = [(m, i) for m in workers for i in GRAPH[m]
           if not i.startswith("curate.verify.worker") and i not in WORKER_MAY]
    assert not bad, f"worker-side modules importing parent code: {bad}"


def test_shared_modules_import_nothing_from_either_side():
    for m in SHARED & set(GRAPH):
        assert GRAPH[m] <= SHARED, f"{m} imports {GRAPH[m] - SHARED}"


def test_isolation_knows_nothing_of_verify():
    bad = [(m, i) for m, deps in GRAPH.items() if m.startswith("curate.isolation")
           for i in deps if i.startswith("curate.verify")]
    assert not bad, bad


def test_no_import_circle_in_the_package():
    index, low, stack, on, circles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_verify_and_isolation_keep_their_size_budgets():
    over = []
    for d in ("verify", "isolation"):
        for p in sorted((PKG / d).rglob("*.py")):
            src = p.read_text()
            if src.count("\n") > MAX_FILE:
                over.append(f"{p.relative_to(ROOT)}: {src.count(chr(10))} lines")
            for node in ast.walk(ast.parse(src)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > MAX_FUNC:
                        over.append(f"{p.relative_to(ROOT)}:{node.lineno} {node.name}: {n}")
    assert not over, "over budget:\n" + "\n".join(over)

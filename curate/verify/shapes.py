"""A second size for a row's problem, written on the reference program's source text (data: the
parent parses it, nothing runs here).

KernelBench programs keep their sizes in module-level integers (`batch_size = 128`) that
`get_inputs` and `get_init_inputs` read when they run. The second shape doubles the ones that
size the first tensor `get_inputs` makes: its first and its last dimension (batch and feature).
Doubling keeps every divisibility the program had (a | n implies a | 2n), so a program that is
valid at its own sizes stays valid; where the reference still fails at the new sizes, the workers
say so and the row records that a second shape was not possible. Sizes written inside functions
(or as literals) cannot be changed from outside: the row is checked at its own shape only.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from .. import pyast

FACTOR = 2
# tensor factories and which of their positional arguments are sizes (None: all of them)
FACTORIES = {"randn": 0, "rand": 0, "zeros": 0, "ones": 0, "empty": 0, "full": (0, 1),
             "randint": (2, None), "normal": None, "randperm": (0, 1), "arange": None}
SIZE_KEYWORDS = ("size",)
# never sizes, whatever a program names them: doubling one changes what the program computes
NOT_SIZES = ("dim", "k", "axis", "seed", "n_classes")
NOT_SIZE_PARTS = ("kernel", "stride", "pad", "dilation", "group", "head", "class", "vocab")
LIMIT = 1 << 24   # a size above this is not doubled (a program that large is checked once)


@dataclass(frozen=True)
class SecondShape:
    """`code`: the reference program at the second sizes (None when not possible); `sizes`:
    name -> [own, second]; `why`: why there is no second shape."""

    code: str | None = None
    sizes: dict = field(default_factory=dict)
    why: str | None = None

    def record(self) -> dict:
        return {"sizes": {k: list(v) for k, v in self.sizes.items()}, "why": self.why}


def second_shape(pytorch_code: str) -> SecondShape:
    try:
        tree = pyast.parse(pytorch_code)
    except SyntaxError:
        return SecondShape(why="reference_syntax_error")
    consts = _int_constants(tree)
    get_inputs = _function(tree, "get_inputs")
    if get_inputs is None:
        return SecondShape(why="no_get_inputs")
    names = [n for n in _first_tensor_sizes(get_inputs, consts) if _scalable(n, consts)]
    chosen = list(dict.fromkeys(names[:1] + names[-1:]))
    if not chosen:
        return SecondShape(why="sizes_not_module_constants")
    sizes = {n: (consts[n][0], consts[n][0] * FACTOR) for n in chosen}
    return SecondShape(code=_rewrite(pytorch_code, {n: consts[n][1] for n in chosen}, sizes),
                       sizes=sizes)


def _int_constants(tree: ast.Module) -> dict[str, tuple[int, ast.expr]]:
    """Module-level `NAME = <integer expression of literals and earlier such names>` (also
    `A, B = 1, 2`), each with its value's expression; a name assigned twice is not one."""
    out: dict[str, tuple[int, ast.expr]] = {}
    seen: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            node = ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno,
                              col_offset=node.col_offset, end_lineno=node.end_lineno,
                              end_col_offset=node.end_col_offset)
        if not isinstance(node, ast.Assign):
            continue
        for t in node.targets:
            for name in [n.id for n in ast.walk(t) if isinstance(n, ast.Name)]:
                if name in seen:
                    out.pop(name, None)
                seen.add(name)
        if len(node.targets) != 1:
            continue
        target, value = node.targets[0], node.value
        pairs = [(target, value)]
        if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) and \
                len(target.elts) == len(value.elts):
            pairs = list(zip(target.elts, value.elts))
        for t, v in pairs:
            n = _int_value(v, out) if isinstance(t, ast.Name) else None
            if n is not None and t.id not in out:
                out[t.id] = (n, v)
    return out


def _int_value(node, consts: dict) -> int | None:
    """The value of a literal integer expression (no call, no attribute: nothing can run)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id][0]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult,
                                                            ast.FloorDiv)):
        a, b = _int_value(node.left, consts), _int_value(node.right, consts)
        if a is None or b is None or (isinstance(node.op, ast.FloorDiv) and b == 0):
            return None
        return {ast.Add: a + b, ast.Sub: a - b, ast.Mult: a * b,
                ast.FloorDiv: a // b if b else 0}[type(node.op)]
    return None


def _function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name),
                None)


def _first_tensor_sizes(fn: ast.FunctionDef, consts: dict) -> list[str]:
    """The module constants that size the first tensor factory call in `fn`, in argument
    order (a size written with a local name or a literal gives none)."""
    local = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)
             and isinstance(n.ctx, ast.Store)} | {a.arg for a in fn.args.args}
    # `shape = (batch, n)` then `torch.randn(shape)`: a local assigned once, read as its value
    stores = [n for n in ast.walk(fn) if isinstance(n, ast.Assign) and len(n.targets) == 1
              and isinstance(n.targets[0], ast.Name)]
    once = {n.targets[0].id: n.value for n in stores
            if sum(m.targets[0].id == n.targets[0].id for m in stores) == 1}
    for call in sorted((n for n in ast.walk(fn) if isinstance(n, ast.Call)),
                       key=lambda n: (n.lineno, n.col_offset)):
        args = _size_args(call)
        if args is None:
            continue
        names = []
        for a in args:
            a = once.get(a.id, a) if isinstance(a, ast.Name) else a
            for el in (a.elts if isinstance(a, (ast.Tuple, ast.List)) else [a]):
                used = [n.id for n in ast.walk(el) if isinstance(n, ast.Name)]
                if not any(n in local for n in used):
                    names += [n for n in used if n in consts]
        return names
    return []


def _size_args(call: ast.Call) -> list | None:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in FACTORIES:
        return None
    which = FACTORIES[name]
    kw = [k.value for k in call.keywords if k.arg in SIZE_KEYWORDS]
    if kw:
        return kw
    if which is None:
        return None if name in ("normal", "arange") else list(call.args)
    if isinstance(which, tuple):
        lo, hi = which
        return list(call.args[lo:hi])
    return list(call.args[which:])


def _scalable(name: str, consts: dict) -> bool:
    low = name.lower()
    if low in NOT_SIZES or any(p.startswith(NOT_SIZE_PARTS) for p in low.split("_")):
        return False
    value, expr = consts[name]
    # a literal, not a size derived from other constants (those follow their bases)
    return 2 <= value <= LIMIT and _int_value(expr, {}) is not None


def _rewrite(code: str, nodes: dict[str, ast.expr], sizes: dict) -> str:
    """The source with each chosen constant's value expression replaced by its new value
    (the last in the text first, so that earlier offsets stay right)."""
    lines = code.splitlines(keepends=True)
    for name, v in sorted(nodes.items(), key=lambda kv: (-kv[1].lineno, -kv[1].col_offset)):
        start, end = v.lineno - 1, v.end_lineno - 1
        head, tail = lines[start][:_col(lines[start], v.col_offset)], \
            lines[end][_col(lines[end], v.end_col_offset):]
        lines[start:end + 1] = [f"{head}{sizes[name][1]}{tail}"]
    return "".join(lines)


def _col(line: str, byte_offset: int) -> int:
    """ast's column offsets count UTF-8 bytes."""
    return len(line.encode()[:byte_offset].decode(errors="ignore"))

"""The try/except fallback gate: a try that launches (or builds) a custom kernel and a handler,
or code only the handler reaches, that computes what forward returns with PyTorch. Handlers that
re-raise, read a setting or import an optional module are error handling, not a second
implementation.
"""

from __future__ import annotations

import ast

from .program import (Func, Program, assign_parts, dotted, last_name, referenced_names,
                      root_name, target_names)

# torch functions that do arithmetic (as opposed to allocation, views and metadata).
TORCH_COMPUTE = {
    "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "linear", "softmax",
    "log_softmax", "layer_norm", "batch_norm", "group_norm", "instance_norm", "relu", "gelu",
    "silu", "sigmoid", "tanh", "mish", "hardswish", "hardtanh", "leaky_relu", "elu", "selu",
    "softplus", "dropout", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "adaptive_avg_pool2d", "scaled_dot_product_attention",
    "cross_entropy", "mse_loss", "smooth_l1_loss", "kl_div", "cosine_similarity",
    "logsumexp", "cumsum", "cumprod", "norm", "normalize", "lstm", "gru", "rnn_tanh",
}

# torch calls that allocate, move or describe tensors: no implementation of the result
_TORCH_NOT_COMPUTE = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "tensor", "as_tensor", "from_numpy", "device", "dtype", "Size", "is_tensor",
    "numel", "get_default_dtype", "manual_seed", "no_grad", "synchronize", "current_stream",
    "device_count", "is_available", "get_device_name", "contiguous", "view", "reshape", "size",
    "stride", "data_ptr", "to", "cpu", "cuda", "detach", "new_empty", "new_zeros", "item",
    "tolist", "element_size", "dim", "is_contiguous", "empty_cache", "set_grad_enabled",
    "inference_mode", "get_device_capability", "Tensor", "finfo", "iinfo"}
_TORCH_ROOTS = {"torch", "F", "nn", "functional", "aten"}
# tensor methods that compute (x.sigmoid(), x.exp(), a.matmul(b) ...)
_TENSOR_COMPUTE = TORCH_COMPUTE | {
    "exp", "log", "sqrt", "rsqrt", "pow", "abs", "neg", "sin", "cos", "erf", "clamp", "clip",
    "mul", "add", "sub", "div", "sum", "mean", "amax", "amin", "max", "min", "prod", "var",
    "std", "where", "masked_fill", "exp2", "log1p", "expm1", "reciprocal", "square",
    "sigmoid_", "relu_", "add_", "mul_", "argmax", "topk", "sort", "gather", "scatter",
    "index_select"}
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_TRIES = (ast.Try,) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


def _walk_local(node: ast.AST):
    """`ast.walk` that does not enter nested functions, lambdas or classes."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        todo.extend(c for c in ast.iter_child_nodes(n)
                    if not isinstance(c, _FUNCS + (ast.Lambda, ast.ClassDef)))


def _stmt_lists(scope: ast.AST):
    """The statement lists of one scope (bodies, else and finally blocks, handlers)."""
    for n in _walk_local(scope):
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(n, name, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                yield stmts


def _ends_flow(stmts: list) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Raise, ast.Continue,
                                                  ast.Break))


def _params(node: ast.AST) -> set[str]:
    args = getattr(node, "args", None)
    if not isinstance(args, ast.arguments):
        return set()
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    return names - {"self", "cls"}


def _bound_names(stmts: list) -> set[str]:
    """Names (and attribute names) that the statements assign."""
    out = set()
    for st in stmts:
        for n in _walk_local(st):
            for t in assign_parts(n)[0]:
                out |= target_names(t)
    return out


class Fallbacks:
    """The try/except blocks of one program whose handler falls back to another
    implementation of what the try's kernel computes."""

    def __init__(self, prog: Program, reach_funcs: list[Func], reach_names: set[str]):
        self.prog, self.reach_names = prog, reach_names
        self.reach_nodes = {id(f.node) for f in reach_funcs}
        self.reach_funcs = reach_funcs
        self.launching = self._launching_functions()
        self._impl: dict[str, bool] = {}
        # names bound to PyTorch modules or functions (`self.act = nn.SiLU()`): calling one
        # computes with PyTorch
        self.torch_objects = set()
        for n in ast.walk(prog.tree):
            targets, value = assign_parts(n)
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and (
                    root_name(value.func) in ("torch", "nn", "F") or prog.module_aliases.get(
                        root_name(value.func) or "", "").split(".")[0] == "torch"):
                for t in targets:
                    self.torch_objects |= target_names(t)

    def _launching_functions(self) -> set[str]:
        """Local functions that (transitively, by name) launch or build a kernel."""
        prog = self.prog
        launching = prog.triton_kernels | prog.handles | prog.factories
        for _ in range(4):
            grew = False
            for name, fs in prog.funcs.items():
                if name in launching or name in prog.triton_kernels:
                    continue
                if any(prog.launches_in(f.node) or (f.refs & launching) for f in fs):
                    launching.add(name)
                    grew = True
            if not grew:
                break
        return launching

    # -- what an expression does -------------------------------------------------------------
    def calls_kernel(self, node: ast.AST) -> bool:
        """A launch, a kernel build, or a call of a function that launches."""
        prog = self.prog
        if prog.makes_kernel(node):
            return True
        for sub in ast.walk(node):
            if isinstance(sub, ast.Subscript) and last_name(sub.value) in prog.triton_kernels:
                return True
            if not isinstance(sub, ast.Call):
                continue
            fn = sub.func
            if isinstance(fn, ast.Attribute) and fn.attr in ("run", "warmup", "launch") and \
                    last_name(fn.value) in prog.triton_kernels:
                return True
            if _super_call(fn):
                continue  # super().forward: the parent class's (PyTorch) forward
            if last_name(fn) in self.launching:
                return True
            while isinstance(fn, ast.Attribute):  # ext.fn(...), self.ext.fn(...)
                fn = fn.value
                if last_name(fn) in prog.handles:
                    return True
        return False

    def _torch_call(self, call: ast.Call) -> bool:
        fn = call.func
        if not isinstance(fn, ast.Attribute):
            return False
        root = root_name(fn)
        full = self.prog.module_aliases.get(root or "", root or "")
        if root in _TORCH_ROOTS or full.split(".")[0] == "torch":
            return fn.attr not in _TORCH_NOT_COMPUTE
        return fn.attr in _TENSOR_COMPUTE

    def _local_impl(self, name: str) -> bool:
        """A function or class of the program that computes with PyTorch, launching nothing."""
        if name not in self._impl:
            self._impl[name] = False  # recursion guard
            nodes = [f.node for f in self.prog.funcs.get(name, [])]
            if name in self.prog.classes:
                nodes.append(self.prog.classes[name])
            self._impl[name] = any(self.fallback_value(n, _params(n)) for n in nodes)
        return self._impl[name]

    def _computes(self, node: ast.AST, params: set[str]) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                name = last_name(sub.func)
                if self._torch_call(sub) or _super_call(sub.func) or \
                        name in self.torch_objects:
                    return True
                if name and name not in self.launching and self._local_impl(name):
                    return True
            elif isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.MatMult):
                return True
            elif isinstance(sub, (ast.BinOp, ast.UnaryOp)) and referenced_names(sub) & params:
                return True
        return False

    def fallback_value(self, node: ast.AST | None, params: set[str]) -> bool:
        """`node` computes with PyTorch (or arithmetic on the function's tensors, or another
        local implementation, or `super().forward`) and launches no custom kernel."""
        return node is not None and not self.calls_kernel(node) and self._computes(node, params)

    # -- where the values go -----------------------------------------------------------------
    @staticmethod
    def _returned(scope: ast.AST, names: set[str]) -> bool:
        """The function returns one of `names`, directly or through later assignments."""
        tainted = set(names)
        for _ in range(4):
            before = len(tainted)
            for n in _walk_local(scope):
                targets, value = assign_parts(n)
                if value is not None and referenced_names(value) & tainted:
                    for t in targets:
                        tainted |= target_names(t)
            if len(tainted) == before:
                break
        return any(isinstance(n, ast.Return) and n.value is not None and
                   referenced_names(n.value) & tainted for n in _walk_local(scope))

    def _fallback_names(self, stmts: list, params: set[str]) -> set[str]:
        """Names the statements bind to a PyTorch value or a PyTorch implementation."""
        out = set()
        for st in stmts:
            for n in _walk_local(st):
                targets, value = assign_parts(n)
                if value is not None and self.fallback_value(value, params | _params(value)):
                    for t in targets:
                        out |= target_names(t)
                if isinstance(n, _FUNCS) and self.fallback_value(n, _params(n)):
                    out.add(n.name)
        return out

    def _block_falls_back(self, stmts: list, scope: ast.AST, params: set[str]) -> bool:
        """The statements return a PyTorch value, or compute one that forward gets."""
        if any(isinstance(n, ast.Return) and self.fallback_value(n.value, params)
               for st in stmts for n in _walk_local(st)):
            return True
        names = self._fallback_names(stmts, params)
        if not names:
            return False
        if id(scope) in self.reach_nodes:
            return self._returned(scope, names)
        # module level, __init__, a builder: a stand-in bound where forward looks it up
        if isinstance(scope, _FUNCS):
            names = {n for n in names if n not in _bound_locally(scope)}
        return bool(names & self.reach_names)

    def _flag_gates_fallback(self, flags: set[str]) -> bool:
        """The handler sets a flag (or clears the kernel) and forward branches on it to a
        PyTorch path: `except: ext = None` ... `if ext is None: return torch...`."""
        for f in self.reach_funcs:
            params = _params(f.node)
            local = set(flags)
            for n in _walk_local(f.node):  # `lib = _kernels()` where _kernels returns None
                targets, value = assign_parts(n)
                if isinstance(value, ast.Call) and last_name(value.func) in flags:
                    for t in targets:
                        local |= target_names(t)
            for n in _walk_local(f.node):
                if isinstance(n, ast.IfExp) and referenced_names(n.test) & local and (
                        self.fallback_value(n.body, params) or
                        self.fallback_value(n.orelse, params)):
                    return True
            for stmts in _stmt_lists(f.node):
                for i, st in enumerate(stmts):
                    if not (isinstance(st, ast.If) and referenced_names(st.test) & local):
                        continue
                    rest = stmts[i + 1:] if _ends_flow(st.body) else []
                    if any(self._block_falls_back(b, f.node, params)
                           for b in (st.body, st.orelse + rest)):
                        return True
        return False

    def _swallowed(self, node, after: list, scope: ast.AST, params: set[str]) -> bool:
        """A handler that swallows the error lets a PyTorch value through: code after a try
        that returned, or a value computed before the try that the kernel's would replace."""
        if _ends_flow(node.body) and self._block_falls_back(after, scope, params):
            return True
        kernel_targets = set()
        for st in node.body:
            for n in _walk_local(st):
                targets, value = assign_parts(n)
                if value is not None and self.calls_kernel(value):
                    for t in targets:
                        kernel_targets |= target_names(t)
        inside = {id(n) for st in node.body for n in _walk_local(st)}
        earlier = set()
        for n in _walk_local(scope):
            targets, value = assign_parts(n)
            if id(n) not in inside and value is not None and self.fallback_value(value, params):
                for t in targets:
                    earlier |= target_names(t)
        hit = kernel_targets & earlier
        return bool(hit) and self._returned(scope, hit)

    # -- one try -----------------------------------------------------------------------------
    def try_falls_back(self, node, scope: ast.AST, after: list) -> bool:
        if not any(self.calls_kernel(st) for st in node.body):
            return False
        params = _params(scope)
        in_forward = id(scope) in self.reach_nodes
        for h in node.handlers:
            returns = [n for st in h.body for n in _walk_local(st) if isinstance(n, ast.Return)]
            if any(self.fallback_value(r.value, params) for r in returns):
                return True
            if isinstance(h.body[-1], ast.Raise):
                continue  # error handling: a better message, a log line, then the error
            if self._block_falls_back(h.body, scope, params):
                return True
            flags = _bound_names(h.body)
            if isinstance(scope, _FUNCS) and returns:
                flags.add(scope.name)  # `return None` from a builder: callers test the result
            if flags and self._flag_gates_fallback(flags):
                return True
            if in_forward and self._swallowed(node, after, scope, params):
                return True
        return False

    def found(self) -> bool:
        scopes = [self.prog.tree] + [f.node for fs in self.prog.funcs.values() for f in fs]
        for scope in scopes:
            for stmts in _stmt_lists(scope):
                for i, st in enumerate(stmts):
                    if isinstance(st, _TRIES) and st.handlers and \
                            self.try_falls_back(st, scope, stmts[i + 1:]):
                        return True
        return False


def _super_call(fn: ast.AST) -> bool:
    return isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Call) and \
        last_name(fn.value.func) == "super"


def _bound_locally(fn: ast.AST) -> set[str]:
    """Plain names a function assigns that are its own locals (not declared global)."""
    glob = {n for sub in _walk_local(fn) if isinstance(sub, (ast.Global, ast.Nonlocal))
            for n in sub.names}
    local = {t.id for sub in _walk_local(fn) for t in assign_parts(sub)[0]
             if isinstance(t, ast.Name)}
    return local - glob


def try_fallbacks(prog: Program, reach_funcs: list[Func], reach_names: set[str]) -> bool:
    """A try/except whose handler falls back to another implementation of the kernel it
    tried, or a contextlib.suppress around a launch or a kernel build."""
    fb = Fallbacks(prog, reach_funcs, reach_names)
    for node in ast.walk(prog.tree):
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                "suppress" in dotted(i.context_expr) for i in node.items) and \
                any(fb.calls_kernel(st) for st in node.body):
            return True
    return fb.found()

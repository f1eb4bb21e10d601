"""Static checks of a KernelBench-format reference program, without running it."""

from __future__ import annotations

import ast
from curate import pyast

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
# Programs that load pretrained weights by name cannot run offline; they are rejected up front.
_WEIGHT_MARKERS = ("from_pretrained", "import transformers", "from transformers",
                   "torch.hub.load", "timm.create_model")


def problem_reasons(code: str) -> list[str]:
    """Why a program is not a usable reference (empty: it is). Never executes the code."""
    try:
        tree = pyast.parse(code)
    except SyntaxError as exc:
        return [f"syntax_error:line{exc.lineno}"]
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    reasons = [f"missing_{n}" for n in REQUIRED if n not in names]
    if any(m in code for m in _WEIGHT_MARKERS):
        reasons.append("needs_pretrained_weights")
    return reasons


def entry_point(code: str) -> str | None:
    """The class that forward()s: `Model` in KernelBench format, else the first nn.Module."""
    try:
        tree = pyast.parse(code)
    except SyntaxError:
        return None
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    for c in classes:
        if c.name == "Model":
            return c.name
    return classes[0].name if classes else None

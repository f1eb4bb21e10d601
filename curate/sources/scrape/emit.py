"""The standalone KernelBench program of one scraped class: its closure, then `Model`,
`get_inputs` and `get_init_inputs` (DESIGN.md, "Program formats")."""

from __future__ import annotations

from .mocks import MOCK_SOURCE


def header(repo: str | None, path: str, commit: str | None, entry: str) -> str:
    at = f" at {commit[:12]}" if commit else ""
    return f"# Scraped by curate from {repo or 'a local folder'}{at}: {path}, class {entry}.\n"


def model_class(class_name: str, n_positional: int, kw_names: list[str]) -> str:
    """`Model` is the scraped class; keyword-only constructor arguments pass through it."""
    if not kw_names:
        return (f"class Model({class_name}):\n"
                f"    \"\"\"{class_name} under the KernelBench name.\"\"\"\n")
    return (f"class Model({class_name}):\n"
            f"    \"\"\"{class_name} under the KernelBench name (keyword-only arguments "
            f"passed on).\"\"\"\n\n"
            f"    def __init__(self, *args):\n"
            f"        super().__init__(*args[:{n_positional}], "
            f"**dict(zip({kw_names!r}, args[{n_positional}:])))\n")


def program(closure_source: str, class_name: str, init: list[str], kw_names: list[str],
            inputs: str, head: str = "") -> str:
    """The whole program text; `init` and `inputs` are source texts from deduction."""
    n_pos = len(init) - len(kw_names)
    src = closure_source
    if any("_Mock(" in t for t in init) and "class _Mock" not in src:
        first, _, rest = src.partition("\n\n\n")
        src = f"{first}\n\n\n{MOCK_SOURCE.strip()}\n\n\n{rest}"
    tail = (f"{model_class(class_name, n_pos, kw_names)}\n\n"
            f"def get_inputs():\n    return {inputs}\n\n\n"
            f"def get_init_inputs():\n    return [{', '.join(init)}]\n")
    return f"{head}{src.rstrip()}\n\n\n{tail}"

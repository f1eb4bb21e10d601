"""Cut a candidate program into prefix / core / suffix rows for kernel-infilling training.

The core is the kernel (DICE's "kernel infilling"): the scaffold (imports, host launcher,
`load_inline` call, `ModelNew`) is prefix and suffix, so a model trained on these rows writes
only the kernel and cannot dodge it. Every row holds `prefix + core + suffix == kernel_code`
byte for byte; a row that would not is never written.
"""

from __future__ import annotations

from dataclasses import dataclass

from .locate import Core, find_cores

GRANULARITIES = ("kernel", "body", "source")
MULTI = ("per-kernel", "span")

# name -> (before prefix, before suffix, before middle, after middle). The text ends with the
# middle (plus the convention's own end-of-middle token where it has one); append your
# tokenizer's end-of-sequence token when you tokenize.
FIM_FORMATS: dict[str, tuple[str, str, str, str] | None] = {
    "none": None,
    "starcoder": ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", ""),
    "codellama": ("<PRE> ", " <SUF>", " <MID>", " <EOT>"),
    "deepseek": ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", ""),
    "qwen": ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", ""),
}


@dataclass(frozen=True)
class SplitConfig:
    granularity: str = "kernel"
    multi: str = "per-kernel"
    fim_format: str = "none"

    def __post_init__(self):
        if self.granularity not in GRANULARITIES:
            raise ValueError(f"granularity must be one of {GRANULARITIES}")
        if self.multi not in MULTI:
            raise ValueError(f"multi must be one of {MULTI}")
        if self.fim_format not in FIM_FORMATS:
            raise ValueError(f"fim_format must be one of {tuple(FIM_FORMATS)}")


def render_fim(prefix: str, core: str, suffix: str, fmt: str) -> str | None:
    """Prefix-suffix-middle text in one model family's FIM token convention (None for 'none')."""
    spec = FIM_FORMATS[fmt]
    if spec is None:
        return None
    pre, suf, mid, end = spec
    return f"{pre}{prefix}{suf}{suffix}{mid}{core}{end}"


def split_code(code: str, cfg: SplitConfig = SplitConfig()) -> tuple[list[dict], list[str]]:
    """The (prefix, core, suffix, core_kind, core_name) parts of one program, or reject reasons.

    Returns (parts, reasons): parts is empty when no core is found, and reasons says why.
    """
    if not code or not code.strip():
        return [], ["no_kernel_code"]
    raw = code.encode("utf-8")
    found = find_cores(raw)
    if not found.cores:
        if found.markers:
            return [], [f"core_unparsed:{m}" for m in sorted(found.markers)]
        return [], ["no_core"]
    body = cfg.granularity == "body"
    pieces: list[tuple[int, int, str, str, bool]] = []
    whole = source_string(code, found.cores) if cfg.granularity == "source" else None
    if whole is not None:
        a, b, label = whole
        langs = {c.lang for c in found.cores if a <= c.start < b}
        name = ",".join(c.display_name for c in found.cores if a <= c.start < b)
        pieces.append((a, b, f"{langs.pop() if len(langs) == 1 else 'mixed'}_source", label
                       or name, False))
    elif cfg.multi == "span" and len(found.cores) > 1:
        first, last = found.cores[0], found.cores[-1]
        a, b = (first.body_start, last.body_end) if body else (first.start, last.end)
        langs = {c.lang for c in found.cores}
        lang = langs.pop() if len(langs) == 1 else "mixed"
        kind = f"{lang}_kernel_bodies" if body else f"{lang}_kernels"
        name = ",".join(c.display_name for c in found.cores)
        pieces.append((a, b, kind, name, any(c.clipped for c in found.cores)))
    else:
        for c in found.cores:
            a, b = (c.body_start, c.body_end) if body else (c.start, c.end)
            kind = f"{c.lang}_kernel_body" if body else f"{c.lang}_kernel"
            pieces.append((a, b, kind, c.display_name, c.clipped))
    parts, reasons = [], []
    for a, b, kind, name, clipped in pieces:
        try:
            prefix, core, suffix = (raw[:a].decode("utf-8"), raw[a:b].decode("utf-8"),
                                    raw[b:].decode("utf-8"))
        except UnicodeDecodeError:
            reasons.append("split_not_on_char_boundary")
            continue
        if prefix + core + suffix != code or not core.strip():
            reasons.append("split_mismatch" if core.strip() else "empty_core")
            continue
        part = {"prefix": prefix, "core": core, "suffix": suffix, "core_kind": kind,
                "core_name": name}
        if clipped:
            part["_warn"] = "core_clipped"
        text = render_fim(prefix, core, suffix, cfg.fim_format)
        if text is not None:
            part["text"] = text
        parts.append(part)
    return parts, ([] if parts else reasons or ["no_core"])


def source_string(code: str, cores: list[Core]) -> tuple[int, int, str | None] | None:
    """DICE's layout for load_inline programs: the byte range of the text inside the Python
    string literal that holds the first kernel (the whole CUDA source), and the variable it is
    assigned to. None where the kernel is not inside one plain literal (f-strings, joins,
    Triton): the kernel granularity applies there."""
    import ast
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    raw = code.encode("utf-8")
    lines = [0]
    for line in raw.splitlines(keepends=True):
        lines.append(lines[-1] + len(line))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign) or not isinstance(node.value, ast.Constant) \
                or not isinstance(node.value.value, str):
            continue
        v = node.value
        start = lines[v.lineno - 1] + v.col_offset
        end = lines[v.end_lineno - 1] + v.end_col_offset
        text = raw[start:end]
        quote = next((q for q in (b'"""', b"'''", b'"', b"'") if text.lstrip(b"rRuU").startswith(q)),
                     None)
        if quote is None or not text.endswith(quote):
            continue
        a = start + len(text) - len(text.lstrip(b"rRuU")) + len(quote)
        b = end - len(quote)
        if any(a <= c.start < b for c in cores):
            target = node.targets[0]
            return a, b, target.id if isinstance(target, ast.Name) else None
    return None


def split_row(row: dict, cfg: SplitConfig = SplitConfig()) -> tuple[list[dict], list[str]]:
    """The infill rows made from one candidate row (every column kept), or reject reasons."""
    parts, reasons = split_code(row.get("kernel_code") or "", cfg)
    out = []
    for part in parts:
        r = dict(row)
        warn = part.pop("_warn", None)
        r.update(part)
        if warn:
            r["reasons"] = [*(row.get("reasons") or []), warn]
        out.append(r)
    return out, reasons


def check_row(row: dict) -> bool:
    """The invariant of every infill row."""
    return (row.get("prefix") or "") + (row.get("core") or "") + (row.get("suffix") or "") \
        == (row.get("kernel_code") or "")


__all__ = ["Core", "FIM_FORMATS", "GRANULARITIES", "MULTI", "SplitConfig", "check_row",
           "render_fim", "split_code", "split_row"]

"""Find the kernels of a candidate program, as byte ranges of the program's own text.

The program is parsed with the Python grammar. Triton kernels are `@triton.jit` functions, in the
program itself or in Python source held in a string (inductor's `async_compile.triton(...)`).
CUDA and C++ kernels live in string literals handed to `load_inline`, `async_compile.cpp_pybinding`
and the like; such a string's value is resolved through concatenations, f-strings, `.format`,
`textwrap.dedent` and variables defined elsewhere in the file into *segments*, each tied to the
file offsets where its text literally appears. The resolved text is parsed with the CUDA grammar
(a superset of C++), and every definition found is mapped back to file offsets, so that a core is
always a slice of the program: prefix + core + suffix == program, byte for byte.

All offsets here are byte offsets into the UTF-8 encoding of the program (tree-sitter's unit);
callers slice bytes and decode.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import tree_sitter as ts
import tree_sitter_cuda
import tree_sitter_python

LANGS = ("triton", "cuda", "cpp")


@functools.lru_cache(maxsize=None)
def _parser(grammar: str) -> ts.Parser:
    mod = {"python": tree_sitter_python, "cuda": tree_sitter_cuda}[grammar]
    return ts.Parser(ts.Language(mod.language()))


@dataclass
class Core:
    """One kernel: its whole definition and its body, as file byte ranges."""

    lang: str                  # triton | cuda | cpp
    name: str                  # the kernel's name as written in the file
    start: int                 # definition (with template<>, extern "C", @triton.jit)
    end: int
    body_start: int            # statements inside the braces / the Python block
    body_end: int
    clipped: bool = False      # the definition spanned pieces that are apart in the file
    label: str | None = None   # a better name where the function name is generic (`kernel`)

    @property
    def display_name(self) -> str:
        return self.label or self.name


@dataclass
class Seg:
    """A piece of a resolved string: the bytes the parser sees and where they sit in the file."""

    shadow: bytes
    file_start: int | None     # None: not in the file (a value we could not resolve)
    group: int                 # pieces of one expression in the file share a group
    doubled: bool = False      # f-string / .format text: a C brace is `{{` in the file


@dataclass
class Source:
    segs: list[Seg]
    grammar: str               # python | cuda
    lang_hint: str | None = None   # cuda | cpp (what the call says the text is)
    label: str | None = None       # the variable the compiled source is assigned to
    exported: list[str] = field(default_factory=list)  # load_inline(functions=[...])


@dataclass
class Found:
    cores: list[Core]
    markers: set[str]          # kernel markers seen in the text (for the reject reason)


# ---------------------------------------------------------------------------------------------
# The entry point


def find_cores(code: bytes) -> Found:
    """Every kernel in `code` (UTF-8 bytes of a candidate program), sorted by position."""
    tree = _parser("python").parse(code)
    root = tree.root_node
    ctx = _Context(code, root)
    sources = [Source([Seg(code, 0, 0)], "python")]
    sources += ctx.call_sources()
    sources += ctx.loose_literals(sources)
    cores: list[Core] = []
    pyinfo = _PyInfo()
    parsed = []
    for k, src in enumerate(sources):
        shadow = b"".join(s.shadow for s in src.segs)
        if k == 0:  # the program itself: parsed and indexed already
            t, index = tree, ctx.index
        else:
            t = _parser(src.grammar).parse(shadow)
            index = _Index(t.root_node, _PY_TYPES) if src.grammar == "python" else None
        parsed.append((src, shadow, t, index))
        if index is not None:
            pyinfo.scan(index, shadow)
    exported_any = {n for s in sources for n in s.exported}
    has_global = any(b"__global__" in sh for s, sh, _, _ in parsed if s.grammar == "cuda")
    for src, shadow, t, index in parsed:
        if src.grammar == "python":
            found = _triton_defs(index, shadow, pyinfo)
        else:
            found = _c_defs(t.root_node, shadow, exported_any, has_global)
        for d in found:
            core = _map_def(src, d, code)
            if core is not None:
                cores.append(core)
    cores = _dedupe(cores)
    markers = set()
    if re.search(rb"@\s*(triton\.)?jit\b", code):
        markers.add("triton")
    if b"__global__" in code:
        markers.add("cuda")
    if b'extern "C"' in code or (re.search(rb"\bkernel\s*\(", code) and b"cpp_pybinding" in code):
        markers.add("cpp")
    return Found(cores, markers)


# ---------------------------------------------------------------------------------------------
# Python program: calls that compile source text, and the values of their arguments

# last attribute of the called function -> (grammar, language, positional index, keyword)
_COMPILERS = {
    "cpp_pybinding": [("cuda", "cpp", 1, "source_code")],
    "cpp": [("cuda", "cpp", 0, "source_code")],
    "triton": [("python", "triton", 1, "source_code")],
    "RawKernel": [("cuda", "cuda", 0, "code")],
    "RawModule": [("cuda", "cuda", 0, "code")],
    "load_inline": [("cuda", "cpp", 1, "cpp_sources"), ("cuda", "cuda", 2, "cuda_sources")],
}
_PASS_THROUGH = {"dedent", "strip", "lstrip", "rstrip", "replace", "encode", "str", "format",
                 "indent"}


class _Context:
    """One program: its assignments (to resolve names), the calls that compile source text,
    and the string literals that hold kernel text."""

    def __init__(self, code: bytes, root: ts.Node):
        self.code = code
        self.root = root
        self.assignments: dict[str, list[tuple[int, ts.Node]]] = {}  # name -> (end, value)
        self._groups = 0
        self.index = _Index(root, _PY_TYPES)
        for node in self.index["assignment"]:
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if left is not None and right is not None and left.type == "identifier":
                self.assignments.setdefault(self.text(left), []).append((node.end_byte, right))

    def text(self, node: ts.Node) -> str:
        return self.code[node.start_byte:node.end_byte].decode("utf-8", "replace")

    def new_group(self) -> int:
        self._groups += 1
        return self._groups

    # -- calls ---------------------------------------------------------------------------
    def call_sources(self) -> list[Source]:
        out = []
        for node in self.index["call"]:
            fn = node.child_by_field_name("function")
            if fn is None:
                continue
            last = self.text(fn).rsplit(".", 1)[-1].strip()
            if last not in _COMPILERS:
                continue
            if last in ("cpp", "triton") and "async_compile" not in self.text(fn):
                continue
            args = node.child_by_field_name("arguments")
            if args is None:
                continue
            positional = [a for a in args.named_children
                          if a.type not in ("keyword_argument", "comment",
                                            "list_splat", "dictionary_splat")]
            keywords = {}
            for a in args.named_children:
                if a.type == "keyword_argument":
                    k, v = a.child_by_field_name("name"), a.child_by_field_name("value")
                    if k is not None and v is not None:
                        keywords[self.text(k)] = v
            label = None
            if node.parent is not None and node.parent.type == "assignment":
                left = node.parent.child_by_field_name("left")
                if left is not None and left.type == "identifier":
                    label = self.text(left)
            exported = []
            if last == "load_inline":
                fnode = keywords.get("functions") or (positional[3] if len(positional) > 3 else None)
                if fnode is not None:
                    exported = [s for s in re.findall(r"['\"]([A-Za-z_]\w*)['\"]", self.text(fnode))]
            for grammar, lang, pos, kw in _COMPILERS[last]:
                value = keywords.get(kw) or (positional[pos] if len(positional) > pos else None)
                if value is None:
                    continue
                for item in self.items(value, set()):
                    segs = self.resolve(item, self.new_group(), set())
                    if any(s.file_start is not None for s in segs):
                        out.append(Source(segs, grammar, lang, label, exported))
        return out

    def items(self, node: ts.Node, seen: set) -> list[ts.Node]:
        """A sources argument may be one string or a list of them (possibly via a variable)."""
        if node.type in ("list", "tuple"):
            return [c for c in node.named_children if c.type != "comment"]
        if node.type == "identifier" and node.start_byte not in seen:
            target = self.lookup(node)
            if target is not None and target.type in ("list", "tuple"):
                seen.add(node.start_byte)
                return self.items(target, seen)
        return [node]

    def lookup(self, ident: ts.Node) -> ts.Node | None:
        """The value last assigned to a name before its use (else the first one after it)."""
        cands = self.assignments.get(self.text(ident))
        if not cands:
            return None
        before = [v for end, v in cands if end <= ident.start_byte]  # `s = s + ...` too
        return before[-1] if before else cands[0][1]

    # -- string values -------------------------------------------------------------------
    def resolve(self, node: ts.Node, group: int, seen: set, fmt: bool | str = False) -> list[Seg]:
        """The segments of a string-valued expression; fmt: `.format` (True) or `%` ("percent")
        placeholders are blanked so that the text parses as the C it becomes."""
        t = node.type
        if t == "string":
            return [self.literal(node, group, fmt)]
        if t == "concatenated_string":
            return [self.literal(c, group, fmt) for c in node.named_children if c.type == "string"]
        if t == "parenthesized_expression":
            inner = [c for c in node.named_children if c.type != "comment"]
            if len(inner) == 1:
                return self.resolve(inner[0], group, seen, fmt)
        if t == "binary_operator":
            op = node.child_by_field_name("operator")
            left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
            if op is not None and left is not None and right is not None:
                if op.type == "+":
                    return self.resolve(left, group, seen, fmt) + self.resolve(right, group, seen, fmt)
                if op.type == "%":
                    return self.resolve(left, group, seen, "percent")
        if t == "identifier" and node.start_byte not in seen and len(seen) < 32:
            target = self.lookup(node)
            if target is not None:
                return self.resolve(target, self.new_group(), seen | {node.start_byte}, fmt)
        if t == "call":
            fn = node.child_by_field_name("function")
            args = node.child_by_field_name("arguments")
            if fn is not None:
                last = self.text(fn).rsplit(".", 1)[-1].strip()
                if fn.type == "attribute" and last == "join" and args is not None:
                    items = [a for a in args.named_children if a.type != "comment"]
                    elements = self.items(items[0], set()) if len(items) == 1 else []
                    if len(items) == 1 and (items[0].type in ("list", "tuple") or len(elements) > 1
                                            or elements[0] is not items[0]):
                        segs: list[Seg] = []
                        for el in elements:
                            segs += self.resolve(el, group, seen, fmt) + [_opaque(group)]
                        return segs
                if last in _PASS_THROUGH:
                    if fn.type == "attribute":
                        obj = fn.child_by_field_name("object")
                        if obj is not None:
                            return self.resolve(obj, group, seen, fmt or (last == "format"))
                    elif args is not None:
                        first = [a for a in args.named_children if a.type != "comment"]
                        if first:
                            return self.resolve(first[0], group, seen, fmt)
        return [_opaque(group)]

    def literal(self, node: ts.Node, group: int, fmt: bool | str) -> Seg:
        """A string literal's content as it reads in the file (same length, parser-friendly)."""
        start = end = None
        is_f = False
        for c in node.children:
            if c.type == "string_start":
                start = c.end_byte
                is_f = "f" in self.code[c.start_byte:c.end_byte].decode("ascii", "replace").lower()
            elif c.type == "string_end":
                end = c.start_byte
        if start is None or end is None or end < start:
            return _opaque(group)
        shadow = bytearray(self.code[start:end])
        for c in _walk(node):
            if c.type == "escape_sequence":
                _unescape(shadow, c.start_byte - start, c.end_byte - start)
        if is_f:
            for c in node.children:
                if c.type == "interpolation":
                    _blank(shadow, c.start_byte - start, c.end_byte - start)
        if fmt == "percent":
            for m in re.finditer(rb"%(\([^)\n]*\))?[-#0 +]*\d*(\.\d+)?[sdifgeExXrc%]", bytes(shadow)):
                _blank(shadow, m.start(), m.end())
        elif is_f or fmt:
            _undouble(shadow)
        if fmt and fmt != "percent":
            for m in re.finditer(rb"\{[^{}\n]*\}", bytes(shadow)):
                _blank(shadow, m.start(), m.end())
        return Seg(bytes(shadow), start, group, is_f or fmt is True)

    # -- strings nobody passed to a compiler call we know --------------------------------
    def loose_literals(self, have: list[Source]) -> list[Source]:
        """String literals that hold kernel text but reach no call we recognize."""
        covered = [(s.file_start, s.file_start + len(s.shadow)) for src in have[1:]
                   for s in src.segs if s.file_start is not None]
        out = []
        for node in sorted(self.index["string"] + self.index["concatenated_string"],
                           key=lambda n: n.start_byte):
            if node.parent is not None and node.parent.type == "concatenated_string":
                continue
            body = self.code[node.start_byte:node.end_byte]
            if b"__global__" in body:
                grammar = "cuda"
            elif re.search(rb"@\s*(triton\.)?jit\b", body) and b"def " in body:
                grammar = "python"
            elif (re.search(rb"\bkernel\s*\(", body) or b'extern "C"' in body) and b"{" in body:
                grammar = "cuda"
            else:
                continue
            if any(a <= node.start_byte < b or node.start_byte <= a < node.end_byte
                   for a, b in covered):
                continue
            out.append(Source(self.resolve(node, self.new_group(), set()), grammar))
        return out


def _opaque(group: int) -> Seg:
    return Seg(b"\n", None, group)


def _blank(buf: bytearray, a: int, b: int) -> None:
    for i in range(a, b):
        if buf[i] not in (0x0A, 0x0D):
            buf[i] = 0x5F  # '_': interpolations read as identifiers


_SIMPLE_ESCAPES = {ord("n"): 0x0A, ord("t"): 0x09, ord('"'): 0x22, ord("'"): 0x27,
                   ord("\\"): 0x5C, ord("r"): 0x20}


def _unescape(buf: bytearray, a: int, b: int) -> None:
    """`\\n` -> ` <newline>` (same length): the parser sees the line breaks the value has."""
    if b - a == 2 and buf[a] == 0x5C and buf[a + 1] in _SIMPLE_ESCAPES:
        buf[a], buf[a + 1] = 0x20, _SIMPLE_ESCAPES[buf[a + 1]]


def _undouble(buf: bytearray) -> None:
    """`{{` -> `{ ` and `}}` -> ` }` (same length), so that f-string/format text reads as C."""
    i = 0
    while i < len(buf) - 1:
        if buf[i] == 0x7B and buf[i + 1] == 0x7B:
            buf[i + 1] = 0x20
            i += 2
        elif buf[i] == 0x7D and buf[i + 1] == 0x7D:
            buf[i] = 0x20
            i += 2
        else:
            i += 1


def _walk(node: ts.Node):
    """Named nodes under `node`, in document order (anonymous tokens are never needed here)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.named_children))


class _Index:
    """The named nodes of one tree by type, collected in one walk."""

    def __init__(self, root: ts.Node, types: tuple[str, ...]):
        self.nodes: dict[str, list[ts.Node]] = {t: [] for t in types}
        for n in _walk(root):
            bucket = self.nodes.get(n.type)
            if bucket is not None:
                bucket.append(n)

    def __getitem__(self, t: str) -> list[ts.Node]:
        return self.nodes[t]


_PY_TYPES = ("assignment", "call", "string", "concatenated_string", "decorated_definition")


# ---------------------------------------------------------------------------------------------
# Definitions inside one parsed source (offsets relative to its shadow text)


@dataclass
class _Def:
    lang: str
    name: str
    name_at: int
    name_end: int
    start: int
    end: int
    body_start: int
    body_end: int
    unclosed: bool = False


class _PyInfo:
    """Across every Python text of a program: which @triton.jit functions are launched kernels
    and which are helpers (called or passed, e.g. to tl.associative_scan, from another one)."""

    def __init__(self):
        self.launched: set[str] = set()
        self.used_by: dict[str, set[str]] = {}   # name -> the jit functions whose bodies use it

    def scan(self, index: "_Index", text: bytes) -> None:
        for node in index["call"]:
            fn = node.child_by_field_name("function")
            if fn is not None and fn.type == "subscript":
                value = fn.child_by_field_name("value")
                if value is not None:
                    self.launched.add(_last_name(text[value.start_byte:value.end_byte]))
        for node in index["decorated_definition"]:
            if _jit_decorator(node, text) is not None:
                fn = node.child_by_field_name("definition")
                name = fn.child_by_field_name("name") if fn is not None else None
                body = fn.child_by_field_name("body") if fn is not None else None
                if name is None or body is None:
                    continue
                owner = text[name.start_byte:name.end_byte].decode("utf-8", "replace")
                for ident in _walk(body):
                    if ident.type == "identifier":
                        used = text[ident.start_byte:ident.end_byte].decode("utf-8", "replace")
                        self.used_by.setdefault(used, set()).add(owner)

    def is_helper(self, name: str) -> bool:
        return name not in self.launched and bool(self.used_by.get(name, set()) - {name})


def _last_name(raw: bytes) -> str:
    return raw.decode("utf-8", "replace").rsplit(".", 1)[-1].strip()


_JIT = re.compile(r"^@\s*(triton\s*\.\s*)?jit\b")


def _jit_decorator(dd: ts.Node, text: bytes) -> ts.Node | None:
    for c in dd.children:
        if c.type == "decorator" and _JIT.match(text[c.start_byte:c.end_byte].decode("utf-8", "replace")):
            return c
    return None


def _triton_defs(index: "_Index", text: bytes, info: _PyInfo) -> list[_Def]:
    out = []
    for node in index["decorated_definition"]:
        jit = _jit_decorator(node, text)
        fn = node.child_by_field_name("definition")
        if jit is None or fn is None or fn.type != "function_definition":
            continue
        name_node, block = fn.child_by_field_name("name"), fn.child_by_field_name("body")
        if name_node is None or block is None:
            continue
        name = text[name_node.start_byte:name_node.end_byte].decode("utf-8", "replace")
        if info.is_helper(name):
            continue  # a @triton.jit helper called from a kernel: scaffold, not core
        colon = next((c for c in fn.children if c.type == ":"), None)
        body_start = block.start_byte
        if colon is not None:
            nl = text.find(b"\n", colon.end_byte, block.start_byte)
            if nl != -1:
                body_start = nl + 1
        out.append(_Def("triton", name, name_node.start_byte, name_node.end_byte,
                        jit.start_byte, fn.end_byte,
                        body_start, block.end_byte))
    return out


def _c_toplevel(root: ts.Node):
    """Named nodes outside function bodies (no function is defined inside another's body)."""
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        if n.type not in ("compound_statement", "parameter_list", "string_literal", "comment"):
            stack.extend(reversed(n.named_children))


def _c_defs(root: ts.Node, text: bytes, exported: set[str], has_global: bool) -> list[_Def]:
    out = []
    for node in _c_toplevel(root):
        if node.type != "function_definition":
            continue
        body = node.child_by_field_name("body")
        decl = node.child_by_field_name("declarator")
        if body is None or decl is None or body.type != "compound_statement":
            continue
        name_node = _declarator_name(decl)
        if name_node is None:
            continue
        name = text[name_node.start_byte:name_node.end_byte].decode("utf-8", "replace")
        if any(c.type == "__global__" for c in node.children):
            lang = "cuda"
        elif not has_global and (name == "kernel" or name in exported or _extern_c(node)):
            lang = "cpp"
        else:
            continue
        outer = node
        while outer.parent is not None and outer.parent.type in ("template_declaration",
                                                                 "linkage_specification"):
            if outer.parent.type == "linkage_specification" and \
                    outer.parent.child_by_field_name("body") != outer:
                break
            outer = outer.parent
        end = body.end_byte
        if text[body.end_byte - 1:body.end_byte] == b"}" and text[body.start_byte:body.start_byte + 1] == b"{":
            b0, b1 = body.start_byte + 1, body.end_byte - 1
        else:  # a body the parser had to close itself: keep what is there, flagged
            b0, b1 = body.start_byte, body.end_byte
        out.append(_Def(lang, name, name_node.start_byte, name_node.end_byte, outer.start_byte,
                        max(end, outer.end_byte), b0, b1,
                        unclosed=not text[body.start_byte:body.end_byte].rstrip().endswith(b"}")))
    return out


def _extern_c(node: ts.Node) -> bool:
    """`extern "C" ... f(...) {...}`: an entry point called from Python (ctypes, inductor)."""
    p = node.parent
    return p is not None and p.type == "linkage_specification" and p.child_by_field_name("body") == node


def _declarator_name(decl: ts.Node) -> ts.Node | None:
    """The identifier a (possibly pointer/reference/qualified) declarator declares."""
    node = decl
    for _ in range(8):
        if node.type == "function_declarator":
            inner = node.child_by_field_name("declarator")
            if inner is None:
                return None
            if inner.type in ("identifier", "field_identifier"):
                return inner
            if inner.type in ("qualified_identifier", "template_function"):
                names = [c for c in _walk(inner) if c.type == "identifier"]
                return names[-1] if names else None
            node = inner
            continue
        inner = node.child_by_field_name("declarator")
        if inner is None:
            return None
        node = inner
    return None


# ---------------------------------------------------------------------------------------------
# From shadow offsets back to the file


def _locate(src: Source, pos: int) -> tuple[int, int]:
    """(segment index, segment's start in the shadow) of the byte at `pos`."""
    at = 0
    for i, s in enumerate(src.segs):
        if at <= pos < at + len(s.shadow):
            return i, at
        at += len(s.shadow)
    return len(src.segs) - 1, at - len(src.segs[-1].shadow)


def _map_range(src: Source, a: int, b: int, anchor: int) -> tuple[int, int, bool] | None:
    """Shadow [a, b) -> file [x, y): directly when both ends lie in one expression of the file,
    else clipped to the literal that holds `anchor` (the definition's name)."""
    if b <= a:
        i, base = _locate(src, a)
        s = src.segs[i]
        if s.file_start is None:
            return None
        x = s.file_start + (a - base)
        return x, x, False
    ia, base_a = _locate(src, a)
    ib, base_b = _locate(src, b - 1)
    sa, sb = src.segs[ia], src.segs[ib]
    if sa.file_start is not None and sb.file_start is not None and sa.group == sb.group:
        x = sa.file_start + (a - base_a)
        y = sb.file_start + (b - 1 - base_b) + 1
        if x <= y:
            return x, y, False
    ik, base_k = _locate(src, anchor)
    sk = src.segs[ik]
    if sk.file_start is None:
        return None
    lo, hi = max(a, base_k), min(b, base_k + len(sk.shadow))
    return sk.file_start + (lo - base_k), sk.file_start + (hi - base_k), True


def _map_def(src: Source, d: _Def, code: bytes) -> Core | None:
    whole = _map_range(src, d.start, d.end, d.name_at)
    if whole is None:
        return None
    body = _map_range(src, d.body_start, d.body_end, d.name_at if d.body_start >= d.body_end
                      else d.body_start)
    if body is None or (not whole[2] and not (whole[0] <= body[0] <= body[1] <= whole[1])):
        body = (whole[0], whole[1], whole[2])
    elif src.segs[_locate(src, d.body_start)[0]].doubled:
        x, y, clipped = body  # `{{ ... }}` in the file: the body lies inside both braces
        if x < y and code[x:x + 1] == b"{" and code[x - 1:x] == b"{":
            x += 1
        if x < y and code[y - 1:y + 1] == b"}}":
            y -= 1
        body = (x, y, clipped)
    label = src.label if (d.lang == "cpp" and d.name == "kernel") else None
    name = d.name
    spot = _map_range(src, d.name_at, d.name_end, d.name_at)
    if spot is not None and not spot[2]:  # the name as the file spells it (`{name}` in f-strings)
        name = code[spot[0]:spot[1]].decode("utf-8", "replace")
    return Core(d.lang, name, whole[0], whole[1], body[0], body[1],
                whole[2] or body[2] or d.unclosed, label)


def _dedupe(cores: list[Core]) -> list[Core]:
    """One core per file range; a core inside another is dropped (the outer one is the kernel)."""
    cores = sorted(cores, key=lambda c: (c.start, -c.end))
    out: list[Core] = []
    for c in cores:
        if out and out[-1].start <= c.start and c.end <= out[-1].end:
            continue
        if out and c.start < out[-1].end:  # partial overlap: keep the first
            continue
        out.append(c)
    return out

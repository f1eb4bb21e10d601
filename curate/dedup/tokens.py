"""Code tokens for deduplication: the leaves of the tree-sitter Python syntax tree.

Comments, whitespace, line continuations and documentation strings (a statement made only of
string literals, at the start of its line) are dropped, so that copies that differ only in
layout, comments or docstrings have the same token stream. Leaves are split at ASCII
punctuation (`**=` -> `*`, `*`, `=`; `1e-5` -> `1e`, `-`, `5`; `self.w` -> `self`, `.`, `w`),
which loses nothing that matters for near duplicates. A string literal is one token, except long
or multi-line ones, which usually hold embedded CUDA/C++ source (`load_inline`): they are cut
into words and punctuation with C comments dropped, so that kernels in strings are compared by
their code rather than as one opaque token each. Tokens are UTF-8 bytes.

Two implementations produce the same tokens:

- `ts_tokens` walks the tree-sitter tree: the definition. tree-sitter-python parses at ~4.5 MB/s
  here and the walk costs as much again (~3 ms for a 1.2 KB program with this Python binding),
  so tree-sitter alone would take far more than the 15 seconds that 100,000 programs may take
  on two cores.
- `lex_blob`/`lex_tokens` need no parse, ~40x faster: one regular-expression scan that stops
  only at quotes and '#' finds string literals and comments; docstrings are found from line
  starts and bracket depth; the rest of the text is left as it is and cut into words and
  punctuation later, in numpy, for a thousand programs at a time (minhash.blob_ids).
  tests/test_dedup.py checks that both agree on every KernelBench problem, every bundled
  example and a file of tricky constructs. Where the lexer meets what it cannot be sure of (an
  unterminated string, a NUL byte) it returns None, and `tokens` falls back to tree-sitter for
  that program.
"""

from __future__ import annotations

import builtins
import keyword
import re
import string as _string
from functools import lru_cache

PUNCTUATION = bytes(c for c in _string.punctuation.encode() if c != ord("_"))
_PUNCT = [(bytes([c]), b" " + bytes([c]) + b" ") for c in PUNCTUATION]
_CODE_STRING_LEN = 64  # longer (or multi-line) string literals are tokenized as code
_CODE_COMMENTS = re.compile(rb"//[^\n]*|/\*.*?\*/", re.DOTALL)


def _spaced(text: bytes) -> bytes:
    for c, spaced in _PUNCT:
        if c in text:
            text = text.replace(c, spaced)
    return text


def split_words(text: bytes) -> list[bytes]:
    """Words: runs of bytes that are neither ASCII whitespace nor ASCII punctuation, and every
    ASCII punctuation character on its own. (minhash.blob_ids splits the same way, in numpy.)"""
    return _spaced(text).split()


# A short string literal is one token: its whitespace and punctuation bytes are mapped to bytes
# that are neither (0x80 + ...), so that splitting words never cuts it.
_ESCAPE_FROM = b" \t\n\r\x0b\x0c" + PUNCTUATION
_ESCAPE_TO = bytes(range(0xC0, 0xC0 + len(_ESCAPE_FROM)))
_ESCAPE = bytes.maketrans(_ESCAPE_FROM, _ESCAPE_TO)
_UNESCAPE = bytes.maketrans(_ESCAPE_TO, _ESCAPE_FROM)
_ESCAPED_QUOTES = frozenset(b"'\"".translate(_ESCAPE))


def readable(tok: bytes) -> str:
    """A token as text (string literals unescaped), for people and tests."""
    return tok.translate(_UNESCAPE).decode("utf-8", "replace")


def _code_text(lit: bytes) -> bytes:
    """The code inside a long string literal, quotes and C comments dropped."""
    return _CODE_COMMENTS.sub(b" ", lit).replace(b'"', b" ").replace(b"'", b" ")


def _string_tokens(lit: bytes) -> list[bytes]:
    if len(lit) <= _CODE_STRING_LEN and b"\n" not in lit:
        return [lit.translate(_ESCAPE)]
    return split_words(_code_text(lit))


# --- the tree-sitter definition ---------------------------------------------------------------

_STRINGISH = ("string", "concatenated_string")
_SKIP = ("comment", "line_continuation")


@lru_cache(maxsize=1)
def _parser():
    import tree_sitter_python
    from tree_sitter import Language, Parser
    return Parser(Language(tree_sitter_python.language()))


def _encode(code: str | bytes) -> bytes:
    src = code.encode("utf-8", "surrogatepass") if isinstance(code, str) else code
    if b"\r" in src:
        src = src.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return src


def _at_line_start(src: bytes, start: int) -> bool:
    """Only whitespace (or a statement ended by ';') between the line's start and `start`."""
    before = src[src.rfind(b"\n", 0, start) + 1:start].strip()
    return not before or before.endswith(b";")


def _is_docstring(node, src: bytes) -> bool:
    children = node.children
    return (bool(children) and all(c.type in _STRINGISH for c in children)
            and _at_line_start(src, node.start_byte))


def ts_tokens(code: str | bytes) -> list[bytes]:
    """Tokens of `code` from the tree-sitter syntax tree (the reference implementation)."""
    src = _encode(code)
    out: list[bytes] = []
    cursor = _parser().parse(src).walk()
    while True:
        node = cursor.node
        kind = node.type
        descend = False
        if kind in _SKIP:
            pass
        elif kind == "string":
            out.extend(_string_tokens(node.text))
        elif kind == "expression_statement" and _is_docstring(node, src):
            pass
        elif node.child_count:
            descend = True
        else:
            out.extend(split_words(node.text))
        if descend and cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return out


# --- the fast lexer -----------------------------------------------------------------------------

# String literals and comments: the scan stops only at quotes and '#'.
_STRINGS = re.compile(
    rb"#[^\n]*"
    rb"|'''(?:[^'\\]++|\\.|'(?!''))*+'''"
    rb'|"""(?:[^"\\]++|\\.|"(?!""))*+"""'
    rb"|'(?:[^'\\\n]++|\\.)*+'"
    rb'|"(?:[^"\\\n]++|\\.)*+"',
    re.DOTALL)
_PREFIX = frozenset(b"rRbBuUfF")
_WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_HOLE = b"\x00"  # stands for one string literal in the text around the literals
_HASH, _BACKSLASH, _NL = ord("#"), ord("\\"), ord("\n")


def lex_tokens(code: str | bytes) -> list[bytes] | None:
    """Tokens of `code` without parsing, equal to `ts_tokens`; None where it cannot be sure."""
    blob = lex_blob(code)
    return None if blob is None else split_words(blob)


def lex_blob(code: str | bytes) -> bytes | None:
    """The tokens of `code` as one bytes object that `split_words` cuts into them; no list of
    tokens is built: minhash.blob_ids splits and hashes many programs' tokens at once."""
    src = _encode(code)
    if _HOLE in src:
        return None
    parts: list[bytes] = []  # the text outside literals and comments, a hole for each literal
    strings: list[bytes] = []
    holes: list[int] = []
    pos = size = 0
    for m in _STRINGS.finditer(src):
        s, e = m.span()
        if src[s] == _HASH:
            parts.append(src[pos:s])
            size += s - pos
            pos = e
            continue
        p = s
        while p > pos and s - p < 2 and src[p - 1] in _PREFIX:
            p -= 1
        if p < s and p > 0 and (src[p - 1] in _WORD or src[p - 1] > 127):
            p = s  # letters of a name, not a string prefix
        parts.append(src[pos:p])
        size += p - pos
        holes.append(size)
        parts.append(_HOLE)
        size += 1
        strings.append(src[p:e])
        pos = e
    parts.append(src[pos:])
    text = b"".join(parts)
    if b"'" in text or b'"' in text:
        return None  # an unterminated string
    if not strings:
        return text.replace(b"\\\n", b" ")
    dropped = _docstrings(text, holes)
    segments = text.replace(b"\\\n", b" ").split(_HOLE)
    out = [segments[0]]
    for i, seg in enumerate(segments[1:]):
        if i not in dropped:
            lit = strings[i]
            if len(lit) <= _CODE_STRING_LEN and b"\n" not in lit:
                out.append(b" " + lit.translate(_ESCAPE) + b" ")
            else:
                out.append(b" " + _code_text(lit) + b" ")
        out.append(seg)
    return b"".join(out)


def _docstrings(text: bytes, holes: list[int]) -> set[int]:
    """Indices of the literals that form docstring statements: alone (or several side by side)
    on a line that starts a statement (or follows ';') and ends it, outside brackets."""
    dropped: set[int] = set()
    n = len(holes)
    i = 0
    while i < n:
        h = holes[i]
        line = text.rfind(b"\n", 0, h) + 1
        before = text[line:h].strip()
        j = i
        if not before or before.endswith(b";"):
            end = h + 1
            while j + 1 < n:
                gap = text[end:holes[j + 1]].replace(b"\\\n", b"")
                if gap.strip() or b"\n" in gap:
                    break  # more than blanks (a newline ends the statement)
                j += 1
                end = holes[j] + 1
            eol = text.find(b"\n", end)
            after = text[end:eol if eol >= 0 else len(text)].strip()
            continued = line >= 2 and text[line - 2] == _BACKSLASH
            if (not after or after.startswith(b";")) and not continued:
                head = text[:h]
                depth = (head.count(b"(") + head.count(b"[") + head.count(b"{")
                         - head.count(b")") - head.count(b"]") - head.count(b"}"))
                if depth <= 0:
                    dropped.update(range(i, j + 1))
        i = j + 1
    return dropped


def blob(code: str | bytes | None, method: str = "fast") -> bytes:
    """`tokens(code, method)` as one whitespace-separated bytes object."""
    if not code:
        return b""
    if method == "fast":
        b = lex_blob(code)
        if b is not None:
            return b
    elif method != "tree-sitter":
        raise ValueError(f"unknown tokenizer {method!r}: use 'fast' or 'tree-sitter'")
    return b" ".join(ts_tokens(code))


def tokens(code: str | bytes | None, method: str = "fast") -> list[bytes]:
    """The token stream of a program; `method` is "fast" (the lexer, with tree-sitter where it
    cannot be sure) or "tree-sitter"."""
    if not code:
        return []
    if method == "fast":
        toks = lex_tokens(code)
        if toks is not None:
            return toks
    elif method != "tree-sitter":
        raise ValueError(f"unknown tokenizer {method!r}: use 'fast' or 'tree-sitter'")
    return ts_tokens(code)


# --- abstraction --------------------------------------------------------------------------------

_KEYWORDS = frozenset(k.encode() for k in keyword.kwlist)
_BUILTINS = frozenset(n.encode() for n in dir(builtins))
_DIGITS = frozenset(b"0123456789")
_IMPORT = re.compile(rb"^[ \t]*(?:from[ \t]+[\w.]+[ \t]+)?import[ \t]+(\([^)]*\)|[^\n#;]+)",
                     re.MULTILINE)
_SELF = b"self"
_DOT = b"."


def imported_names(code: str | bytes) -> set[bytes]:
    """Names bound by the program's import statements (`torch`, `nn`, `F`, `tl`, ...)."""
    names: set[bytes] = set()
    for m in _IMPORT.finditer(_encode(code)):
        for part in m.group(1).strip(b"()").split(b","):
            words = part.split()
            if words:
                names.add(words[-1] if b"as" in words[:-1] else words[0].split(b".")[0])
    return names


def abstract_tokens(toks: list[bytes], code: str | bytes) -> list[bytes]:
    """The program's own names -> ID, numbers -> NUM, short string literals -> STR.

    What a renamed copy changes is abstracted: variables, parameters, functions, classes,
    module constants and `self.` attributes. What says which computation it is stays: keywords,
    builtins, imported modules and what is reached through them or through a value (`torch.relu`,
    `F.gelu`, `x.view`), and punctuation. A renamed copy then has the same tokens, while
    `torch.relu` and `torch.sigmoid` programs still differ."""
    keep = _KEYWORDS | _BUILTINS | imported_names(code)
    out: list[bytes] = []
    prev = prev2 = b""
    for t in toks:
        first = t[0]
        if t[-1] in _ESCAPED_QUOTES:
            a = b"STR"
        elif first in _DIGITS:
            a = b"NUM"
        elif (first in _WORD or first > 127) and t not in keep and not (
                prev == _DOT and prev2 != _SELF):
            a = b"ID"
        else:
            a = t
        out.append(a)
        prev2, prev = prev, t
    return out

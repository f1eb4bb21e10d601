"""The record: one dict per pair with the schema's columns; its id is a content hash."""

from __future__ import annotations

import hashlib

from .schema import new_record  # noqa: F401  (re-exported: the way stages make records)


def normalize_code(code: str | None) -> str:
    """Line endings unified, trailing whitespace and blank edges dropped: cosmetic edits hash alike."""
    if not code:
        return ""
    lines = [ln.rstrip() for ln in code.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return "\n".join(lines).strip("\n")


def content_hash(pytorch_code: str | None, kernel_code: str | None = None) -> str:
    """Stable id of a pair: sha256 over the normalized reference and candidate, 16 hex digits."""
    h = hashlib.sha256()
    h.update(normalize_code(pytorch_code).encode())
    h.update(b"\x00")
    h.update(normalize_code(kernel_code).encode())
    return h.hexdigest()[:16]


def row_key(row: dict) -> str:
    """The ledger key of a row: the content hash of what it holds now (ids can be user-given)."""
    return content_hash(row.get("pytorch_code"), row.get("kernel_code"))


def ensure_id(row: dict) -> dict:
    if not row.get("id"):
        row["id"] = content_hash(row.get("pytorch_code"), row.get("kernel_code"))
    return row


def add_reasons(row: dict, *reasons: str) -> dict:
    """Append reasons (kept unique, in order) to a row's `reasons` list."""
    have = list(row.get("reasons") or [])
    for r in reasons:
        if r and r not in have:
            have.append(r)
    row["reasons"] = have
    return row

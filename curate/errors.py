"""Errors that the CLI turns into exit codes: BadInput -> 2 (with file, row and fix)."""

from __future__ import annotations


class BadInput(Exception):
    """Bad usage or bad input: the message names the file, the row and the fix. Exit code 2."""

    def __init__(self, message: str, *, path: str | None = None, row: int | None = None,
                 fix: str | None = None):
        self.path, self.row, self.fix = path, row, fix
        parts = []
        if path is not None:
            parts.append(str(path) + (f", row {row}" if row is not None else ""))
        parts.append(message)
        text = ": ".join(parts)
        if fix:
            text += f"\n  fix: {fix}"
        super().__init__(text)


class NotAvailable(Exception):
    """A stage that this version of curate does not have yet. Exit code 2."""

"""Errors that the CLI turns into exit codes: BadInput -> 2 (with file, row and fix)."""

from __future__ import annotations


class BadInput(Exception):
    """Bad usage or bad input: the message names the file, the row and the fix. Exit code 2.

    `row` counts table rows from 0 (as pandas and pyarrow do); `line` counts the lines of a text
    file from 1 (as editors do), so a jsonl error can be found with `sed -n 3p`.
    """

    def __init__(self, message: str, *, path: str | None = None, row: int | None = None,
                 fix: str | None = None, line: int | None = None):
        self.path, self.row, self.fix, self.line = path, row, fix, line
        parts = []
        if path is not None:
            where = f", line {line}" if line is not None else ""
            where += f", row {row}" if row is not None and line is None else ""
            parts.append(str(path) + where)
        parts.append(message)
        text = ": ".join(parts)
        if fix:
            text += f"\n  fix: {fix}"
        super().__init__(text)


class NotAvailable(Exception):
    """A stage that this version of curate does not have yet. Exit code 2."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that it unwinds like Ctrl-C (exit code 143)."""

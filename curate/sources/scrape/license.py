"""A repository's license as an SPDX id, read from its license files.

The text is matched by `identify` (pre-commit's file identification library: the
choosealicense.com texts under their SPDX ids, matched after normalization, within a 5% edit
distance computed by `ukkonen`). It is small, maintained and needs no network. No file, or a
text that matches nothing, gives None with the reason.
"""

from __future__ import annotations

from pathlib import Path

LICENSE_FILES = ("LICENSE", "LICENSE.txt", "LICENSE.md", "LICENSE.rst", "LICENCE",
                 "LICENCE.txt", "LICENCE.md", "COPYING", "COPYING.txt", "COPYING.md",
                 "license", "license.txt", "License.txt")


def license_files(root: Path) -> list[Path]:
    """The license files of the folder, else of the nearest folder above it that has one (a
    package inside a checkout), else of an installed package's dist-info."""
    root = Path(root).resolve()
    base = root if root.is_dir() else root.parent
    for d in [base, *list(base.parents)[:4]]:
        found = [d / n for n in LICENSE_FILES if (d / n).is_file()]
        for info in sorted(d.parent.glob(f"{d.name}-*.dist-info")):
            found += sorted(p for p in [*info.glob("*"), *info.glob("licenses/*")]
                            if p.is_file() and p.name.upper().startswith(("LICEN", "COPYING")))
        if found:
            return found
    return []


def detect_license(root: Path) -> tuple[str | None, str | None]:
    """(SPDX id, None) or (None, why not)."""
    files = license_files(root)
    if not files:
        return None, "license_unknown:no_license_file"
    try:
        from identify.identify import license_id
    except ImportError:
        return None, "license_unknown:identify_not_installed"
    for f in files:
        try:
            spdx = license_id(str(f))
        except (OSError, UnicodeDecodeError):
            continue
        if spdx:
            return spdx, None
    return None, "license_unknown:unrecognized_text"

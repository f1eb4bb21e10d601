"""Is the card on disk the card a push would publish, as it was rendered (and reviewed)?

Rendering writes `card.sha256` beside the card (sha256sum lines for README.md and its plots).
A push publishes README.md as it is when it is current for the build and repo, else renders it
first; `review` tells which, and what would differ from the card on disk.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .render import CARD, HASHES, card_files, file_hashes, is_current, render_card, rendered_hashes


@dataclass
class CardReview:
    state: str                   # "as_rendered", "edited", "unrecorded", "stale", "missing"
    message: str
    changed: list[str] = field(default_factory=list)   # files that differ

    @property
    def reviewed_is_pushed(self) -> bool:
        return self.state in ("as_rendered", "edited")


def review(build_dir: str | Path, repo_id: str | None) -> CardReview:
    """Compare the card on disk with what it was rendered as, and with what a push publishes."""
    build = Path(build_dir)
    how = f"review it with `curate card {build} --repo {repo_id}`"
    if not (build / CARD).is_file():
        return CardReview("missing", f"README.md is missing or out of date: a real push renders "
                                     f"it first ({how})")
    if not is_current(build, repo_id):
        changed = _rerender_diff(build, repo_id)
        what = (f"the pushed card would differ from the one on disk in {', '.join(changed)}"
                if changed else "the result equals the card on disk")
        return CardReview("stale", f"README.md is missing or out of date: the build (or the "
                                   f"repo) changed since the card was rendered, so a push "
                                   f"renders it again and {what} ({how})", changed)
    recorded = rendered_hashes(build)
    if recorded is None:
        return CardReview("unrecorded", f"card: no {HASHES} beside it (rendered by an older "
                                        f"curate): cannot tell whether it changed since; {how}")
    now = file_hashes(build, card_files(build))
    changed = sorted(n for n in set(now) | set(recorded) if now.get(n) != recorded.get(n))
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime((build / HASHES).stat().st_mtime))
    if changed:
        return CardReview("edited", f"card: changed since it was rendered at {when}: "
                                    f"{', '.join(changed)}; these files are pushed as they are "
                                    f"now (a later render keeps only the text between "
                                    f"curate:begin and curate:end markers)", changed)
    return CardReview("as_rendered", f"card: unchanged since it was rendered at {when} "
                                     f"({len(now)} files match {HASHES}): the card on disk is "
                                     f"the one pushed")


def _rerender_diff(build: Path, repo_id: str | None) -> list[str]:
    """Render the card a push would publish into a temporary folder; the files that differ."""
    with tempfile.TemporaryDirectory(prefix="curate-card-") as tmp:
        out = Path(tmp)
        shutil.copy2(build / CARD, out / CARD)  # its hand-written sections, name and repo
        card = render_card(build, repo_id=repo_id, out=out)
        new = file_hashes(out, card_files(out, card.assets))
    old = file_hashes(build, card_files(build))
    return sorted(n for n in set(new) | set(old) if new.get(n) != old.get(n))

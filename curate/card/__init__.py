"""The dataset card of a build: README.md with Hub front matter, and its plots."""

from .render import Card, hand_written, is_current, render_card

__all__ = ["Card", "hand_written", "is_current", "render_card"]

"""`python -m curate` == `curate` (for machines where the console script is not installed)."""

from .cli import run

run()

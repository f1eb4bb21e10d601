"""Kernel infilling rows: prefix / core / suffix cuts of candidate programs (`curate split-infill`)."""

from .locate import Core, find_cores
from .split import (FIM_FORMATS, GRANULARITIES, MULTI, SplitConfig, check_row, render_fim,
                    split_code, split_row)

__all__ = ["Core", "FIM_FORMATS", "GRANULARITIES", "MULTI", "SplitConfig", "check_row",
           "find_cores", "render_fim", "split_code", "split_row"]

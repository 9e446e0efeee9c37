"""Deprecated: the figures moved to :mod:`cactus_theory.figures` (one module per figure family).

This module re-exports the old names so that existing imports keep working; new code should
import from :mod:`cactus_theory.figures`. Importing it selects no matplotlib backend.
"""

from __future__ import annotations

from .figures import (
    FIGURES,
    figure_frontier,
    figure_gamma,
    figure_per_draft_vs_emitted,
    figure_taylor_overshoot,
    write_figures,
)

__all__ = [
    "figure_gamma",
    "figure_taylor_overshoot",
    "figure_per_draft_vs_emitted",
    "figure_frontier",
    "FIGURES",
    "write_figures",
]

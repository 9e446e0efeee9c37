"""What a rule emits: one-step analysis, Taylor vs exact, the frontier, calibration, tables.

(The ``cactus-calibrated`` rule lives in :mod:`cactus_theory.rules.calibrated`.)
"""

from .one_step import (
    OneStepResult,
    acceptance_probabilities,
    acceptance_rate,
    analyze,
    emitted_distribution,
    make_plan,
    per_draft_divergence,
)

__all__ = [
    "OneStepResult", "acceptance_probabilities", "acceptance_rate", "analyze",
    "emitted_distribution", "make_plan", "per_draft_divergence",
]

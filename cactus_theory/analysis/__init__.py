"""What a rule emits: exact one-step analysis, and the Taylor-vs-exact comparison."""

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

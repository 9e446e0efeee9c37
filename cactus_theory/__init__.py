"""cactus_theory: exact theory and simulation of speculative-sampling acceptance rules.

Notation: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
delta budget, h target. The vocabulary is the last axis; batch axes lead.
"""

from . import distributions
from .divergences import DIVERGENCES, divergence, get_divergence, two_point_divergence
from .rules import RULES, get_rule, rule_names
from .analysis import (
    OneStepResult,
    acceptance_probabilities,
    acceptance_rate,
    analyze,
    emitted_distribution,
    per_draft_divergence,
)

__version__ = "0.1.0"

__all__ = [
    "distributions",
    "DIVERGENCES", "divergence", "get_divergence", "two_point_divergence",
    "RULES", "get_rule", "rule_names",
    "OneStepResult", "acceptance_probabilities", "acceptance_rate", "analyze",
    "emitted_distribution", "per_draft_divergence",
]

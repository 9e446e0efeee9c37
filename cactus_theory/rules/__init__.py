"""Verification rules: their plans (structure), the registry, and every rule.

Importing this package registers every rule in :data:`RULES`.
"""

from .plans import DecisionPlan, Plan, SpikePlan, TargetPlan
from .registry import RULES, Knob, Rule, RuleSpec, get_rule, register, rule_names
from . import sps, cactus, tas, topk, interpolation, mentored, cascades, fuzzy  # noqa: F401  (registration side effect)
from . import sequence_budget  # noqa: F401  (registration side effect)

__all__ = [
    "RULES", "Knob", "Rule", "RuleSpec", "get_rule", "register", "rule_names",
    "TargetPlan", "SpikePlan", "DecisionPlan", "Plan",
]

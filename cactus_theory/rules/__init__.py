"""Verification rules: their plans (structure), the registry, and every rule.

Importing this package registers every rule in :data:`RULES` and the aliases of the older
per-divergence names (``cactus-exact-kl``, ``mentored-tv``, ...), which resolve to
``cactus-exact`` / ``mentored`` with the ``divergence`` knob set. ``cactus-calibrated``, which
needs the emitted-distribution analysis, is registered by
:mod:`cactus_theory.analysis.calibration` (imported with :mod:`cactus_theory` itself).
"""

from .plans import DecisionPlan, Plan, SpikePlan, TargetPlan
from .registry import (RULES, Knob, Rule, RuleRegistry, RuleSpec, get_rule, register,
                       register_alias, rule_names)
from . import sps, cactus, tas, topk, interpolation, mentored, cascades, fuzzy  # noqa: F401  (registration side effect)
from . import sequence_budget  # noqa: F401  (registration side effect)

__all__ = [
    "RULES", "Knob", "Rule", "RuleRegistry", "RuleSpec", "get_rule", "register",
    "register_alias", "rule_names", "TargetPlan", "SpikePlan", "DecisionPlan", "Plan",
]

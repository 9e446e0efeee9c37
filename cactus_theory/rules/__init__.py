"""Verification rules: their plans (structure), the registry, and every rule.

Importing this package registers every rule in :data:`RULES` and the aliases of the older
per-divergence names (``cactus-exact-kl``, ``mentored-tv``, ...), which resolve to
``cactus-exact`` / ``mentored`` with the ``divergence`` knob set. ``cactus-calibrated``, which
needs the emitted-distribution analysis, is registered by
:mod:`cactus_theory.analysis._calibrated_rule` (imported with :mod:`cactus_theory` itself).
"""

from . import (  # noqa: F401  (registration side effect)
    _cactus,
    _cascades,
    _entropy_verify,
    _fuzzy,
    _interpolation,
    _lossy_sd,
    _margin,
    _mentored,
    _relaxed_topk,
    _rfsd,
    _scd,
    _sequence_budget,  # noqa: F401  (registration side effect)
    _sglang_threshold,
    _sps,
    _static_ensemble,
    _tas,
    _topk,
    multidraft,
)
from .plans import DecisionPlan, Plan, SpikePlan, TargetPlan
from .registry import (
    RULES,
    ElementwiseTargetRule,
    Knob,
    Rule,
    RuleSpec,
    SpikeRule,
    get_rule,
    register,
    register_alias,
    rule_names,
)

__all__ = [
    "RULES",
    "Knob",
    "Rule",
    "ElementwiseTargetRule",
    "SpikeRule",
    "RuleSpec",
    "get_rule",
    "register",
    "register_alias",
    "rule_names",
    "TargetPlan",
    "SpikePlan",
    "DecisionPlan",
    "Plan",
]

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
    _sequence_budget,
    _sglang_threshold,
    _sps,
    _static_ensemble,
    _tas,
    _topk,
    multidraft,
)
from .plans import DecisionPlan, SpikePlan, TargetPlan
from .registry import (
    RULES,
    DecisionRule,
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

#: The registry's order (what ``list(RULES)``, :func:`rule_names` and every table of rules
#: follow), stated here rather than left to the modules' import order; ``cactus-calibrated``
#: follows, registered with :mod:`cactus_theory.analysis`.
_ORDER = (
    "cactus-taylor",
    "cactus-exact",
    "cascade-chow",
    "cascade-diff",
    "cascade-opt",
    "cascade-token-v1",
    "cascade-token-v2",
    "cascade-token-v3",
    "entropy-verify",
    "fuzzy",
    "interpolation",
    "lossy-sd",
    "margin-relaxed",
    "mentored",
    "topk",
    "relaxed-topk",
    "rfsd",
    "scd",
    "sequence-budget-kl",
    "sglang-threshold",
    "sampler-match",
    "sps",
    "static-ensemble",
    "tas",
)
RULES._order(_ORDER)

__all__ = [
    "RULES",
    "Knob",
    "Rule",
    "ElementwiseTargetRule",
    "SpikeRule",
    "DecisionRule",
    "RuleSpec",
    "get_rule",
    "register",
    "register_alias",
    "rule_names",
    "TargetPlan",
    "SpikePlan",
    "DecisionPlan",
]

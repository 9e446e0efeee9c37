r"""Result types of the front door (:mod:`cactus_theory.api`): one frozen dataclass per problem.

Every result type of the package (these, and those of the solvers, the simulator, the
samplers' law check, the planner) derives from :class:`Result`: it has a ``status`` (how the
computation ended; ``"ok"`` where it can end only one way) and a ``message``, a one-line
summary ``repr``, ``to_dict()`` (plain floats, ints, bools, strings and lists that
``json.dumps(..., allow_nan=False)`` accepts: a non-finite float is written as the string
``"nan"``, ``"inf"`` or ``"-inf"``, so ``float(value)`` reads it back) and, for tables,
``rows()`` (a list of flat dicts of Python values a user can hand to ``pandas.DataFrame``:
a NaN is None there, a missing value, and an infinity stays a float).

Names (one per concept, across the whole API)
---------------------------------------------
``target_probs`` (q)
    The verifier's distribution; the vocabulary is the last axis.
``draft_probs`` (p)
    The drafter's distribution.
``token`` (n)
    The drafted token.
``delta``
    The **per-draft** budget: Cactus bounds :math:`D(h^{(n)}\|q) \le \delta` for every
    drafted token n (paper, Theorem 2).
``eps``
    A target on the **emitted** distribution: :math:`D(h_{alg}\|q) \le \epsilon`, where
    :math:`h_{alg}` is what a rule actually emits (paper, Theorem 3); the frontier and the
    calibration are stated in eps.
``per_draft_divergence``
    :math:`D(h^{(n)}\|q)` of the per-draft target; ``emitted_divergence`` is
    :math:`D(h_{alg}\|q)`.
``acceptance``
    :math:`\sum_n p_n a_n` (one position) or its mean over positions; at one drafted token
    :math:`a_n = \min(1, h_n/p_n)`.

KL(h||q) = sum h log(h/q). Reference: Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987
(Theorems 1-3, Corollary 5).
"""

from ._analysis import (
    FamilyComparison,
    GlobalDelta,
    KnobCalibration,
    MentoredComparison,
    OneStepResult,
    OperatingPoints,
    TaylorGrid,
    TreeBudgetResult,
    TreeOutcomes,
    TreeSpend,
)
from ._audit import AuditResult
from ._base import Result
from ._front import (
    CalibrationResult,
    ChainResult,
    FrontierResult,
    RuleTable,
    SpikeSolution,
    TaylorExactComparison,
)
from ._lengths import CurveCheck, PositionComparison
from ._plan import PlanResult

__all__ = [
    "Result",
    "SpikeSolution",
    "TaylorExactComparison",
    "FrontierResult",
    "CalibrationResult",
    "RuleTable",
    "ChainResult",
    "AuditResult",
    "OneStepResult",
    "GlobalDelta",
    "MentoredComparison",
    "KnobCalibration",
    "OperatingPoints",
    "TaylorGrid",
    "FamilyComparison",
    "TreeOutcomes",
    "TreeSpend",
    "TreeBudgetResult",
    "CurveCheck",
    "PositionComparison",
    "PlanResult",
]

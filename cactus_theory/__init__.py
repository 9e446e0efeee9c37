r"""cactus_theory: exact theory and simulation of speculative-sampling acceptance rules.

The front door (``import cactus_theory as ct``), one call per everyday problem:

- ``ct.solve_spike(q, p, token, delta, method="exact"|"taylor"|"cvxpy")``: the per-draft
  problem :math:`\max h_n` s.t. :math:`D(h\|q) \le \delta` (Theorem 2, Corollary 5).
- ``ct.compare_taylor_exact(q, p, delta)``: Taylor against exact Cactus.
- ``ct.optimal_frontier(q, p, eps=...)``: the best acceptance within eps of q (Theorem 1).
- ``ct.calibrate_delta(q, p, eps)``: the delta whose emitted divergence meets eps.
- ``ct.analyze_rules(q, p)``: every rule side by side.
- ``ct.exact_chain(rule, ct.Trajectory(q_t, p_t), m)``: exact multi-token metrics.
- ``ct.make_sampler(rule, **knobs)``: a batched torch sampler (vLLM's interface).
- ``ct.audit("distilled", eps=0.1)``: every rule calibrated to one true emitted divergence.
- ``ct.plan("distilled", eps=0.1, cost=0.1)``: the knob, tokens per call and speedup at every
  draft length, the best one and a vLLM configuration (``ct.AcceptanceProfile``,
  ``ct.CostModel``).
- ``ct.get_verifier(name)`` with ``ct.MultiDraft`` / ``ct.TokenTree`` / ``ct.DraftChain``:
  multi-draft and tree verification (``ct.VERIFIERS``; exact laws in
  :mod:`cactus_theory.analysis.multidraft`).

Each returns a frozen dataclass of :mod:`cactus_theory.results` with a summary ``repr``,
``to_dict()`` (JSON-ready) and, for tables, ``rows()`` (for pandas).

Names, one per concept: ``target_probs`` = q (verifier), ``draft_probs`` = p (drafter),
``token`` = n (drafted token), ``delta`` = the per-draft budget
(:math:`D(h^{(n)}\|q) \le \delta`), ``eps`` = a target on the emitted distribution
(:math:`D(h_{alg}\|q) \le \epsilon`); KL(h||q) = sum h log(h/q). The vocabulary is the last
axis; batch axes lead. Reference: Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987.
"""

from . import distributions
from .analysis import (
    acceptance_probabilities,
    acceptance_rate,
    analyze,
    emitted_distribution,
    per_draft_divergence,
)
from .api import (
    analyze_rules,
    audit,
    calibrate_delta,
    compare_taylor_exact,
    exact_chain,
    make_sampler,
    optimal_frontier,
    plan,
    solve_spike,
)
from .divergences import DIVERGENCES, divergence, get_divergence, two_point_divergence
from .drafts import DraftChain, MultiDraft, TokenTree
from .planning import AcceptanceProfile, CostModel
from .results import (
    CalibrationResult,
    ChainResult,
    FrontierResult,
    OneStepResult,
    PlanResult,
    RuleTable,
    SpikeSolution,
    TaylorExactComparison,
)
from .rules import RULES, get_rule, rule_names
from .rules.multidraft import VERIFIERS, get_verifier
from .simulate import Trajectory

__version__ = "0.1.0"

__all__ = [
    "solve_spike",
    "compare_taylor_exact",
    "optimal_frontier",
    "calibrate_delta",
    "analyze_rules",
    "exact_chain",
    "make_sampler",
    "audit",
    "plan",
    "PlanResult",
    "AcceptanceProfile",
    "CostModel",
    "Trajectory",
    "SpikeSolution",
    "TaylorExactComparison",
    "FrontierResult",
    "CalibrationResult",
    "RuleTable",
    "ChainResult",
    "distributions",
    "DIVERGENCES",
    "divergence",
    "get_divergence",
    "two_point_divergence",
    "RULES",
    "get_rule",
    "rule_names",
    "VERIFIERS",
    "get_verifier",
    "MultiDraft",
    "TokenTree",
    "DraftChain",
    "OneStepResult",
    "acceptance_probabilities",
    "acceptance_rate",
    "analyze",
    "emitted_distribution",
    "per_draft_divergence",
]

"""Exact optimisation: Theorem 2's scalar root, the Taylor point, the frontier and the mentored
target, the cvxpy oracles, certificates, the optimum of k drafts and its budgeted frontier, the
sequence-level budget."""

from ._certificates import rejection_radius
from ._cvx import SolverFailure, max_draft_probability_cvxpy
from ._cvx_frontier import max_acceptance_cvxpy
from ._frontier import frontier, frontier_curve, min_divergence_for_acceptance, saturation_budget
from ._mentored import max_acceptance, mentored_target, solve_mentored
from ._multidraft import (
    min_cut_acceptance,
    multidraft_frontier,
    multidraft_multiplier_target,
    multidraft_target,
)
from ._multidraft_cvx import all_subsets, multidraft_frontier_cvxpy
from ._sequence import budget_account, solve_sequence_budget
from ._spike import exact_spike, spike_scale, taylor_spike

__all__ = [
    "exact_spike",
    "taylor_spike",
    "spike_scale",
    "frontier",
    "frontier_curve",
    "saturation_budget",
    "min_divergence_for_acceptance",
    "solve_mentored",
    "mentored_target",
    "max_acceptance",
    "rejection_radius",
    "max_draft_probability_cvxpy",
    "max_acceptance_cvxpy",
    "SolverFailure",
    "min_cut_acceptance",
    "multidraft_frontier",
    "multidraft_target",
    "multidraft_multiplier_target",
    "multidraft_frontier_cvxpy",
    "all_subsets",
    "solve_sequence_budget",
    "budget_account",
]

"""Exact optimisation: Theorem 2's scalar root, the Taylor point, the frontier and the mentored
target, the cvxpy oracles, certificates, the optimum of k drafts and its budgeted frontier, the
sequence-level budget."""

from ._cvx import SolverFailure, max_draft_probability_cvxpy
from ._cvx_frontier import max_acceptance_cvxpy
from ._frontier import frontier, min_divergence_for_acceptance, saturation_budget
from ._mentored import max_acceptance, solve_mentored
from ._multidraft import (
    min_cut_acceptance,
    multidraft_frontier,
)
from ._multidraft_cvx import all_subsets, multidraft_frontier_cvxpy
from ._sequence import budget_account, solve_sequence_budget
from ._spike import exact_spike, taylor_spike

__all__ = [
    "exact_spike",
    "taylor_spike",
    "frontier",
    "saturation_budget",
    "min_divergence_for_acceptance",
    "solve_mentored",
    "max_acceptance",
    "max_draft_probability_cvxpy",
    "max_acceptance_cvxpy",
    "SolverFailure",
    "min_cut_acceptance",
    "multidraft_frontier",
    "multidraft_frontier_cvxpy",
    "all_subsets",
    "solve_sequence_budget",
    "budget_account",
]

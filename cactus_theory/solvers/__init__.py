"""Exact optimisation: Theorem 2's scalar root, the Taylor point, the cvxpy oracle, certificates,
the optimum of k drafts and its budgeted frontier."""

from ._certificates import rejection_radius
from ._multidraft import (
    min_cut_acceptance,
    multidraft_frontier,
    multidraft_multiplier_target,
    multidraft_target,
)
from ._spike import exact_spike, spike_scale, taylor_spike

__all__ = [
    "exact_spike",
    "taylor_spike",
    "spike_scale",
    "rejection_radius",
    "min_cut_acceptance",
    "multidraft_frontier",
    "multidraft_target",
    "multidraft_multiplier_target",
]

"""Exact optimisation: Theorem 2's scalar root, the Taylor point, the cvxpy oracle, certificates."""

from .certificates import rejection_radius
from .spike import exact_spike, spike_scale, taylor_spike

__all__ = ["exact_spike", "taylor_spike", "spike_scale", "rejection_radius"]

"""Exact optimisation: Theorem 2's scalar root, the Taylor point and the cvxpy oracle."""

from .spike import exact_spike, spike_scale, taylor_spike

__all__ = ["exact_spike", "taylor_spike", "spike_scale"]

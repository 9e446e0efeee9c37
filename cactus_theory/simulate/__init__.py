"""Teacher-forced chain simulation of speculative decoding, its exact expectations, metrics.

Teacher forced: a trajectory is a recorded sequence of (q_t, p_t) pairs whose distributions do
not depend on the emitted text. Symbols: q verifier (``target_probs``), p drafter
(``draft_probs``), n drafted token, m draft length.
"""

from .chain import ChainRun, PositionLaws, Trajectory, position_laws, simulate_chain
from .exact import (
    ExactChain,
    SequenceDivergence,
    brute_force_chain,
    exact_chain,
    sequence_divergence,
    sequence_kl_brute_force,
    sequence_kl_monte_carlo,
    sequence_log_prob,
)
from .metrics import (
    METRIC_LABELS,
    ChainTotals,
    Estimate,
    compute_metrics,
    pool_totals,
    ratio_estimate,
    rej_relative,
)
from .synthetic import synthetic_trajectory
from .trees import TreeSimulation, simulate_tree, synthetic_chain, synthetic_multidraft, synthetic_tree

__all__ = [
    "Trajectory",
    "PositionLaws",
    "position_laws",
    "ChainRun",
    "simulate_chain",
    "ExactChain",
    "exact_chain",
    "brute_force_chain",
    "SequenceDivergence",
    "sequence_divergence",
    "sequence_log_prob",
    "sequence_kl_monte_carlo",
    "sequence_kl_brute_force",
    "ChainTotals",
    "Estimate",
    "compute_metrics",
    "pool_totals",
    "ratio_estimate",
    "rej_relative",
    "METRIC_LABELS",
    "synthetic_trajectory",
    "synthetic_multidraft",
    "synthetic_chain",
    "synthetic_tree",
    "simulate_tree",
    "TreeSimulation",
]

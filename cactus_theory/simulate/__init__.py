"""Teacher-forced chain simulation of speculative decoding, its exact expectations, metrics.

Teacher forced: a trajectory is a recorded sequence of (q_t, p_t) pairs whose distributions do
not depend on the emitted text. Symbols: q verifier (``target_probs``), p drafter
(``draft_probs``), n drafted token, m draft length.
"""

from ._bonus import relaxed_bonus_chain
from ._chain import Trajectory, position_laws, simulate_chain
from ._exact import exact_chain, sequence_divergence, sequence_kl_brute_force, sequence_kl_monte_carlo
from ._fly import fly_exact_chain, simulate_fly
from ._metrics import compute_metrics
from ._sequence_budget import compare_sequence_budget
from ._survival import best_verify_length, realised_acceptance, survival_probabilities
from ._synthetic import synthetic_trajectory
from ._trees import simulate_tree, synthetic_chain, synthetic_multidraft, synthetic_tree

__all__ = [
    "Trajectory",
    "position_laws",
    "simulate_chain",
    "exact_chain",
    "sequence_divergence",
    "sequence_kl_monte_carlo",
    "sequence_kl_brute_force",
    "compute_metrics",
    "synthetic_trajectory",
    "synthetic_tree",
    "synthetic_multidraft",
    "synthetic_chain",
    "simulate_tree",
    "compare_sequence_budget",
    "fly_exact_chain",
    "simulate_fly",
    "relaxed_bonus_chain",
    "survival_probabilities",
    "realised_acceptance",
    "best_verify_length",
]

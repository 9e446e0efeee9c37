"""What a rule emits: one-step analysis, Taylor vs exact, the frontier, calibration, tables.

Importing it registers the ``cactus-calibrated`` rule (:mod:`cactus_theory.analysis.calibration`).
"""

from . import calibration  # noqa: F401  (registers cactus-calibrated)
from .certificates import acceptance_certificate, accepted_set, certificate_rules
from .lengths import geometric_length_ratio
from .multidraft import (
    drawn_trees,
    expected_accepted_length,
    lossless_error,
    multidraft_acceptance,
    multidraft_emitted,
    tree_outcomes,
)
from .one_step import (
    OneStepResult,
    acceptance_probabilities,
    acceptance_rate,
    make_plan,
    per_draft_divergence,
)
from .scaled import analyze, emitted_distribution  # chunk by chunk beyond one chunk of rows

__all__ = [
    "OneStepResult",
    "acceptance_certificate",
    "acceptance_probabilities",
    "accepted_set",
    "acceptance_rate",
    "analyze",
    "certificate_rules",
    "emitted_distribution",
    "geometric_length_ratio",
    "make_plan",
    "per_draft_divergence",
    "drawn_trees",
    "expected_accepted_length",
    "lossless_error",
    "multidraft_acceptance",
    "multidraft_emitted",
    "tree_outcomes",
]

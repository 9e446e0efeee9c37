"""What a rule emits: one-step analysis, calibration, the frontier (multi-draft and tree laws:
:mod:`cactus_theory.analysis.multidraft`, :mod:`cactus_theory.analysis.tree_budget`).

One function per question; where the work runs follows from the input or a parameter: arrays
in memory (rows beyond one chunk chunk by chunk, ``chunk_rows=`` or ``max_memory=``), a row
source (:mod:`cactus_theory.rows`: a file or a folder of shards, read chunk by chunk), or Dask
arrays (Dask tasks; ``runner="dask"`` for a row source's shards), the numbers the same bit for
bit. The front door (:mod:`cactus_theory.api`) adds the per-problem calls.

Importing it registers the ``cactus-calibrated`` rule
(:mod:`cactus_theory.analysis._calibrated_rule`).
"""

from . import _calibrated_rule  # noqa: F401  (registers cactus-calibrated)
from ._certificates import acceptance_certificate, accepted_set, certificate_rules
from ._knob import calibrate_knob
from .calibration import compare_with_mentored, global_delta
from .one_step import (
    acceptance_probabilities,
    acceptance_rate,
    analyze,
    emitted_distribution,
    make_plan,
    per_draft_divergence,
)

__all__ = [
    "acceptance_certificate",
    "acceptance_probabilities",
    "accepted_set",
    "acceptance_rate",
    "analyze",
    "calibrate_knob",
    "certificate_rules",
    "compare_with_mentored",
    "emitted_distribution",
    "global_delta",
    "make_plan",
    "per_draft_divergence",
]

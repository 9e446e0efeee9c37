r"""Cactus with delta calibrated per position to a budget eps on what is emitted.

``cactus-calibrated`` chooses, at each position, the per-draft budget delta whose emitted
divergence meets the target: :math:`D(h_{alg}(\delta)\|q) \le \epsilon` (first crossing, see
:func:`cactus_theory.analysis.calibration.calibrate_delta`), then acts as Cactus at that delta:
:math:`\gamma_n` from Corollary 5 (``base="taylor"``) or Theorem 2 (``base="exact"``),
:math:`a_n = \min(1, \gamma_n/p_n)`.

The rule is registered when :mod:`cactus_theory.rules` is imported; the calibration itself
(:mod:`cactus_theory.analysis.calibration`) is imported on the first ``plan`` call.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, delta
per-draft budget, eps target on the emitted divergence, :math:`h_{alg}` the emitted
distribution.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3 (the emitted distribution) and
Corollary 5; not part of the paper (the paper fixes one delta).
"""

from __future__ import annotations

import math

import numpy as np
from array_api_compat import array_namespace

from ..divergences import DIVERGENCES
from .plans import SpikePlan
from .registry import Knob, Rule, RuleSpec, register

__all__ = ["BASES", "CalibratedCactus"]

#: How gamma is computed from delta: Corollary 5 (the paper's rule) or Theorem 2's root.
BASES = ("taylor", "exact")


class CalibratedCactus(Rule):
    r"""Cactus with delta calibrated per position so that :math:`D(h_{alg}\|q) \le \epsilon`.

    .. warning::
       Not part of the paper: the paper fixes one delta. The calibration runs the exact
       float64 analysis (numpy) on each row; with torch input the rows are copied to the
       host, calibrated, and gamma is rebuilt on the input's device and dtype from the
       calibrated deltas (the only non-array-API step of any rule's ``plan``).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """

    def __init__(self, eps: float, base: str, divergence: str):
        self.eps = eps
        self.base = base
        self.divergence = divergence

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``SpikePlan`` whose per-row delta meets the emitted budget eps."""
        from ..analysis.calibration import DELTA_CAP, calibrate_delta, spike_for

        xp = array_namespace(target_probs, draft_probs)
        to_np = lambda x: np.asarray(x.detach().cpu().double() if hasattr(x, "detach") else x,  # noqa: E731
                                     dtype=np.float64)
        qn, pn = to_np(target_probs), to_np(draft_probs)
        qn = qn / qn.sum(-1, keepdims=True)
        pn = pn / pn.sum(-1, keepdims=True)
        delta = calibrate_delta(qn, pn, self.eps, base=self.base, divergence=self.divergence).delta
        delta = np.where(np.isfinite(delta), delta, DELTA_CAP)
        dt = xp.asarray(delta[..., None], dtype=target_probs.dtype,
                        device=getattr(target_probs, "device", None))
        return SpikePlan(target_probs, draft_probs,
                         spike_for(target_probs, dt, self.base, self.divergence))


register(RuleSpec(
    name="cactus-calibrated",
    factory=CalibratedCactus,
    knobs=(
        Knob("eps", 0.1, 0.0, math.inf, doc="budget on D(h_alg || q) of the emitted distribution"),
        Knob("base", "taylor", choices=BASES, doc="gamma from delta: Corollary 5 or Theorem 2"),
        Knob("divergence", "kl", choices=tuple(DIVERGENCES),
             doc="divergence of the budget (and of the exact base's two-point form)"),
    ),
    sps_knobs={"eps": 0.0}, deterministic=False, reads_draft=True, needs_raw=False,
    family="spike",
    summary="Cactus with a per-position delta meeting D(h_alg||q) <= eps (first crossing)",
    reference="this toolkit (issue 3); Cactus Theorem 3 for h_alg",
))

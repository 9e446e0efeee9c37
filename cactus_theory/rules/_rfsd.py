r"""Reducible fuzzy speculative decoding (rFSD): SpS against the drafter where it is close enough.

The deferral target of one position is the drafter's whole row when its divergence from the
verifier is at most T, the verifier's otherwise,

.. math:: \pi = \begin{cases} p & D(q, p) \le T \\ q & \text{otherwise,} \end{cases}

and the drafted token is verified by SpS against :math:`\pi`: :math:`a_n = \min(1, \pi_n/p_n)`
(1 for every draft where :math:`\pi = p`), recovery :math:`\mathrm{normalize}(\max(0, \pi - p))`
(the SpS residual where :math:`\pi = q`). One step emits :math:`\pi` exactly (Theorem 1 with
target :math:`\pi`), so it is a speculative cascade whose deferral test is a divergence.

It differs from FSD (:mod:`cactus_theory.rules._fuzzy`, Holsman et al.) in the rejection
branch only: FSD resamples from plain q when D > T (no SpS test, so it accepts nothing there),
rFSD runs SpS against q there (it accepts :math:`\sum_x \min(p_x, q_x)` and still emits q).
The decision is per row: every candidate draft sees the same :math:`\pi`.

Divergences (``fuzzy_divergence``), as the source computes them on the **processed**
(temperature/top-k/top-p) rows: ``"kl"`` is :math:`KL(q\|p) = \sum_x q_x \log(q_x/p_x)`, the
verifier first (the source writes it KL(p || q) with p the verifier), infinite where p = 0 < q;
``"js"`` is the Jensen-Shannon divergence in nats, in [0, log 2]. The gate is non-strict
(D <= T), as the source's ``rfsd_use_draft_mask``.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
T = ``fuzzy_threshold``.

References
----------
The vLLM 0.20 overlay of arXiv 2607.08690, ``relaxed_target_method="rfsd"`` (legacy spelling
``"fuzzy"``), ``vllm/v1/sample/rejection_sampler.py``: ``apply_rfsd_constraint``,
``fsd_divergence_scores``; knobs ``fuzzy_divergence`` ("kl", "js") and ``fuzzy_threshold``
(its grid 0.05, 0.20, 0.30). FSD: Holsman, Huang, Dhingra, Findings of ACL 2025
(arXiv 2502.20704).
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from ..divergences import get_divergence
from .plans import TargetPlan
from .registry import Knob, Rule, RuleSpec, register


def rfsd_divergence(fuzzy_divergence: str, target_probs, draft_probs):
    r"""rFSD's :math:`D(q, p)` per row (array-agnostic), shape ``q.shape[:-1]``.

    ``"kl"``: :math:`KL(q\|p)` (verifier first; infinite where p = 0 < q); ``"js"``:
    Jensen-Shannon in nats. Clipped at 0 (rounding of equal rows), never NaN.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``).
    Source: arXiv 2607.08690's vLLM overlay, ``fsd_divergence_scores``.
    """
    if fuzzy_divergence == "kl":
        return get_divergence("kl").unchecked(target_probs, draft_probs)  # KL(q || p)
    return get_divergence("js").unchecked(draft_probs, target_probs)


def rfsd_target(fuzzy_divergence: str, fuzzy_threshold: float, target_probs, draft_probs):
    r""":math:`\pi = p` where :math:`D(q, p) \le T`, else q (array-agnostic, rows [..., V]).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), T threshold.
    Source: arXiv 2607.08690's vLLM overlay, ``apply_rfsd_constraint``.
    """
    xp = array_namespace(target_probs, draft_probs)
    near = rfsd_divergence(fuzzy_divergence, target_probs, draft_probs) <= fuzzy_threshold
    return xp.where(near[..., None], draft_probs, target_probs)


class ReducibleFuzzy(Rule):
    r"""rFSD: SpS against :math:`\pi = p` if :math:`D(q, p) \le T`, else against q.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: arXiv 2607.08690's vLLM overlay (``relaxed_target_method="rfsd"``).
    """

    def __init__(self, fuzzy_threshold: float, fuzzy_divergence: str):
        self.fuzzy_threshold = fuzzy_threshold
        self.fuzzy_divergence = fuzzy_divergence

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        r"""``TargetPlan(pi)``: the row's deferral target (processed rows)."""
        pi = rfsd_target(self.fuzzy_divergence, self.fuzzy_threshold, target_probs, draft_probs)
        return TargetPlan(target_probs, draft_probs, pi)


register(
    RuleSpec(
        name="rfsd",
        factory=ReducibleFuzzy,
        knobs=(
            Knob(
                "fuzzy_threshold",
                0.2,
                0.0,
                math.inf,
                doc="T: pi = p where D(q, p) <= T (the overlay's grid 0.05, 0.20, 0.30)",
            ),
            Knob(
                "fuzzy_divergence",
                "kl",
                choices=("kl", "js"),
                doc="D: KL(q || p) (verifier first) or Jensen-Shannon, on the processed rows",
            ),
        ),
        sps_knobs={"fuzzy_threshold": 0.0},
        family="target",
        summary="reducible fuzzy SD: SpS against pi = p if D(q, p) <= T, else q; emits pi",
        reference="arXiv 2607.08690 vLLM overlay (relaxed_target_method='rfsd'); "
        "after FSD, Holsman et al. 2025 (arXiv 2502.20704)",
    )
)

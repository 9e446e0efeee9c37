r"""Fuzzy speculative decoding (FSD): accept when the drafter is close to the verifier.

At each drafted position FSD computes one divergence between the drafter's and the
verifier's **whole** distributions and accepts the drafted token **deterministically** iff

.. math:: \mathrm{Div}(p, q) \le T,

whatever token was drafted; otherwise it samples from the verifier q (plain q, no SpS
residual), as the official code does. One step emits p if Div <= T, else q.

Divergences (``fsd_div_type``, the code's names): ``js_div`` (Jensen-Shannon, natural log;
default), ``kl_div`` = KL(p || q) (the code's ``torch.kl_div(log q, p)``), ``kl_div_reversed``
= KL(q || p), ``tv_div`` = TV(p, q). By default the divergence reads the **unprocessed**
distributions (before temperature/top-p warping), passed as ``raw_target_probs`` /
``raw_draft_probs``; the ``*_processed`` choices read the processed ones.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
T = ``fsd_div_threshold``.

References
----------
Holsman, Huang, Dhingra, "Fuzzy Speculative Decoding for a Tunable Accuracy-Runtime Tradeoff",
Findings of ACL 2025, arXiv 2502.20704; official code ``fsd_utils.py``
(``_speculative_backoff_sampling``), README example ``fsd_div_threshold=0.4,
fsd_div_type='js_div'``.
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from ..divergences import get_divergence
from .registry import DecisionRule, Knob, RuleSpec, register

#: fsd_div_type -> (our divergence name, whether D(p || q) is evaluated as D(first=p, second=q))
FSD_DIVERGENCES = {
    "js_div": "js",
    "kl_div": "kl",  # KL(p || q)
    "kl_div_reversed": "reverse_kl",  # KL(q || p)
    "tv_div": "tv",
}
_CHOICES = tuple(FSD_DIVERGENCES) + tuple(f"{k}_processed" for k in FSD_DIVERGENCES)


def _divergence_name(fsd_div_type: str) -> str:
    """Our divergence's name for an ``fsd_div_type`` (``*_processed`` included)."""
    return FSD_DIVERGENCES[fsd_div_type.removesuffix("_processed")]


def fsd_divergence(fsd_div_type: str, target_probs, draft_probs):
    r"""FSD's :math:`\mathrm{Div}(p, q)` per position (array-agnostic), shape (...).

    ``kl_div`` is :math:`KL(p\|q) = \sum p \log(p/q)`, ``kl_div_reversed`` is
    :math:`KL(q\|p)`, ``js_div`` and ``tv_div`` are symmetric. Infinite where the KL
    is (different supports); never NaN.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Holsman et al., Findings of ACL 2025 (arXiv 2502.20704), fsd_utils.py.
    """
    name = _divergence_name(fsd_div_type)
    # our divergences are D(h || q) with h first: D(p || q) for kl_div, KL(q||p) = reverse_kl(p, q)
    return get_divergence(name).unchecked(draft_probs, target_probs)


class FuzzySpeculative(DecisionRule):
    r"""FSD: accept every draft iff :math:`\mathrm{Div}(p, q) \le T`; else sample from q.

    .. warning::
       Only the per-position rule is modelled; the code's top-k(=50)/top-p variants of the
       divergence are not. Which JS normalisation (natural log) the code uses was not re-read;
       we use nats, in [0, log 2].

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    """

    def __init__(self, fsd_div_threshold: float, fsd_div_type: str):
        self.fsd_div_threshold = fsd_div_threshold
        self.fsd_div_type = fsd_div_type

    def decision_rows(self, target_probs, draft_probs, raw_target_probs, raw_draft_probs):
        """The raw rows (the drafter's processed row where its raw one is not given), or the
        processed ones for a ``*_processed`` divergence or without raw rows."""
        if self.fsd_div_type.endswith("_processed") or raw_target_probs is None:
            return target_probs, draft_probs
        return raw_target_probs, draft_probs if raw_draft_probs is None else raw_draft_probs

    def row_statistic(self, q, p):
        r""":math:`1[\mathrm{Div}(p, q) \le T]` of each row, shape (..., 1)."""
        xp = array_namespace(q, p)
        return xp.astype(fsd_divergence(self.fsd_div_type, q, p) <= self.fsd_div_threshold, q.dtype)[
            ..., None
        ]

    def accept_at(self, q_n, p_n, statistic):
        """The row's decision, whatever the drafted token."""
        xp = array_namespace(q_n)
        return statistic * xp.ones_like(q_n)

    def recovery_distribution(self, target_probs, draft_probs, statistic):
        """q itself (no divergence needed)."""
        return target_probs


register(
    RuleSpec(
        name="fuzzy",
        factory=FuzzySpeculative,
        knobs=(
            Knob(
                "fsd_div_threshold",
                0.4,
                0.0,
                math.inf,
                doc="T: accept the draft iff Div(p, q) <= T (README example 0.4 with js_div)",
            ),
            Knob(
                "fsd_div_type",
                "js_div",
                choices=_CHOICES,
                doc="divergence between drafter and verifier (raw distributions unless *_processed)",
            ),
        ),
        sps_note="no threshold gives SpS: a rejection "
        "resamples from q, not from the SpS residual; T = 0 accepts only where Div = 0 (p = q)",
        deterministic=True,
        needs_raw=True,
        family="decision",
        summary="fuzzy SD: accept iff Div(p, q) <= T (JS on raw distributions); else sample q",
        reference="Holsman et al., Findings of ACL 2025 (arXiv 2502.20704), fsd_utils.py",
    )
)

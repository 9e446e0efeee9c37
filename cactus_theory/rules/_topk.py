r"""Top-k acceptance, as the official Cactus repository runs it.

The "relaxed target" is the **un-normalized** indicator of the verifier's top-k set

.. math:: h_x = 1[q_x \ge q_{(k)}], \qquad q_{(k)} = \text{k-th largest entry of } q,

run through the SpS skeleton: :math:`a_n = \min(1, h_n/p_n)` (1 inside the set, 0 outside:
acceptance is deterministic) and recovery :math:`\mathrm{normalize}(\max(0, h - p)) =
\mathrm{normalize}((1 - p_x)\, 1[x \in T_k])`. Ties at the threshold are accepted, so the set
can hold more than k tokens. q's values inside the set are ignored, so the emitted
distribution is not controlled: KL(q || h_alg) is infinite whenever q has mass outside the set.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
k = ``topk``.

References
----------
Hao & Mou, Cactus official code github.com/MANGA-UOFA/Cactus ``cactus/topk.py``
(``TopKRejectionSampler``, ``spec.py --topk``, default 5).
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from .registry import ElementwiseTargetRule, Knob, RuleSpec, register


def topk_indicator(target_probs, topk: int):
    r"""The indicator :math:`1[q_x \ge q_{(k)}]` (float, same dtype as q; array-agnostic).

    Parameters
    ----------
    target_probs : array, shape (..., V)
        Verifier q.
    topk : int
        k >= 1; values above V use k = V.

    .. warning::
       When k exceeds the number of tokens with q > 0 (truncated q), :math:`q_{(k)} = 0` and
       the set includes every token, zeros of q too; this is what the official code's
       ``q >= kth value`` test does. ``torch.topk`` in the official code fails for k > V; we
       use k = V.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    """
    xp = array_namespace(target_probs)
    return xp.astype(target_probs >= kth_largest(target_probs, topk), target_probs.dtype)


def kth_largest(target_probs, topk: int):
    r""":math:`q_{(k)}`, the k-th largest entry of each row (k above V: the smallest), shape
    (..., 1) (array-agnostic). :math:`q_n \ge q_{(k)} \iff \#\{j : q_j > q_n\} < k`."""
    xp = array_namespace(target_probs)
    V = target_probs.shape[-1]
    k = min(int(topk), V)
    return xp.sort(target_probs, axis=-1)[..., V - k : V - k + 1]


class TopKAcceptance(ElementwiseTargetRule):
    """Top-k acceptance: accept n iff n is in the verifier's top-k (ties included).

    Source: Cactus official code (github.com/MANGA-UOFA/Cactus) cactus/topk.py.
    """

    def __init__(self, topk: int):
        self.topk = int(topk)

    def row_statistic(self, target_probs, draft_probs):
        r""":math:`q_{(k)}` of each row (:func:`kth_largest`), shape (..., 1)."""
        return kth_largest(target_probs, self.topk)

    def elementwise_target(self, q, p, *statistic):
        r"""The un-normalized indicator :math:`h = 1[q \ge q_{(k)}]` (``statistic[0]`` =
        :math:`q_{(k)}`; ties at the threshold are in)."""
        xp = array_namespace(q)
        return xp.astype(q >= statistic[0], q.dtype)


register(
    RuleSpec(
        name="topk",
        factory=TopKAcceptance,
        knobs=(
            Knob(
                "topk",
                5,
                1,
                math.inf,
                integer=True,
                doc="k: accept drafted tokens in the verifier's top-k (Cactus spec.py default 5)",
            ),
        ),
        sps_note="no k gives SpS: acceptance is 0/1 and the recovery ignores q's values",
        deterministic=True,
        family="target",
        summary="top-k acceptance: accept iff q_n >= k-th largest q; recover normalize(1[top-k] - p)",
        reference="Cactus official code (github.com/MANGA-UOFA/Cactus) cactus/topk.py",
    )
)

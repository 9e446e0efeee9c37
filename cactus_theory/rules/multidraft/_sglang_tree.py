r"""SGLang's target-only tree verification: one coin per node, acceptance accumulated over siblings.

SGLang verifies a token tree with sgl-kernel's ``TreeSpeculativeSamplingTargetOnly``. At the
last accepted node it draws **one** coin :math:`u \sim U[0, 1)` and tries the node's drafted
children :math:`c_1, \dots, c_k` in order (``retrive_next_sibling``), accumulating the
verifier's probabilities of the children tried so far, :math:`S_j = q(c_1) + \dots + q(c_j)`;
child :math:`c_j` is accepted, and the walk moves into it with a fresh coin, at the first j
with

.. math:: u \le S_j / t_{acc} \quad\text{or}\quad q(c_j) \ge t_{single}.

The drafter's probabilities are never read. When every child is rejected, each rejected
child's draft slot has been set to its verifier probability, so the token is sampled from
:math:`\max(0, q - p')`: q without the tried children, renormalized. At a leaf (all drafts
of its path accepted) the bonus token is sampled from q. As a node law, with
:math:`F(x) = \min(1, x/t_{acc})` and :math:`J` the first slot with :math:`q(c_J) \ge t_{single}`
(:math:`J = k + 1` if none):

.. math::
    P(\text{slot } j) = F(S_j) - F(S_{j-1}) \;(j < J), \qquad
    P(\text{slot } J) = 1 - F(S_{J-1}), \qquad
    P(\text{none}) = 1 - F(S_k) \;(J = k + 1),

since the events :math:`u \le S_j / t_{acc}` are nested. At the defaults
(:math:`t_{single} = t_{acc} = 1`) the walk is an inverse-CDF draw :math:`y \sim q` over the
children in order: the child equal to y is accepted, else y is emitted (q without the
children), so the rule is lossless for distinct children (top-k or without-replacement
drafts). With repeated children (i.i.d. drafts) the sum counts a repeated token twice and the
rule is lossy even at the defaults, so only the distinct-children schemes are declared.
SGLang's EAGLE trees draft the drafter's top-k tokens at each node.

At one child the node law is the chain rule ``sglang-threshold`` with the same knobs, per
drafted token: acceptance :math:`a_n`, recovery q without n.

Limits of the float32 kernel that the exact law does not have: the coin is ``torch.rand`` in
[0, 1), so :math:`u = 0` (probability :math:`2^{-24}`) accepts a child with :math:`S_j = 0`;
a recovery row whose mass rounds to 0 returns the last valid index.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``, unread),
:math:`t_{single}` = ``threshold_single``, :math:`t_{acc}` = ``threshold_acc`` (floored at
``1e-9`` as the launcher does).

References
----------
sgl-project/sglang, ``sgl-kernel/csrc/speculative/speculative_sampling.cuh``
(``TreeSpeculativeSamplingTargetOnly``: ``prob_acc += target_prob_single``; ``coin <= prob_acc
/ threshold_acc || target_prob_single >= threshold_single``; on rejection
``draft_probs[...] = target_probs[...]``; the final token from ``relu(target_probs -
draft_probs)`` with its own coin), ``python/sglang/srt/speculative/eagle_info.py``.
"""

from __future__ import annotations

import numpy as np

from .._sglang_threshold import SGLANG_MIN_THRESHOLD_ACC
from ..registry import Knob
from .base import NodeLaw, NodeVerifier, VerifierSpec, _normalize_residual, register_verifier


class SGLangTree(NodeVerifier):
    r"""SGLang's target-only tree verification (node-wise; module docstring for the law)."""

    def __init__(self, threshold_single: float, threshold_acc: float):
        self.threshold_single = float(threshold_single)
        self.threshold_acc = max(float(threshold_acc), SGLANG_MIN_THRESHOLD_ACC)

    def node_law(self, target_probs, draft_probs, child_tokens, drafting: str) -> NodeLaw:
        r"""Slot j accepted w.p. :math:`F(S_j) - F(S_{j-1})` before the first slot J with
        :math:`q(c_J) \ge t_{single}`, which takes :math:`1 - F(S_{J-1})`; residual q without
        the children."""
        q = np.asarray(target_probs, dtype=np.float64)
        accept = np.zeros(len(child_tokens))
        total, before = 0.0, 0.0  # S_j and F(S_{j-1})
        for j, tok in enumerate(child_tokens):
            total += q[tok]
            if q[tok] >= self.threshold_single:
                accept[j] = 1.0 - before
                break
            reached = min(1.0, total / self.threshold_acc)
            accept[j] = reached - before
            before = reached
        rest = q.copy()
        rest[list(child_tokens)] = 0.0
        return NodeLaw(accept, _normalize_residual(rest, q))


_T_ACC = Knob(
    "threshold_acc",
    1.0,
    0.0,
    1.0,
    doc="t_acc: accept the j-th tried sibling when u <= (q(c_1) + ... + q(c_j)) / t, t floored at 1e-9 "
    "(SGLang --speculative-accept-threshold-acc)",
)
_T_SINGLE = Knob(
    "threshold_single",
    1.0,
    0.0,
    1.0,
    doc="t_single: accept any tried child with q >= t (SGLang --speculative-accept-threshold-single)",
)

register_verifier(
    VerifierSpec(
        name="sglang-tree",
        factory=SGLangTree,
        knobs=(_T_ACC, _T_SINGLE),
        drafting=("top_k", "without_replacement"),
        structures=("multi", "tree", "chain"),
        nodewise=True,
        lossless=False,
        summary="SGLang target-only: one coin per node, accept the j-th sibling when u <= (q(c_1) + ... + "
        "q(c_j)) / t_acc or q(c_j) >= t_single; else q without the children (lossless at t = 1)",
        reference="sgl-project/sglang sgl-kernel speculative_sampling.cuh (TreeSpeculativeSamplingTargetOnly)",
        single_draft="sglang-threshold",
    )
)

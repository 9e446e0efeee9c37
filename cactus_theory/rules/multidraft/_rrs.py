r"""Recursive rejection sampling (SpecInfer), with and without replacement.

At a node with verifier row q and drafted children :math:`x_1, \dots, x_k` (in drafted
order), with :math:`p_j` the law child j was drafted from given the children before it
(:func:`~cactus_theory.drafts.drafting_law`: p for i.i.d. drafts, p without the earlier
children renormalized without replacement, a point mass for top-k children):

.. math::
    r_1 = q, \qquad \text{accept } x_j \text{ w.p. } \min\Bigl(1, \frac{r_j(x_j)}{p_j(x_j)}\Bigr),
    \qquad r_{j+1} = \mathrm{normalize}\bigl(\max(0, r_j - p_j)\bigr),

and if no child is accepted the token is drawn from :math:`r_{k+1}`. By the single-draft
lemma (the output of step j is :math:`r_j` whatever law the later drafts come from) the
emitted token has law q exactly; the accepted child continues at its own node. At k = 1 it
is standard speculative sampling.

References: Miao et al., SpecInfer (arXiv 2305.09781), Algorithm 2 (multi-step speculative
sampling); without replacement: Jeon et al. (arXiv 2402.14160, recursive speculative
decoding) and Hu et al. (arXiv 2502.18779), who call it RRSw.
"""

from __future__ import annotations

import numpy as np

from ...drafts import drafting_law
from .base import NodeLaw, NodeVerifier, VerifierSpec, _normalize_residual, register_verifier


class RecursiveRejection(NodeVerifier):
    """SpecInfer's recursive rejection sampling (node-wise; the drafting law from the tree)."""

    def node_law(self, target_probs, draft_probs, child_tokens, drafting: str) -> NodeLaw:
        r"""Slot j accepted w.p. :math:`\prod_{i<j}(1 - a_i)\, a_j`,
        :math:`a_j = \min(1, r_j(x_j)/p_j(x_j))`; residual :math:`r_{k+1}`."""
        q = np.asarray(target_probs, dtype=np.float64)
        p = np.asarray(draft_probs, dtype=np.float64)
        r = q.copy()
        reach = 1.0
        accept = np.zeros(len(child_tokens))
        for j, tok in enumerate(child_tokens):
            law = drafting_law(p, list(child_tokens[:j]), drafting)
            a = min(1.0, r[tok] / law[tok]) if law[tok] > 0 else float(r[tok] > 0)
            accept[j] = reach * a
            reach *= 1.0 - a
            r = _normalize_residual(r - law, r)
        return NodeLaw(accept, r)

    def accepted_token_law(self, target_probs, draft_probs, k: int, drafting: str) -> np.ndarray:
        r"""i.i.d. drafts: the residuals do not depend on the rejected tokens, so

        .. math:: A(x) = \sum_{j=1}^{k} \prod_{i<j} (1 - \beta_i)\, \min(r_j(x), p(x)),
                  \qquad \beta_j = \sum_x \min(r_j(x), p(x));

        the other schemes enumerate the draft tuples (the base class)."""
        if drafting != "iid":
            return super().accepted_token_law(target_probs, draft_probs, k, drafting)
        q = np.asarray(target_probs, dtype=np.float64)
        p = np.asarray(draft_probs, dtype=np.float64)
        r, reach, out = q.copy(), 1.0, np.zeros_like(q)
        for _ in range(int(k)):
            m = np.minimum(r, p)
            out += reach * m
            reach *= max(0.0, 1.0 - m.sum())
            r = _normalize_residual(r - p, r)
        return out


register_verifier(
    VerifierSpec(
        name="rrs",
        factory=RecursiveRejection,
        knobs=(),
        drafting=("iid",),
        structures=("multi", "tree", "chain"),
        nodewise=True,
        lossless=True,
        summary="recursive rejection sampling over k i.i.d. drafts (SpecInfer); emits q",
        reference="Miao et al. 2024, SpecInfer (arXiv 2305.09781), Algorithm 2",
    )
)

register_verifier(
    VerifierSpec(
        name="rrs-without-replacement",
        factory=RecursiveRejection,
        knobs=(),
        drafting=("without_replacement", "top_k"),
        structures=("multi", "tree", "chain"),
        nodewise=True,
        lossless=True,
        summary="recursive rejection sampling over distinct drafts (the drafting law updated per draft); emits q",
        reference="Hu et al. 2025 (arXiv 2502.18779), RRS without replacement; Jeon et al. 2024 (arXiv 2402.14160)",
    )
)

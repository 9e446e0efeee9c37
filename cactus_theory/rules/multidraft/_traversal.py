r"""Traversal verification of a draft tree (Weng et al. 2025, arXiv 2505.12398).

The tree is traversed leaf to root in depth-first post-order, judging at each step the whole
path from the root to the current first leaf. Every node y keeps a sequence weight
:math:`w_y`, a current verifier row :math:`Q_y` and the drafting law :math:`P_y` of its next
child (:func:`~cactus_theory.drafts.drafting_law` of the children not yet removed): at first
:math:`w_{root} = 1`, :math:`Q_y = q_y`, and for a child c of y with token x

.. math:: w_c = \min\Bigl(1, w_y \frac{Q_y(x)}{P_y(x)}\Bigr).

Step: take the first leaf u of the remaining tree (follow first children from the root) and
accept the path to u with probability :math:`w_u`; then emit the path's tokens and one token
from :math:`Q_u` (the bonus :math:`q_u` at an original leaf, the residual otherwise). If
rejected, remove u and update its parent y:

.. math::
    Z = \sum_x \max(0, w_y Q_y(x) - P_y(x)), \quad
    Q_y \leftarrow \mathrm{normalize}\bigl(\max(0, w_y Q_y - P_y)\bigr), \quad
    w_y \leftarrow \frac{Z}{Z + 1 - w_y},

and :math:`P_y` becomes the law of y's next child (the removed token excluded without
replacement); the remaining children's weights follow from the formula above. The root,
once a leaf, ends the traversal (no draft accepted; the token from :math:`Q_{root}`).

On a chain this is block verification (:mod:`.block`; the update is its
:math:`h_i = Z_i/(Z_i + 1 - w_i)`); on k drafts at one position (the root's
:math:`w = 1` throughout) it is recursive rejection sampling with the same drafting law. The
emitted law is the verifier's (the battery checks it by enumeration over every drawn tree).
"""

from __future__ import annotations

import numpy as np

from ...drafts import DrawnTree, drafting_law
from .base import MultiDraftVerifier, PathLaw, VerifierSpec, _normalize_residual, register_verifier


def _ratio_weight(w_parent: float, big_q: np.ndarray, law: np.ndarray, tok: int) -> float:
    if law[tok] > 0:
        return min(1.0, w_parent * big_q[tok] / law[tok])
    return float(w_parent * big_q[tok] > 0)


class TraversalVerification(MultiDraftVerifier):
    """Traversal verification (sequence-level; module docstring)."""

    def tree_law(self, tree: DrawnTree) -> PathLaw:
        r"""The traversal's steps are deterministic given the rejections: step s accepts its
        leaf :math:`u_s` with :math:`w_{u_s}`, so :math:`P(\text{end at } u_s) =
        w_{u_s} \prod_{s' < s} (1 - w_{u_{s'}})`."""
        self.check_tree(tree)
        m = tree.num_nodes
        q, p, tok = tree.target_probs, tree.draft_probs, tree.token_ids
        big_q = np.array(q, dtype=np.float64)
        removed_kids = [[] for _ in range(m)]  # tokens of the removed children, in order
        active = np.ones(m, dtype=bool)
        w = np.zeros(m)
        w[0] = 1.0
        end = np.zeros(m)
        residuals = np.array(q, dtype=np.float64)
        reach = 1.0
        for _ in range(m):
            # descend to the first leaf, refreshing the weights along the way
            u = 0
            while True:
                kids = [c for c in tree.children(u) if active[c]]
                if not kids:
                    break
                c = kids[0]
                if not removed_kids[c]:  # an updated node keeps its updated weight
                    law = drafting_law(p[u], removed_kids[u], tree.drafting)
                    w[c] = _ratio_weight(w[u], big_q[u], law, int(tok[c]))
                u = c
            a = 1.0 if u == 0 else w[u]
            end[u] += reach * a
            residuals[u] = big_q[u]
            reach *= 1.0 - a
            if u == 0 or reach <= 0.0:
                break
            y = int(tree.parents[u])
            law = drafting_law(p[y], removed_kids[y], tree.drafting)
            weights = np.maximum(0.0, w[y] * big_q[y] - law)
            z = float(weights.sum())
            big_q[y] = _normalize_residual(weights, big_q[y])
            denom = z + 1.0 - w[y]
            w[y] = 1.0 if y == 0 else (z / denom if denom > 0 else 0.0)
            removed_kids[y].append(int(tok[u]))
            active[u] = False
        return PathLaw(end, residuals)


register_verifier(
    VerifierSpec(
        name="traversal",
        factory=TraversalVerification,
        knobs=(),
        drafting=("iid", "without_replacement", "top_k"),
        structures=("multi", "tree", "chain"),
        nodewise=False,
        lossless=True,
        summary="traversal verification: leaf-to-root, sequence-level weights, residual updates; emits q",
        reference="Weng et al. 2025, Traversal Verification for Speculative Tree Decoding (arXiv 2505.12398)",
    )
)

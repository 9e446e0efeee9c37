r"""Block verification of a drafted chain (Sun et al. 2024, arXiv 2403.10444, Algorithm 2).

A chain :math:`x_1, \dots, x_\gamma` drafted from :math:`p_0, \dots, p_{\gamma-1}` is verified
jointly with the path weights and the residual masses

.. math::
    w_0 = 1, \quad w_i = \min\Bigl(1, w_{i-1} \frac{q_{i-1}(x_i)}{p_{i-1}(x_i)}\Bigr), \qquad
    Z_i = \sum_x \max\bigl(0, w_i q_i(x) - p_i(x)\bigr),

:math:`h_i = Z_i / (Z_i + 1 - w_i)` for :math:`1 \le i < \gamma` (0 when both vanish: no
residual mass), :math:`h_\gamma = w_\gamma`; with independent coins
:math:`\eta_i \sim U[0, 1)` the accepted length is :math:`\tau = \max\{i \ge 1 : \eta_i \le
h_i\}` (0 if none), and the token after it is drawn from
:math:`\mathrm{normalize}(\max(0, w_\tau q_\tau - p_\tau))` if :math:`\tau < \gamma`, from
:math:`q_\gamma` (the bonus) otherwise. It emits exactly the verifier's law, its expected
accepted length is the largest among verifiers that read the drafted path's conditionals,
and never below token-wise SpS; at :math:`\gamma = 1` it is SpS. So

.. math:: P(\tau = i \mid x) = h_i \prod_{j > i} (1 - h_j) \quad (h_0 = 1).

Here :math:`p_i` is the law child :math:`x_{i+1}` was drafted from (i.i.d.: the drafter row;
top-k: the point mass at the drafted token).
"""

from __future__ import annotations

import numpy as np

from ...drafts import DrawnTree, drafting_law
from .base import MultiDraftVerifier, PathLaw, VerifierSpec, _normalize_residual, register_verifier


def block_weights(tree: DrawnTree):
    r"""Path weights :math:`w_i`, stop probabilities :math:`h_i` and residuals along a chain.

    Returns
    -------
    w, h : ndarray, shape (gamma + 1,)
    residuals : ndarray, shape (gamma + 1, V)
    """
    m = tree.num_nodes
    q, p, tok = tree.target_probs, tree.draft_probs, tree.token_ids
    w = np.ones(m)
    for i in range(1, m):
        law = drafting_law(p[i - 1], [], tree.drafting)
        x = int(tok[i])
        w[i] = min(1.0, w[i - 1] * q[i - 1][x] / law[x])
    h = np.zeros(m)
    residuals = np.array(q, dtype=np.float64)
    for i in range(m - 1):
        law = drafting_law(p[i], [], tree.drafting)
        weights = np.maximum(0.0, w[i] * q[i] - law)
        z = float(weights.sum())
        residuals[i] = _normalize_residual(weights, q[i])
        denom = z + 1.0 - w[i]
        h[i] = z / denom if denom > 0 else 0.0
    h[0] = 1.0
    h[m - 1] = w[m - 1] if m > 1 else 1.0
    return w, h, residuals


class BlockVerification(MultiDraftVerifier):
    """Block verification of a chain (sequence-level; module docstring)."""

    def tree_law(self, tree: DrawnTree) -> PathLaw:
        r""":math:`P(\tau = i) = h_i \prod_{j>i}(1-h_j)`; residuals as in :func:`block_weights`."""
        self.check_tree(tree)
        _, h, residuals = block_weights(tree)
        end = np.zeros(tree.num_nodes)
        survive = 1.0
        for i in range(tree.num_nodes - 1, -1, -1):
            end[i] = survive * h[i]
            survive *= 1.0 - h[i]
        return PathLaw(end, residuals)


register_verifier(
    VerifierSpec(
        name="block",
        factory=BlockVerification,
        knobs=(),
        drafting=("iid", "without_replacement", "top_k"),
        structures=("chain",),
        nodewise=False,
        lossless=True,
        summary="block verification of a chain (joint, scanned from the end); emits q",
        reference="Sun et al. 2025, Block Verification Accelerates Speculative Decoding (arXiv 2403.10444), Algorithm 2",
    )
)

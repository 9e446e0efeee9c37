r"""Typical acceptance sampling (TAS): Medusa's rule, with vLLM's semantics by default.

A drafted token n is accepted **deterministically** iff

.. math:: q_n > \tau(q) = \min\big(\epsilon,\ \alpha\, e^{-H(q)}\big),

with :math:`\epsilon` = ``posterior_threshold`` (default 0.09) and :math:`\alpha` =
``posterior_alpha`` (default 0.3 = sqrt(0.09), the Medusa convention). The drafter
distribution p is never read. The entropy is vLLM's and Medusa's
:math:`H(q) = -\sum_x q_x \log(q_x + 10^{-5})` by default (``entropy="vllm"``), or the exact
:math:`-\sum_x q_x \log q_x` (``entropy="exact"``). On rejection the emitted token is

- ``recovery="argmax"`` (vLLM V0 ``TypicalAcceptanceSampler._get_recovered_token_ids``):
  the verifier's argmax (a point mass; ties go to the lowest index, as ``torch.argmax``);
- ``recovery="truncated"`` (Medusa ``get_typical_one_token``): q truncated to
  :math:`\{x : q_x \ge \tau(q)\}` and renormalized.

One step therefore emits :math:`h_{alg}(x) = p_x 1[q_x > \tau] + (1 - p(\{q > \tau\}))\, r_x`.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``, unused by the acceptance
test), n drafted token.

References
----------
Cai et al., "MEDUSA", ICML 2024, arXiv 2401.10774, Sec. 3.3 (typical acceptance); code
github.com/FasterDecoding/Medusa ``medusa/model/utils.py``; vLLM V0
``vllm/model_executor/layers/typical_acceptance_sampler.py`` (defaults 0.09 / 0.3 in
``vllm/config.py``).
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from .plans import _one_hot
from .registry import DecisionRule, Knob, RuleSpec, register

#: The constant inside vLLM's and Medusa's entropy, ``log(q + 1e-5)``.
VLLM_ENTROPY_EPS = 1e-5


def tas_threshold(target_probs, posterior_threshold: float, posterior_alpha: float, entropy: str = "vllm"):
    r"""TAS's per-position threshold :math:`\tau(q) = \min(\epsilon, \alpha e^{-H(q)})`.

    Parameters
    ----------
    target_probs : array, shape (..., V)
        Verifier q (numpy or torch).
    posterior_threshold : float
        :math:`\epsilon` (vLLM ``typical_acceptance_sampler_posterior_threshold``).
    posterior_alpha : float
        :math:`\alpha` (vLLM ``typical_acceptance_sampler_posterior_alpha``).
    entropy : {"vllm", "exact"}
        ``"vllm"``: :math:`H = -\sum q \log(q + 10^{-5})` as both codes compute it (biased
        slightly low); ``"exact"``: :math:`-\sum q \log q` with :math:`0 \log 0 = 0`.

    Returns
    -------
    array, shape (..., 1)
        The threshold, kept as a trailing axis for broadcasting against q.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    """
    xp = array_namespace(target_probs)
    q = target_probs
    if entropy == "vllm":
        logq = xp.log(q + VLLM_ENTROPY_EPS)
    else:
        pos = q > 0
        logq = xp.where(pos, xp.log(xp.where(pos, q, xp.ones_like(q))), xp.zeros_like(q))
    H = -xp.sum(q * logq, axis=-1, keepdims=True)
    return xp.minimum(xp.full_like(H, posterior_threshold), posterior_alpha * xp.exp(-H))


class TypicalAcceptance(DecisionRule):
    r"""TAS: accept n iff :math:`q_n > \min(\epsilon, \alpha e^{-H(q)})`; never reads p.

    .. warning::
       With ``recovery="truncated"`` the kept set is :math:`\{q_x \ge \tau\}` together with
       the argmax of q. The argmax always satisfies :math:`q_x \ge \tau` when
       :math:`\alpha \le 1` (because :math:`e^{-H} \le \max q + 10^{-5}`); for larger
       :math:`\alpha` Medusa's code can mask every token (a NaN distribution), where we keep
       the argmax instead.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    """

    def __init__(self, posterior_threshold: float, posterior_alpha: float, entropy: str, recovery: str):
        self.posterior_threshold = posterior_threshold
        self.posterior_alpha = posterior_alpha
        self.entropy = entropy
        self.recovery = recovery

    def row_statistic(self, q, p):
        r"""The threshold :math:`\tau = \min(\epsilon, \alpha e^{-H(q)})` of each row, shape (..., 1)."""
        return tas_threshold(q, self.posterior_threshold, self.posterior_alpha, self.entropy)

    def accept_at(self, q_n, p_n, statistic):
        r""":math:`1[q_n > \tau]` (0/1; p is not read)."""
        xp = array_namespace(q_n)
        return xp.astype(q_n > statistic, q_n.dtype)

    @property
    def recovery_reads_statistic(self):
        r"""The truncated recovery keeps :math:`\{q \ge \tau\}`; the argmax reads no threshold."""
        return self.recovery == "truncated"

    def recovery_distribution(self, target_probs, draft_probs, statistic):
        r"""vLLM's point mass at the argmax of q, or Medusa's q truncated to
        :math:`\{q \ge \tau\}` and the argmax."""
        xp = array_namespace(target_probs)
        q = target_probs
        top = _one_hot(xp.argmax(q, axis=-1), q.shape[-1], q)
        if self.recovery == "argmax":
            return top
        kept = xp.where((q >= statistic) | (top > 0), q, xp.zeros_like(q))
        return kept / xp.sum(kept, axis=-1, keepdims=True)


register(
    RuleSpec(
        name="tas",
        factory=TypicalAcceptance,
        knobs=(
            Knob(
                "posterior_threshold",
                0.09,
                0.0,
                1.0,
                doc="epsilon: hard threshold on q_n (vLLM/Medusa default 0.09)",
            ),
            Knob(
                "posterior_alpha",
                0.3,
                0.0,
                math.inf,
                doc="alpha: scale of the entropy-dependent threshold alpha exp(-H(q)) (default 0.3)",
            ),
            Knob(
                "entropy",
                "vllm",
                choices=("vllm", "exact"),
                doc="entropy as vLLM/Medusa compute it (log(q + 1e-5)) or exactly",
            ),
            Knob(
                "recovery",
                "argmax",
                choices=("argmax", "truncated"),
                doc="on rejection: vLLM's argmax q, or Medusa's q truncated to {q >= threshold}",
            ),
        ),
        calibrated=("posterior_threshold", "posterior_alpha"),
        sps_note="no knob value gives SpS: the 0/1 acceptance ignores p and the recovery is not "
        "the SpS residual (posterior_threshold = 0 accepts every token with q_n > 0)",
        deterministic=True,
        reads_draft=False,
        family="decision",
        summary="typical acceptance: accept iff q_n > min(eps, alpha exp(-H(q))); recover argmax q",
        reference="Cai et al., MEDUSA, ICML 2024 (arXiv 2401.10774) Sec. 3.3; vLLM V0 "
        "TypicalAcceptanceSampler",
    )
)

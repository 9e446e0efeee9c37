r"""vllm-ascend's entropy verification: the SpS coin scaled down by the verifier's entropy.

vllm-ascend's rejection sampler (``rejection_sampler_config.enable_entropy_verify``) keeps the
SpS test and its recovery but multiplies the uniform coin by an entropy-dependent factor

.. math:: c(q) = \min\bigl(e^{-\alpha H(q)},\ t\bigr), \qquad
          H(q) = -\sum_x q_x \log(q_x + 10^{-10}),

accepting the drafted token n iff :math:`q_n / p_n \ge c(q)\, u`, :math:`u \sim U[0, 1)`, so

.. math:: a_n = \min\Bigl(1, \frac{q_n}{c(q)\, p_n}\Bigr),

and on rejection it samples the usual recovery :math:`\mathrm{normalize}(\max(0, q - p))`
(its recovery kernel takes no entropy argument). A flat verifier row (large H) scales the coin
down and accepts more. Per row this is lossy speculative decoding with
:math:`1 - \alpha_{lossy} = c(q)` (``lossy-sd``), the factor read from the row. :math:`t = 1`,
:math:`\alpha = 0` gives :math:`c = 1`: SpS; at the defaults (:math:`t = 0.95`,
:math:`\alpha = 0.4`) the rule is lossy on every row (:math:`c \le 0.95`).

.. note::
   The kernel computes H from ``ori_target_probs`` where it is given (else from
   ``target_probs``); which row that buffer holds (the processed verifier row or another) was
   not traced in the source read. This rule computes H from the processed q it verifies
   against, with the kernel's :math:`10^{-10}` inside the logarithm. Where :math:`p_n = 0`
   the kernel rejects; here convention 1 applies (acceptance 1 if :math:`q_n > 0`; such a
   token is never drafted).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`t` = ``posterior_threshold``, :math:`\alpha` = ``posterior_alpha``.

References
----------
vllm-project/vllm-ascend PR #9772 ("add Entropy Verify"): ``vllm_ascend/ops/triton/reject_sample.py``
(``ENTROPY_VERIFY``: ``entropy += sum(-probs * log(probs + EPSILON))``, ``threshold =
min(exp(-entropy * POSTERIOR_ALPHA), POSTERIOR_THRESHOLD)``, ``_uniform_prob = threshold *
uniform_prob``, accept iff ``target_prob / draft_prob >= _uniform_prob``);
``vllm_ascend/ascend_config.py`` ``RejectionSamplerConfig`` (defaults ``posterior_threshold
= 0.95``, ``posterior_alpha = 0.4``).
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from ._lossy_sd import LossySpeculative
from .registry import Knob, RuleSpec, register

#: The kernel's ``EPSILON`` inside the entropy's logarithm.
ENTROPY_EPSILON = 1e-10


def entropy_factor(target_probs, posterior_threshold: float, posterior_alpha: float):
    r""":math:`c(q) = \min(e^{-\alpha H(q)}, t)`, :math:`H(q) = -\sum_x q_x \log(q_x + 10^{-10})`,
    shape (..., 1) (array-agnostic). Source: vllm-ascend ``reject_sample.py`` (``ENTROPY_VERIFY``)."""
    xp = array_namespace(target_probs)
    q = target_probs
    h = -xp.sum(q * xp.log(q + ENTROPY_EPSILON), axis=-1, keepdims=True)
    return xp.minimum(xp.exp(-posterior_alpha * h), xp.full_like(h, posterior_threshold))


class EntropyVerify(LossySpeculative):
    r"""Accept n with :math:`\min(1, q_n / (c(q) p_n))`; recover from
    :math:`\mathrm{normalize}(\max(0, q - p))` (module docstring): ``lossy-sd``'s decision
    with the factor read from the row, :math:`c(q)` (:func:`entropy_factor`).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: vllm-ascend ``reject_sample.py`` (``ENTROPY_VERIFY``).
    """

    def __init__(self, posterior_threshold: float, posterior_alpha: float):
        self.posterior_threshold = posterior_threshold
        self.posterior_alpha = posterior_alpha

    def row_statistic(self, q, p):
        """The coin's factor :math:`c(q)` of each row, shape (..., 1)."""
        return entropy_factor(q, self.posterior_threshold, self.posterior_alpha)


register(
    RuleSpec(
        name="entropy-verify",
        factory=EntropyVerify,
        knobs=(
            Knob(
                "posterior_alpha",
                0.4,
                0.0,
                math.inf,
                doc="alpha: the entropy's scale in c = min(exp(-alpha H(q)), t) (vllm-ascend default 0.4)",
            ),
            Knob(
                "posterior_threshold",
                0.95,
                0.0,
                1.0,
                low_open=True,
                doc="t: the coin factor's cap, c = min(exp(-alpha H(q)), t) (vllm-ascend default 0.95)",
            ),
        ),
        calibrated=("posterior_alpha", "posterior_threshold"),
        sps_knobs={"posterior_threshold": 1.0, "posterior_alpha": 0.0},
        family="decision",
        summary="vllm-ascend entropy verify: accept min(1, q_n / (c p_n)), c = min(exp(-alpha H(q)), t); "
        "recover from max(0, q - p)",
        reference="vllm-project/vllm-ascend PR #9772, vllm_ascend/ops/triton/reject_sample.py (ENTROPY_VERIFY)",
    )
)

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

from .plans import DecisionPlan, first_argmax, one_hot, two_level_sum
from .registry import Knob, Rule, RuleSpec, register

__all__ = ["TypicalAcceptance", "tas_threshold"]

#: The constant inside vLLM's and Medusa's entropy, ``log(q + 1e-5)``.
VLLM_ENTROPY_EPS = 1e-5

#: |s - 1| up to which the CPU samplers take vLLM's entropy of rows summing to s in the loop
#: of the row sums (expanded to first order in s - 1: the remainder shifts H by at most
#: 5e-7, within the float32 rounding of an entropy of a few nats summed over 1e4-1e5 terms,
#: measured 0.9-1.7e-6 on the benchmark's rows); beyond it, the exact second pass. A
#: softmax's float32 rows sum to 1 within 1e-5 (measured up to 6e-6 at V = 151,936).
_LINEAR_SUM_TOL = 1e-3


def tas_threshold(target_probs, posterior_threshold: float, posterior_alpha: float,
                  entropy: str = "vllm"):
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


class TypicalAcceptance(Rule):
    r"""TAS: accept n iff :math:`q_n > \min(\epsilon, \alpha e^{-H(q)})`; never reads p.

    .. warning::
       With ``recovery="truncated"`` the kept set is :math:`\{q_x \ge \tau\}` together with
       the argmax of q. The argmax always satisfies :math:`q_x \ge \tau` when
       :math:`\alpha \le 1` (because :math:`e^{-H} \le \max q + 10^{-5}`); for larger
       :math:`\alpha` Medusa's code can mask every token (a NaN distribution), where we keep
       the argmax instead.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    """

    def __init__(self, posterior_threshold: float, posterior_alpha: float, entropy: str,
                 recovery: str):
        self.posterior_threshold = posterior_threshold
        self.posterior_alpha = posterior_alpha
        self.entropy = entropy
        self.recovery = recovery

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``DecisionPlan``: 0/1 acceptance from q alone; argmax or truncated-q recovery."""
        xp = array_namespace(target_probs)
        q = target_probs
        tau = tas_threshold(q, self.posterior_threshold, self.posterior_alpha, self.entropy)
        accept = xp.astype(q > tau, q.dtype)
        top = one_hot(xp.argmax(q, axis=-1), q.shape[-1], q)
        if self.recovery == "argmax":
            recovery = top
        else:
            keep = (q >= tau) | (top > 0)
            kept = xp.where(keep, q, xp.zeros_like(q))
            recovery = kept / xp.sum(kept, axis=-1, keepdims=True)
        return DecisionPlan(target_probs, draft_probs, accept, recovery)

    def accept_probs_from_rows(self, target_rows, draft_rows, token_ids, target_sums, draft_sums):
        r"""Acceptance :math:`1[q_n > \tau(q)]` from un-normalized rows x with sums s (q = x/s).

        The entropy without a normalized copy (:math:`\sum x = s`):

        .. math:: H = \log s - \frac{1}{s}\sum_x x \log(x + \epsilon s)\ \text{("vllm")},
                  \qquad H = \log s - \frac{1}{s}\sum_x x \log x\ \text{("exact")},

        then :func:`tas_threshold`'s :math:`\tau`; equal to the plan's acceptance up to
        float32 rounding of the entropy (a draft at the threshold). "exact" needs no sum: one
        pass, its terms summed in blocks of 256 entries (:func:`~.plans.two_level_sum`, the loop
        shape of the row sums), so that the compiled samplers read it in the loop of the row
        sums. "vllm" (:math:`\epsilon = 10^{-5}`) needs s inside the log; compiled, on CPU
        tensors, it is read in that loop too, by expanding in :math:`s - 1` (with :math:`t =
        \epsilon(s-1)/(x+\epsilon)`, :math:`|t| \le |s - 1|`):

        .. math:: \sum_x x \log(x + \epsilon s) = \sum_x x\log(x+\epsilon)
                  + \epsilon(s-1)\sum_x \frac{x}{x+\epsilon} + R, \qquad
                  |R| \le \frac{(s-1)^2\, s}{2(1 - |s-1|)},

        :math:`|R|/s \le 5\cdot10^{-7}` in H for :math:`|s - 1| \le 10^{-3}`
        (:data:`_LINEAR_SUM_TOL`; a softmax's float32 rows sum to 1 within 1e-5). If any row
        is farther from 1, the batch takes the exact second pass (``torch.cond``). On CUDA
        tensors the second pass always runs (choosing would synchronize), and so it does
        eagerly (in place: fewer passes than the expansion's unfused steps).
        """
        import torch

        x = target_rows
        sums = target_sums
        if self.entropy == "vllm":
            eps = VLLM_ENTROPY_EPS

            def exact():
                return (torch.log(x + eps * sums[..., None]) * x).sum(-1)

            if x.device.type != "cpu" or not torch.compiler.is_compiling():
                dot = torch.add(x, eps * sums[..., None]).log_().mul_(x).sum(-1)
            else:
                dot = two_level_sum(x, lambda z: torch.log(z + eps) * z) + \
                    (eps * (sums - 1.0)) * two_level_sum(x, lambda z: z / (z + eps))
                far = ((sums - 1.0).abs() > _LINEAR_SUM_TOL).any()
                dot = torch.cond(far, exact, lambda: dot.clone())
        else:
            # x log x with 0 log 0 = 0: log of x clamped at the smallest normal float (a
            # subnormal x changes its term by less than 1e-36)
            tiny = torch.finfo(x.dtype).tiny
            dot = two_level_sum(x, lambda z: torch.log(z.clamp_min(tiny)) * z)
        H = torch.log(sums) - dot / sums
        tau = torch.clamp_max(self.posterior_alpha * torch.exp(-H), self.posterior_threshold)
        q_n = torch.gather(x, -1, token_ids[..., None])[..., 0] / target_sums
        return (q_n > tau).to(torch.float32)

    def recovery_token_from_rows(self, target_rows, draft_rows, token_ids, target_sums,
                                 draft_sums):
        """``recovery="argmax"``: the verifier's argmax on the un-normalized rows (dividing by
        the positive row sum keeps the order; ties go to the lowest index, as
        ``torch.argmax``; in two levels, :func:`~.plans.first_argmax`), the compiled samplers'
        recovered token; ``"truncated"``: None."""
        if self.recovery != "argmax":
            return None
        return first_argmax(target_rows)

    def recovery_weights_at(self, target_probs, draft_probs, token_ids, *, raw_target_probs=None,
                            raw_draft_probs=None):
        """The recovery without the acceptance of every candidate: ``recovery="argmax"`` is the
        point mass at the verifier's argmax (one pass); ``"truncated"`` is the plan's."""
        if self.recovery != "argmax":
            return super().recovery_weights_at(target_probs, draft_probs, token_ids)
        xp = array_namespace(target_probs)
        return one_hot(xp.argmax(target_probs, axis=-1), target_probs.shape[-1], target_probs)


register(RuleSpec(
    name="tas", factory=TypicalAcceptance,
    knobs=(
        Knob("posterior_threshold", 0.09, 0.0, 1.0,
             doc="epsilon: hard threshold on q_n (vLLM/Medusa default 0.09)"),
        Knob("posterior_alpha", 0.3, 0.0, math.inf,
             doc="alpha: scale of the entropy-dependent threshold alpha exp(-H(q)) (default 0.3)"),
        Knob("entropy", "vllm", choices=("vllm", "exact"),
             doc="entropy as vLLM/Medusa compute it (log(q + 1e-5)) or exactly"),
        Knob("recovery", "argmax", choices=("argmax", "truncated"),
             doc="on rejection: vLLM's argmax q, or Medusa's q truncated to {q >= threshold}"),
    ),
    sps_knobs=None,
    sps_note="no knob value gives SpS: the 0/1 acceptance ignores p and the recovery is not "
             "the SpS residual (posterior_threshold = 0 accepts every token with q_n > 0)",
    deterministic=True, reads_draft=False, needs_raw=False, family="decision",
    summary="typical acceptance: accept iff q_n > min(eps, alpha exp(-H(q))); recover argmax q",
    reference="Cai et al., MEDUSA, ICML 2024 (arXiv 2401.10774) Sec. 3.3; vLLM V0 "
              "TypicalAcceptanceSampler",
))

r"""SGLang's target-only verification with its two thresholds, and the sampler-match rule.

SGLang verifies drafts with its own kernel, ``tree_speculative_sampling_target_only``
(sgl-kernel ``csrc/speculative/speculative_sampling.cuh``, derived from FlashInfer). The
kernel never reads the drafter's probabilities ("target-only": the caller passes a
``draft_probs`` buffer of zeros, and the kernel writes into it only to remove rejected
tokens from the residual). In a chain (one child per node) it accepts the drafted token n
at a position, with a fresh coin :math:`u \sim U[0, 1)`, iff

.. math:: u \le q_n / t_{acc} \quad\text{or}\quad q_n \ge t_{single},

so that

.. math:: a_n = \begin{cases} 1 & q_n \ge t_{single} \\ \min(1, q_n / t_{acc}) & \text{else,}
          \end{cases}

and on rejection it sets the drafted token's draft slot to :math:`q_n` and samples the
recovered token from :math:`\max(0, q - p')` with :math:`p' = q_n e_n`: the verifier's row
without the rejected token, :math:`r^{(n)}_j = q_j 1[j \ne n] / (1 - q_n)`. Server flags
``--speculative-accept-threshold-single`` (:math:`t_{single}`) and
``--speculative-accept-threshold-acc`` (:math:`t_{acc}`); both default to 1.0, where the rule
is lossless for every drafter (:math:`h_{alg,j} = p_j q_j + \sum_{n \ne j} p_n q_j = q_j`).
The launcher caps :math:`t_{acc}` below at ``1e-9``.

**Acceptance and recovery as a plan.** The acceptance never reads p. The recovery depends on
the rejected draft; since only the recovered token is emitted (the rejected draft is not),
the round's outcome (accepted or not, the emitted token) has the same law as with the one
recovery distribution that mixes the per-draft ones by their rejected mass:

.. math:: r_j \propto \sum_n p_n (1 - a_n) \frac{q_j 1[j \ne n]}{1 - q_n}
          = q_j \Bigl(S - p_j w_j\Bigr), \quad w_n = \frac{1 - a_n}{1 - q_n},
          \quad S = \sum_n p_n w_n,

whose normalizer is the rejected mass :math:`\sum_n p_n (1 - a_n)`. The declaration is that
decision plan (acceptance and this recovery), so the exact analysis, the samplers and the
simulator take it as they take any decision rule; its emitted law is the kernel's exactly.
Because the mixed recovery reads p, the rule is declared ``reads_draft=True`` although the
kernel's decision at a drafted token does not.

With a one-hot draft :math:`p = e_n` (SGLang's EAGLE drafts are the drafter's top-k
proposals, point masses to the kernel) the rule is Theorem 2's spike rule with
:math:`\gamma(q_n) = a_n`: :math:`h^{(n)}_n = a_n`, :math:`h^{(n)}_i = (1 - a_n) q_i/(1-q_n)`,
with emitted KL per token :math:`a_n \ln(a_n/q_n) + (1-a_n)\ln((1-a_n)/(1-q_n))`. It is
:math:`\ln(1/q_n)` wherever :math:`a_n = 1`, i.e. on :math:`q_n \ge t = \min(t_{single},
t_{acc})`, so it reaches :math:`\ln(1/t)` at :math:`q_n = t` (4.6 nats at :math:`t = 0.01`).

``sampler-match`` is the rule at :math:`t_{single} = t_{acc} = 1`: accept iff the drafted
token equals the verifier's own sample :math:`y \sim q` (acceptance :math:`q_n`, recovery
:math:`y` given :math:`y \ne n`), lossless for every drafter with acceptance
:math:`\sum_n p_n q_n`. vLLM's rejection sampler without draft probabilities
(``NO_DRAFT_PROBS``: the draft probability taken as 1, the recovery the target row with the
drafted token zeroed) is the same rule (alias ``one-hot-draft``).

.. warning::
   Only the chain form is this rule. In a tree SGLang tries the siblings of a node in order
   with **one** coin, accepting the k-th tried child when
   :math:`u \le (q_{c_1} + \dots + q_{c_k}) / t_{acc}`; that is a multi-draft verifier, not
   a per-position rule. The kernel's coin is ``torch.rand`` in [0, 1), so :math:`u = 0`
   accepts a token with :math:`q_n = 0` with probability :math:`2^{-24}` in float32; the
   exact rule gives 0 there. The bonus token (all drafts accepted) is sampled from q.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`t_{single}` = ``threshold_single``, :math:`t_{acc}` = ``threshold_acc``.

References
----------
sgl-project/sglang, ``sgl-kernel/csrc/speculative/speculative_sampling.cuh``
(``TreeSpeculativeSamplingTargetOnly``: ``coin <= prob_acc / threshold_acc ||
target_prob_single >= threshold_single``; ``capped_threshold_acc = fmaxf(threshold_acc,
1e-9f)``), ``python/sglang/srt/speculative/eagle_info.py`` (``EagleVerifyInput.verify``);
vllm-project/vllm ``vllm/v1/sample/rejection_sampler.py`` (``NO_DRAFT_PROBS``).
"""

from __future__ import annotations

from array_api_compat import array_namespace

from ..conventions import EMPTY_RESIDUAL_MASS
from .registry import DecisionRule, Knob, RuleSpec, register, register_alias

#: The launcher's floor on ``threshold_acc`` (``fmaxf(threshold_acc, 1e-9f)``).
SGLANG_MIN_THRESHOLD_ACC = 1e-9


def sglang_acceptance(target_probs_at, threshold_single: float, threshold_acc: float):
    r""":math:`a_n = 1` if :math:`q_n \ge t_{single}`, else :math:`\min(1, q_n / t_{acc})`
    (elementwise in the verifier's probabilities of the drafted tokens; array-agnostic).

    Source: sgl-kernel ``TreeSpeculativeSamplingTargetOnly`` (chain form).
    """
    xp = array_namespace(target_probs_at)
    q_n = target_probs_at
    ones = xp.ones_like(q_n)
    a = xp.minimum(ones, q_n / threshold_acc)
    return xp.where(q_n >= threshold_single, ones, a)


class SGLangThreshold(DecisionRule):
    r"""SGLang's target-only rule: accept n with :math:`a_n` (1 above :math:`t_{single}`, else
    :math:`\min(1, q_n/t_{acc})`); on rejection sample q without n.

    The plan's one recovery is the per-draft recoveries mixed by rejected mass (module
    docstring): :math:`r \propto q \odot (S - p \odot w)`; where nothing can be rejected it
    is q (convention 3).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: sgl-kernel ``speculative_sampling.cuh``.
    """

    def __init__(self, threshold_single: float, threshold_acc: float):
        self.threshold_single = threshold_single
        self.threshold_acc = max(threshold_acc, SGLANG_MIN_THRESHOLD_ACC)

    def accept_at(self, q_n, p_n, statistic):
        r""":math:`a_n` from :math:`q_n` alone (:func:`sglang_acceptance`)."""
        return sglang_acceptance(q_n, self.threshold_single, self.threshold_acc)

    def recovery_distribution(self, target_probs, draft_probs, statistic):
        r"""The per-draft recoveries "q without n" mixed by rejected mass,
        :math:`r \propto q \odot (S - p \odot w)` (class docstring); q where nothing can be
        rejected (convention 3)."""
        xp = array_namespace(target_probs, draft_probs)
        q, p = target_probs, draft_probs
        rejected = 1.0 - self.accept_at(q, p, None)
        # a < 1 implies q_n < t_acc <= 1, so 1 - q_n > 0 there; w = 0 where a = 1
        can_reject = rejected > 0
        w = xp.where(can_reject, rejected / xp.where(can_reject, 1.0 - q, xp.ones_like(q)), xp.zeros_like(q))
        pw = p * w
        s = xp.sum(pw, axis=-1, keepdims=True)
        weights = q * xp.clip(s - pw, 0.0, None)
        mass = xp.sum(weights, axis=-1, keepdims=True)
        empty = mass <= EMPTY_RESIDUAL_MASS
        return xp.where(empty, q, weights / xp.where(empty, xp.ones_like(mass), mass))


class SamplerMatch(SGLangThreshold):
    r"""Accept n iff it equals the verifier's own sample: :math:`a_n = q_n`, recovery q given
    :math:`y \ne n`. Lossless for every drafter; acceptance :math:`\sum_n p_n q_n`.

    SGLang's rule at :math:`t_{single} = t_{acc} = 1`; vLLM's ``NO_DRAFT_PROBS`` path.
    """

    def __init__(self):
        super().__init__(1.0, 1.0)


register(
    RuleSpec(
        name="sglang-threshold",
        factory=SGLangThreshold,
        knobs=(
            Knob(
                "threshold_acc",
                1.0,
                0.0,
                1.0,
                doc="t_acc: accept with min(1, q_n / t), t floored at 1e-9 as the launcher does "
                "(SGLang --speculative-accept-threshold-acc)",
            ),
            Knob(
                "threshold_single",
                1.0,
                0.0,
                1.0,
                doc="t_single: accept any draft with q_n >= t (SGLang --speculative-accept-threshold-single)",
            ),
        ),
        calibrated=("threshold_acc", "threshold_single"),
        sps_note="t_single = t_acc = 1 (SGLang's defaults) is lossless for every drafter but accepts "
        "sum_n p_n q_n, not sum min(p, q): it is SpS only for a one-hot draft",
        family="decision",
        summary="SGLang target-only: accept iff u <= q_n / t_acc or q_n >= t_single; else sample q without n",
        reference="sgl-project/sglang sgl-kernel speculative_sampling.cuh (TreeSpeculativeSamplingTargetOnly)",
    )
)

register(
    RuleSpec(
        name="sampler-match",
        factory=SamplerMatch,
        sps_note="lossless for every drafter, but accepts sum_n p_n q_n <= sum min(p, q); equal to "
        "SpS only for a one-hot draft",
        family="decision",
        summary="accept iff the draft equals the verifier's own sample (a_n = q_n); else sample q "
        "without n; lossless",
        reference="vLLM rejection_sampler.py NO_DRAFT_PROBS; SGLang's kernel at thresholds 1",
    )
)
register_alias("one-hot-draft", "sampler-match")

r"""Relaxed top-K greedy acceptance (TensorRT-LLM's relaxed MTP acceptance; vLLM #45229).

Greedy verification relaxed to a candidate set of the verifier: the drafted token n is
accepted **deterministically** iff

.. math:: \#\{j : \tilde q_j > \tilde q_n\} < K, \qquad
          \tilde q_n \ge \max\tilde q - \delta, \qquad \tilde q_n \ge \rho \max\tilde q,

(it is among the verifier's top K, its probability is within :math:`\delta` of the top one,
and at least :math:`\rho` times it), and on rejection the verifier's argmax is emitted (the
"golden" token). :math:`\tilde q` is the verifier's softmax of its logits at temperature 1 (the
raw row): TensorRT-LLM applies ``torch.softmax`` to the logits and compares
**probabilities**, not log-probabilities, with the top one minus ``relaxed_delta``
(``mtpRelaxedAcceptanceKernel``: a candidate is kept while ``value >= top1 - delta``). vLLM
#45229 compares logits, ``draft_logit >= top1_logit + log(relax_ratio)``, which is the ratio
test :math:`\tilde q_n \ge \rho \max \tilde q` (its constants K = 3, :math:`\rho` = 0.5: alias
``vllm-relaxed-thinking``). K = 1, :math:`\delta = \rho = 0` is strict greedy acceptance
(alias ``greedy``, TensorRT-LLM's defaults). The drafter's p is never read.

One step emits :math:`h_{alg}(x) = p_x 1[x \in A] + (1 - p(A))\, 1[x = \arg\max q]`, A the
accepted set. Both sources apply the rule to greedy decoding inside a reasoning span only;
the span gating is not modelled.

.. warning::
   Ties: the top-K test counts strictly larger entries (ties at the K-th value are in);
   ``torch.topk`` keeps K entries, ties in an unspecified order. The argmax recovery takes the
   lowest index among maxima (as ``torch.argmax``); it reads the processed q, whose argmax is
   the raw one under temperature, top-k and top-p.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``, unused), n drafted token,
K = ``relaxed_topk``, :math:`\delta` = ``relaxed_delta``, :math:`\rho` = ``relax_ratio``.

References
----------
NVIDIA TensorRT-LLM: ``MTPDecodingConfig`` (``use_relaxed_acceptance_for_thinking``,
``relaxed_topk`` default 1, ``relaxed_delta`` default 0.0), ``_torch/speculative/mtp.py``
(``gen_logprobs = torch.softmax(gen_logits)``, ``torch.topk``),
``cpp/tensorrt_llm/kernels/speculativeDecoding/mtpKernels.cu``
(``mtpRelaxedAcceptanceKernel``); blog "DeepSeek R1 MTP Implementation and Optimization"
(top-10, delta 0.6; PR #3865). vllm-project/vllm #45229 (port of #22238): top-K = 3,
``draft_logit >= top1_logit + log(0.5)``.
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from ._topk import kth_largest
from .plans import _one_hot
from .registry import DecisionRule, Knob, RuleSpec, register, register_alias


class RelaxedTopK(DecisionRule):
    r"""Accept n iff it is in the raw verifier's top K, within :math:`\delta` of the top
    probability and at least :math:`\rho` times it; on rejection emit the argmax of q.

    Symbols: q verifier (``target_probs``), p drafter (unused), n drafted token.
    Source: TensorRT-LLM ``mtpRelaxedAcceptanceKernel``; vLLM #45229.
    """

    def __init__(self, relaxed_delta: float, relaxed_topk: int, relax_ratio: float):
        self.relaxed_delta = relaxed_delta
        self.relaxed_topk = int(relaxed_topk)
        self.relax_ratio = relax_ratio

    def decision_rows(self, target_probs, draft_probs, raw_target_probs, raw_draft_probs):
        """The raw verifier row where given (else the processed one); p is not read."""
        return (target_probs if raw_target_probs is None else raw_target_probs), draft_probs

    def row_statistic(self, q, p):
        r"""The level :math:`\tilde q_n` must reach, shape [..., 1]: the largest of the K-th
        largest :math:`\tilde q` (the top-K test: :math:`\tilde q_n \ge \tilde q_{(K)} \iff
        \#\{j: \tilde q_j > \tilde q_n\} < K`, ties in), :math:`\max\tilde q - \delta` and
        :math:`\rho \max\tilde q`."""
        xp = array_namespace(q)
        top = xp.max(q, axis=-1, keepdims=True)
        level = xp.maximum(top - self.relaxed_delta, self.relax_ratio * top)
        return xp.maximum(kth_largest(q, self.relaxed_topk), level)

    def accept_at(self, q_n, p_n, statistic):
        r""":math:`1[\tilde q_n \ge s]` (0/1, the three tests at once)."""
        xp = array_namespace(q_n)
        return xp.astype(q_n >= statistic, q_n.dtype)

    def recovery_distribution(self, target_probs, draft_probs, statistic):
        """The point mass at the verifier's argmax (one pass, no acceptance needed)."""
        xp = array_namespace(target_probs)
        return _one_hot(xp.argmax(target_probs, axis=-1), target_probs.shape[-1], target_probs)


register(
    RuleSpec(
        name="relaxed-topk",
        factory=RelaxedTopK,
        knobs=(
            Knob(
                "relaxed_delta",
                0.6,
                0.0,
                1.0,
                doc="delta: accept if q~_n >= max q~ - delta, probabilities (TensorRT-LLM; R1 recipe 0.6)",
            ),
            Knob(
                "relaxed_topk",
                10,
                1,
                math.inf,
                integer=True,
                doc="K: candidates among the verifier's top K (TensorRT-LLM; R1 recipe 10)",
            ),
            Knob(
                "relax_ratio",
                0.0,
                0.0,
                1.0,
                doc="rho: accept if q~_n >= rho max q~ (vLLM #45229's logit test, 0.5 there)",
            ),
        ),
        calibrated=("relaxed_delta", "relaxed_topk", "relax_ratio"),
        sps_note="greedy acceptance: 0/1 decisions that ignore p and an argmax recovery; no knob "
        "value gives SpS (K = 1, delta = rho = 0 is strict greedy acceptance)",
        deterministic=True,
        reads_draft=False,
        needs_raw=True,
        family="decision",
        summary="relaxed top-K greedy: accept iff n in top-K(q~) and q~_n >= max(max q~ - delta, "
        "rho max q~); recover argmax q",
        reference="TensorRT-LLM relaxed MTP acceptance (mtpRelaxedAcceptanceKernel); vLLM #45229",
    )
)
register_alias("vllm-relaxed-thinking", "relaxed-topk", relaxed_topk=3, relax_ratio=0.5, relaxed_delta=1.0)
register_alias("greedy", "relaxed-topk", relaxed_topk=1, relaxed_delta=0.0, relax_ratio=0.0)

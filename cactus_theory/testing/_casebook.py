r"""The casebook: defects modelled on public sampler bugs, planted in the reference sampler.

:func:`reference_sampler` is a short, plain torch implementation of the "SpS against h"
samplers (vLLM 0.7's layout; its steps in :mod:`._reference`). ``defect`` plants one bug of a
class that real samplers have had: each mutant below overrides the one step its bug changes,
and names its public report (repository and number). :data:`CASEBOOK` lists each with its
class and report; :data:`DEFECTS` holds their names. Their detection rates at the default size
are generated into the documentation by ``scripts/sampler_power.py``.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3, Corollary 5.
"""

from __future__ import annotations

from ._casebook_whole import WHOLE_REQUEST_MUTANTS, _Drafts
from ._defect import Defect
from ._reference import REFERENCE_RULES, _BlockReference, _race, _Reference
from ._torch import torch


class _RecoveryFromQ(_Reference):
    """sgl-project/sglang #9877: the token after a rejection drawn from q instead of max(q - p, 0)."""

    defect = Defect(
        "recovery-from-q",
        "the token after a rejection drawn from q instead of max(q - p, 0)",
        "sgl-project/sglang #9877 (draft probabilities left as zeros: the residual max(q - 0, 0) is q)",
        "sps",
        "given",
        "any case with rejections",
    )

    def residual(self, s):
        return s.q


class _BonusOffByOne(_Reference):
    """openvinotoolkit/openvino.genai #4190: verifier rows read one position late (position i verified against row i + 1)."""

    defect = Defect(
        "bonus-off-by-one",
        "verifier rows read one position late (position i verified against row i + 1)",
        "openvinotoolkit/openvino.genai #4190 (a token drawn from the logit row of the next position)",
        "sps",
        "given",
        "a different verifier row at every position",
    )

    def verifier_rows(self, s):
        return s.rows[:, 1:]


class _SwappedRatio(_Reference):
    """1bit-MONSTER/1bit-MONSTER #637: a wrong acceptance ratio: min(1, p_n / q_n) instead of min(1, q_n / p_n)."""

    defect = Defect(
        "swapped-ratio",
        "a wrong acceptance ratio: min(1, p_n / q_n) instead of min(1, q_n / p_n)",
        "1bit-MONSTER/1bit-MONSTER #637 (acceptance uses the wrong probability ratio)",
        "sps",
        "given",
        "any case",
    )

    def ratio(self, s):
        h_n, p_n = s.h.gather(-1, s.n)[..., 0], s.p.gather(-1, s.n)[..., 0]
        return torch.where(h_n > 0, p_n / torch.where(h_n > 0, h_n, 1.0), torch.full_like(h_n, float("inf")))


class _CactusNoRescale(_Reference):
    """No public report (the rule is new); the class of transformers #28508: Cactus's spike gamma_n set at n without rescaling the other tokens by (1 - gamma_n) / (1 - q_n)."""

    defect = Defect(
        "cactus-no-rescale",
        "Cactus's spike gamma_n set at n without rescaling the other tokens by (1 - gamma_n) / (1 - q_n)",
        "none public (the rule is new); the class is transformers #28508's: a step of the paper's algorithm left out",
        "cactus-taylor",
        "given",
        "the overconfident case",
    )

    def spike(self, s, q_n, gamma):
        return s.q.scatter(-1, s.n, gamma)


class _ArgmaxDraftSoftmaxRatio(_Reference):
    """huggingface/transformers #32867: a greedy (argmax) drafter whose softmax row is given to the ratio: where the drafts come from a point mass, the sampler sees a softer row."""

    defect = Defect(
        "argmax-draft-softmax-ratio",
        "a greedy (argmax) drafter whose softmax row is given to the ratio: where the drafts come from a point mass, the sampler sees a softer row",
        "huggingface/transformers #32867 (regression test #34553)",
        "sps",
        "given",
        "the edge case's one-hot drafter row",
    )

    def drafter(self, s):
        point = s.p.max(-1, keepdim=True).values >= 1
        return torch.where(point, (s.p + s.q) / 2, s.p)  # a softer row with the same argmax


class _DraftLawMismatch(_Reference):
    """huggingface/transformers #47932: the drafts drawn from processed drafter rows (top-k) while the ratio and the residual get the unprocessed rows."""

    defect = Defect(
        "draft-law-mismatch",
        "the drafts drawn from processed drafter rows (top-k) while the ratio and the residual get the unprocessed rows",
        "huggingface/transformers #47932 (also deepseek-ai/DeepSpec #31: bf16 sampling, fp32 ratio)",
        "sps",
        "given",
        "the truncated case's raw rows (a sampler that takes raw_draft_probs)",
    )

    def drafter(self, s):
        if s.raw_p is None:
            return s.p
        p = s.raw_p.to(torch.float32)
        return p / p.sum(-1, keepdim=True)


class _UnprocessedTarget(_Reference):
    """vllm-project/vllm #10198: the target rows not processed with the request's top-k (temperature / top-p alike): verified against the raw rows."""

    defect = Defect(
        "unprocessed-target",
        "the target rows not processed with the request's top-k (temperature / top-p alike): verified against the raw rows",
        "vllm-project/vllm #10198 (the Ascend port: vllm-project/vllm-ascend #6685)",
        "sps",
        "given",
        "the truncated case's raw rows (a sampler that takes raw_target_probs)",
    )

    def verifier(self, s):
        if s.raw_q is None:
            return s.q
        q = s.raw_q[:, : s.k].to(torch.float32)
        return q / q.sum(-1, keepdim=True)


class _InclusiveComparison(_Reference):
    """sgl-project/sglang #35771: accepts when u <= ratio: a draft of target probability 0 is accepted when u = 0."""

    defect = Defect(
        "inclusive-comparison",
        "accepts when u <= ratio: a draft of target probability 0 is accepted when u = 0",
        "sgl-project/sglang #35771",
        "sps",
        "given",
        "the zero-uniform side batch (a sampler that takes uniform_samples)",
    )

    def accept(self, s, u, ratio, extra):
        return u <= ratio


class _TopkTieBoundary(_Reference):
    """flashinfer-ai/flashinfer #3774: top-k applied by value: tokens tied with the k-th are all kept."""

    defect = Defect(
        "topk-tie-boundary",
        "top-k applied by value: tokens tied with the k-th are all kept",
        "flashinfer-ai/flashinfer #3774",
        "sps",
        "given",
        "the truncated case's tie at the top-3 boundary (raw rows)",
    )

    def verifier(self, s):
        if s.raw_q is None:
            return s.q
        raw = s.raw_q[:, : s.k].to(torch.float32)
        kept = (s.q > 0).sum(-1, keepdim=True)
        kth = raw.sort(-1, descending=True).values.gather(-1, kept - 1)
        q = torch.where(raw >= kth, raw, torch.zeros_like(raw))  # ties with the k-th kept
        return q / q.sum(-1, keepdim=True)


class _InPlaceResidual(_Reference):
    """vllm-project/vllm-ascend #2881: on the n-gram path (one-hot drafter rows) the recovery step zeroes the drafted token's target probability in place before the acceptance test reads it: such drafts are never accepted."""

    defect = Defect(
        "in-place-residual",
        "on the n-gram path (one-hot drafter rows) the recovery step zeroes the drafted token's target probability in place before the acceptance test reads it: such drafts are never accepted",
        "vllm-project/vllm-ascend #2881",
        "sps",
        "given",
        "the edge case's one-hot drafter row",
    )

    def ratio(self, s):  # recovery ran first and zeroed q_n where p is a point mass
        point = s.p.max(-1).values >= 1
        ratio = super().ratio(s)
        return torch.where(point, torch.zeros_like(ratio), ratio)


class _UninitialisedDraftProbs(_Reference):
    """sgl-project/sglang #12561: draft probabilities from an uninitialised buffer (here: a fixed pattern of garbage) instead of the drafter's rows."""

    defect = Defect(
        "uninitialised-draft-probs",
        "draft probabilities from an uninitialised buffer (here: a fixed pattern of garbage) instead of the drafter's rows",
        "sgl-project/sglang #12561",
        "sps",
        "given",
        "any case",
    )

    def drafter(self, s):
        return torch.rand(s.p.shape, generator=torch.Generator().manual_seed(0))


class _BatchRowMixup(_Reference):
    """vllm-project/vllm #14645: a request's verifier rows read from another request's slot (row r from row r xor 2): invisible in batches of one request or two interleaved ones."""

    defect = Defect(
        "batch-row-mixup",
        "a request's verifier rows read from another request's slot (row r from row r xor 2): invisible in batches of one request or two interleaved ones",
        "vllm-project/vllm #14645 (batch order of the spec-decode rows; the end-to-end test had too small and too similar a batch)",
        "sps",
        "given",
        "the mixed batch of four interleaved cases",
    )

    def batch_rows(self, s, rows):
        if s.b <= 2:
            return rows
        idx = torch.arange(s.b) ^ 2
        return rows[torch.where(idx < s.b, idx, torch.arange(s.b))]


class _CoupledResampleUniform(_Reference):
    """vllm-project/vllm-ascend #16370: the recovery token drawn by inverse CDF with the acceptance test's uniform (u >= ratio after a rejection): acceptance exact, recovery biased."""

    defect = Defect(
        "coupled-resample-uniform",
        "the recovery token drawn by inverse CDF with the acceptance test's uniform (u >= ratio after a rejection): acceptance exact, recovery biased",
        "vllm-project/vllm-ascend #16370",
        "sps",
        "given",
        "any case with rejections and a residual of two or more tokens",
    )

    def recover(self, residual, e, u):
        cdf = residual.cumsum(-1)
        token = torch.searchsorted(cdf, (u * cdf[..., -1])[..., None].contiguous(), right=True)[..., 0]
        return token.clamp(max=cdf.shape[-1] - 1)


class _AlwaysAccept(_Reference):
    """vllm-project/vllm-ascend #13766: no uniform drawn (u = 0): every draft of positive target probability accepted."""

    defect = Defect(
        "always-accept",
        "no uniform drawn (u = 0): every draft of positive target probability accepted",
        "vllm-project/vllm-ascend #13766 (issue #13730)",
        "sps",
        "given",
        "any case",
    )

    def accept(self, s, u, ratio, extra):
        return super().accept(s, torch.zeros_like(u), ratio, extra)


class _SameTokenOrRatio(_Reference):
    """alibaba/rtp-llm #1295: accepts when the draft equals a token sampled from q OR u < ratio."""

    defect = Defect(
        "same-token-or-ratio",
        "accepts when the draft equals a token sampled from q OR u < ratio",
        "alibaba/rtp-llm #1295",
        "sps",
        "given",
        "any case",
    )

    def extra_noise(self, k, v):
        return [(k, v)]  # its own draw of a token from q

    def accept(self, s, u, ratio, extra):
        return (u < ratio) | (_race(s.q, extra[0]) == s.n[..., 0])


class _NegativeIndex(_Reference):
    """vllm-project/vllm-ascend #10043: a placeholder draft id -1 (a request that drafted fewer tokens) indexes the last vocabulary entry instead of being rejected."""

    defect = Defect(
        "negative-index",
        "a placeholder draft id -1 (a request that drafted fewer tokens) indexes the last vocabulary entry instead of being rejected",
        "vllm-project/vllm-ascend #10043",
        "sps",
        "given",
        "the placeholder side batch (a sampler that declares takes_placeholder_drafts)",
    )

    def drafted(self, s, ids):
        return ids % s.v

    def guard_placeholders(self, s, ratio):
        return ratio


class _BonusWrongRow(_Reference):
    """openvinotoolkit/openvino.genai #4190: a sampler that draws its own bonus token (declared) draws it from the last draft position's row instead of the bonus row."""

    defect = Defect(
        "bonus-wrong-row",
        "a sampler that draws its own bonus token (declared) draws it from the last draft position's row instead of the bonus row",
        "openvinotoolkit/openvino.genai #4190 (a token drawn from another position's row)",
        "sps",
        "drawn",
        "bonus-law: the bonus row differs from every draft row",
    )

    def bonus_row(self, s):
        return s.rows[:, s.k - 1]


class _BlockTokenwiseResidual(_BlockReference):
    """vllm-project/vllm-ascend #7807: block verification's thresholds, but the token after the kept drafts drawn from the token-wise residual max(q - p, 0) instead of the block residual max(P_tau q - p, 0)."""

    defect = Defect(
        "block-tokenwise-residual",
        "block verification's thresholds, but the token after the kept drafts drawn from the token-wise residual max(q - p, 0) instead of the block residual max(P_tau q - p, 0)",
        "vllm-project/vllm-ascend #7807 (fixed by #7808: its block verify drew the recovered token as token-wise verification does)",
        "block",
        "given",
        "the block case low-joint-ratio: stops after a kept draft whose cumulative ratio P_tau is about 2/9",
    )

    def recovery(self, s, block):
        return torch.clamp(s.q - s.p, min=0)


class _BlockOneHotFallback(_BlockReference):
    """vllm-project/vllm-ascend #7603: block verification without the drafter's probabilities, on one-hot drafter rows at the drafted tokens (p_n = 1), while the drafts come from a sampling drafter: the law stays the verifier's (a point-mass drafter is lossless for any draft), the acceptance falls."""

    defect = Defect(
        "block-onehot-fallback",
        "block verification without the drafter's probabilities, on one-hot drafter rows at the drafted tokens (p_n = 1), while the drafts come from a sampling drafter: the law stays the verifier's, the acceptance falls",
        "vllm-project/vllm-ascend #7603 (backport #7839: block verify disabled where draft_probs is None)",
        "block",
        "given",
        "the acceptance of every case whose drafter rows are not one-hot",
    )

    def drafter(self, s):
        return torch.zeros_like(s.p).scatter(-1, s.n, 1.0)


class _BlockIgnored(_Reference):
    """vllm-project/vllm-ascend #15673: block verification requested and silently not done: token-wise verification (lossless, lower acceptance) where block verification is claimed."""

    defect = Defect(
        "block-ignored",
        "block verification requested and silently not done: token-wise verification (lossless, lower acceptance) where block verification is claimed",
        "vllm-project/vllm-ascend #15673 (rejection_sample_method='block' ignored on the NPU's newer model runner)",
        "block",
        "given",
        "the acceptance after the first position, where the block keeps more drafts",
    )

    def __init__(self, bonus: str):
        super().__init__("sps", None, bonus)


#: The mutants, in the casebook's order.
_MUTANTS = (
    _RecoveryFromQ,
    _BonusOffByOne,
    _SwappedRatio,
    _CactusNoRescale,
    _ArgmaxDraftSoftmaxRatio,
    _DraftLawMismatch,
    _UnprocessedTarget,
    _InclusiveComparison,
    _TopkTieBoundary,
    _InPlaceResidual,
    _UninitialisedDraftProbs,
    _BatchRowMixup,
    _CoupledResampleUniform,
    _AlwaysAccept,
    _SameTokenOrRatio,
    _NegativeIndex,
    _BonusWrongRow,
    _BlockTokenwiseResidual,
    _BlockOneHotFallback,
    _BlockIgnored,
    *WHOLE_REQUEST_MUTANTS,
)

CASEBOOK = {m.defect.name: m.defect for m in _MUTANTS}
DEFECTS = tuple(CASEBOOK)
_BY_NAME = {m.defect.name: m for m in _MUTANTS}
#: The rules :func:`reference_sampler` implements.
RULES = (*REFERENCE_RULES, "block")


def reference_sampler(
    rule: str = "sps",
    *,
    delta: float | None = None,
    defect: str | None = None,
    bonus: str | None = None,
    drafting: bool | None = None,
):
    r"""A plain torch sampler for ``rule``, correct or with one planted ``defect``.

    Parameters
    ----------
    rule : {"sps", "cactus-taylor", "block"}
        ``"block"``: block verification (Sun et al., Algorithm 2), checked with
        ``rule="block"``; its defects are the casebook's entries of rule ``"block"``.
    delta : float, optional
        Cactus's per-draft budget :math:`\delta > 0` (required for ``"cactus-taylor"``).
    defect : str, optional
        One of :data:`DEFECTS` (``"cactus-no-rescale"`` only with ``"cactus-taylor"``), or
        None for the correct sampler.
    bonus : {"given", "drawn"}, optional
        ``"given"``: emit the bonus token handed in; ``"drawn"``: draw it from the bonus row
        (the sampler then has ``draws_bonus_token = True``). Default: the defect's
        (:data:`CASEBOOK`), else ``"given"``.
    drafting : bool, optional
        The sampler draws the drafts itself from the drafter rows (engine-side drafting, the
        exponential race with its own noise; a seeded row from its generator) and returns
        ``(drafts, output)``; it has ``draws_drafts = True``, so
        :func:`~cactus_theory.testing.check_sampler_law` checks it through
        :func:`~cactus_theory.testing.drafting_adapter`. Default: the defect's, else False.

    Returns
    -------
    callable
        ``fn(target_probs [B, k+1, V], draft_probs [B, k, V], draft_token_ids [B, k],
        bonus_token_ids [B, 1], seeded_seqs=None, raw_target_probs=None,
        raw_draft_probs=None, uniform_samples=None) -> [B, k+1]`` int64 (accepted drafts,
        the recovered or bonus token, then -1), for
        :func:`~cactus_theory.testing.callable_adapter`. A draft id -1 (a request that
        drafted fewer tokens) is never accepted (``takes_placeholder_drafts = True``). It uses
        ``uniform_samples[:, :k]`` as its acceptance uniforms when given; the raw rows only
        where a defect reads them.

    Examples
    --------
    >>> from cactus_theory.testing import check_sampler_law
    >>> check_sampler_law(reference_sampler("sps", defect="swapped-ratio"), "sps").passed
    False
    """
    if rule not in RULES:
        raise ValueError(f"rule: expected one of {RULES}, got {rule!r}")
    if defect is not None and defect not in DEFECTS:
        raise ValueError(f"defect: expected one of {DEFECTS} or None, got {defect!r}")
    if defect is not None and (rule == "block") != (CASEBOOK[defect].rule == "block"):
        raise ValueError(f"defect: {defect!r} is a defect of rule {CASEBOOK[defect].rule!r}, not {rule!r}")
    if defect == "cactus-no-rescale" and rule != "cactus-taylor":
        raise ValueError("defect: 'cactus-no-rescale' needs rule='cactus-taylor'")
    if bonus is None:
        bonus = CASEBOOK[defect].bonus if defect else "given"
    if bonus not in ("given", "drawn"):
        raise ValueError(f"bonus: expected 'given' or 'drawn', got {bonus!r}")
    if defect == "bonus-wrong-row" and bonus != "drawn":
        raise ValueError("defect: 'bonus-wrong-row' needs bonus='drawn'")
    if rule == "cactus-taylor":
        if delta is None or not float(delta) > 0:
            raise ValueError(f"delta: expected a positive budget for cactus-taylor, got {delta!r}")
        delta = float(delta)
    own = bool(defect) and CASEBOOK[defect].drafting
    drafting = own if drafting is None else bool(drafting)
    if own and not drafting:
        raise ValueError(f"drafting: the defect {defect!r} is in the sampler's own drafting (drafting=True)")
    cls = _BY_NAME[defect] if defect else (_BlockReference if rule == "block" else _Reference)
    if drafting and not issubclass(cls, _Drafts):
        cls = type(cls.__name__ + "Drafting", (_Drafts, cls), {})
    sampler = cls(bonus) if rule == "block" else cls(rule, delta, bonus)
    sampler.__name__ = f"reference_{rule}" + (f"_{defect}" if defect else "")
    return sampler

r"""A reference sampler and a casebook of defects modelled on public sampler bugs.

:func:`reference_sampler` is a short, plain torch implementation of the "SpS against h"
samplers (vLLM 0.7's layout): with :math:`h^{(n)}` the rule's target for the drafted token n,
it accepts n when :math:`u < h^{(n)}_n / p_n` (u uniform on [0, 1)) and otherwise emits a
token of :math:`\max(h^{(n)} - p, 0)` (normalized), which emits :math:`h_{alg}` (paper,
Theorem 3):

* ``"sps"``: :math:`h^{(n)} = q` (lossless speculative sampling);
* ``"cactus-taylor"``: :math:`h^{(n)}_n = \gamma_n = \min(1, q_n + \sqrt{2\delta q_n(1-q_n)})`
  and :math:`h^{(n)}_j = q_j (1-\gamma_n)/(1-q_n)` for :math:`j \ne n` (Corollary 5).

``defect`` plants one bug of a class that real samplers have had. :data:`CASEBOOK` lists each
with its class and one public report (repository and number); :data:`DEFECTS` holds their
names. Their detection rates at the default size are generated into the documentation by
``scripts/sampler_power.py``.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3, Corollary 5. Leviathan et al.
2023 (speculative sampling). FlashInfer's chain speculative sampling (``uniform_samples``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._torch import torch

__all__ = ["CASEBOOK", "DEFECTS", "REFERENCE_RULES", "Defect", "reference_sampler"]

REFERENCE_RULES = ("sps", "cactus-taylor")


@dataclass(frozen=True)
class Defect:
    """One entry of the casebook.

    Attributes
    ----------
    name : str
        The ``defect`` argument of :func:`reference_sampler`.
    bug_class : str
        What is wrong, in the sampler's terms.
    source : str
        One public report of a real sampler with this class of bug (repository and number).
    rule : str
        The rule the mutant claims (``"sps"``, or ``"cactus-taylor"`` for Cactus's own).
    bonus : str
        The mutant's bonus contract (``"given"`` or ``"drawn"``).
    shown_by : str
        What in the default cases makes it visible.
    """

    name: str
    bug_class: str
    source: str
    rule: str
    bonus: str
    shown_by: str


CASEBOOK = {
    d.name: d
    for d in (
        Defect(
            "recovery-from-q",
            "the token after a rejection drawn from q instead of max(q - p, 0)",
            "sgl-project/sglang #9877 (draft probabilities left as zeros: the residual max(q - 0, 0) is q)",
            "sps",
            "given",
            "any case with rejections",
        ),
        Defect(
            "bonus-off-by-one",
            "verifier rows read one position late (position i verified against row i + 1)",
            "openvinotoolkit/openvino.genai #4190 (a token drawn from the logit row of the next position)",
            "sps",
            "given",
            "a different verifier row at every position",
        ),
        Defect(
            "swapped-ratio",
            "a wrong acceptance ratio: min(1, p_n / q_n) instead of min(1, q_n / p_n)",
            "1bit-MONSTER/1bit-MONSTER #637 (acceptance uses the wrong probability ratio)",
            "sps",
            "given",
            "any case",
        ),
        Defect(
            "cactus-no-rescale",
            "Cactus's spike gamma_n set at n without rescaling the other tokens by (1 - gamma_n) / (1 - q_n)",
            "none public (the rule is new); the class is transformers #28508's: a step of the "
            "paper's algorithm left out",
            "cactus-taylor",
            "given",
            "the overconfident case",
        ),
        Defect(
            "argmax-draft-softmax-ratio",
            "a greedy (argmax) drafter whose softmax row is given to the ratio: where the "
            "drafts come from a point mass, the sampler sees a softer row",
            "huggingface/transformers #32867 (regression test #34553)",
            "sps",
            "given",
            "the edge case's one-hot drafter row",
        ),
        Defect(
            "draft-law-mismatch",
            "the drafts drawn from processed drafter rows (top-k) while the ratio and the "
            "residual get the unprocessed rows",
            "huggingface/transformers #47932 (also deepseek-ai/DeepSpec #31: bf16 sampling, fp32 ratio)",
            "sps",
            "given",
            "the truncated case's raw rows (a sampler that takes raw_draft_probs)",
        ),
        Defect(
            "unprocessed-target",
            "the target rows not processed with the request's top-k (temperature / top-p "
            "alike): verified against the raw rows",
            "vllm-project/vllm #10198 (the Ascend port: vllm-project/vllm-ascend #6685)",
            "sps",
            "given",
            "the truncated case's raw rows (a sampler that takes raw_target_probs)",
        ),
        Defect(
            "inclusive-comparison",
            "accepts when u <= ratio: a draft of target probability 0 is accepted when u = 0",
            "sgl-project/sglang #35771",
            "sps",
            "given",
            "the zero-uniform side batch (a sampler that takes uniform_samples)",
        ),
        Defect(
            "topk-tie-boundary",
            "top-k applied by value: tokens tied with the k-th are all kept",
            "flashinfer-ai/flashinfer #3774",
            "sps",
            "given",
            "the truncated case's tie at the top-3 boundary (raw rows)",
        ),
        Defect(
            "in-place-residual",
            "on the n-gram path (one-hot drafter rows) the recovery step zeroes the drafted "
            "token's target probability in place before the acceptance test reads it: such "
            "drafts are never accepted",
            "vllm-project/vllm-ascend #2881",
            "sps",
            "given",
            "the edge case's one-hot drafter row",
        ),
        Defect(
            "uninitialised-draft-probs",
            "draft probabilities from an uninitialised buffer (here: a fixed pattern of "
            "garbage) instead of the drafter's rows",
            "sgl-project/sglang #12561",
            "sps",
            "given",
            "any case",
        ),
        Defect(
            "batch-row-mixup",
            "a request's verifier rows read from another request's slot (row r from row "
            "r xor 2): invisible in batches of one request or two interleaved ones",
            "vllm-project/vllm #14645 (batch order of the spec-decode rows; the end-to-end "
            "test had too small and too similar a batch)",
            "sps",
            "given",
            "the mixed batch of four interleaved cases",
        ),
        Defect(
            "coupled-resample-uniform",
            "the recovery token drawn by inverse CDF with the acceptance test's uniform "
            "(u >= ratio after a rejection): acceptance exact, recovery biased",
            "vllm-project/vllm-ascend #16370",
            "sps",
            "given",
            "any case with rejections and a residual of two or more tokens",
        ),
        Defect(
            "always-accept",
            "no uniform drawn (u = 0): every draft of positive target probability accepted",
            "vllm-project/vllm-ascend #13766 (issue #13730)",
            "sps",
            "given",
            "any case",
        ),
        Defect(
            "same-token-or-ratio",
            "accepts when the draft equals a token sampled from q OR u < ratio",
            "alibaba/rtp-llm #1295",
            "sps",
            "given",
            "any case",
        ),
        Defect(
            "negative-index",
            "a placeholder draft id -1 (a request that drafted fewer tokens) indexes the last "
            "vocabulary entry instead of being rejected",
            "vllm-project/vllm-ascend #10043",
            "sps",
            "given",
            "the placeholder side batch (a sampler that declares takes_placeholder_drafts)",
        ),
        Defect(
            "bonus-wrong-row",
            "a sampler that draws its own bonus token (declared) draws it from the last draft "
            "position's row instead of the bonus row",
            "openvinotoolkit/openvino.genai #4190 (a token drawn from another position's row)",
            "sps",
            "drawn",
            "bonus-law: the bonus row differs from every draft row",
        ),
    )
}

DEFECTS = tuple(CASEBOOK)


def _race(weights: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """A token of each row of ``weights`` (non-negative, not normalized): the exponential race."""
    return (weights / e).argmax(-1)


def reference_sampler(
    rule: str = "sps", *, delta: float | None = None, defect: str | None = None, bonus: str | None = None
):
    r"""A plain torch sampler for ``rule``, correct or with one planted ``defect``.

    Parameters
    ----------
    rule : {"sps", "cactus-taylor"}
    delta : float, optional
        Cactus's per-draft budget :math:`\delta > 0` (required for ``"cactus-taylor"``).
    defect : str, optional
        One of :data:`DEFECTS` (``"cactus-no-rescale"`` only with ``"cactus-taylor"``), or
        None for the correct sampler.
    bonus : {"given", "drawn"}, optional
        ``"given"``: emit the bonus token handed in; ``"drawn"``: draw it from the bonus row
        (the sampler then has ``draws_bonus_token = True``). Default: the defect's
        (:data:`CASEBOOK`), else ``"given"``.

    Returns
    -------
    callable
        ``fn(target_probs [B, k+1, V], draft_probs [B, k, V], draft_token_ids [B, k],
        bonus_token_ids [B, 1], seeded_seqs=None, raw_target_probs=None,
        raw_draft_probs=None, uniform_samples=None) -> [B, k+1]`` int64 (accepted drafts,
        the recovered or bonus token, then -1), for
        :func:`~cactus_theory.testing.adapters.callable_adapter`. A draft id -1 (a request that
        drafted fewer tokens) is never accepted (``takes_placeholder_drafts = True``). It uses
        ``uniform_samples[:, :k]`` as its acceptance uniforms when given; the raw rows only
        where a defect reads them.

    Examples
    --------
    >>> from cactus_theory.testing import check_sampler_law
    >>> check_sampler_law(reference_sampler("sps", defect="swapped-ratio"), "sps").passed
    False
    """
    if rule not in REFERENCE_RULES:
        raise ValueError(f"rule: expected one of {REFERENCE_RULES}, got {rule!r}")
    if defect is not None and defect not in DEFECTS:
        raise ValueError(f"defect: expected one of {DEFECTS} or None, got {defect!r}")
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

    def sampler(
        target_probs: torch.Tensor,
        draft_probs: torch.Tensor,
        draft_token_ids: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        seeded_seqs: dict[int, torch.Generator] | None = None,
        raw_target_probs: torch.Tensor | None = None,
        raw_draft_probs: torch.Tensor | None = None,
        uniform_samples: torch.Tensor | None = None,
    ) -> torch.Tensor:
        b, k = draft_token_ids.shape
        v = target_probs.shape[-1]
        rows = target_probs.to(torch.float32)
        if defect == "batch-row-mixup" and b > 2:
            idx = torch.arange(b) ^ 2
            rows = rows[torch.where(idx < b, idx, torch.arange(b))]
        q = rows[:, 1:] if defect == "bonus-off-by-one" else rows[:, :k]
        p = draft_probs.to(torch.float32)
        ids = draft_token_ids.to(torch.int64)
        placeholder = ids < 0  # a request that drafted fewer tokens: never accepted
        n = (ids % v if defect == "negative-index" else ids.clamp(min=0))[..., None]
        if defect == "unprocessed-target" and raw_target_probs is not None:
            q = raw_target_probs[:, :k].to(torch.float32)
            q = q / q.sum(-1, keepdim=True)
        if defect == "topk-tie-boundary" and raw_target_probs is not None:
            raw = raw_target_probs[:, :k].to(torch.float32)
            kept = (q > 0).sum(-1, keepdim=True)
            kth = raw.sort(-1, descending=True).values.gather(-1, kept - 1)
            q = torch.where(raw >= kth, raw, torch.zeros_like(raw))  # ties with the k-th kept
            q = q / q.sum(-1, keepdim=True)
        if defect == "draft-law-mismatch" and raw_draft_probs is not None:
            p = raw_draft_probs.to(torch.float32)
            p = p / p.sum(-1, keepdim=True)
        if defect == "argmax-draft-softmax-ratio":
            point = p.max(-1, keepdim=True).values >= 1
            p = torch.where(point, (p + q) / 2, p)  # a softer row with the same argmax
        if defect == "uninitialised-draft-probs":
            p = torch.rand(p.shape, generator=torch.Generator().manual_seed(0))
        q_n = q.gather(-1, n)
        if rule == "cactus-taylor":
            gamma = torch.clamp(q_n + torch.sqrt(2 * delta * q_n * (1 - q_n)), max=1.0)
            if defect == "cactus-no-rescale":
                h = q.scatter(-1, n, gamma)
            else:
                scale = torch.where(
                    q_n < 1, (1 - gamma) / torch.clamp(1 - q_n, min=1e-30), torch.zeros_like(q_n)
                )
                h = (q * scale).scatter(-1, n, gamma)
        else:
            h = q
        h_n = h.gather(-1, n)[..., 0]
        p_n = p.gather(-1, n)[..., 0]
        if defect == "swapped-ratio":
            ratio = torch.where(
                h_n > 0, p_n / torch.where(h_n > 0, h_n, 1.0), torch.full_like(h_n, float("inf"))
            )
        else:
            ratio = torch.where(p_n > 0, h_n / torch.where(p_n > 0, p_n, 1.0), (h_n > 0).to(h_n.dtype))
        if defect != "negative-index":
            ratio = torch.where(placeholder, torch.zeros_like(ratio), ratio)
        if defect == "in-place-residual":  # recovery ran first and zeroed q_n where p is a point mass
            point = p.max(-1).values >= 1
            ratio = torch.where(point, torch.zeros_like(ratio), ratio)
        residual = q if defect == "recovery-from-q" else torch.clamp(h - p, min=0)
        empty = residual.sum(-1, keepdim=True) <= 0  # only where acceptance is 1
        residual = torch.where(empty, h, residual)
        if uniform_samples is not None:
            u = uniform_samples[:, :k].to(torch.float32)
        else:
            u = torch.rand(b, k)
        e = torch.empty(b, k, v).exponential_()
        e_bonus = torch.empty(b, v).exponential_()
        same_token = defect == "same-token-or-ratio"  # its own draw of a token from q
        e_target = torch.empty(b, k, v).exponential_() if same_token else None
        for row, gen in (seeded_seqs or {}).items():
            u[row] = torch.rand(k, generator=gen)
            e[row] = torch.empty(k, v).exponential_(generator=gen)
            e_bonus[row] = torch.empty(v).exponential_(generator=gen)
            if same_token:
                e_target[row] = torch.empty(k, v).exponential_(generator=gen)
        if defect == "always-accept":
            u = torch.zeros_like(u)
        accepted = u <= ratio if defect == "inclusive-comparison" else u < ratio
        if defect == "same-token-or-ratio":
            target_token = _race(q, e_target)
            accepted = accepted | (target_token == n[..., 0])
        if defect == "coupled-resample-uniform":
            cdf = residual.cumsum(-1)
            recovered = torch.searchsorted(cdf, (u * cdf[..., -1])[..., None].contiguous(), right=True)[
                ..., 0
            ]
            recovered = recovered.clamp(max=v - 1)
        else:
            recovered = _race(residual, e)
        if bonus == "drawn":
            bonus_row = rows[:, k - 1] if defect == "bonus-wrong-row" else rows[:, k]
            bonus_ids = _race(bonus_row, e_bonus)
        else:
            bonus_ids = bonus_token_ids[:, 0].to(torch.int64)
        length = torch.where(accepted.all(1), k, (~accepted).to(torch.int64).argmax(1))
        pos = torch.arange(k + 1)[None, :]
        out = torch.full((b, k + 1), -1, dtype=torch.int64)
        ids = torch.cat([draft_token_ids.to(torch.int64), bonus_ids[:, None]], 1)
        out = torch.where(pos < length[:, None], ids, out)
        extra = torch.where(
            length == k, bonus_ids, recovered.gather(1, torch.clamp(length, max=k - 1)[:, None])[:, 0]
        )
        return out.scatter(1, length[:, None], extra[:, None])

    sampler.__name__ = f"reference_{rule}" + (f"_{defect}" if defect else "")
    sampler.draws_bonus_token = bonus == "drawn"
    sampler.takes_placeholder_drafts = True
    return sampler

r"""The casebook's whole-request defects: batches, seeds, depth and engine-side drafting.

Each mutant overrides one step of the reference sampler (:mod:`._reference`); a sampler that
draws its own drafts is the reference with :class:`_Drafts` in front (its ``__call__`` draws
:math:`n_i \sim p_i` by the exponential race with its own noise, then verifies them).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
"""

from __future__ import annotations

from ._defect import Defect
from ._reference import _race, _Reference
from ._torch import torch


class _Drafts:
    """Engine-side drafting in front of a reference sampler: the drafts drawn from the drafter
    rows by the exponential race (a seeded row from its own generator, before its verification
    noise), then verified; returns ``(drafts, output)`` (:func:`~._adapters.drafting_adapter`)."""

    draws_drafts = True

    def __call__(
        self,
        target_probs,
        draft_probs,
        bonus_token_ids,
        seeded_seqs=None,
        raw_target_probs=None,
        raw_draft_probs=None,
        uniform_samples=None,
    ):
        b, k, v = draft_probs.shape
        e = torch.empty(b, k, v).exponential_()
        for row, gen in (seeded_seqs or {}).items():
            e[row] = torch.empty(k, v).exponential_(generator=gen)
        self._drafting_noise = e
        drafts = _race(draft_probs.to(torch.float32), e)
        out = super().__call__(
            target_probs,
            draft_probs,
            drafts,
            bonus_token_ids,
            seeded_seqs=seeded_seqs,
            raw_target_probs=raw_target_probs,
            raw_draft_probs=raw_draft_probs,
            uniform_samples=uniform_samples,
        )
        return drafts, out


class _UnseededNoiseUnwritten(_Reference):
    """vllm-project/vllm #10863: in a batch with seeded requests the unseeded rows' recovery noise is filled into an indexed copy, so their buffer stays unwritten."""

    defect = Defect(
        "unseeded-noise-unwritten",
        "in a batch with seeded requests, the unseeded rows' recovery noise is never written (an indexed copy is filled instead of the buffer): their recovered token is the residual's argmax",
        "vllm-project/vllm #10863 (the rejection sampler's _multinomial: q[non_seeded_indices].exponential_() fills a copy)",
        "sps",
        "given",
        "batch-law: unseeded requests beside seeded ones in small batches",
    )

    def noise(self, s, seeded_seqs, uniform_samples):
        u, e, e_bonus, extra = super().noise(s, seeded_seqs, uniform_samples)
        if seeded_seqs:
            unseeded = torch.ones(s.b, dtype=torch.bool)
            unseeded[list(seeded_seqs)] = False
            e[unseeded] = 1.0  # the unwritten buffer (torch.empty): here a constant
        return u, e, e_bonus, extra


class _SeededBatchDependent(_Reference):
    """vllm-project/vllm-ascend #13608 / #13755: a seeded request's output depends on the batch around it (here: its noise drawn batch-shaped from its generator and read at its slot)."""

    defect = Defect(
        "seeded-batch-dependent",
        "a seeded request's noise drawn as a batch-shaped tensor from its own generator and read at its slot: its output depends on the batch size and its position (the same batch twice is reproduced)",
        "vllm-project/vllm-ascend #13608 / #13755 (a seeded output depends on the batch); also vllm-project/vllm #51226, fixed by #51866 (seeds dropped in mixed batches on CPU)",
        "sps",
        "given",
        "batch-seeded: a seeded request in batches of other sizes and slots",
    )

    def noise(self, s, seeded_seqs, uniform_samples):
        u, e, e_bonus, extra = super().noise(s, None, uniform_samples)
        for row, gen in (seeded_seqs or {}).items():
            u[row] = torch.rand(s.b, s.k, generator=gen)[row]
            e[row] = torch.empty(s.b, s.k, s.v).exponential_(generator=gen)[row]
            e_bonus[row] = torch.empty(s.b, s.v).exponential_(generator=gen)[row]
        return u, e, e_bonus, extra


class _FirstSlotRows(_Reference):
    """vllm-project/vllm-ascend #16215: the first request of a batch reads its start offset from before the per-request offsets (here it lands on the last request's rows)."""

    defect = Defect(
        "first-slot-rows",
        "the first request of a batch reads its rows at an offset read before the start of the per-request offsets (here: the last request's rows); a batch of one request is right",
        "vllm-project/vllm-ascend #16215 (out-of-bounds reads before cu_num_draft_tokens in the rejection sampling kernels)",
        "sps",
        "given",
        "batch-law:first: the first slot of small batches of different cases",
    )

    def batch_rows(self, s, rows):
        if s.b <= 1:
            return rows
        rows = rows.clone()
        rows[0] = rows[s.b - 1]
        return rows


class _MaxDepthRow(_Reference):
    """No public report: verifier rows past a fixed depth read the last row the buffer holds (positions 3 and deeper verified against row 2)."""

    defect = Defect(
        "max-depth-row",
        "verifier rows past a fixed depth read the last row the buffer holds (positions 3 and deeper verified against row 2): right for k <= 3",
        "none public; the class of openvinotoolkit/openvino.genai #4190 (a token drawn from another position's row), at depth",
        "sps",
        "given",
        "the deep case (k = 8)",
    )

    def verifier_rows(self, s):
        idx = torch.clamp(torch.arange(s.k), max=2)
        return s.rows[:, idx]


class _DraftingNoiseReused(_Drafts, _Reference):
    """vllm-project/vllm #47386 (fixed by #54282): the drafter's sampling noise reused by the acceptance test and the recovery draw."""

    defect = Defect(
        "drafting-noise-reused",
        "engine-side drafting whose noise is reused: the acceptance uniform is the drafted token's race exponential (1 - exp(-E_n)) and the recovery race reuses the drafting exponentials; the drafts' law is right, the output leans towards the drafter",
        "vllm-project/vllm #47386, fixed by #54282 (the draft's sampling noise took the random offset of the acceptance uniform and the recovery draw)",
        "sps",
        "given",
        "the output law of every case (the drafts drawn by the sampler)",
        drafting=True,
    )

    def noise(self, s, seeded_seqs, uniform_samples):
        u, _e, e_bonus, extra = super().noise(s, seeded_seqs, uniform_samples)
        e = self._drafting_noise
        u = 1.0 - torch.exp(-e.gather(-1, s.n)[..., 0])
        return u, e, e_bonus, extra


#: The whole-request mutants, in the casebook's order.
WHOLE_REQUEST_MUTANTS = (
    _UnseededNoiseUnwritten,
    _SeededBatchDependent,
    _FirstSlotRows,
    _MaxDepthRow,
    _DraftingNoiseReused,
)

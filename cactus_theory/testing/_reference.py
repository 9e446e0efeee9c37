r"""The reference sampler's steps: a short, plain torch "SpS against h" sampler.

With :math:`h^{(n)}` the rule's target for the drafted token n, it accepts n when
:math:`u < h^{(n)}_n / p_n` (u uniform on [0, 1)) and otherwise emits a token of
:math:`\max(h^{(n)} - p, 0)` (normalized), which emits :math:`h_{alg}` (paper, Theorem 3):

* ``"sps"``: :math:`h^{(n)} = q` (lossless speculative sampling);
* ``"cactus-taylor"``: :math:`h^{(n)}_n = \gamma_n = \min(1, q_n + \sqrt{2\delta q_n(1-q_n)})`
  and :math:`h^{(n)}_j = q_j (1-\gamma_n)/(1-q_n)` for :math:`j \ne n` (Corollary 5).

Each step is a method of :class:`_Reference`; a mutant of the casebook (:mod:`._casebook`)
overrides the one step its bug changes. The random draws, in this order: the acceptance
uniforms ``[B, k]`` (unless given), the recovery race's exponentials ``[B, k, V]``, the bonus
race's ``[B, V]``, a mutant's extra ones; a seeded row redraws its own from its generator.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3, Corollary 5. Leviathan et al.
2023 (speculative sampling). FlashInfer's chain speculative sampling (``uniform_samples``).
"""

from __future__ import annotations

import types

from ._torch import torch

REFERENCE_RULES = ("sps", "cactus-taylor")


def _race(weights: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """A token of each row of ``weights`` (non-negative, not normalized): the exponential race."""
    return (weights / e).argmax(-1)


def _assemble(draft_token_ids, accepted, recovered, bonus_ids) -> torch.Tensor:
    """``[B, k+1]``: the accepted drafts, the recovered token (or the bonus token after k
    acceptances), then -1."""
    b, k = draft_token_ids.shape
    length = torch.where(accepted.all(1), k, (~accepted).to(torch.int64).argmax(1))
    pos = torch.arange(k + 1)[None, :]
    out = torch.full((b, k + 1), -1, dtype=torch.int64)
    ids = torch.cat([draft_token_ids.to(torch.int64), bonus_ids[:, None]], 1)
    out = torch.where(pos < length[:, None], ids, out)
    extra = torch.where(
        length == k, bonus_ids, recovered.gather(1, torch.clamp(length, max=k - 1)[:, None])[:, 0]
    )
    return out.scatter(1, length[:, None], extra[:, None])


class _Reference:
    """The correct sampler for ``rule`` (``"sps"`` or ``"cactus-taylor"`` at ``delta``), step
    by step; ``bonus`` is ``"given"`` (emit the handed-in bonus token) or ``"drawn"``
    (declared: ``draws_bonus_token``). A draft id -1 is never accepted (declared:
    ``takes_placeholder_drafts``)."""

    takes_placeholder_drafts = True

    def __init__(self, rule: str, delta: float | None, bonus: str):
        self.rule, self.delta, self.bonus = rule, delta, bonus
        self.draws_bonus_token = bonus == "drawn"

    def __call__(
        self,
        target_probs,
        draft_probs,
        draft_token_ids,
        bonus_token_ids,
        seeded_seqs=None,
        raw_target_probs=None,
        raw_draft_probs=None,
        uniform_samples=None,
    ):
        b, k = draft_token_ids.shape
        s = types.SimpleNamespace(b=b, k=k, v=target_probs.shape[-1])
        s.raw_q, s.raw_p = raw_target_probs, raw_draft_probs
        ids = draft_token_ids.to(torch.int64)
        accepted, recovered, e_bonus = self.verify(
            s, target_probs, draft_probs, ids, seeded_seqs, uniform_samples
        )
        if self.draws_bonus_token:
            bonus_ids = _race(self.bonus_row(s), e_bonus)
        else:
            bonus_ids = bonus_token_ids[:, 0].to(torch.int64)
        return _assemble(draft_token_ids, accepted, recovered, bonus_ids)

    def verify(self, s, target_probs, draft_probs, ids, seeded_seqs, uniform_samples):
        """Token-wise verification: (accepted ``[B, k]``, recovered ids ``[B, k]``, bonus noise)."""
        s.rows = self.batch_rows(s, target_probs.to(torch.float32))
        s.q = self.verifier_rows(s)
        s.p = draft_probs.to(torch.float32)
        s.placeholder = ids < 0  # a request that drafted fewer tokens: never accepted
        s.n = self.drafted(s, ids)[..., None]
        s.q = self.verifier(s)
        s.p = self.drafter(s)
        s.h = self.target(s)
        ratio = self.guard_placeholders(s, self.ratio(s))
        residual = self.residual(s)
        empty = residual.sum(-1, keepdim=True) <= 0  # only where acceptance is 1
        residual = torch.where(empty, s.h, residual)
        u, e, e_bonus, extra = self.noise(s, seeded_seqs, uniform_samples)
        return self.accept(s, u, ratio, extra), self.recover(residual, e, u), e_bonus

    # -- the rows the sampler reads ----------------------------------------------------------
    def batch_rows(self, s, rows):
        """Each request's verifier rows ``[B, k+1, V]`` (float32)."""
        return rows

    def verifier_rows(self, s):
        """The verifier rows of the k draft positions."""
        return s.rows[:, : s.k]

    def drafted(self, s, ids):
        """The drafted token ids the rows are read at (a placeholder -1 reads token 0)."""
        return ids.clamp(min=0)

    def verifier(self, s):
        """The verifier rows the acceptance test and the residual use."""
        return s.q

    def drafter(self, s):
        """The drafter rows the ratio and the residual use."""
        return s.p

    # -- the maths ---------------------------------------------------------------------------
    def target(self, s):
        """:math:`h^{(n)}`: q for SpS; Cactus's spike at n with the other tokens rescaled."""
        if self.rule != "cactus-taylor":
            return s.q
        q_n = s.q.gather(-1, s.n)
        gamma = torch.clamp(q_n + torch.sqrt(2 * self.delta * q_n * (1 - q_n)), max=1.0)
        return self.spike(s, q_n, gamma)

    def spike(self, s, q_n, gamma):
        """:math:`h^{(n)}_n = \\gamma_n`, :math:`h^{(n)}_j = q_j (1-\\gamma_n)/(1-q_n)`."""
        scale = torch.where(q_n < 1, (1 - gamma) / torch.clamp(1 - q_n, min=1e-30), torch.zeros_like(q_n))
        return (s.q * scale).scatter(-1, s.n, gamma)

    def ratio(self, s):
        """:math:`h^{(n)}_n / p_n` (1 where :math:`p_n = 0 < h_n`, 0 where both are 0)."""
        h_n, p_n = s.h.gather(-1, s.n)[..., 0], s.p.gather(-1, s.n)[..., 0]
        return torch.where(p_n > 0, h_n / torch.where(p_n > 0, p_n, 1.0), (h_n > 0).to(h_n.dtype))

    def guard_placeholders(self, s, ratio):
        """A placeholder draft's ratio is 0: it is never accepted."""
        return torch.where(s.placeholder, torch.zeros_like(ratio), ratio)

    def residual(self, s):
        """The recovery weights :math:`\\max(h^{(n)} - p, 0)`."""
        return torch.clamp(s.h - s.p, min=0)

    # -- the randomness ----------------------------------------------------------------------
    def extra_noise(self, k: int, v: int) -> list[tuple[int, ...]]:
        """Per-row shapes of a mutant's own exponential draws (none here)."""
        return []

    def noise(self, s, seeded_seqs, uniform_samples):
        """(uniforms [B, k], recovery exponentials [B, k, V], bonus exponentials [B, V], extra)."""
        b, k, v = s.b, s.k, s.v
        u = uniform_samples[:, :k].to(torch.float32) if uniform_samples is not None else torch.rand(b, k)
        e = torch.empty(b, k, v).exponential_()
        e_bonus = torch.empty(b, v).exponential_()
        extra = [torch.empty(b, *shape).exponential_() for shape in self.extra_noise(k, v)]
        for row, gen in (seeded_seqs or {}).items():
            u[row] = torch.rand(k, generator=gen)
            e[row] = torch.empty(k, v).exponential_(generator=gen)
            e_bonus[row] = torch.empty(v).exponential_(generator=gen)
            for x in extra:
                x[row] = torch.empty(*x.shape[1:]).exponential_(generator=gen)
        return u, e, e_bonus, extra

    def accept(self, s, u, ratio, extra):
        """The acceptance test: ``u < ratio``."""
        return u < ratio

    def recover(self, residual, e, u):
        """The recovered token: a draw from the residual (the exponential race)."""
        return _race(residual, e)

    def bonus_row(self, s):
        """The row a sampler that draws its own bonus token draws it from."""
        return s.rows[:, s.k]


class _BlockReference(_Reference):
    r"""Block verification (Sun et al., Algorithm 2), step by step; the steps and conventions of
    :mod:`._block` (whose :func:`~._block.block_law` is its exact law). With :math:`P_0 = 1`,
    :math:`P_i = \min(1, P_{i-1} q_i(n_i) / p_i(n_i))` and the block residual
    :math:`r_i = \max(P_{i-1} q_i - p_i, 0)`, it keeps :math:`\tau = \max\{i : u_i < \eta_i\}`
    drafts, :math:`\eta_i = Z_{i+1} / (Z_{i+1} + 1 - P_i)` with :math:`Z_{i+1} = \sum r_{i+1}`
    (:math:`\eta_k = P_k`), then emits a token of :math:`r_{\tau+1}` (or the bonus token).

    A placeholder draft -1 ends the block, as in vLLM's kernel: its ratio is 0 and its drafter
    row is read as zero, so the threshold before it is :math:`P_i` and its residual is q.
    """

    def __init__(self, bonus: str):
        super().__init__("block", None, bonus)

    def verify(self, s, target_probs, draft_probs, ids, seeded_seqs, uniform_samples):
        """Block verification: (kept drafts ``[B, k]``, recovered ids ``[B, k]``, bonus noise)."""
        k = s.k
        s.rows = target_probs.to(torch.float32)
        s.q = s.rows[:, :k]
        s.placeholder = torch.cumsum((ids < 0).to(torch.int64), 1) > 0  # at or after a -1
        s.n = ids.clamp(min=0)[..., None]
        s.p = draft_probs.to(torch.float32)
        s.p = self.drafter(s)
        s.p = torch.where(s.placeholder[..., None], torch.zeros_like(s.p), s.p)
        cum = self.cumulative(s)
        block = self.block_residual(s, cum)
        eta = self.thresholds(s, cum, block.sum(-1))
        residual = self.recovery(s, block)
        total = residual.sum(-1, keepdim=True)
        residual = torch.where(total > 0, residual, s.q)  # empty: the block never stops there
        u, e, e_bonus, _extra = self.noise(s, seeded_seqs, uniform_samples)
        passed = u < eta
        pos = torch.arange(1, k + 1)[None, :]
        tau = torch.where(passed, pos, torch.zeros_like(pos)).amax(1)
        kept = torch.arange(k)[None, :] < tau[:, None]
        return kept, _race(residual, e), e_bonus

    def drafter(self, s):
        """The drafter rows the ratios, thresholds and residuals use."""
        return s.p

    def cumulative(self, s):
        """``[B, k+1]``: :math:`P_0 = 1` and the clipped cumulative ratios (0 from a -1 on)."""
        q_n, p_n = s.q.gather(-1, s.n)[..., 0], s.p.gather(-1, s.n)[..., 0]
        ratio = torch.where(p_n > 0, q_n / torch.where(p_n > 0, p_n, 1.0), (q_n > 0).to(q_n.dtype))
        ratio = torch.where(s.placeholder, torch.zeros_like(ratio), ratio)
        cum = [torch.ones(s.b)]
        for i in range(s.k):
            cum.append(torch.clamp(cum[-1] * ratio[:, i], max=1.0))
        return torch.stack(cum, 1)

    def block_residual(self, s, cum):
        """``[B, k, V]``: :math:`\\max(P_{i-1} q_i - p_i, 0)` at each position."""
        return torch.clamp(cum[:, : s.k, None] * s.q - s.p, min=0)

    def recovery(self, s, block):
        """The weights of the token emitted after the kept drafts: the block residual."""
        return block

    def thresholds(self, s, cum, mass):
        """``[B, k]``: :math:`\\eta_i = Z_{i+1} / (Z_{i+1} + 1 - P_i)` (1 where that is 0/0),
        :math:`\\eta_k = P_k`; ``mass`` [B, k] holds :math:`Z_i`."""
        z, c = mass[:, 1:], cum[:, 1 : s.k]
        denom = z + 1.0 - c
        eta = torch.where(denom > 0, z / torch.where(denom > 0, denom, 1.0), torch.ones_like(z))
        return torch.cat([eta, cum[:, s.k :]], 1)

r"""A reference sampler with named defects: to see that a test catches what it should.

:func:`reference_sampler` is a short, plain torch implementation of the "SpS against h"
samplers (vLLM 0.7's layout): with :math:`h^{(n)}` the rule's target for the drafted token n,
it accepts n with probability :math:`\min(1, h^{(n)}_n / p_n)` and otherwise emits a token
of :math:`\max(h^{(n)} - p, 0)` (normalized), which emits :math:`h_{alg}` (paper, Theorem 3):

* ``"sps"``: :math:`h^{(n)} = q` (lossless speculative sampling);
* ``"cactus-taylor"``: :math:`h^{(n)}_n = \gamma_n = \min(1, q_n + \sqrt{2\delta q_n(1-q_n)})`
  and :math:`h^{(n)}_j = q_j (1-\gamma_n)/(1-q_n)` for :math:`j \ne n` (Corollary 5).

``defect`` plants one bug of the kind real samplers have had (:data:`DEFECTS`):

``"recovery-from-q"``
    the rejected draft's token comes from q instead of :math:`\max(h - p, 0)`;
``"bonus-off-by-one"``
    the verifier rows are read one position late: position i is verified against
    ``target_probs[:, i + 1]``, so the bonus row enters the verification;
``"swapped-ratio"``
    q and p swapped in the ratio: acceptance :math:`\min(1, p_n / h_n)`;
``"cactus-no-rescale"``
    Cactus's spike :math:`\gamma_n` set at n without rescaling the other tokens by
    :math:`(1-\gamma_n)/(1-q_n)` (recovery from :math:`\max(h - p, 0)` with the unscaled h).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3, Corollary 5. Leviathan et al.
2023 (speculative sampling).
"""

from __future__ import annotations

from ._torch import torch

__all__ = ["DEFECTS", "REFERENCE_RULES", "reference_sampler"]

DEFECTS = ("recovery-from-q", "bonus-off-by-one", "swapped-ratio", "cactus-no-rescale")
REFERENCE_RULES = ("sps", "cactus-taylor")


def reference_sampler(rule: str = "sps", *, delta: float | None = None, defect: str | None = None):
    r"""A plain torch sampler for ``rule``, correct or with one planted ``defect``.

    Parameters
    ----------
    rule : {"sps", "cactus-taylor"}
    delta : float, optional
        Cactus's per-draft budget :math:`\delta > 0` (required for ``"cactus-taylor"``).
    defect : str, optional
        One of :data:`DEFECTS` (``"cactus-no-rescale"`` only with ``"cactus-taylor"``), or
        None for the correct sampler.

    Returns
    -------
    callable
        ``fn(target_probs [B, k+1, V], draft_probs [B, k, V], draft_token_ids [B, k],
        bonus_token_ids [B, 1], seeded_seqs=None) -> [B, k+1]`` int64 (accepted drafts, the
        recovered or bonus token, then -1), for
        :func:`~cactus_theory.testing.adapters.callable_adapter`.

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
    ) -> torch.Tensor:
        b, k = draft_token_ids.shape
        q = target_probs[:, 1:] if defect == "bonus-off-by-one" else target_probs[:, :k]
        q = q.to(torch.float32)
        p = draft_probs.to(torch.float32)
        n = draft_token_ids.to(torch.int64)[..., None]
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
        residual = q if defect == "recovery-from-q" else torch.clamp(h - p, min=0)
        empty = residual.sum(-1, keepdim=True) <= 0  # only where acceptance is 1
        residual = torch.where(empty, h, residual)
        u = torch.rand(b, k)
        e = torch.empty(b, k, residual.shape[-1]).exponential_()
        for row, gen in (seeded_seqs or {}).items():
            u[row] = torch.rand(k, generator=gen)
            e[row] = torch.empty(k, residual.shape[-1]).exponential_(generator=gen)
        accepted = u < ratio
        recovered = (residual / e).argmax(-1)  # exponential race
        length = torch.where(accepted.all(1), k, (~accepted).to(torch.int64).argmax(1))
        pos = torch.arange(k + 1)[None, :]
        out = torch.full((b, k + 1), -1, dtype=torch.int64)
        ids = torch.cat([draft_token_ids.to(torch.int64), bonus_token_ids.to(torch.int64)], 1)
        out = torch.where(pos < length[:, None], ids, out)
        extra = torch.where(
            length == k,
            bonus_token_ids[:, 0].to(torch.int64),
            recovered.gather(1, torch.clamp(length, max=k - 1)[:, None])[:, 0],
        )
        return out.scatter(1, length[:, None], extra[:, None])

    sampler.__name__ = f"reference_{rule}" + (f"_{defect}" if defect else "")
    return sampler

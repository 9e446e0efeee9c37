r"""Cactus: constrained acceptance speculative sampling (Hao & Mou, ICLR 2026).

For each candidate drafted token n, the per-draft target raises n to :math:`\gamma_n` and
rescales the rest in proportion to q (Theorem 2):

.. math::
    h^{(n)}_n = \gamma_n, \quad h^{(n)}_i = q_i \frac{1-\gamma_n}{1-q_n}\ (i \ne n), \quad
    a_n = \min(1, \gamma_n / p_n), \quad r^{(n)} = \mathrm{normalize}(\max(0, h^{(n)} - p)).

Two ways to get :math:`\gamma_n`:

- ``cactus-taylor`` (Corollary 5, as the official code computes it):
  :math:`\gamma_n = \min(1, q_n + \sqrt{2\delta q_n(1-q_n)})`.
- ``cactus-exact`` (Theorem 2): the largest root in :math:`[q_n, 1]` of the two-point
  divergence :math:`= \delta`, capped at 1, for any divergence of
  :mod:`cactus_theory.divergences` (knob ``divergence``, default KL). The names
  ``cactus-exact-<divergence>`` (``cactus-exact-kl``, ``cactus-exact-reverse-kl``, ...) are
  aliases with the knob fixed.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
delta budget (``delta``). The accept test reads only q_n and p_n; the recovery reads p.

References
----------
Hao & Mou, "Cactus: Accelerating Auto-Regressive Decoding with Constrained Acceptance
Speculative Sampling", ICLR 2026, arXiv 2604.04987: Theorem 2, Corollary 5; official code
github.com/MANGA-UOFA/Cactus (``cactus.py::solve_constraint``).
"""

from __future__ import annotations

import math

import numpy as np
from array_api_compat import array_namespace

from ..conventions import EMPTY_RESIDUAL_MASS
from ..divergences import DIVERGENCES
from ..solvers.spike import exact_spike, spike_scale, taylor_spike
from .plans import SpikePlan, gather, ratio_acceptance, residual_distribution, spike_target_at
from .registry import Knob, Rule, RuleSpec, register, register_alias

__all__ = ["CactusTaylor", "CactusExact", "SMOOTH_DIVERGENCES"]

#: Divergences with a second-order expansion at h = q (usable by the Taylor rule).
SMOOTH_DIVERGENCES = tuple(n for n, d in DIVERGENCES.items() if math.isfinite(d.f_second_at_one))

_DELTA = Knob("delta", 1.0, 0.0, math.inf, doc="divergence budget per draft (0 gives SpS)")


class _CactusBase(Rule):
    """Shared by both Cactus rules: gamma is an elementwise function of q_n."""

    def __init__(self, delta: float, divergence: str = "kl"):
        self.delta = delta
        self.divergence = divergence

    def spike(self, q_n):
        """gamma for verifier probabilities ``q_n`` (any shape; array-agnostic)."""
        raise NotImplementedError

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``SpikePlan`` with gamma for every candidate token (array-agnostic)."""
        return SpikePlan(target_probs, draft_probs, self.spike(target_probs))

    def accept_probs_at(self, target_probs, draft_probs, token_ids, *, raw_target_probs=None,
                        raw_draft_probs=None):
        r"""Acceptance :math:`\min(1, \gamma(q_n)/p_n)` of the drafted tokens only.

        Equal to ``plan(...).accept_probs_at(token_ids)`` but evaluates gamma at the drafted
        tokens alone (shape ``token_ids.shape``) instead of the whole vocabulary: the samplers'
        accept path uses it (declared by ``RuleSpec.fast_accept``).
        """
        q_n = gather(target_probs, token_ids)
        return ratio_acceptance(self.spike(q_n), gather(draft_probs, token_ids))


    def accept_probs_from_values(self, q_n, p_n):
        r"""Acceptance :math:`\min(1, \gamma(q_n)/p_n)` from the drafted tokens' probabilities.

        The samplers call it with row-normalized ``q_n``, ``p_n`` (shape [B, k]) gathered at
        the drafted tokens, so they never normalize the [B, k, V] inputs.
        """
        return ratio_acceptance(self.spike(q_n), p_n)

    def recovery_at(self, target_probs, draft_probs, token_ids, *, raw_target_probs=None,
                    raw_draft_probs=None):
        r"""Recovery :math:`r^{(n)} = \mathrm{normalize}(\max(0, h^{(n)} - p))` of the drafted tokens.

        Equal to ``plan(...).recovery_at(token_ids)`` but evaluates gamma at the drafted tokens
        only (shape ``token_ids.shape``): the samplers' recovery path uses it.
        """
        gamma_n = self.spike(gather(target_probs, token_ids))
        return residual_distribution(spike_target_at(target_probs, token_ids, gamma_n),
                                     draft_probs)

    def recovery_weights_at(self, target_probs, draft_probs, token_ids, *, raw_target_probs=None,
                            raw_draft_probs=None):
        r"""Un-normalized recovery weights of the drafted tokens: :math:`\max(0, h^{(n)} - p)`.

        :math:`h^{(n)}_i = c_n q_i` with :math:`h^{(n)}_n = \gamma_n` (Theorem 2), built with
        one scaled copy of q and the spike written in place (no one-hot mask); where the
        residual is empty, :math:`h^{(n)}` itself (convention 3). Proportional to
        :meth:`recovery_at`; gamma is evaluated at the drafted tokens only. The samplers draw
        from these weights (inverse CDF).
        """
        xp = array_namespace(target_probs, draft_probs)
        q_n = gather(target_probs, token_ids)
        gamma_n = self.spike(q_n)
        h = spike_scale(q_n, gamma_n)[..., None] * target_probs
        idx = xp.astype(token_ids, xp.int64)[..., None]
        if hasattr(h, "scatter_"):      # torch: write gamma_n at n in place
            h.scatter_(-1, idx, gamma_n[..., None].to(h.dtype))
            res = (h - draft_probs).clamp_min_(0.0)
        else:                           # numpy (the analysis never calls this; tests do)
            np.put_along_axis(h, idx, gamma_n[..., None], axis=-1)
            res = np.maximum(h - draft_probs, 0.0)
        empty = xp.sum(res, axis=-1, keepdims=True) <= EMPTY_RESIDUAL_MASS
        return xp.where(empty, h, res)


class CactusTaylor(_CactusBase):
    r"""Cactus with Corollary 5's Taylor point :math:`\gamma_n = \min(1, q_n + \sqrt{2\delta q_n(1-q_n)})`."""

    def spike(self, q_n):
        """Corollary 5's gamma for ``q_n`` (array-agnostic)."""
        return taylor_spike(q_n, self.delta, self.divergence)


class CactusExact(_CactusBase):
    """Cactus with Theorem 2's exact gamma: two-point ``D(h^(n) || q) = delta``, capped at 1."""

    def spike(self, q_n):
        """Theorem 2's gamma for ``q_n`` (array-agnostic)."""
        return exact_spike(q_n, self.delta, self.divergence)


register(RuleSpec(
    name="cactus-taylor", factory=CactusTaylor,
    knobs=(_DELTA, Knob("divergence", "kl", choices=SMOOTH_DIVERGENCES,
                        doc="divergence whose 2nd-order expansion gives gamma (paper: KL)")),
    sps_knobs={"delta": 0.0}, deterministic=False, reads_draft=True, needs_raw=False,
    family="spike", fast_accept=True,
    summary="Cactus, Corollary 5: gamma = min(1, q_n + sqrt(2 delta q_n (1 - q_n)))",
    reference="Hao & Mou, ICLR 2026, arXiv 2604.04987, Corollary 5",
))

register(RuleSpec(
    name="cactus-exact", factory=CactusExact,
    knobs=(_DELTA, Knob("divergence", "kl", choices=tuple(DIVERGENCES),
                        doc="divergence of the per-draft budget D(h^(n) || q) <= delta (paper: KL)")),
    sps_knobs={"delta": 0.0}, deterministic=False, reads_draft=True, needs_raw=False,
    family="spike", fast_accept=True,
    summary="Cactus, Theorem 2: largest gamma with two-point divergence = delta",
    reference="Hao & Mou, ICLR 2026, arXiv 2604.04987, Theorem 2",
))

for _name in DIVERGENCES:
    register_alias(f"cactus-exact-{_name.replace('_', '-')}", "cactus-exact", divergence=_name)

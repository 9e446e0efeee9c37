r"""The structure every single-draft verification rule produces: a plan.

A single-draft rule is, for each candidate drafted token n, an acceptance probability
:math:`a_n` and a recovery distribution :math:`r^{(n)}` used on rejection. The emitted token
then follows (paper, Theorem 3)

.. math:: h_{alg}(j) = p_j a_j + \sum_n p_n (1 - a_n) r^{(n)}_j.

Rules come in three structural families, and a plan keeps that structure so that no consumer
ever materializes a dense :math:`h^{(n)}` for every n (O(V^2)):

:class:`TargetPlan`
    One target h for every draft (SpS: h = q; interpolation; Mentored decoding; cascades;
    top-k's un-normalized indicator). :math:`a_n = \min(1, h_n/p_n)`,
    :math:`r = \mathrm{normalize}(\max(0, h - p))`.
:class:`SpikePlan`
    Cactus's structure (Theorem 2): :math:`h^{(n)}_n = \gamma_n` and
    :math:`h^{(n)}_i = c_n q_i` for i != n, :math:`c_n = (1-\gamma_n)/(1-q_n)`. The plan stores
    only :math:`\gamma` (one number per candidate token). :math:`a_n = \min(1, \gamma_n/p_n)`,
    :math:`r^{(n)} = \mathrm{normalize}(\max(0, h^{(n)} - p))`.
:class:`DecisionPlan`
    An explicit acceptance per candidate token (often 0/1) and one recovery distribution for
    every draft (typical acceptance, fuzzy speculative decoding).

Every plan holds the (processed) ``target_probs`` q and ``draft_probs`` p it was built from.
All functions here are array-agnostic (numpy or torch, via the array API) and implement the
conventions of :mod:`cactus_theory.conventions` (p_n = 0, empty residual, q_n = 1, V = 1) once,
for the analysis and the samplers alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Union

import numpy as np
from array_api_compat import array_namespace

from .._validation import as_token_ids

from ..conventions import EMPTY_RESIDUAL_MASS
from ..solvers.spike import spike_scale

__all__ = [
    "TargetPlan",
    "SpikePlan",
    "DecisionPlan",
    "Plan",
    "ratio_acceptance",
    "residual_distribution",
    "residual_weights",
    "one_hot",
    "gather",
    "spike_target_at",
    "RowTarget",
    "split_blocks",
    "block_reduce",
    "block_maxima",
    "two_level_sum",
    "first_argmax",
]


def gather(x, token_ids):
    """``x[..., token_ids]`` along the last axis: ``token_ids`` has shape ``x.shape[:-1]``.

    numpy input: the ids are validated (integers in ``[0, V)``; ValueError naming
    ``token_ids``), so a fractional id is never truncated and -1 never wraps to the last
    token. torch input (the samplers) is used as given: their entry validation has clamped
    and flagged the ids on the device.
    """
    if isinstance(x, np.ndarray):
        token_ids = as_token_ids(token_ids, x.shape[-1], x.shape[:-1], "token_ids")
    xp = array_namespace(x)
    idx = xp.astype(token_ids, xp.int64)[..., None]
    return xp.take_along_axis(x, idx, axis=-1)[..., 0]


def one_hot(token_ids, vocab_size: int, like):
    """Float one-hot rows ``[..., V]`` of the dtype/device of ``like``."""
    xp = array_namespace(like)
    ar = xp.arange(vocab_size, device=getattr(like, "device", None))
    return xp.astype(ar == xp.astype(token_ids, xp.int64)[..., None], like.dtype)


def ratio_acceptance(h_n, p_n):
    r"""``min(1, h_n / p_n)`` with the p_n = 0 convention (1 if h_n > 0 else 0).

    Parameters
    ----------
    h_n, p_n : array
        Target and drafter probabilities of the candidate drafted token(s); same shape.
    """
    xp = array_namespace(h_n, p_n)
    pos = p_n > 0
    safe_p = xp.where(pos, p_n, xp.ones_like(p_n))
    ratio = xp.minimum(h_n, safe_p) / safe_p  # <= 1, so no overflow for subnormal p_n
    limit = xp.astype(h_n > 0, h_n.dtype)
    return xp.where(pos, ratio, limit)


def residual_weights(h, p):
    r"""Un-normalized recovery weights: ``max(0, h - p)``, or ``h`` where that residual is empty.

    :func:`residual_distribution` is these weights divided by their sum (convention 3); the
    samplers draw from the weights directly (inverse CDF), skipping the division.
    """
    xp = array_namespace(h, p)
    if hasattr(h, "clamp_min_"):    # torch: in place, and h added only on empty rows
        res = (h - p).clamp_min_(0.0)
        empty = res.sum(-1, keepdim=True) <= EMPTY_RESIDUAL_MASS
        # an empty residual row is all zeros: 0 + h = h there, res + 0 h = res elsewhere
        return res.addcmul_(h, empty.to(res.dtype))
    res = xp.clip(h - p, 0.0, None)
    empty = xp.sum(res, axis=-1, keepdims=True) <= EMPTY_RESIDUAL_MASS
    return xp.where(empty, h, res)


def residual_distribution(h, p):
    r"""``normalize(max(0, h - p))`` over the last axis; ``normalize(h)`` if the residual is empty.

    ``h`` may be un-normalized (top-k's indicator target). See convention 3.
    """
    xp = array_namespace(h, p)
    res = xp.clip(h - p, 0.0, None)
    mass = xp.sum(res, axis=-1, keepdims=True)
    empty = mass <= EMPTY_RESIDUAL_MASS
    h_mass = xp.sum(h, axis=-1, keepdims=True)
    res = xp.where(empty, h, res)
    mass = xp.where(empty, h_mass, mass)
    return res / mass


@dataclass
class RowTarget:
    r"""A target-family rule's h on un-normalized rows, elementwise (the compiled samplers).

    Returned by ``Rule.recovery_target_from_rows``. The samplers' compiled core evaluates it
    at the drafted entries (the acceptance :math:`\min(1, h_n/p_n)`), reads the recovery
    rows once for the block sums of :math:`\max(0, h - p)` and h, and evaluates h again at
    the 256 columns of the block it draws from
    (:func:`~cactus_theory.samplers.blocked.residual_block_weights`).

    Attributes
    ----------
    fn : callable
        ``fn(x, y, *params)`` -> h at verifier entries ``x`` and drafter entries ``y``
        (un-normalized, float32, shape [..., m]), in probability units: elementwise, with
        the per-row constants ``params`` (no reduction over m, no column index). q and p
        are written ``x * (1.0 / s_q)`` and ``y * (1.0 / s_p)``, as the samplers write p in
        the residual, so that h = p holds bit for bit where it holds exactly (an empty
        residual, convention 3, rather than rounding noise).
    params : tuple
        Per-row constants, arrays of shape [..., 1] (the rows' leading shape), or Python
        scalars shared by every row.
    spike_ids : array or None
        [..., 1] int64: one column per row where h is ``spike_values`` instead (Cactus's
        drafted token, :math:`h^{(n)}_n = \gamma_n`).
    spike_values : array or None
        [..., 1]: h at ``spike_ids``.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
    h target.
    """

    fn: Callable
    params: tuple = ()
    spike_ids: Optional[Any] = None
    spike_values: Optional[Any] = None

    def h(self, x, y):
        """h at entries ``x``, ``y`` (shape [..., m]; the spike not applied)."""
        return self.fn(x, y, *self.params)

    def index(self, *idx):
        """The target of the rows ``rows[idx]`` (the constants indexed by ``idx``, e.g. the
        recovery positions ``(rows, pos)`` of [B, k] rows)."""
        def at(a):   # arrays indexed, Python scalars (and None) as they are
            return a[idx] if hasattr(a, "shape") else a
        return RowTarget(self.fn, tuple(at(a) for a in self.params), at(self.spike_ids),
                         at(self.spike_values))


def spike_target_at(target_probs, token_ids, gamma_n):
    r"""Theorem 2's per-draft target for the drafted tokens from their :math:`\gamma_n` alone.

    :math:`h^{(n)}_n = \gamma_n`, :math:`h^{(n)}_i = c_n q_i` with
    :math:`c_n = (1-\gamma_n)/(1-q_n)`; ``gamma_n`` has shape ``token_ids.shape``. Lets a
    sampler build the recovery of the drafted token without gamma for every candidate.
    """
    xp = array_namespace(target_probs)
    q = target_probs
    c = spike_scale(gather(q, token_ids), gamma_n)
    mask = one_hot(token_ids, q.shape[-1], q)
    return xp.where(mask > 0, gamma_n[..., None], c[..., None] * q)


@dataclass(frozen=True)
class TargetPlan:
    """One target ``target`` (h, shape [..., V], possibly un-normalized) for every draft."""

    target_probs: Any
    draft_probs: Any
    target: Any

    def accept_probs(self):
        """Acceptance ``a_n = min(1, h_n/p_n)`` of every candidate token, shape [..., V]."""
        return ratio_acceptance(self.target, self.draft_probs)

    def accept_probs_at(self, token_ids):
        """Acceptance of the drafted tokens ``token_ids`` (shape [...])."""
        return ratio_acceptance(gather(self.target, token_ids), gather(self.draft_probs, token_ids))

    def recovery_at(self, token_ids):
        """Recovery distribution r for the drafted tokens (independent of n), shape [..., V]."""
        return residual_distribution(self.target, self.draft_probs)

    def recovery_weights_at(self, token_ids):
        """Un-normalized recovery weights (:func:`residual_weights`), shape [..., V]."""
        return residual_weights(self.target, self.draft_probs)


class SpikePlan:
    r"""Cactus structure: ``spike`` holds gamma_n for every candidate token n, shape [..., V].

    Parameters
    ----------
    target_probs, draft_probs : array, shape (..., V)
        q and p.
    spike : array, shape (..., V), optional
        :math:`\gamma_n` for every candidate token.
    spike_fn : callable, optional
        Instead of ``spike``: an elementwise function of q that gives it, called on first use
        of :attr:`spike` (the exact rule's root over the whole vocabulary, which the
        acceptance and the emitted law never need whole), or on the drafted tokens' q_n alone
        (:meth:`target_at`).
    effective_fn : callable, optional
        ``effective_fn(q, p)``: :meth:`effective_spike` without ``spike``
        (:func:`cactus_theory.solvers.spike.capped_exact_spike` for the exact KL root).

    Plans compare by identity; ``spike``, once computed, is kept.
    """

    __slots__ = ("target_probs", "draft_probs", "_spike", "_spike_fn", "_effective",
                 "_effective_fn")

    def __init__(self, target_probs, draft_probs, spike=None, *, spike_fn=None,
                 effective_fn=None):
        if (spike is None) == (spike_fn is None):
            raise ValueError("spike: give the values or spike_fn (one of them)")
        self.target_probs, self.draft_probs = target_probs, draft_probs
        self._spike, self._spike_fn = spike, spike_fn
        self._effective, self._effective_fn = None, effective_fn

    def __repr__(self):
        state = "given" if self._spike_fn is None else (
            "computed" if self._spike is not None else "not computed yet")
        return f"SpikePlan(shape={tuple(self.draft_probs.shape)}, spike {state})"

    @property
    def spike(self):
        r""":math:`\gamma_n` for every candidate token n, shape [..., V]."""
        if self._spike is None:
            self._spike = self._spike_fn(self.target_probs)
        return self._spike

    def spike_at(self, token_ids):
        r""":math:`\gamma_n` at the drafted tokens ``token_ids`` (shape [...]), without the
        whole vocabulary's when it has not been computed (``spike_fn`` is elementwise)."""
        if self._spike is None:
            return self._spike_fn(gather(self.target_probs, token_ids))
        return gather(self._spike, token_ids)

    def effective_spike(self):
        r"""What the acceptance and the emitted law read of :math:`\gamma`, shape [..., V].

        :math:`\min(\gamma_n, p_n)` where :math:`p_n > 0`, and 1 or 0 as :math:`\gamma_n > 0`
        where :math:`p_n = 0`. In place of :math:`\gamma`, :func:`ratio_acceptance` gives the
        same acceptance bit for bit, and so does the emitted law
        (:func:`cactus_theory.analysis.one_step.emitted_distribution`): it reads
        :math:`\gamma_n` only through :math:`a_n`, :math:`\max(0, p_n - \gamma_n)` and, for
        the drafts with :math:`\gamma_n < p_n`, :math:`c_n`. Tested for every spike rule.
        """
        if self._effective is None:
            if self._effective_fn is not None and self._spike is None:
                self._effective = self._effective_fn(self.target_probs, self.draft_probs)
            else:
                xp = array_namespace(self.draft_probs)
                g, p = self.spike, self.draft_probs
                self._effective = xp.where(p > 0, xp.minimum(g, p), xp.astype(g > 0, g.dtype))
        return self._effective

    def spike_for_emission(self):
        r""":math:`\gamma` when known or when nothing cheaper is (no ``effective_fn``), else
        :meth:`effective_spike`: the same acceptance and emitted law, bit for bit."""
        if self._spike is not None or self._effective_fn is None:
            return self.spike
        return self.effective_spike()

    def accept_probs(self):
        """Acceptance ``a_n = min(1, gamma_n/p_n)`` of every candidate token, shape [..., V]."""
        return ratio_acceptance(self.spike_for_emission(), self.draft_probs)

    def accept_probs_at(self, token_ids):
        """Acceptance of the drafted tokens ``token_ids`` (shape [...])."""
        return ratio_acceptance(self.spike_at(token_ids), gather(self.draft_probs, token_ids))

    def target_at(self, token_ids):
        """The per-draft target :math:`h^{(n)}` for the drafted tokens, shape [..., V]."""
        return spike_target_at(self.target_probs, token_ids, self.spike_at(token_ids))

    def recovery_at(self, token_ids):
        """Recovery :math:`r^{(n)} = normalize(max(0, h^{(n)} - p))`, shape [..., V]."""
        return residual_distribution(self.target_at(token_ids), self.draft_probs)

    def recovery_weights_at(self, token_ids):
        """Un-normalized recovery weights (:func:`residual_weights`), shape [..., V]."""
        return residual_weights(self.target_at(token_ids), self.draft_probs)


@dataclass(frozen=True)
class DecisionPlan:
    """Explicit acceptance ``accept`` [..., V] per candidate and one ``recovery`` [..., V]."""

    target_probs: Any
    draft_probs: Any
    accept: Any
    recovery: Any

    def accept_probs(self):
        """The acceptance of every candidate token, shape [..., V]."""
        return self.accept

    def accept_probs_at(self, token_ids):
        """Acceptance of the drafted tokens ``token_ids`` (shape [...])."""
        return gather(self.accept, token_ids)

    def recovery_at(self, token_ids):
        """The recovery distribution (independent of the draft), shape [..., V]."""
        return self.recovery

    def recovery_weights_at(self, token_ids):
        """The recovery distribution itself (already normalized), shape [..., V]."""
        return self.recovery


Plan = Union[TargetPlan, SpikePlan, DecisionPlan]


#: Block length of :func:`first_argmax`'s two-level search (and the default of
#: :func:`block_maxima`).
ARGMAX_BLOCK = 256


def split_blocks(x, blk: int = ARGMAX_BLOCK):
    """The last axis of ``x`` as its whole ``blk``-entry blocks and the rest, both views.

    Returns ``(whole, tail)``: ``whole`` is ``x[..., :nb * blk]`` viewed as [..., nb, blk]
    with nb = V // blk (None when nb = 0), ``tail`` is ``x[..., nb * blk:]``, [..., V % blk]
    (None when blk divides V). The loop shape of every blocked row pass here and in the
    samplers (row sums, block sums and maxima, the divergence bounds' moments): a compiled
    kernel reads passes of the same shape in one loop.
    """
    V = x.shape[-1]
    nb = V // blk
    whole = x[..., :nb * blk].unflatten(-1, (nb, blk)) if nb else None
    tail = x[..., nb * blk:] if nb * blk < V else None
    return whole, tail


def block_reduce(x, op: str, blk: int = ARGMAX_BLOCK):
    """Sums (``op="sum"``) or maxima (``op="amax"``) of consecutive ``blk``-entry blocks of
    the last axis (the last block may be shorter), [..., ceil(V / blk)], in x's dtype: one
    vectorized read of the rows."""
    import torch

    whole, tail = split_blocks(x, blk)
    parts = [] if whole is None else [getattr(whole, op)(-1)]
    if tail is not None:
        parts.append(getattr(tail, op)(-1, keepdim=True))
    return parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)


def block_maxima(x, blk: int = ARGMAX_BLOCK):
    """Maxima of consecutive ``blk``-entry blocks of the last axis (the last block may be
    shorter), [..., ceil(V / blk)]: :func:`block_reduce` with ``"amax"``."""
    return block_reduce(x, "amax", blk)


def two_level_sum(x, fn=None, blk: int = ARGMAX_BLOCK):
    """Row sums of ``fn(x)`` (elementwise; None: x) over the last axis, taken in two levels:
    float32 sums of consecutive ``blk``-entry blocks (the last block may be shorter), then
    their sum. The loop shape of the samplers' row sums
    (:func:`~cactus_theory.samplers.fused.stats`), so that a compiled kernel reads such a
    row pass in the same loop (``fn`` is applied to the blocked views of x: a blocked view
    of a computed tensor would be stored first); a sum of terms of one sign errs by at most
    about (blk + V / blk) float32 eps, relative."""
    fn = (lambda z: z) if fn is None else fn
    whole, tail = split_blocks(x, blk)
    total = None if whole is None else fn(whole).sum(-1).sum(-1)
    if tail is not None:
        tail_sum = fn(tail).sum(-1)
        total = tail_sum if total is None else total + tail_sum
    return total


def first_argmax(x):
    r"""``torch.argmax(x, dim=-1)`` (the lowest index of the row maximum) in two levels.

    The maxima of 256-entry blocks (one vectorized read; a NaN entry makes its block's and
    the row's maximum NaN), the first block whose maximum equals the row maximum, then the
    first entry of that block equal to it: the lowest index attaining the maximum, since
    every earlier block's maximum is below it. Rows holding a NaN (invalid input, which the
    samplers flag) give an index in range, not necessarily torch's. Compiled CPU kernels
    reduce an argmax at about a third of a maximum's speed (1.16 against 0.32 ms for [8,
    151,936] float32 rows); this costs one maximum's read plus 256 entries per row.
    """
    import torch

    V = x.shape[-1]
    blk = ARGMAX_BLOCK
    if V <= 4 * blk:
        return torch.argmax(x, dim=-1)
    maxima = block_maxima(x, blk)
    top = maxima.amax(-1, keepdim=True)
    # the first block reaching the maximum (argmax of a 0/1 row: its first 1)
    block = (maxima == top).to(torch.uint8).argmax(-1, keepdim=True)
    idx = block * blk + torch.arange(blk, device=x.device)
    inside = idx < V
    cand = torch.gather(x, -1, idx.clamp(max=V - 1))
    return (block[..., 0] * blk
            + ((cand == top) & inside).to(torch.uint8).argmax(-1))

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

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from array_api_compat import array_namespace
from array_api_compat import device as array_device

from .._validation import token_ids_of
from ..conventions import EMPTY_RESIDUAL_MASS
from ..solvers.internal import spike_scale

__all__ = ["TargetPlan", "SpikePlan", "DecisionPlan", "RowTarget"]


def _gather(x, token_ids):
    """``x[..., token_ids]`` along the last axis: ``token_ids`` has shape ``x.shape[:-1]``.

    numpy input: the ids are validated (integers in ``[0, V)``; ValueError naming
    ``token_ids``), so a fractional id is never truncated and -1 never wraps to the last
    token. torch input (the samplers) is used as given: their entry validation has clamped
    and flagged the ids on the device.
    """
    token_ids = token_ids_of(x, token_ids)
    xp = array_namespace(x)
    idx = xp.astype(token_ids, xp.int64)[..., None]
    return xp.take_along_axis(x, idx, axis=-1)[..., 0]


def _one_hot(token_ids, vocab_size: int, like):
    """Float one-hot rows ``[..., V]`` of the dtype/device of ``like``."""
    xp = array_namespace(like)
    ar = xp.arange(vocab_size, device=array_device(like))
    return xp.astype(ar == xp.astype(token_ids, xp.int64)[..., None], like.dtype)


def _ratio_acceptance(h_n, p_n):
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


def _residual_weights(h, p):
    r"""Un-normalized recovery weights: ``max(0, h - p)``, or ``h`` where that residual is empty.

    :func:`_residual_distribution` is these weights divided by their sum (convention 3); the
    samplers draw from the weights directly (inverse CDF), skipping the division.
    """
    xp = array_namespace(h, p)
    res = xp.clip(h - p, 0.0, None)
    empty = xp.sum(res, axis=-1, keepdims=True) <= EMPTY_RESIDUAL_MASS
    return xp.where(empty, h, res)


def _residual_distribution(h, p):
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

    The target family's declaration on the samplers' un-normalized rows: built from a
    rule's elementwise target (``Rule.elementwise_target``), from a spike (Theorem 2's
    :math:`h^{(n)}`) or by a rule's kernel (:mod:`cactus_theory.samplers._kernels`). The
    samplers' compiled core evaluates it at the drafted entries (the acceptance
    :math:`\min(1, h_n/p_n)`), reads the recovery rows once for the block sums of
    :math:`\max(0, h - p)` and h, and evaluates h again at the 256 columns of the block it
    draws from (:func:`~cactus_theory.samplers._blocked.residual_block_weights`).

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
    spike_ids: Any | None = None
    spike_values: Any | None = None

    def h(self, x, y):
        """h at entries ``x``, ``y`` (shape [..., m]; the spike not applied)."""
        return self.fn(x, y, *self.params)

    def index(self, *idx):
        """The target of the rows ``rows[idx]`` (the constants indexed by ``idx``, e.g. the
        recovery positions ``(rows, pos)`` of [B, k] rows)."""

        def at(a):  # arrays indexed, Python scalars (and None) as they are
            return a if a is None or isinstance(a, numbers.Number) else a[idx]

        return RowTarget(
            self.fn, tuple(at(a) for a in self.params), at(self.spike_ids), at(self.spike_values)
        )


def _spike_row_scale(target_probs, token_ids, gamma_n, target_sums=None):
    r"""Theorem 2's factor of the verifier off the spike, :math:`c_n / s_q` with
    :math:`c_n = (1-\gamma_n)/(1-q_n)`, on rows ``target_probs`` = q s_q (``target_sums``
    s_q of shape ``token_ids.shape``; None: normalized rows, s_q = 1). The one definition the
    spike's per-draft targets (here and in the samplers' kernels) scale q by."""
    ts = 1.0 if target_sums is None else target_sums
    return spike_scale(_gather(target_probs, token_ids) / ts, gamma_n) / ts


def _spike_target_at(target_probs, token_ids, gamma_n, target_sums=None):
    r"""Theorem 2's per-draft target for the drafted tokens from their :math:`\gamma_n` alone.

    :math:`h^{(n)}_n = \gamma_n`, :math:`h^{(n)}_i = c_n q_i` with
    :math:`c_n = (1-\gamma_n)/(1-q_n)` (:func:`_spike_row_scale`); ``gamma_n`` has shape
    ``token_ids.shape``. With ``target_sums`` the rows are un-normalized (q = ``target_probs
    / target_sums``, the division folded into :math:`c_n`). Lets a sampler build the recovery
    of the drafted token without gamma for every candidate.
    """
    xp = array_namespace(target_probs)
    q = target_probs
    c = _spike_row_scale(q, token_ids, gamma_n, target_sums)
    mask = _one_hot(token_ids, q.shape[-1], q)
    return xp.where(mask > 0, gamma_n[..., None], c[..., None] * q)


def _spike_target_(target_rows, token_ids, gamma_n, target_sums=None, valid=None):
    r"""Theorem 2's per-draft target written into torch rows ``target_rows`` (= q s_q) in place:
    :math:`c_n q_i` off the spike (:func:`_spike_row_scale`) and :math:`\gamma_n` at the
    drafted token; rows where ``valid`` (bool, ``token_ids.shape``) is False are left as they
    are. Returns the rows. The one place the torch consumers (the samplers' spike kernel, the
    vLLM rows) build :math:`h^{(n)}`; :func:`_spike_target_at` is its array-agnostic,
    copy-making twin (the plan's)."""
    xp = array_namespace(target_rows)
    scale = _spike_row_scale(target_rows, token_ids, gamma_n, target_sums)
    ids = token_ids.long()[..., None]
    if valid is not None:
        scale = xp.where(valid, scale, xp.ones_like(scale))
        gamma_n = xp.where(valid, gamma_n, target_rows.gather(-1, ids)[..., 0])
    h = target_rows.mul_(scale[..., None])
    return h.scatter_(-1, ids, gamma_n[..., None].to(h.dtype))


def _spike_residual_weights(target_probs, draft_probs, token_ids, gamma_n, target_sums=None, draft_sums=None):
    r"""Recovery weights :math:`\max(0, h^{(n)} - p)` of a spike rule from the drafted tokens'
    :math:`\gamma_n` (:func:`_residual_weights` of :func:`_spike_target_at`'s target).

    With ``target_sums`` / ``draft_sums`` (shape ``token_ids.shape``) the rows are
    un-normalized: q = ``target_probs / target_sums``, p = ``draft_probs / draft_sums``. Where
    the residual is empty, :math:`h^{(n)}` itself (convention 3). Array-agnostic; the
    samplers' torch kernel computes the same weights in place.
    """
    xp = array_namespace(target_probs, draft_probs)
    gamma_n = xp.astype(gamma_n, target_probs.dtype)
    h = _spike_target_at(target_probs, token_ids, gamma_n, target_sums)
    p = draft_probs if draft_sums is None else draft_probs / draft_sums[..., None]
    return _residual_weights(h, p)


@dataclass(frozen=True)
class TargetPlan:
    """One target ``target`` (h, shape [..., V], possibly un-normalized) for every draft."""

    target_probs: Any
    draft_probs: Any
    target: Any

    def accept_probs(self):
        """Acceptance ``a_n = min(1, h_n/p_n)`` of every candidate token, shape [..., V]."""
        return _ratio_acceptance(self.target, self.draft_probs)

    def accept_probs_at(self, token_ids):
        """Acceptance of the drafted tokens ``token_ids`` (shape [...])."""
        return _ratio_acceptance(_gather(self.target, token_ids), _gather(self.draft_probs, token_ids))

    def recovery_at(self, token_ids):
        """Recovery distribution r for the drafted tokens (independent of n), shape [..., V]."""
        return _residual_distribution(self.target, self.draft_probs)

    def recovery_weights_at(self, token_ids):
        """Un-normalized recovery weights (:func:`_residual_weights`), shape [..., V]."""
        return _residual_weights(self.target, self.draft_probs)


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
        (:func:`cactus_theory.solvers._spike.capped_exact_spike` for the exact KL root).

    Plans compare by identity; ``spike``, once computed, is kept.
    """

    __slots__ = ("target_probs", "draft_probs", "_spike", "_spike_fn", "_effective", "_effective_fn")

    def __init__(self, target_probs, draft_probs, spike=None, *, spike_fn=None, effective_fn=None):
        if (spike is None) == (spike_fn is None):
            raise ValueError("spike: give the values or spike_fn (one of them)")
        self.target_probs, self.draft_probs = target_probs, draft_probs
        self._spike, self._spike_fn = spike, spike_fn
        self._effective, self._effective_fn = None, effective_fn

    def __repr__(self):
        state = (
            "given"
            if self._spike_fn is None
            else ("computed" if self._spike is not None else "not computed yet")
        )
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
            return self._spike_fn(_gather(self.target_probs, token_ids))
        return _gather(self._spike, token_ids)

    def effective_spike(self):
        r"""What the acceptance and the emitted law read of :math:`\gamma`, shape [..., V].

        :math:`\min(\gamma_n, p_n)` where :math:`p_n > 0`, and 1 or 0 as :math:`\gamma_n > 0`
        where :math:`p_n = 0`. In place of :math:`\gamma`, :func:`_ratio_acceptance` gives the
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
        return _ratio_acceptance(self.spike_for_emission(), self.draft_probs)

    def accept_probs_at(self, token_ids):
        """Acceptance of the drafted tokens ``token_ids`` (shape [...])."""
        return _ratio_acceptance(self.spike_at(token_ids), _gather(self.draft_probs, token_ids))

    def target_at(self, token_ids):
        """The per-draft target :math:`h^{(n)}` for the drafted tokens, shape [..., V]."""
        return _spike_target_at(self.target_probs, token_ids, self.spike_at(token_ids))

    def recovery_at(self, token_ids):
        """Recovery :math:`r^{(n)} = normalize(max(0, h^{(n)} - p))`, shape [..., V]."""
        return _residual_distribution(self.target_at(token_ids), self.draft_probs)

    def recovery_weights_at(self, token_ids):
        """Un-normalized recovery weights (:func:`_residual_weights`), shape [..., V]."""
        return _residual_weights(self.target_at(token_ids), self.draft_probs)


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
        return _gather(self.accept, token_ids)

    def recovery_at(self, token_ids):
        """The recovery distribution (independent of the draft), shape [..., V]."""
        return self.recovery

    def recovery_weights_at(self, token_ids):
        """The recovery distribution itself (already normalized), shape [..., V]."""
        return self.recovery

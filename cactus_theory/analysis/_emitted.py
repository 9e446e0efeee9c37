r"""The emitted distribution :math:`h_{alg}` of a plan (Theorem 3), exactly, without a V x V
intermediate.

.. math:: h_{alg}(j) = p_j a_j + \sum_n p_n (1 - a_n)\, r^{(n)}_j

For Cactus's spike structure :math:`h^{(n)} = c_n q + (\gamma_n - c_n q_n) e_n` the mixture is
computed exactly in O(V log V) per row: for a rejected n (:math:`\gamma_n < p_n`),
:math:`\max(0, h^{(n)}_j - p_j) = q_j \max(0, c_n - t_j)` with :math:`t_j = p_j/q_j`, so

.. math:: \sum_n \frac{w_n}{Z_n} \max(0, h^{(n)}_j - p_j)
          = q_j \sum_{n:\,c_n > t_j} u_n (c_n - t_j), \qquad
          Z_n = \sum_{j:\,t_j < c_n} (c_n q_j - p_j),

with :math:`w_n = p_n(1-a_n)`, :math:`u_n = w_n / Z_n`. Two exact paths compute it: on
torch and on short numpy rows (batched), one sort of the :math:`t_j` per row, prefix sums,
a ``searchsorted`` of the :math:`c_n` and a weighted ``bincount``; on numpy rows of at least
:data:`LONG_ROW_VOCAB` tokens, one row at a time, a sort of the rejected drafts' :math:`c_n`
only, among which every :math:`t_j` is placed (:mod:`cactus_theory.analysis._rejected_mixture`;
most drafts are accepted outright). ``method="dense"`` builds every :math:`h^{(n)}` instead
(O(V^2) memory): the test oracle. Target and decision plans have one recovery for every
draft: O(V).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3.
"""

from __future__ import annotations

import math

import numpy as np
from array_api_compat import array_namespace

from .._threads import in_chunks, in_row_blocks
from ..rules import SpikePlan, TargetPlan
from ..rules.plans import _ratio_acceptance, _residual_distribution
from ..solvers.internal import spike_scale_unchecked
from ._rejected_mixture import mixture_row


def _is_torch(x) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _emitted_fixed_recovery(p, a, r):
    """``p a + (sum_n p_n (1 - a_n)) r`` for a recovery r that does not depend on n."""
    xp = array_namespace(p)
    rejected = xp.sum(p * (1.0 - a), axis=-1, keepdims=True)
    return p * a + rejected * r


#: Rows of at least twice this many values are searched in chunks on threads.
_SEARCH_CHUNK = 16384

#: Rows of at most this many entries are searched by comparing every value with every
#: entry, all rows at once (V^2 comparisons a row), instead of one ``searchsorted`` call a
#: row: measured 0.5 against 2.0 us a row at V = 8, even at V = 32 (3.4 against 3.2 us).
_COMPARE_MAX_V = 32

#: Entries of the comparisons' boolean temporary per chunk of rows.
_COMPARE_ELEMENTS = 1 << 22


def _searchsorted_rows(xp, sorted_rows, values):
    """Per-row ``searchsorted(sorted_rows[r], values[r], side="left")`` (batch axes flattened).

    numpy: rows of at most :data:`_COMPARE_MAX_V` entries count, for each value v, the
    entries s_j < v (the same integers for a sorted row without NaN), vectorized over rows;
    longer rows call ``searchsorted`` once a row, and rows of ``2 * _SEARCH_CHUNK`` values or
    more search only the window between their smallest and largest value, in chunks on
    threads. torch: ``torch.searchsorted``."""
    if isinstance(sorted_rows, np.ndarray):
        V = sorted_rows.shape[-1]
        s2, v2 = sorted_rows.reshape(-1, V), values.reshape(-1, values.shape[-1])
        out = np.empty(v2.shape, dtype=np.int64)
        if V <= _COMPARE_MAX_V:
            step = max(1, _COMPARE_ELEMENTS // max(1, V * v2.shape[-1]))
            for a in range(0, s2.shape[0], step):
                np.sum(s2[a : a + step, None, :] < v2[a : a + step, :, None], axis=-1, out=out[a : a + step])
            return out.reshape(values.shape)
        if v2.shape[-1] < 2 * _SEARCH_CHUNK:
            # one call a row, nothing around it (the window and the chunking cost about
            # 20 us a row: 40 against 15 us a row at V = 129, the real data's compact rows)
            for r in range(s2.shape[0]):
                out[r] = s2[r].searchsorted(v2[r], side="left")
            return out.reshape(values.shape)
        for r in range(s2.shape[0]):
            # only the entries between the smallest and the largest value can separate them:
            # search that window (the c_n of a row span a narrow range; 1.2x faster at V = 152k)
            row, val = s2[r], v2[r]
            lo = int(np.searchsorted(row, val.min(), side="left"))
            hi = int(np.searchsorted(row, val.max(), side="right"))
            window, res = row[lo:hi], out[r]

            def search(a, b, res=res, lo=lo, window=window, val=val):
                # values a..b-1, written in place (numpy releases the GIL)
                res[a:b] = lo + np.searchsorted(window, val[a:b], side="left")

            # a long row's values in contiguous chunks on threads: the same indices
            in_chunks(search, val.size, _SEARCH_CHUNK)
        return out.reshape(values.shape)
    import torch

    return torch.searchsorted(sorted_rows.contiguous(), values.contiguous(), side="left")


def _bincount_rows(xp, idx, weights, length):
    """Per-row ``bincount(idx[r], weights[r], minlength=length)`` (batch axes flattened)."""
    if isinstance(idx, np.ndarray):
        V = idx.shape[-1]
        rows = idx.reshape(-1, V)
        offs = (np.arange(rows.shape[0]) * length)[:, None]
        flat = np.bincount(
            (rows + offs).ravel(), weights=weights.reshape(-1), minlength=rows.shape[0] * length
        )
        return flat.reshape(idx.shape[:-1] + (length,))
    out = xp.zeros(idx.shape[:-1] + (length,), dtype=weights.dtype, device=weights.device)
    return out.scatter_add_(-1, idx, weights)


def _emitted_spike_fast(q, p, gamma):
    r"""Theorem 3's mixture for the spike structure in O(V log V) per row (module docstring).

    One sort of :math:`t_j = p_j/q_j` per row. With :math:`k_n` the number of t-entries
    below :math:`c_n` (``searchsorted``), prefix sums of q and p in t-order give
    :math:`Z_n = \max(0, c_n Q_{k_n} - P_{k_n})` (then the j = n correction), and draft n
    contributes :math:`u_n (c_n - t_j)` to exactly the t-entries of rank below :math:`k_n`:
    a weighted ``bincount`` of the :math:`k_n` and suffix sums give
    :math:`\sum_{n: c_n > t_j} u_n c_n` and :math:`\sum_{n: c_n > t_j} u_n` at every rank.
    Entries with :math:`c_n = t_j` contribute :math:`c_n q_j - p_j = 0`, so ties are
    immaterial. Array-agnostic (numpy float64, torch on any device).
    """
    xp = array_namespace(q, p, gamma)
    V = q.shape[-1]
    zero, one = xp.zeros_like(q), xp.ones_like(q)
    a = xp.clip(_ratio_acceptance(gamma, p), 0.0, 1.0)
    w = xp.where(p > 0, xp.clip(p - gamma, 0.0, None), zero)  # p_n (1 - a_n)
    c = spike_scale_unchecked(q, gamma)
    pos_q = q > 0
    t = xp.where(pos_q, p / xp.where(pos_q, q, one), xp.full_like(q, math.inf))  # p_j / q_j
    # numpy's default introsort (the array API's argsort is stable: 5x slower); ties in t are
    # immaterial (see above)
    order = np.argsort(t, axis=-1) if isinstance(t, np.ndarray) else xp.argsort(t, axis=-1)
    t_s = xp.take_along_axis(t, order, axis=-1)
    q_s = xp.take_along_axis(q, order, axis=-1)
    pad = xp.zeros_like(q[..., :1])
    Q = xp.concat([pad, xp.cumulative_sum(q_s, axis=-1)], axis=-1)  # Q[k] = sum of k first
    P = xp.concat([pad, xp.cumulative_sum(xp.take_along_axis(p, order, axis=-1), axis=-1)], axis=-1)
    k = _searchsorted_rows(xp, t_s, c)  # #{j: t_j < c_n}
    S = xp.clip(c * xp.take_along_axis(Q, k, axis=-1) - xp.take_along_axis(P, k, axis=-1), 0.0, None)
    own_c, own_g = xp.clip(c * q - p, 0.0, None), xp.clip(gamma - p, 0.0, None)
    Z = S - own_c + own_g  # correction at j = n: h_n = gamma_n, not c_n q_n
    rejected = w > 0
    u = xp.where(rejected, w / xp.where(rejected & (Z > 0), Z, one), zero)
    empty = rejected & (Z <= 0)
    # draft n reaches the t-ranks 0 .. k_n - 1: counts at k_n, then suffix sums from rank i+1
    uc_at = _bincount_rows(xp, k, u * c, V + 1)
    u_at = _bincount_rows(xp, k, u, V + 1)
    suc = xp.flip(xp.cumulative_sum(xp.flip(uc_at, axis=-1), axis=-1), axis=-1)[..., 1:]
    su = xp.flip(xp.cumulative_sum(xp.flip(u_at, axis=-1), axis=-1), axis=-1)[..., 1:]
    finite_t = t_s < math.inf  # t_j = inf (q_j = 0, or p_j/q_j overflowing): never in a residual
    t_fin = xp.where(finite_t, t_s, xp.zeros_like(t_s))
    mix_s = xp.where(finite_t, q_s * xp.clip(suc - t_fin * su, 0.0, None), xp.zeros_like(t_s))
    mix = _unsort(xp, mix_s, order)
    # corrections at j = n: remove u_n max(0, c_n q_n - p_n), add u_n max(0, gamma_n - p_n)
    mix = mix - u * own_c + u * own_g
    out = p * a + xp.clip(mix, 0.0, None)
    if not isinstance(out, np.ndarray):
        # torch: without reading the device, every row's correction (zero where no
        # residual is empty)
        return out + _empty_residual_terms(xp, empty, q, gamma, c, w)
    if bool(xp.any(empty)):
        # Convention 3 (empty residual -> normalize(h^(n))); unreachable in exact arithmetic.
        out = _add_empty_residual_rows(xp, out, empty, q, gamma, c, w)
    return out


def _empty_residual_terms(xp, empty, q, gamma, c, w):
    r""":func:`_add_empty_residual_rows`'s addition as one array expression (no host read):
    :math:`\sum_n [\text{empty}_n]\, w_n h^{(n)}/|h^{(n)}|` with :math:`h^{(n)} = c_n q` off n,
    :math:`h^{(n)}_n = \gamma_n`, :math:`|h^{(n)}| = c_n (\sum_j q_j - q_n) + \gamma_n`."""
    zero = xp.zeros_like(q)
    total = c * (xp.sum(q, axis=-1, keepdims=True) - q) + gamma
    coef = xp.where(empty, w / xp.where(empty & (total > 0), total, xp.ones_like(q)), zero)
    return q * xp.sum(coef * c, axis=-1, keepdims=True) + coef * (gamma - c * q)


#: Rows at least this long take :func:`~cactus_theory.analysis._rejected_mixture.mixture_row`,
#: one row at a time; shorter rows (many positions of a small vocabulary) take the
#: array-agnostic path, vectorized over the batch, whose per-call overhead the rows share.
#: Measured (Cactus-Taylor, medians of 7): 400 rows at V = 64, 7.5 ms batched against 89 ms
#: one row at a time; 100 rows at V = 512, 15 against 27 ms; 50 rows at V = 1,024, 15
#: against 15 ms; 50 rows at V = 2,048, 31 against 17 ms; 25 rows at V = 4,096, 31 against
#: 13 ms.
LONG_ROW_VOCAB = 1024

#: Entries per block of rows of the batched numpy mixture (shorter rows than
#: :data:`LONG_ROW_VOCAB`; :func:`~cactus_theory._threads.in_row_blocks`): the same floats
#: as one call over the batch; ``cactus-theory benchmark`` times both.
ROW_BLOCK_ELEMENTS = 1 << 17


def _emitted_spike_rows(q, p, gamma):
    """The numpy mixture of long rows, one row at a time
    (:func:`~cactus_theory.analysis._rejected_mixture.mixture_row`; batch axes flattened)."""
    V = q.shape[-1]
    q2, p2, g2 = (np.ascontiguousarray(x, dtype=np.float64).reshape(-1, V) for x in (q, p, gamma))
    out = np.empty_like(q2)
    for r in range(q2.shape[0]):
        with np.errstate(over="ignore"):
            empty = mixture_row(q2[r], p2[r], g2[r], out[r])
        if empty is not None:
            out[r] = _add_empty_residual_rows(np, out[r], empty[0], q2[r], g2[r], *empty[1:])
    return out.reshape(q.shape)


def _unsort(xp, x_sorted, order):
    """Scatter ``x_sorted`` back to the original positions: ``x[order] = x_sorted``."""
    if isinstance(x_sorted, np.ndarray):
        out = np.empty_like(x_sorted)
        np.put_along_axis(out, order, x_sorted, axis=-1)
        return out
    return xp.zeros_like(x_sorted).scatter_(-1, order, x_sorted)


def _add_empty_residual_rows(xp, out, empty, q, gamma, c, w):
    r"""Add :math:`w_n\, \mathrm{normalize}(h^{(n)})` for the drafts with an empty residual."""
    if not isinstance(out, np.ndarray):
        dev = out.device
        res = _add_empty_residual_rows(
            np,
            out.cpu().numpy(),
            empty.cpu().numpy(),
            q.cpu().numpy(),
            gamma.cpu().numpy(),
            c.cpu().numpy(),
            w.cpu().numpy(),
        )
        return xp.asarray(res, device=dev)
    out = out.copy()
    for pos in np.argwhere(empty):
        row, n = tuple(pos[:-1]), pos[-1]
        h = c[row + (n,)] * q[row]
        h[n] = gamma[row + (n,)]
        out[row] += w[row + (n,)] * h / h.sum()
    return out


def _emitted_dense(plan):
    r"""Theorem 3 by enumeration: materializes every r^(n) (O(V^2) memory). Test oracle.

    A spike plan's whole :math:`\gamma` is computed first (kept by the plan): each draft's
    recovery then reads its own :math:`\gamma_n`, where the plan would otherwise solve it
    anew for every enumerated draft. The oracle reads the whole root, not the capped
    :meth:`~cactus_theory.rules.SpikePlan.effective_spike` the fast path may read.
    """
    if isinstance(plan, SpikePlan):
        _ = plan.spike
    p = plan.draft_probs
    V = p.shape[-1]
    a = np.clip(plan.accept_probs(), 0.0, 1.0)
    out = p * a
    for n in range(V):
        ids = np.full(p.shape[:-1], n, dtype=np.int64)
        r = plan.recovery_at(ids)
        out = out + (p[..., n] * (1.0 - a[..., n]))[..., None] * r
    return out


def emitted_of_plan(plan, method="fast"):
    """:math:`h_{alg}` of a plan (``method`` ``"fast"`` or ``"dense"``, checked by the caller)."""
    if method == "dense":
        if _is_torch(plan.draft_probs):
            raise ValueError("method: 'dense' (the O(V^2) test oracle) takes numpy inputs only")
        return _emitted_dense(plan)
    q, p = plan.target_probs, plan.draft_probs
    xp = array_namespace(p)
    if isinstance(plan, SpikePlan):
        # gamma, or min(gamma, p) where the plan has not solved gamma: the same law bit for bit
        spike = plan.spike_for_emission()
        if _is_torch(p):
            return _emitted_spike_fast(q, p, spike)
        spike = np.asarray(spike, dtype=np.float64)
        if q.shape[-1] < LONG_ROW_VOCAB:
            return in_row_blocks(_emitted_spike_fast, (q, p, spike), ROW_BLOCK_ELEMENTS)
        return _emitted_spike_rows(q, p, spike)
    a = xp.clip(plan.accept_probs(), 0.0, 1.0)
    if isinstance(plan, TargetPlan):
        return _emitted_fixed_recovery(p, a, _residual_distribution(plan.target, p))
    return _emitted_fixed_recovery(p, a, plan.recovery)

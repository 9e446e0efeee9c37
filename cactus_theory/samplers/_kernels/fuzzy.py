r"""Fuzzy SD's speed paths (:class:`~cactus_theory.rules._fuzzy.FuzzySpeculative`) on the
samplers' un-normalized rows: the divergence in entropy form (no normalized copies), and for
``js_div`` rigorous bounds on the Jensen-Shannon divergence without a logarithm, read in the
loop of the row sums, that decide most rows before the exact test.
"""

from __future__ import annotations

import math

import torch

from ...rules.internal import FuzzySpeculative, _divergence_name
from ._registry import RuleKernels, register_kernels
from .blocks import split_blocks

__all__ = ["js_bounds_from_rows", "js_bounds_in_sum_pass", "JS_BOUND_MARGIN", "JS_SUM_RATIO_TOL"]


#: Relative margin of the Jensen-Shannon bounds' decisions (:func:`js_bounds_from_rows`): a
#: row is decided by its bounds only when they clear the threshold by this factor. The
#: bounds are float32 sums of non-negative terms, each with a relative error of a few float32
#: eps (6e-8) from the normalization, the division and the products, and the sums add at most
#: about log2(V) + 256 eps of relative error for inductor's cascaded and torch's pairwise
#: sums (under 2e-5 at V = 151,936): 1e-4 is five times that.
JS_BOUND_MARGIN = 1e-4

#: :math:`\log 2 - 1/2 - 1/12`: the sum of the coefficients :math:`1/(2j(2j-1))`, j >= 3,
#: of the series of :math:`f(u)` (:func:`js_bounds_from_rows`).
_JS_TAIL = math.log(2.0) - 0.5 - 1.0 / 12.0


def js_bounds_from_rows(target_rows, draft_rows, target_sums, draft_sums):
    r"""Lower and upper bounds on :math:`JS(p, q)` without a logarithm (torch), shape [...].

    With :math:`m_i = (p_i + q_i)/2` and :math:`u_i = (p_i - q_i)/(p_i + q_i) \in [-1, 1]`
    (0 where :math:`p_i = q_i = 0`), each term of the divergence is

    .. math::
        \tfrac12\Big(p_i\log\frac{p_i}{m_i} + q_i\log\frac{q_i}{m_i}\Big) = m_i f(u_i),
        \qquad f(u) = \tfrac12\big((1+u)\log(1+u) + (1-u)\log(1-u)\big)
                     = \sum_{j\ge1} \frac{u^{2j}}{2j(2j-1)},

    a series of non-negative terms whose coefficients sum to :math:`\log 2` (its value at
    :math:`|u| = 1`). Cutting it after :math:`u^6` bounds it below; bounding the rest by
    :math:`u^6 \sum_{j\ge3} 1/(2j(2j-1))` (:math:`|u| \le 1`) bounds it above. With the
    moments :math:`M_{2j} = \sum_i m_i u_i^{2j}`:

    .. math::
        \frac{M_2}{2} + \frac{M_4}{12} + \frac{M_6}{30} \;\le\; JS(p, q) \;\le\;
        \frac{M_2}{2} + \frac{M_4}{12} + \Big(\log 2 - \frac12 - \frac1{12}\Big) M_6,

    a gap of :math:`0.0765\,M_6 \le 0.0765\,M_2`: a few per cent of the divergence on
    language-model rows (the terms with :math:`|u|` near 1 make it). One pass, one division
    per entry, no logarithm; float32.

    Parameters
    ----------
    target_rows, draft_rows : Tensor, shape (..., V)
        Un-normalized q and p (float32): q = ``target_rows / target_sums``, likewise p.
    target_sums, draft_sums : Tensor, shape (...)
        Their positive row sums.

    Returns
    -------
    (Tensor, Tensor)
        The lower and the upper bound, shape (...), in nats.

    Symbols: q verifier (``target_rows``), p drafter (``draft_rows``). JS as in Holsman et
    al. (arXiv 2502.20704), natural log.
    """
    p = draft_rows * (1.0 / draft_sums)[..., None]
    q = target_rows * (1.0 / target_sums)[..., None]
    a = p + q  # 2 m
    d = p - q
    u = d / a.clamp_min(torch.finfo(a.dtype).tiny)  # 0 where p = q = 0 (d = 0)
    t = d * u  # 2 m u^2
    u2 = u * u
    m2 = t.sum(-1)
    m4 = (t * u2).sum(-1)
    m6 = (t * u2 * u2).sum(-1)
    # the sums are of 2 m u^(2j): halve
    head = 0.5 * (m2 / 2.0 + m4 / 12.0)
    return head + m6 / 60.0, head + 0.5 * _JS_TAIL * m6


#: Largest :math:`|s_p/s_q - 1|` over a batch for which :func:`js_bounds_in_sum_pass` is
#: used: its slack, :math:`\tfrac12 \log 2\,|s_p/s_q - 1|`, is then at most 3.5e-4 nats
#: (a softmax's float32 rows give 1e-7); a batch farther from normalized takes the bounds on
#: the normalized rows (:func:`js_bounds_from_rows`, a second pass).
JS_SUM_RATIO_TOL = 1e-3


def _moments(y, x):
    """The sums of :math:`2 m u^2, 2 m u^4, 2 m u^6` of :func:`js_bounds_from_rows` on the
    rows as given (un-normalized), blocked as the samplers' row sums
    (:func:`~cactus_theory.samplers._fused.stats`: sums of 256-entry blocks in the rows'
    dtype, then a float64 sum of those, rounded to that dtype), so that a compiled kernel
    reads them in the loop of the row sums."""

    def terms(yb, xb):
        a = yb + xb
        d = yb - xb
        u = d / a.clamp_min(torch.finfo(a.dtype).tiny)
        t = d * u
        u2 = u * u
        return t, t * u2, t * u2 * u2

    out = [torch.zeros(x.shape[:-1], dtype=torch.float64, device=x.device) for _ in range(3)]
    (y_whole, y_tail), (x_whole, x_tail) = split_blocks(y), split_blocks(x)
    parts = ([] if x_whole is None else [(y_whole, x_whole)]) + (
        [] if x_tail is None else [(y_tail[..., None], x_tail[..., None])]
    )
    for yb, xb in parts:
        for i, t in enumerate(terms(yb, xb)):
            out[i] = out[i] + t.sum(-1).sum(-1, dtype=torch.float64)
    return [o.to(x.dtype) for o in out]


def js_bounds_in_sum_pass(target_rows, draft_rows, target_sums, draft_sums):
    r"""Bounds on :math:`JS(p, q)` from moments of the **un-normalized** rows, which a
    compiled kernel reads in the same loop as the row sums (no second pass).

    Write x, y for the rows (q = x/s_q, p = y/s_p) and D for the Jensen-Shannon form on
    non-negative vectors, :math:`D(a, b) = \tfrac12\sum_i a_i\log\frac{2a_i}{a_i+b_i}
    + b_i\log\frac{2b_i}{a_i+b_i}`: the moments of :func:`js_bounds_from_rows`, taken on
    (y, x), bound D(y, x) (the series is term by term). D is 1-homogeneous, so
    :math:`D(y, x) = s_q\,g(r)` with :math:`g(r) = D(r p, q)` and :math:`r = s_p/s_q`, and
    :math:`g(1) = JS(p, q)`. Its slope is
    :math:`g'(r) = \tfrac12\sum_i p_i\log\frac{p_i}{n_i}`, :math:`n_i = (p_i + q_i/r)/2`:
    at most :math:`\tfrac12\log 2` (since :math:`p_i/n_i \le 2`) and at least
    :math:`-\tfrac12\log\sum_i n_i = -\tfrac12\log\frac{1 + 1/r}{2} \ge -\tfrac12\log 2` for
    :math:`r \ge 1/3` (Gibbs). So

    .. math:: \Big|JS(p, q) - \frac{D(y, x)}{s_q}\Big| \le \tfrac12\log 2\,|r - 1|,

    and the bounds are those of D(y, x) over :math:`s_q`, widened by that slack (with
    :math:`|r - 1|` raised by 16 eps of the rows' dtype for the rounding of the computed
    sums and their ratio).

    Returns
    -------
    (Tensor, Tensor, Tensor)
        Lower and upper bounds (nats; valid for :math:`r \ge 1/3`), and :math:`|r - 1|`
        per row (the caller checks it: :data:`JS_SUM_RATIO_TOL`).
    """
    m2, m4, m6 = _moments(draft_rows, target_rows)
    head = 0.5 * (m2 / 2.0 + m4 / 12.0)
    lo, hi = head + m6 / 60.0, head + 0.5 * _JS_TAIL * m6
    off = (draft_sums / target_sums - 1.0).abs()
    # |r - 1| as computed from sums with a few eps of relative error each: 16 eps covers
    # them (2^-19 for float32 rows, 2^-48 for float64)
    eps = torch.finfo(off.dtype).eps
    slack = 0.5 * math.log(2.0) * (off + 16.0 * eps)
    return lo / target_sums - slack, hi / target_sums + slack, off


def accept_decided_from_rows(rule, target_rows, draft_rows, token_ids, target_sums, draft_sums):
    r"""``js_div``: the decision :math:`1[JS \le T]` from bounds on JS where they clear
    T by :data:`JS_BOUND_MARGIN` (relative), and the rows where they do not; declined for
    the other divergences (no bound, the exact test on every row). The bounds are
    :func:`js_bounds_in_sum_pass` (read with the row sums) when every row's sums are
    within :data:`JS_SUM_RATIO_TOL` of each other, else :func:`js_bounds_from_rows` (the
    normalized rows; ``torch.cond`` when compiled).

    Returns ``(accept, undecided)``, bool [B, k]: ``accept`` where the upper bound is at
    most :math:`T/(1 + \text{margin})`; ``undecided`` where neither that nor the lower
    bound above :math:`T/(1 - \text{margin})` holds. The samplers call
    :func:`accept_from_rows` on the undecided rows.
    """
    lo, hi, off = js_bounds_in_sum_pass(target_rows, draft_rows, target_sums, draft_sums)
    near = (off <= JS_SUM_RATIO_TOL).all()

    def normalized():
        return js_bounds_from_rows(target_rows, draft_rows, target_sums, draft_sums)

    if torch.compiler.is_compiling():
        lo, hi = torch.cond(near, lambda: (lo.clone(), hi.clone()), normalized)
    elif not bool(near):
        lo, hi = normalized()
    t = rule.fsd_div_threshold
    accept = hi * (1.0 + JS_BOUND_MARGIN) <= t
    reject = lo * (1.0 - JS_BOUND_MARGIN) > t
    return accept, ~(accept | reject)


def accept_from_rows(rule, target_rows, draft_rows, token_ids, target_sums, draft_sums):
    r"""Acceptance :math:`1[\mathrm{Div}(p, q) \le T]` from un-normalized rows (q = x/s_x,
    p = y/s_y), with the divergence in entropy form (few passes, no normalized copies):

    .. math::
        KL(p\|q) = \frac{1}{s_y}\sum_i \left(y_i\log y_i - y_i \log x_i\right)
                   + \log s_x - \log s_y, \qquad
        JS = \log 2 + \tfrac12\left(\sum p\log p + \sum q \log q\right)
             - \tfrac12 \sum (p+q)\log(p+q),

    with :math:`\sum p \log p = \frac{1}{s_y}\sum y \log y - \log s_y` (and likewise
    for q), :math:`0 \log 0 = 0` (the log's argument clamped at the smallest normal float:
    a subnormal entry's term changes by under 1e-36) and :math:`+\infty` where the KL is
    infinite (``xlogy`` for the cross term); TV is :math:`\frac12\sum|p - q|`. The samplers
    call it only when no raw distributions are given (the divergence then reads the processed
    ones, as the plan does). Equal to the plan's decision up to float32 rounding of the divergence
    (entropy terms of size up to log V cancel: a divergence within about 1e-5 of T).
    """
    x, y = target_rows, draft_rows
    sx, sy = target_sums, draft_sums
    tiny = torch.finfo(x.dtype).tiny

    def xlogx_sum(a):  # sum a log a, 0 log 0 = 0 (log clamped at the smallest normal)
        return a.clamp_min(tiny).log_().mul_(a).sum(-1)

    kind = _divergence_name(rule.fsd_div_type)
    if kind == "tv":
        div = 0.5 * torch.addcmul(y / sy[..., None], x, (-1.0 / sx)[..., None]).abs_().sum(-1)
    elif kind in ("kl", "reverse_kl"):
        a, b, sa, sb = (y, x, sy, sx) if kind == "kl" else (x, y, sx, sy)
        cross = torch.xlogy(a, b).sum(-1)  # -inf where a > 0 = b: KL infinite
        div = (xlogx_sum(a) - cross) / sa + torch.log(sb) - torch.log(sa)
        div = torch.where(torch.isinf(cross), torch.full_like(div, math.inf), div)
    else:
        ent_p = xlogx_sum(y) / sy - torch.log(sy)
        ent_q = xlogx_sum(x) / sx - torch.log(sx)
        m = torch.addcmul(x / sx[..., None], y, (1.0 / sy)[..., None])
        div = math.log(2.0) + 0.5 * (ent_p + ent_q) - 0.5 * xlogx_sum(m)
    return (div.clamp_min(0.0) <= rule.fsd_div_threshold).to(torch.float32)


register_kernels(
    FuzzySpeculative,
    RuleKernels(
        accept_from_rows=accept_from_rows,
        accept_decided_from_rows=accept_decided_from_rows,
        declines=lambda rule: (
            () if _divergence_name(rule.fsd_div_type) == "js" else ("accept_decided_from_rows",)
        ),
        guard=lambda: hasattr(torch, "cond") and hasattr(torch.compiler, "is_compiling"),
    ),
)

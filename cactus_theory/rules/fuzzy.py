r"""Fuzzy speculative decoding (FSD): accept when the drafter is close to the verifier.

At each drafted position FSD computes one divergence between the drafter's and the
verifier's **whole** distributions and accepts the drafted token **deterministically** iff

.. math:: \mathrm{Div}(p, q) \le T,

whatever token was drafted; otherwise it samples from the verifier q (plain q, no SpS
residual), as the official code does. One step emits p if Div <= T, else q.

Divergences (``fsd_div_type``, the code's names): ``js_div`` (Jensen-Shannon, natural log;
default), ``kl_div`` = KL(p || q) (the code's ``torch.kl_div(log q, p)``), ``kl_div_reversed``
= KL(q || p), ``tv_div`` = TV(p, q). By default the divergence reads the **unprocessed**
distributions (before temperature/top-p warping), passed as ``raw_target_probs`` /
``raw_draft_probs``; the ``*_processed`` choices read the processed ones.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
T = ``fsd_div_threshold``.

References
----------
Holsman, Huang, Dhingra, "Fuzzy Speculative Decoding for a Tunable Accuracy-Runtime Tradeoff",
Findings of ACL 2025, arXiv 2502.20704; official code ``fsd_utils.py``
(``_speculative_backoff_sampling``), README example ``fsd_div_threshold=0.4,
fsd_div_type='js_div'``.
"""

from __future__ import annotations

import math

from array_api_compat import array_namespace

from ..divergences import get_divergence
from .plans import DecisionPlan, split_blocks
from .registry import Knob, Rule, RuleSpec, register

__all__ = ["FuzzySpeculative", "FSD_DIVERGENCES", "fsd_divergence", "js_bounds_from_rows",
           "js_bounds_in_sum_pass", "JS_BOUND_MARGIN", "JS_SUM_RATIO_TOL"]

#: fsd_div_type -> (our divergence name, whether D(p || q) is evaluated as D(first=p, second=q))
FSD_DIVERGENCES = {
    "js_div": "js",
    "kl_div": "kl",              # KL(p || q)
    "kl_div_reversed": "reverse_kl",  # KL(q || p)
    "tv_div": "tv",
}
_CHOICES = tuple(FSD_DIVERGENCES) + tuple(f"{k}_processed" for k in FSD_DIVERGENCES)


def _divergence_name(fsd_div_type: str) -> str:
    """Our divergence's name for an ``fsd_div_type`` (``*_processed`` included)."""
    return FSD_DIVERGENCES[fsd_div_type.removesuffix("_processed")]


def fsd_divergence(fsd_div_type: str, target_probs, draft_probs):
    r"""FSD's :math:`\mathrm{Div}(p, q)` per position (array-agnostic), shape (...).

    ``kl_div`` is :math:`KL(p\|q) = \sum p \log(p/q)`, ``kl_div_reversed`` is
    :math:`KL(q\|p)`, ``js_div`` and ``tv_div`` are symmetric. Infinite where the KL
    is (different supports); never NaN.

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Holsman et al., Findings of ACL 2025 (arXiv 2502.20704), fsd_utils.py.
    """
    name = _divergence_name(fsd_div_type)
    # our divergences are D(h || q) with h first: D(p || q) for kl_div, KL(q||p) = reverse_kl(p, q)
    return get_divergence(name).unchecked(draft_probs, target_probs)


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
    import torch

    p = draft_rows * (1.0 / draft_sums)[..., None]
    q = target_rows * (1.0 / target_sums)[..., None]
    a = p + q                                       # 2 m
    d = p - q
    u = d / a.clamp_min(torch.finfo(a.dtype).tiny)  # 0 where p = q = 0 (d = 0)
    t = d * u                                       # 2 m u^2
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
    (:func:`~cactus_theory.samplers.fused.stats`: sums of 256-entry blocks in the rows'
    dtype, then a float64 sum of those, rounded to that dtype), so that a compiled kernel
    reads them in the loop of the row sums."""
    import torch

    def terms(yb, xb):
        a = yb + xb
        d = yb - xb
        u = d / a.clamp_min(torch.finfo(a.dtype).tiny)
        t = d * u
        u2 = u * u
        return t, t * u2, t * u2 * u2

    out = [torch.zeros(x.shape[:-1], dtype=torch.float64, device=x.device) for _ in range(3)]
    (y_whole, y_tail), (x_whole, x_tail) = split_blocks(y), split_blocks(x)
    parts = ([] if x_whole is None else [(y_whole, x_whole)]) + \
        ([] if x_tail is None else [(y_tail[..., None], x_tail[..., None])])
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
    import torch

    m2, m4, m6 = _moments(draft_rows, target_rows)
    head = 0.5 * (m2 / 2.0 + m4 / 12.0)
    lo, hi = head + m6 / 60.0, head + 0.5 * _JS_TAIL * m6
    off = (draft_sums / target_sums - 1.0).abs()
    # |r - 1| as computed from sums with a few eps of relative error each: 16 eps covers
    # them (2^-19 for float32 rows, 2^-48 for float64)
    eps = torch.finfo(off.dtype).eps
    slack = 0.5 * math.log(2.0) * (off + 16.0 * eps)
    return lo / target_sums - slack, hi / target_sums + slack, off


class FuzzySpeculative(Rule):
    r"""FSD: accept every draft iff :math:`\mathrm{Div}(p, q) \le T`; else sample from q.

    .. warning::
       Only the per-position rule is modelled; the code's top-k(=50)/top-p variants of the
       divergence are not. Which JS normalisation (natural log) the code uses was not re-read;
       we use nats, in [0, log 2].

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    """

    def __init__(self, fsd_div_threshold: float, fsd_div_type: str):
        self.fsd_div_threshold = fsd_div_threshold
        self.fsd_div_type = fsd_div_type

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``DecisionPlan``: acceptance 1[Div <= T] for every candidate, recovery q."""
        xp = array_namespace(target_probs, draft_probs)
        ok = self._accepts(target_probs, draft_probs, raw_target_probs, raw_draft_probs)[..., None]
        accept = ok * xp.ones_like(target_probs)
        return DecisionPlan(target_probs, draft_probs, accept, target_probs)

    def _accepts(self, target_probs, draft_probs, raw_target_probs, raw_draft_probs):
        """1[Div <= T] per position (shape ``target_probs.shape[:-1]``)."""
        xp = array_namespace(target_probs, draft_probs)
        if self.fsd_div_type.endswith("_processed") or raw_target_probs is None:
            rq, rp = target_probs, draft_probs
        else:
            rq = raw_target_probs
            rp = draft_probs if raw_draft_probs is None else raw_draft_probs
        div = fsd_divergence(self.fsd_div_type, rq, rp)
        return xp.astype(div <= self.fsd_div_threshold, target_probs.dtype)

    def accept_probs_at(self, target_probs, draft_probs, token_ids, *, raw_target_probs=None,
                        raw_draft_probs=None):
        r"""Acceptance :math:`1[\mathrm{Div}(p, q) \le T]` per position, whatever the drafted
        token (shape ``token_ids.shape``): the divergence, without the plan's [..., V]
        acceptance of every candidate. The samplers' accept path (``fast_accept``)."""
        return self._accepts(target_probs, draft_probs, raw_target_probs, raw_draft_probs)

    def accept_decided_from_rows(self, target_rows, draft_rows, token_ids, target_sums,
                                 draft_sums):
        r"""``js_div``: the decision :math:`1[JS \le T]` from bounds on JS where they clear
        T by :data:`JS_BOUND_MARGIN` (relative), and the rows where they do not; other
        divergences: None (no bound, the exact test on every row). The bounds are
        :func:`js_bounds_in_sum_pass` (read with the row sums) when every row's sums are
        within :data:`JS_SUM_RATIO_TOL` of each other, else :func:`js_bounds_from_rows` (the
        normalized rows; ``torch.cond`` when compiled).

        Returns ``(accept, undecided)``, bool [B, k]: ``accept`` where the upper bound is at
        most :math:`T/(1 + \text{margin})`; ``undecided`` where neither that nor the lower
        bound above :math:`T/(1 - \text{margin})` holds. The samplers call
        :meth:`accept_probs_from_rows` on the undecided rows.
        """
        if _divergence_name(self.fsd_div_type) != "js":
            return None
        import torch

        lo, hi, off = js_bounds_in_sum_pass(target_rows, draft_rows, target_sums, draft_sums)
        near = (off <= JS_SUM_RATIO_TOL).all()

        def normalized():
            return js_bounds_from_rows(target_rows, draft_rows, target_sums, draft_sums)

        if torch.compiler.is_compiling():
            lo, hi = torch.cond(near, lambda: (lo.clone(), hi.clone()), normalized)
        elif not bool(near):
            lo, hi = normalized()
        t = self.fsd_div_threshold
        accept = hi * (1.0 + JS_BOUND_MARGIN) <= t
        reject = lo * (1.0 - JS_BOUND_MARGIN) > t
        return accept, ~(accept | reject)

    def recovery_weights_at(self, target_probs, draft_probs, token_ids, *, raw_target_probs=None,
                            raw_draft_probs=None):
        """The recovery is q itself (no divergence needed)."""
        return target_probs

    def accept_probs_from_rows(self, target_rows, draft_rows, token_ids, target_sums, draft_sums):
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
        infinite (``xlogy`` for the cross term); TV is :math:`\frac12\sum|p - q|`. The samplers call it only when no raw
        distributions are given (the divergence then reads the processed ones, as the plan
        does). Equal to the plan's decision up to float32 rounding of the divergence
        (entropy terms of size up to log V cancel: a divergence within about 1e-5 of T).
        """
        import torch

        x, y = target_rows, draft_rows
        sx, sy = target_sums, draft_sums
        tiny = torch.finfo(x.dtype).tiny

        def xlogx_sum(a):   # sum a log a, 0 log 0 = 0 (log clamped at the smallest normal)
            return a.clamp_min(tiny).log_().mul_(a).sum(-1)

        kind = _divergence_name(self.fsd_div_type)
        if kind == "tv":
            div = 0.5 * torch.addcmul(y / sy[..., None], x, (-1.0 / sx)[..., None]).abs_().sum(-1)
        elif kind in ("kl", "reverse_kl"):
            a, b, sa, sb = (y, x, sy, sx) if kind == "kl" else (x, y, sx, sy)
            cross = torch.xlogy(a, b).sum(-1)     # -inf where a > 0 = b: KL infinite
            div = (xlogx_sum(a) - cross) / sa + torch.log(sb) - torch.log(sa)
            div = torch.where(torch.isinf(cross), torch.full_like(div, math.inf), div)
        else:
            ent_p = xlogx_sum(y) / sy - torch.log(sy)
            ent_q = xlogx_sum(x) / sx - torch.log(sx)
            m = torch.addcmul(x / sx[..., None], y, (1.0 / sy)[..., None])
            div = math.log(2.0) + 0.5 * (ent_p + ent_q) - 0.5 * xlogx_sum(m)
        return (div.clamp_min(0.0) <= self.fsd_div_threshold).to(torch.float32)


register(RuleSpec(
    name="fuzzy", factory=FuzzySpeculative,
    knobs=(
        Knob("fsd_div_threshold", 0.4, 0.0, math.inf,
             doc="T: accept the draft iff Div(p, q) <= T (README example 0.4 with js_div)"),
        Knob("fsd_div_type", "js_div", choices=_CHOICES,
             doc="divergence between drafter and verifier (raw distributions unless *_processed)"),
    ),
    sps_knobs=None,
    sps_note="no threshold gives SpS: a rejection "
             "resamples from q, not from the SpS residual; T = 0 accepts only where Div = 0 (p = q)",
    deterministic=True, reads_draft=True, needs_raw=True, family="decision", fast_accept=True,
    summary="fuzzy SD: accept iff Div(p, q) <= T (JS on raw distributions); else sample q",
    reference="Holsman et al., Findings of ACL 2025 (arXiv 2502.20704), fsd_utils.py",
))

r"""Speculative-decoding metrics, each named by the convention it follows.

All metrics are ratios of totals accumulated over verification rounds, so one code path
serves the simulator (totals per run, with standard errors) and the exact dynamic programme
(expected totals, :mod:`.exact`). Symbols: q verifier (``target_probs``), p drafter
(``draft_probs``), n drafted token, m draft length, :math:`N` accepted drafted tokens of a
round (the accepted prefix), :math:`m_s \le m` the drafts of the round starting at s (shorter
only at the end of a trajectory), R rounds (= verifier calls), T emitted tokens.

=============================  =============================================================
name                           definition (sums over rounds)
=============================  =============================================================
``al_paper``                   :math:`\sum N / R`: the paper's :math:`AL_m` (Cactus code's
                               ``accepted.cumprod(-1).sum(-1).mean()``), bonus NOT counted
``tokens_per_call``            :math:`\sum (N+1) / R = T / R`: tokens per verifier call with
                               the recovered-or-bonus token (vLLM V1 "Mean acceptance
                               length", Spec-Bench, Medusa/EAGLE tau, Leviathan eq. 1)
``v0_acceptance_rate``         non-causal accepted / drafted: vLLM V0 ``draft_acceptance_rate``
                               (every position judged, also after the first rejection)
``prefix_acceptance_rate``     :math:`\sum N / \sum m_s`: vLLM V1 "Avg Draft acceptance rate"
``v0_system_efficiency``       :math:`T / \sum (m_s + 1)`: emitted over the most that could
                               be emitted; vLLM V0's ``emitted / (drafts / k \cdot (k+1))``
                               when every round drafts m (here also exact for the shorter
                               last rounds, so it never exceeds 1)
``rejected_per_token``         :math:`\sum (m_s - N) / T`: drafted tokens thrown away per
                               generated token; the paper's Rej is its relative change
                               against SpS (:func:`rej_relative`)
``pos_marginal[i]``            :math:`\#\{N > i\} / \#\{m_s > i\}`: vLLM V1 per-position
                               acceptance rate (prefix-causal)
``pos_conditional[i]``         :math:`\#\{N > i\} / \#\{N \ge i, m_s > i\}`: acceptance at
                               draft index i given the prefix before it was accepted
``hist[i]``                    :math:`\#\{N = i\} / R`: acceptance-length histogram
``speedup(c)``                 :math:`T / (c \sum m_s + R)`: Leviathan et al.'s wall-clock
                               model with drafter/verifier cost ratio c (one verifier call
                               costs 1, one drafted token c), relative to T verifier calls
=============================  =============================================================

.. warning::
    "Acceptance length" means different things: the paper and the Cactus code exclude the
    bonus token (``al_paper``), vLLM V1, Spec-Bench, Medusa and EAGLE include it
    (``tokens_per_call = al_paper + 1``), and vLLM V0's ``num_accepted_tokens`` is a
    non-causal per-position count (``v0_acceptance_rate``). Compare numbers only within one
    convention.

The value of a ratio metric over many rounds is :math:`\sum \text{num} / \sum \text{den}`
(what engine counters and the Cactus tracker report); the exact counterpart is the ratio of
the expected totals, the limit of the simulated value as the number of runs grows.

References
----------
vLLM 0.7.3 ``vllm/spec_decode/metrics.py`` (V0); ``vllm/v1/spec_decode/metrics.py`` (V1);
Leviathan et al. 2023 (arXiv 2211.17192), section 3; Hao & Mou, ICLR 2026 (AL_m, Rej).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "ChainTotals",
    "Estimate",
    "ratio_estimate",
    "compute_metrics",
    "rej_relative",
    "METRIC_LABELS",
    "pool_totals",
]

#: Metric name -> one-line label with its convention (printed in tables).
METRIC_LABELS = {
    "al_paper": "AL_m, accepted drafts / round, no bonus (paper, Cactus code)",
    "tokens_per_call": "tokens / verifier call, with bonus (vLLM V1, Spec-Bench, Leviathan)",
    "v0_acceptance_rate": "draft acceptance rate, non-causal (vLLM V0 counters)",
    "prefix_acceptance_rate": "draft acceptance rate, prefix-causal (vLLM V1)",
    "v0_system_efficiency": "system efficiency (vLLM V0)",
    "rejected_per_token": "rejected drafts / generated token (paper's Rej base)",
    "speedup": "speedup model T / (c * drafts + calls) (Leviathan)",
}


@dataclass
class ChainTotals:
    """Per-unit totals of a chain (a unit = one simulated run over one trajectory).

    Attributes
    ----------
    rounds, tokens, accepted, drafts, noncausal : ndarray, shape (n,)
        Verifier calls R, emitted tokens T, accepted drafted tokens :math:`\\sum N`, drafted
        tokens :math:`\\sum m_s`, non-causal accepted count (vLLM V0).
    exposure, accepted_pos, reached : ndarray, shape (n, m)
        Rounds with :math:`m_s > i`; with :math:`N > i`; with :math:`N \\ge i` and
        :math:`m_s > i`.
    hist : ndarray, shape (n, m + 1)
        Rounds with :math:`N = i`.
    group : ndarray of int, shape (n,)
        Trajectory index of each unit (standard errors are centred within a trajectory).
    exact : bool
        True for expected totals from :mod:`.exact` (no standard error).
    """

    rounds: np.ndarray
    tokens: np.ndarray
    accepted: np.ndarray
    drafts: np.ndarray
    noncausal: np.ndarray
    exposure: np.ndarray
    accepted_pos: np.ndarray
    reached: np.ndarray
    hist: np.ndarray
    group: np.ndarray = field(default=None)
    exact: bool = False

    def __post_init__(self):
        if self.group is None:
            self.group = np.zeros(np.shape(self.rounds)[0], dtype=np.int64)

    @property
    def draft_length(self) -> int:
        return self.exposure.shape[1]


def pool_totals(parts) -> ChainTotals:
    """Concatenate the totals of several trajectories into one :class:`ChainTotals`.

    Parameters
    ----------
    parts : iterable of ChainTotals
        One per trajectory; per-position totals of different lengths (trajectories shorter
        than the draft length) are padded with zeros, exactly what they hold beyond.

    Returns
    -------
    ChainTotals
        Units of part i get group label i, so standard errors are centred per trajectory;
        exact iff every part is.
    """
    parts = list(parts)
    if not parts:
        raise ValueError("parts: nothing to pool")
    # A short trajectory's totals stop at its longest round (no draft reaches further): zeros
    # beyond it, exactly.
    width = max(t.draft_length for t in parts)

    def cat(name):
        arrays = [getattr(t, name) for t in parts]
        if name in ("exposure", "accepted_pos", "reached", "hist"):
            extra = width + (name == "hist")
            arrays = [np.pad(a, ((0, 0), (0, extra - a.shape[1]))) for a in arrays]
        return np.concatenate(arrays, axis=0)

    groups = np.concatenate([np.full(len(t.rounds), i) for i, t in enumerate(parts)])
    return ChainTotals(
        cat("rounds"),
        cat("tokens"),
        cat("accepted"),
        cat("drafts"),
        cat("noncausal"),
        cat("exposure"),
        cat("accepted_pos"),
        cat("reached"),
        cat("hist"),
        groups,
        exact=all(t.exact for t in parts),
    )


@dataclass(frozen=True)
class Estimate:
    """A metric value and its standard error (``nan`` for exact values)."""

    value: float
    se: float = float("nan")

    def __format__(self, spec):
        spec = spec or ".4f"
        if np.isnan(self.se):
            return format(self.value, spec)
        return f"{format(self.value, spec)} ± {format(self.se, spec)}"


def ratio_estimate(num, den, group=None, exact: bool = False) -> Estimate:
    r"""Pooled ratio :math:`\sum num / \sum den` and its delta-method standard error.

    .. math:: \widehat{se} = \frac{\sqrt{\sum_g \frac{n_g}{n_g-1}\sum_{i \in g}
              (e_i - \bar e_g)^2}}{\sum_i den_i}, \qquad e_i = num_i - \hat\rho\, den_i,

    units independent, identically distributed within a group g (one trajectory); groups of
    one unit contribute no variance. ``den`` summing to 0 gives ``nan``.

    Parameters
    ----------
    num, den : array_like, shape (n,)
        Per-unit numerator and denominator totals (e.g. accepted drafts and rounds).
    group : array_like of int, shape (n,), optional
        Trajectory label of each unit.
    exact : bool
        The totals are expectations: return the ratio with no standard error.

    Returns
    -------
    Estimate
    """
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    total = den.sum()
    if total <= 0:
        return Estimate(float("nan"), float("nan"))
    rho = num.sum() / total
    if exact:
        return Estimate(float(rho))
    e = num - rho * den
    group = np.zeros(len(e), dtype=np.int64) if group is None else np.asarray(group)
    var = 0.0
    for g in np.unique(group):
        eg = e[group == g]
        if len(eg) > 1:
            var += len(eg) / (len(eg) - 1) * np.sum((eg - eg.mean()) ** 2)
    return Estimate(float(rho), float(np.sqrt(var) / total))


def compute_metrics(t: ChainTotals, cost_ratio: float = 0.0) -> dict:
    r"""Every metric of the module table from totals.

    Parameters
    ----------
    t : ChainTotals
        Simulated (per-run) or exact (expected) totals.
    cost_ratio : float
        c, the drafter's cost per drafted token relative to one verifier call, >= 0.

    Returns
    -------
    dict
        Scalar metrics (``al_paper``, ``tokens_per_call``, ...) as :class:`Estimate`, and
        ``pos_marginal``, ``pos_conditional`` (length m) and ``hist`` (length m + 1) as lists of
        :class:`Estimate`.
    """
    if not np.isfinite(cost_ratio) or cost_ratio < 0:
        raise ValueError(f"cost_ratio: must be a finite number >= 0, got {cost_ratio!r}")
    m = t.draft_length
    r = lambda a, b: ratio_estimate(a, b, t.group, t.exact)  # noqa: E731
    out = {
        "al_paper": r(t.accepted, t.rounds),
        "tokens_per_call": r(t.tokens, t.rounds),
        "v0_acceptance_rate": r(t.noncausal, t.drafts),
        "prefix_acceptance_rate": r(t.accepted, t.drafts),
        "v0_system_efficiency": r(t.tokens, t.drafts + t.rounds),
        "rejected_per_token": r(t.drafts - t.accepted, t.tokens),
        "speedup": r(t.tokens, cost_ratio * t.drafts + t.rounds),
        "pos_marginal": [r(t.accepted_pos[:, i], t.exposure[:, i]) for i in range(m)],
        "pos_conditional": [r(t.accepted_pos[:, i], t.reached[:, i]) for i in range(m)],
        "hist": [r(t.hist[:, i], t.rounds) for i in range(m + 1)],
    }
    return out


def rej_relative(rule_metrics: dict, sps_metrics: dict) -> Estimate:
    r"""The paper's Rej: relative change of rejected drafts per generated token against SpS.

    .. math:: \mathrm{Rej} = \frac{(\sum(m_s - N)/T)_{\text{rule}}}{(\sum(m_s - N)/T)_{\text{SpS}}} - 1

    (negative = fewer rejections). With the paper's Table (m = 20) this reproduces its Rej
    column from its AL column to within about 2 points (e.g. GSM8K Cactus delta = 0.75:
    (20 - 7.15)/8.15 against (20 - 5.11)/6.11 gives -35 %, the paper prints -36 %).
    The standard error assumes the two runs independent.

    Parameters
    ----------
    rule_metrics, sps_metrics : dict
        From :func:`compute_metrics` for the rule and for SpS on the same trajectories.

    Returns
    -------
    Estimate
        ``nan`` when SpS rejects nothing.

    References
    ----------
    Hao & Mou, ICLR 2026, main table (Rej column); paper.md claim 10.
    """
    x, y = rule_metrics["rejected_per_token"], sps_metrics["rejected_per_token"]
    if y.value <= 0:
        return Estimate(float("nan"), float("nan"))
    rel = x.value / y.value
    se = float("nan")
    if not (np.isnan(x.se) or np.isnan(y.se)):
        terms = [(x.se / x.value) ** 2 if x.value > 0 else 0.0, (y.se / y.value) ** 2]
        se = abs(rel) * float(np.sqrt(sum(terms)))
    return Estimate(rel - 1.0, se)

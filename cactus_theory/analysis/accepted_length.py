r"""Accepted-length curves: counting conventions, shape checks, and engine counters against S_j.

A chain of k drafts accepts a prefix of N drafts and then emits one more token (the recovered
token, or the bonus token when all k are accepted). With the survival
:math:`S_j = P(N \ge j)` (:math:`j = 1, \dots, k`; the probability that the first j drafts are
all accepted) the mean accepted length of a round that verifies k drafts is

.. math:: A_k = E[N] = \sum_{j \le k} S_j \quad(\text{drafts only}),\qquad
          \tau_k = E[N + 1] = 1 + A_k \quad(\text{bonus counted}),

the two counting conventions in use (vLLM's "mean acceptance length" counts the extra token,
some papers report accepted drafts only). A curve over k is therefore nondecreasing with
increments :math:`A_k - A_{k-1} = S_k \in [0, 1]`, and :math:`S_k` is nonincreasing in k
(:math:`\{N \ge k+1\} \subset \{N \ge k\}`): its increments never rise. An engine's
per-position counters (the number of rounds that accepted position j, out of the rounds that
drafted it) estimate :math:`S_j`; each is a binomial count, compared with the exact survival
(:func:`cactus_theory.simulate._survival.survival_probabilities` on the recorded rows) by a
Clopper-Pearson interval.

Symbols: N accepted drafts of a round, k drafts per round, :math:`S_j` survival.
Source: Leviathan et al. 2023 (arXiv 2211.17192), Section 3.1 (expected tokens per round);
Clopper & Pearson, Biometrika 1934 (exact binomial interval).
"""

from __future__ import annotations

import numpy as np
from scipy import stats

from ..results import CurveCheck, PositionComparison

__all__ = [
    "convert_accepted_length",
    "survival_from_curve",
    "curve_from_survival",
    "check_accepted_length_curve",
    "compare_position_counts",
]

_CONVENTIONS = ("drafts", "bonus")
"""``"drafts"``: accepted drafts per round, :math:`A_k`; ``"bonus"``: tokens per round, :math:`1 + A_k`."""


def _convention(name: str, arg: str) -> str:
    if name not in _CONVENTIONS:
        raise ValueError(f"{arg}: {name!r} is not a counting convention (one of {', '.join(_CONVENTIONS)})")
    return name


def _curve(values, arg: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
        raise ValueError(f"{arg}: expected a non-empty 1-D array of finite numbers, got shape {v.shape}")
    return v


def convert_accepted_length(values, source: str, target: str) -> np.ndarray:
    """Convert accepted lengths between conventions (``"drafts"``: :math:`A_k`, ``"bonus"``: :math:`1 + A_k`).

    Examples
    --------
    >>> convert_accepted_length([1.5, 2.0], "drafts", "bonus").tolist()
    [2.5, 3.0]
    """
    v = _curve(values, "values")
    shift = {"drafts": 0.0, "bonus": 1.0}
    return v - shift[_convention(source, "source")] + shift[_convention(target, "target")]


def survival_from_curve(values, convention: str = "drafts") -> np.ndarray:
    r"""The survival :math:`S_k = A_k - A_{k-1}` (:math:`A_0 = 0`) of a curve over k = 1, 2, ...

    ``values[i]`` is the mean accepted length with ``i + 1`` drafts per round, in ``convention``.
    """
    a = convert_accepted_length(values, convention, "drafts")
    return np.diff(a, prepend=0.0)


def curve_from_survival(survival, convention: str = "drafts") -> np.ndarray:
    r"""The curve :math:`A_k = \sum_{j \le k} S_j` (or :math:`1 + A_k`) from a survival curve."""
    s = _curve(survival, "survival")
    return convert_accepted_length(np.cumsum(s), "drafts", convention)


def check_accepted_length_curve(
    values, convention: str = "bonus", *, kind: str = "length", atol: float = 0.0
):
    r"""Flag an accepted-length (or survival) curve that no chain of drafts can produce.

    Parameters
    ----------
    values : array_like, shape (K,)
        ``kind="length"``: the mean accepted length with 1, 2, ..., K drafts per round, in
        ``convention``; ``kind="survival"``: :math:`S_1, \dots, S_K` (per-position acceptance
        of the prefix; ``convention`` is not read).
    convention : {"bonus", "drafts"}
        The length curve's counting convention ("bonus" or "drafts").
    kind : {"length", "survival"}
    atol : float
        Slack on every comparison (>= 0), for curves measured with noise; 0 for exact curves.

    Returns
    -------
    CurveCheck

    Examples
    --------
    >>> check_accepted_length_curve([1.8, 2.4, 2.8]).ok     # increments 0.8, 0.6, 0.4
    True
    >>> check_accepted_length_curve([1.5, 2.3, 2.4]).summary()   # 0.5 then 0.8: rises
    'increment rises at k = 2'
    """
    if kind not in ("length", "survival"):
        raise ValueError(f"kind: {kind!r} is not 'length' or 'survival'")
    if not (np.isfinite(atol) and atol >= 0):
        raise ValueError(f"atol: must be finite and >= 0, got {atol}")
    s = survival_from_curve(values, convention) if kind == "length" else _curve(values, "values")
    k = np.arange(1, s.size + 1)
    neg = tuple(int(x) for x in k[s < -atol])
    rises = tuple(int(x) for x in k[1:][np.diff(s) > atol])
    above = tuple(int(x) for x in k[s > 1.0 + atol])
    return CurveCheck(s, neg, rises, above)


def compare_position_counts(
    accepted_counts, rounds, expected_survival, alpha: float = 1e-3
) -> PositionComparison:
    r"""Compare an engine's per-position acceptance counters with the exact survival.

    Parameters
    ----------
    accepted_counts : array_like of int, shape (K,)
        Rounds that accepted position j (vLLM's ``num_accepted_tokens_per_pos``).
    rounds : int or array_like of int, shape (K,)
        Rounds that drafted position j (vLLM: the number of drafts, the same for every j).
    expected_survival : array_like, shape (K,)
        :math:`S_j` averaged over the same rounds (exact, from the recorded rows).
    alpha : float
        Per-position level of the two-sided Clopper-Pearson interval, in (0, 1).

    The count at position j is a sum of independent Bernoulli draws with means :math:`S_j` of
    each round, so its mean is ``rounds * expected``; the interval is exact for equal means
    and conservative otherwise (a Poisson-binomial count is less spread than the binomial).
    """
    c = np.asarray(accepted_counts)
    s = _curve(expected_survival, "expected_survival")
    if c.shape != s.shape or not np.issubdtype(c.dtype, np.integer) or np.any(c < 0):
        raise ValueError(f"accepted_counts: expected non-negative integers of shape {s.shape}, got {c.shape}")
    n = np.broadcast_to(np.asarray(rounds), c.shape)
    if not np.issubdtype(n.dtype, np.integer) or np.any(n < 1) or np.any(c > n):
        raise ValueError("rounds: expected integers >= 1 and >= accepted_counts")
    if np.any((s < 0) | (s > 1)):
        raise ValueError("expected_survival: probabilities must lie in [0, 1]")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha: must lie in (0, 1), got {alpha}")
    lo = np.empty(c.size)
    hi = np.empty(c.size)
    for i, (ci, ni) in enumerate(zip(c.tolist(), n.tolist())):
        ci_ = stats.binomtest(ci, ni).proportion_ci(confidence_level=1 - alpha, method="exact")
        lo[i], hi[i] = ci_.low, ci_.high
    outside = tuple(int(j) + 1 for j in np.flatnonzero((s < lo) | (s > hi)))
    return PositionComparison(c / n, s, lo, hi, outside)

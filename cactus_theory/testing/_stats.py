r"""The power of the sampler-law check: the smallest deviation a chi-square test detects.

Pearson's chi-square statistic of ``n`` draws from a law :math:`g` tested against :math:`h`
on ``df + 1`` cells is asymptotically non-central chi-square with ``df`` degrees of freedom
and non-centrality :math:`\lambda = n \chi^2(g \| h) = n \sum_j (g_j - h_j)^2 / h_j`. By
Cauchy-Schwarz, :math:`(\sum_j |g_j - h_j|)^2 \le \chi^2(g \| h) \sum_j h_j`, so every law
at total variation :math:`t = \tfrac12 \sum_j |g_j - h_j|` from :math:`h` has
:math:`\chi^2(g \| h) \ge 4 t^2`. With :math:`\lambda^*` the non-centrality at which the test
at ``level`` rejects with probability ``power``, every deviation of total variation at least

.. math:: t^* = \tfrac12 \sqrt{\lambda^* / n}

between the test's cells is detected with probability at least ``power`` (to the accuracy
of the non-central approximation), and :math:`n^* = \lambda^* / (4 t^2)` draws detect every
deviation of total variation t.

References
----------
Cochran, "The chi-square test of goodness of fit", Ann. Math. Stat. 23 (1952) (the
non-central limit). Cauchy-Schwarz: :math:`(\sum |d_j|)^2 = (\sum \sqrt{h_j} |d_j| /
\sqrt{h_j})^2 \le \sum h_j \sum d_j^2 / h_j`.
"""

from __future__ import annotations

import math
from functools import lru_cache

from scipy import optimize, stats

__all__ = ["DEFAULT_DETECTABLE_TV", "DEFAULT_POWER", "detectable_tv", "draws_needed", "noncentrality"]

#: The power at which the smallest detectable deviation is stated.
DEFAULT_POWER = 0.9
#: A position whose smallest detectable total variation (at :data:`DEFAULT_POWER`) exceeds this
#: is "underpowered": its pass says little.
DEFAULT_DETECTABLE_TV = 0.1


@lru_cache(maxsize=4096)
def noncentrality(df: int, level: float, power: float) -> float:
    r"""The non-centrality :math:`\lambda^*` at which a chi-square test with ``df`` degrees of
    freedom at ``level`` rejects with probability ``power``."""
    if df < 1:
        raise ValueError(f"df: expected >= 1, got {df}")
    crit = float(stats.chi2.isf(level, df))

    def gap(lam):
        return float(stats.ncx2.sf(crit, df, lam)) - power

    hi = 1.0
    while gap(hi) < 0:
        hi *= 2.0
    return float(optimize.brentq(gap, 0.0, hi, xtol=1e-9, rtol=1e-10))


def detectable_tv(n: int, df: int, level: float, power: float = DEFAULT_POWER) -> float:
    """The smallest total variation detected with probability ``power`` by a chi-square test of
    ``n`` draws on ``df + 1`` cells at ``level`` (:math:`t^*`; inf for n = 0)."""
    if n <= 0:
        return math.inf
    return 0.5 * math.sqrt(noncentrality(int(df), float(level), float(power)) / n)


def draws_needed(tv: float, df: int, level: float, power: float = DEFAULT_POWER) -> int:
    """Draws :math:`n^*` at which a deviation of total variation ``tv`` is detected with
    probability ``power``."""
    if not tv > 0:
        raise ValueError(f"tv: expected a positive total variation, got {tv!r}")
    return int(math.ceil(noncentrality(int(df), float(level), float(power)) / (4.0 * tv * tv)))

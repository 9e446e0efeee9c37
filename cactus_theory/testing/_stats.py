r"""The statistical tests of the sampler-law check, and their power.

The tests: Pearson's chi-square of emitted tokens against an exact law (cells of small
expected count pooled; a token of exact probability 0 that is emitted fails outright), an exact
two-sided binomial test of an acceptance count, and Bernstein's inequality for a counter.

The power: the smallest deviation a chi-square test detects.

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

import numpy as np
from scipy import optimize, stats

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


def _chi_square(counts: np.ndarray, probs: np.ndarray, min_expected: float):
    """(p-value, detail, cells) of Pearson's chi-square; cells below min_expected pooled.

    ``cells`` is the number of cells tested (0 when an impossible token decided it)."""
    n = int(counts.sum())
    if n == 0:
        return 1.0, "position never reached", 0
    impossible = (probs <= 0) & (counts > 0)
    if impossible.any():
        j = int(np.flatnonzero(impossible)[0])
        return (
            0.0,
            (
                f"token {j} emitted {int(counts[j])} times, its exact probability is 0 "
                f"({int(counts[impossible].sum())} draws on impossible tokens)"
            ),
            0,
        )
    exp = probs / probs.sum() * n
    keep = exp >= min_expected
    obs = counts[keep].astype(np.float64)
    ex = exp[keep]
    if (~keep).any() and exp[~keep].sum() > 0:
        obs = np.append(obs, counts[~keep].sum())
        ex = np.append(ex, exp[~keep].sum())
    resid = (counts - exp) / np.sqrt(np.where(exp > 0, exp, 1.0))
    j = int(np.argmax(np.abs(resid)))
    tv = 0.5 * float(np.abs(counts / n - probs / probs.sum()).sum())
    detail = (
        f"emitted frequencies vs exact law: TV {tv:.4f}; largest deviation token {j}: "
        f"observed {counts[j] / n:.4f}, exact {probs[j] / probs.sum():.4f}"
    )
    if len(ex) < 2:
        return 1.0, detail + " (one cell: nothing to test)", len(ex)
    pval = float(stats.chisquare(obs, ex * obs.sum() / ex.sum()).pvalue)
    return pval, detail, len(ex)


def _binomial(successes: int, n: int, prob: float):
    if n == 0:
        return 1.0, "position never reached"
    prob = min(max(prob, 0.0), 1.0)
    pval = float(stats.binomtest(successes, n, prob).pvalue)
    return pval, f"acceptance observed {successes / n:.4f}, exact {prob:.4f}"


def _bernstein(observed: float, mean: float, variance: float):
    r"""Two-sided Bernstein bound :math:`2\exp(-t^2 / (2(\sigma^2 + t/3)))` for a sum of
    independent [0, 1] variables, at :math:`t = |S - E S|`."""
    t = abs(observed - mean)
    if t == 0:
        return 1.0
    return float(min(1.0, 2.0 * math.exp(-t * t / (2.0 * (variance + t / 3.0)))))


def _token_law(tokens: np.ndarray, probs: np.ndarray, min_expected: float):
    """Chi-square of emitted token ids against ``probs``; ids outside the vocabulary fail."""
    v = len(probs)
    bad = (tokens < 0) | (tokens >= v)
    if bad.any():
        return 0.0, f"{int(bad.sum())} emitted ids outside the vocabulary, e.g. {int(tokens[bad][0])}", 0
    return _chi_square(np.bincount(tokens, minlength=v), probs, min_expected)


def _power_fields(
    r: dict, passed: bool, level: float, power: float, tv_goal: float, num_samples: int
) -> dict:
    """detectable_tv, underpowered and draws_needed of one raw chi-square check."""
    if r["test"] != "chi-square":
        return {}
    n, support, reach = r["n"], r["_support"], r["_reach"]
    if support <= 1:  # one possible token: any other token fails outright
        tv = 0.0 if n == 0 else 1.0 - (1.0 - power) ** (1.0 / n)
        df_goal = None
    elif r["_cells"] >= 2:
        tv = detectable_tv(n, r["_cells"] - 1, level, power)
        df_goal = support - 1
    elif r["_cells"] == 0 and n > 0:  # decided by an impossible token: the nominal power
        tv = detectable_tv(n, support - 1, level, power)
        df_goal = support - 1
    else:
        tv = math.inf if n > 0 or reach > 0 else None
        df_goal = support - 1
    if n == 0 and reach == 0:
        return {"detectable_tv": None}
    under = bool(passed and tv is not None and tv > tv_goal)
    need = None
    if under:
        if df_goal is None:
            per_pos = math.ceil(math.log(1.0 - power) / math.log(1.0 - tv_goal))
        else:
            per_pos = draws_needed(tv_goal, df_goal, level, power)
        # draws per case whose reached count falls short of per_pos with probability ~0.001
        # (three standard deviations of the binomial count spared)
        need = int(math.ceil((per_pos + 3.0 * math.sqrt(per_pos)) / reach)) if reach > 0 else None
    return {"detectable_tv": tv, "underpowered": under, "draws_needed": need}


def _pit_test(parts, rng: np.random.Generator, bins: int = 20):
    r"""One test of several samples of tokens, each against its own exact law: the randomized
    probability integral transform.

    With a part's tokens ordered by decreasing exact probability :math:`h` (ties by index),
    :math:`F` its distribution function in that order and :math:`V` uniform, a token t gives
    :math:`U = F(t^-) + V h(t)`, uniform on [0, 1) exactly when t follows h, whatever h is; so
    the U of all parts, however small each part is, pool into one sample, tested by Pearson's
    chi-square on up to ``bins`` equiprobable bins (at least 5 expected per bin). Tokens of
    successive positions of one request give independent U (each is uniform given the past). A
    token of exact probability 0, or an id outside the vocabulary, fails outright. A sampler too
    sure of the likely tokens (an argmax where a draw is due) puts U near 0.

    Returns (p-value, detail, bins tested, tokens).
    """
    us, n = [], 0
    for tokens, probs in parts:
        if len(tokens) == 0:
            continue
        v = len(probs)
        safe = np.clip(tokens, 0, v - 1)
        bad = (tokens < 0) | (tokens >= v) | (probs[safe] <= 0)
        if bad.any():
            detail = f"{int(bad.sum())} tokens of exact probability 0 (or outside the vocabulary), e.g. {int(tokens[bad][0])}"
            return 0.0, detail, 0, int(len(tokens)) + n
        h = probs / probs.sum()
        order = np.argsort(-h, kind="stable")
        rank = np.empty(v, dtype=np.int64)
        rank[order] = np.arange(v)
        before = np.concatenate([[0.0], np.cumsum(h[order])])[rank]  # F(t^-) in that order
        us.append(before[safe] + rng.random(len(tokens)) * h[safe])
        n += len(tokens)
    b = min(bins, n // 5)
    if b < 2:
        return 1.0, f"{n} tokens: too few to test", 0, n
    u = np.concatenate(us)
    counts = np.bincount(np.minimum((u * b).astype(np.int64), b - 1), minlength=b)
    pval = float(stats.chisquare(counts).pvalue)
    share = counts / n
    return (
        pval,
        f"{n} tokens, PIT in {b} bins: lowest bin {share[0]:.3f}, highest {share.max():.3f} (uniform {1 / b:.3f})",
        b,
        n,
    )

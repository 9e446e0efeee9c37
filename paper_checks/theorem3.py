r"""Claim 7, Theorem 3: the emitted divergence against D(p||q), and a family on which it grows
without bound in the vocabulary size at a fixed delta."""

from __future__ import annotations

import math

import numpy as np

from cactus_theory.analysis.one_step import emitted_distribution
from cactus_theory.divergences import get_divergence
from cactus_theory.rules import get_rule

from .verdicts import EXACT_TOL, RATIO_TOL, Check, Verdict, stated

#: Vocabulary sizes of the Theorem 3 family.
THEOREM3_VOCABS = (10, 100, 1000, 10000, 100000)


#: Smallest q* the family uses: below it float64 cannot hold q (the exact root's q* falls like
#: exp(-delta (V-1)), so large V at large delta are out of float64's range).
FAMILY_FLOOR = 1e-300


def _family_qstar(vocabs, delta, rule):
    """q* per vocabulary size: the least q with gamma(q) >= 1/(V-1) (bisection on log q)."""
    r = get_rule(rule, delta=delta)
    target = 1.0 / (np.asarray(vocabs, dtype=np.float64) - 1.0)
    lo = np.full(target.shape, math.log(FAMILY_FLOOR))
    hi = np.log(target)
    for _ in range(80):  # the log bracket is < 700 wide: 700 / 2**80 is far below float64's step
        mid = 0.5 * (lo + hi)
        ok = np.asarray(r.spike(np.exp(mid))) >= target
        hi = np.where(ok, mid, hi)
        lo = np.where(ok, lo, mid)
    below = np.asarray(r.spike(np.full(target.shape, FAMILY_FLOOR))) >= target
    return np.where(below, np.nan, np.exp(hi))  # nan: q* below FAMILY_FLOOR


def theorem3_family(vocab_size: int, delta: float, rule: str = "cactus-taylor"):
    r"""A (q, p) pair whose emitted divergence grows without bound in V at a fixed delta.

    p is uniform on tokens 1..V-1 (token 0 never drafted); q puts :math:`q^*` on each of them
    and the rest on token 0, with :math:`q^*` the least value whose :math:`\gamma(q^*)` reaches
    :math:`p_n = 1/(V-1)` (bisection on log q). Every draft is then accepted with certainty, so
    :math:`h_{alg} = p` and :math:`KL(h_{alg}\|q) = KL(p\|q) = \log(1/((V-1) q^*))`. For the
    Taylor point :math:`q^* \approx 1/(2\delta (V-1)^2)`, so this is about
    :math:`\log(2\delta(V-1))`; for the exact KL root :math:`\gamma \log(\gamma/q^*) \approx
    \delta`, so it is about :math:`\delta (V-1)` (linear in V).

    Returns
    -------
    q, p : ndarray, shape (V,)

    Raises
    ------
    ValueError
        ``vocab_size`` < 3, or q* below :data:`FAMILY_FLOOR` (not representable).
    """
    V = int(vocab_size)
    if V < 3:
        raise ValueError(f"vocab_size: must be >= 3, got {vocab_size}")
    qs = float(_family_qstar([V], delta, rule)[0])
    if not np.isfinite(qs):
        raise ValueError(f"vocab_size: q* < {FAMILY_FLOOR:g} at V = {V}, delta = {delta} ({rule})")
    q = np.full(V, qs)
    q[0] = 1.0 - (V - 1) * qs
    p = np.full(V, 1.0 / (V - 1))
    p[0] = 0.0
    return q, p


def _corpus_ratios(corpus):
    """Over the corpus (both rules, delta 0.1 and 1): the largest D(h_alg||q)/D(p||q) (KL, TV,
    Hellinger) and, per (rows, rule, delta), the largest KL(h_alg||q)/delta."""
    worst_ratio, gamma_ratio = 0.0, []
    for _, q, p in corpus:
        for name in ("cactus-taylor", "cactus-exact-kl"):
            for d in (0.1, 1.0):
                e = emitted_distribution(get_rule(name, delta=d), q, p)
                for div in ("kl", "tv", "hellinger"):
                    D = get_divergence(div)
                    lhs, rhs = D.unchecked(e, q), D.unchecked(p, q)
                    ok = rhs > 0
                    worst_ratio = max(
                        worst_ratio,
                        float(np.max(np.where(ok, lhs / np.where(ok, rhs, 1), 0))),
                    )
                gamma_ratio.append(float(np.max(get_divergence("kl").unchecked(e, q)) / d))
    return worst_ratio, gamma_ratio


def _family_values():
    """``{(rule, delta): (KL(h_alg||q) per vocabulary size of the family, max |h_alg - p|)}``."""
    fam = {}
    for rule in ("cactus-taylor", "cactus-exact-kl"):
        for d in (0.1, 1.0):
            vals, dev = [], 0.0
            qstar = _family_qstar(THEOREM3_VOCABS, d, rule)
            for V in np.asarray(THEOREM3_VOCABS)[np.isfinite(qstar)]:
                q, p = theorem3_family(int(V), d, rule)
                h = emitted_distribution(get_rule(rule, delta=d), q, p)
                dev = max(dev, float(np.abs(h - p).max()))
                vals.append(float(get_divergence("kl").unchecked(h, q)))
            fam[(rule, d)] = (vals, dev)
    return fam


def claim_theorem3(corpus) -> Verdict:
    worst_ratio, gamma_ratio = _corpus_ratios(corpus)
    n = sum(len(q) for _, q, _ in corpus)
    fam = _family_values()
    nums = {f"family_{rule}_{d:g}": vals for (rule, d), (vals, _) in fam.items()}
    growth = min(v[-1] - v[-2] for v, _ in fam.values())  # the last decade of V available
    dev = max(x for _, x in fam.values())
    nums.update(
        max_ratio=worst_ratio,
        sample_max_gamma_over_delta=max(gamma_ratio),
        family_growth=growth,
        family_h_minus_p=dev,
    )
    fam_txt = "; ".join(
        f"{r} delta={d:g}: "
        + ", ".join(f"{x:.2f}" for x in v)
        + ("" if len(v) == len(THEOREM3_VOCABS) else " (larger V: q* < 1e-300)")
        for (r, d), (v, _) in fam.items()
    )
    return Verdict(
        7,
        "Theorem 3: D(h_alg||q) <= min(Gamma(delta), D(p||q)) with Gamma(delta) finite; how large?",
        stated(
            "D_f(h_alg||q) of the emitted mixture against D_f(p||q), and Gamma as a function "
            "of delta alone (the paper's Gamma(delta))",
            Check(
                "max D(h_alg||q)/D(p||q) over the corpus (KL, TV, Hellinger)",
                worst_ratio,
                "<=",
                1 + RATIO_TOL,
            ),
            # a sup finite in V needs the per-decade increments to fall to 0: 0.01 nats is a
            # generous "stopped growing"; log(10) = 2.30 per decade is log V growth
            Check(
                "Gamma(delta) finite whatever V: family's KL(h_alg||q) increment over its last "
                "decade of V (least over rules and deltas)",
                growth,
                "<=",
                0.01,
            ),
        ),
        "sup over (q, p) of KL(h_alg||q) at a fixed delta is infinite: on the family "
        "(p uniform on V-1 tokens, q* on each so that gamma(q*) = p_n, the rest on a token never "
        "drafted) h_alg = p and KL(h_alg||q) = log(1/((V-1)q*)), about log(2 delta (V-1)) for the "
        f"Taylor point and about delta (V-1) for the exact root; at V = "
        f"{', '.join(str(v) for v in THEOREM3_VOCABS)}: {fam_txt}. So Gamma can be "
        "finite only as a function of the vocabulary size too: Gamma(delta, V) is at least these values "
        "(log V growth for Taylor, linear in V for the exact root), and corpus values are "
        f"sample maxima, not bounds: here the largest KL(h_alg||q)/delta over {n} positions is "
        f"{max(gamma_ratio):.1f}",
        nums,
        (
            Check(
                "family grows at least like log V: the same increment >= 0.99 log(10)",
                growth,
                ">=",
                0.99 * math.log(10),
                of_paper=False,
            ),
            Check(
                "family: max |h_alg - p| (every draft accepted, so h_alg = p)",
                dev,
                "<=",
                EXACT_TOL,
                of_paper=False,
            ),
            Check(
                "sample max over the corpus of KL(h_alg||q)/delta (exceeds 1: Gamma > delta)",
                max(gamma_ratio),
                ">",
                1.0,
                of_paper=False,
            ),
        ),
    )

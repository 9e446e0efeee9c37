r"""Verdicts, with numbers, on the claims of the Cactus paper that a theory toolkit can check.

Each ``claim_*`` function computes its evidence from seeded inputs and returns a
:class:`Verdict`; :func:`check_claims` runs them all. The claims are those listed in the paper
notes (Hao & Mou, ICLR 2026, arXiv 2604.04987); numbering follows that list.
Symbols: q verifier, p drafter, n drafted token, delta budget, h target, h_alg emitted.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from .analysis.comparison import (
    TAYLOR_WITHIN_BUDGET_FROM,
    taylor_kl_bound,
    taylor_vs_exact_pairs,
)
from .analysis.one_step import acceptance_probabilities, emitted_distribution
from .distributions import synthetic_pairs, truncate
from .divergences import get_divergence
from .rules import TargetPlan, get_rule
from .solvers.spike import exact_spike, taylor_spike

__all__ = [
    "Check",
    "Definition",
    "Verdict",
    "VERDICT_WORDS",
    "NOT_CHECKED",
    "grade",
    "verdict_word",
    "check_claims",
    "format_verdicts",
    "format_vocabulary",
    "PAPER_TABLE",
    "REJ_DEFINITIONS",
    "rej_readings",
    "per_prompt_sps_spread",
    "theorem3_family",
    "readme_example_readings",
]

_PAPER_TRUNC = dict(temperature=0.6, top_k=20, top_p=0.95)


#: Tolerance of an identity computed in float64 over rows of at most a few hundred terms
#: (sums of V <= 48 probabilities, a few ulps each): 1e-12 is far above that rounding.
_EXACT_TOL = 1e-12
#: Tolerance of a cvxpy answer: Clarabel/SCS are run at about 1e-8 to 1e-9 feasibility and gap.
_CVX_TOL = 1e-6
#: Tolerance of an inequality whose two sides are computed by different float64 routes
#: (a divergence ratio, an argmax on a grid): well above rounding, far below any finding.
_RATIO_TOL = 1e-9


@dataclass(frozen=True)
class Check:
    r"""One numerical test behind a verdict: ``value op threshold``.

    Attributes
    ----------
    statement : str
        What is tested, in words.
    value : float
        The computed number.
    op : str
        ``"<="``, ``">="`` or ``">"``.
    threshold : float
        The stated threshold (its reason is in the constant or the claim's code).
    of_paper : bool
        True: the check tests what the paper states (it enters the verdict). False: a finding
        of this toolkit beyond the paper (reported and pinned, not graded).
    """

    statement: str
    value: float
    op: str
    threshold: float
    of_paper: bool = True

    @property
    def passed(self) -> bool:
        """Whether ``value op threshold`` holds."""
        v, t = self.value, self.threshold
        return {"<=": v <= t, ">=": v >= t, ">": v > t}[self.op]

    def line(self) -> str:
        """One line: ``[pass] statement: value <= threshold``; a value below
        :data:`ROUNDING_FLOOR` in size reads ``0 (to 1e-14)`` (its digits are float64 rounding of
        order-one quantities, which the summation order of a machine or thread count moves)."""
        tag = ("pass" if self.passed else "FAIL") if self.of_paper else ("true" if self.passed else "false")
        shown = f"0 (to {ROUNDING_FLOOR:g})" if abs(self.value) < ROUNDING_FLOOR else f"{self.value:.6g}"
        return f"[{tag}] {self.statement}: {shown} {self.op} {self.threshold:.6g}"


#: Below this size a check's value is shown as ``0 (to 1e-14)``: float64 rounding (a few ulps of
#: order-one quantities), whose digits depend on the summation order.
ROUNDING_FLOOR = 1e-14

#: The verdict words and the criterion of each (:func:`verdict_word` applies them).
VERDICT_WORDS = {
    "holds": "every check of what the paper states passes, under the definition the paper states "
    "(or, where it leaves the quantity unstated, under every definition tried)",
    "partly": "some of the paper's checks pass and some fail, under the definition the paper states "
    "(or under every definition tried, where it leaves the quantity unstated)",
    "fails": "every check of what the paper states fails, under the definition the paper states "
    "(or under every definition tried, where it leaves the quantity unstated)",
    "undetermined": "the paper leaves a quantity of the claim unstated, and the definitions tried give "
    "different words or one of them cannot be computed from what the paper prints",
}
#: Not a verdict: the claim's checks were not run (an optional solver was skipped).
NOT_CHECKED = "not checked"


def grade(checks) -> str:
    """The word of one definition's checks: all of the paper's pass ``holds``, none ``fails``, else
    ``partly`` (``not checked`` when there is no check of the paper)."""
    paper = [c.passed for c in checks if c.of_paper]
    if not paper:
        return NOT_CHECKED
    return "holds" if all(paper) else ("fails" if not any(paper) else "partly")


@dataclass(frozen=True)
class Definition:
    """One reading of a claim's quantity and the paper's checks under it.

    Attributes
    ----------
    name : str
        The definition, in words.
    checks : tuple of Check
        The checks of what the paper states, under this definition (graded by :func:`grade`).
    stated : bool
        True: the paper states this definition. At most one definition of a verdict is stated.
    computable : bool
        False: what the paper prints does not determine the checks under this definition.
    note : str
        Why it cannot be computed, or what else it shows.
    """

    name: str
    checks: tuple = ()
    stated: bool = False
    computable: bool = True
    note: str = ""

    @property
    def word(self):
        """``holds``, ``partly`` or ``fails`` under this definition; None where not computable."""
        return grade(self.checks) if self.computable else None


def verdict_word(definitions) -> str:
    """The verdict from the definitions tried, by the criteria of :data:`VERDICT_WORDS`.

    The word of the stated definition when the paper states one; otherwise the common word when
    every definition tried is computable and all give the same word, else ``undetermined``.

    Raises
    ------
    ValueError
        ``definitions`` empty, more than one stated, or a stated one that cannot be computed.
    """
    definitions = tuple(definitions)
    if not definitions:
        raise ValueError("definitions: a verdict needs at least one definition tried")
    stated = [d for d in definitions if d.stated]
    if len(stated) > 1:
        raise ValueError(f"definitions: {len(stated)} are marked stated; the paper states at most one")
    if stated:
        if stated[0].word is None:
            raise ValueError(f"definitions: the stated definition {stated[0].name!r} is not computable")
        return stated[0].word
    words = {d.word for d in definitions}
    if len(words) == 1 and None not in words:
        return words.pop()
    return "undetermined"


@dataclass(frozen=True)
class Verdict:
    """One claim's verdict, computed from the definitions tried by :func:`verdict_word`.

    Attributes
    ----------
    number : int
        The claim's number in the paper notes.
    claim : str
        The claim.
    definitions : tuple of Definition
        The definitions of the claim's quantity tried, each with the paper's checks under it.
    evidence : str
        What else the numbers show.
    numbers : dict
        The key numbers by name (tests pin them).
    findings : tuple of Check
        Checks of this toolkit beyond the paper (reported and pinned, not graded).
    unstated : str
        What the paper leaves unstated ("" when it states the claim's quantity).
    """

    number: int
    claim: str
    definitions: tuple
    evidence: str
    numbers: dict = field(default_factory=dict)
    findings: tuple = ()
    unstated: str = ""

    def __post_init__(self):
        if not self.unstated and not any(d.stated for d in self.definitions) and self.definitions:
            raise ValueError(
                f"unstated: claim {self.number} names no stated definition, so it must say "
                "what the paper leaves unstated"
            )

    @property
    def checks(self) -> tuple:
        """Every check: the definitions' (graded) and the findings (not graded)."""
        return tuple(c for d in self.definitions for c in d.checks) + tuple(self.findings)

    @property
    def verdict(self) -> str:
        """A word of :data:`VERDICT_WORDS` (``not checked`` when no definition was run)."""
        return verdict_word(self.definitions) if self.definitions else NOT_CHECKED


def _stated(name, *checks) -> tuple:
    return (Definition(name, tuple(checks), stated=True),)


def _corpus(seed=0, n=300, V=48):
    out = []
    for fam in ("dirichlet", "zipf", "logits", "noisy_copy"):
        q, p = synthetic_pairs(fam, n, V, seed)
        out.append((fam, q, p))
        out.append((fam + "+trunc", truncate(q, **_PAPER_TRUNC), truncate(p, **_PAPER_TRUNC)))
    return out


def claim_delta_zero(corpus) -> Verdict:
    worst = 0.0
    for _, q, p in corpus:
        for name in ("cactus-taylor", "cactus-exact-kl"):
            worst = max(
                worst,
                float(np.abs(emitted_distribution(get_rule(name, delta=0.0), q, p) - q).max()),
            )
    n = sum(len(q) for _, q, _ in corpus)
    return Verdict(
        1,
        "delta = 0 reproduces SpS exactly (emitted = q)",
        _stated(
            "the emitted distribution h_alg at delta = 0 equals q (Taylor point and exact root)",
            Check(
                "max |h_alg - q| at delta = 0 (Taylor and exact)",
                worst,
                "<=",
                _EXACT_TOL,
            ),
        ),
        f"over {n} positions",
        {"max_abs_diff": worst, "positions": n},
    )


def claim_acceptance(corpus) -> Verdict:
    worst = math.inf
    for _, q, p in corpus:
        a0 = acceptance_probabilities("sps", q, p)
        for name in ("cactus-taylor", "cactus-exact-kl"):
            for d in (0.01, 0.5, 2.0):
                worst = min(
                    worst,
                    float((acceptance_probabilities(get_rule(name, delta=d), q, p) - a0).min()),
                )
    return Verdict(
        2,
        "per draft, Cactus acceptance >= SpS (hence AL >= SpS)",
        _stated(
            "per drafted token n, min(1, gamma_n/p_n) against SpS's min(1, q_n/p_n)",
            Check(
                "min over drafts of a_cactus - a_sps (delta 0.01, 0.5, 2)",
                worst,
                ">=",
                -_EXACT_TOL,
            ),
        ),
        "gamma_n >= q_n always",
        {"min_gain": worst},
    )


def claim_theorem1(corpus) -> Verdict:
    worst = 0.0
    for _, q, p in corpus:
        h = 0.5 * p + 0.5 * q
        plan = TargetPlan(q, p, h)
        worst = max(worst, float(np.abs(emitted_distribution(plan) - h).max()))
    return Verdict(
        3,
        "Theorem 1: a fixed target h is emitted exactly, acceptance sum min(p, h)",
        _stated(
            "accept n with min(1, h_n/p_n), recover from normalize(max(0, h - p)); emitted h_alg",
            Check("max |h_alg - h| for h = (p + q)/2", worst, "<=", _EXACT_TOL),
        ),
        "optimality of sum min(p, h) is the coupling inequality",
        {"max_abs_diff": worst},
    )


def claim_theorem2(seed=0) -> Verdict:
    from .solvers.cvx import CVX_DIVERGENCES, max_draft_probability_cvxpy

    rng = np.random.default_rng(seed)
    gap, beats = 0.0, 0.0
    count = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for trial in range(3):
            q = rng.dirichlet(np.full(5, 0.5))
            if trial == 2:
                q[0] = 0.0
                q /= q.sum()
            for name in CVX_DIVERGENCES:
                for delta in (0.05, 0.5):
                    n = int(rng.integers(5))
                    res = max_draft_probability_cvxpy(q, n, delta, name)
                    root = float(exact_spike(np.array(q[n]), delta, name))
                    gap = max(gap, abs(res.value - root))
                    beats = max(
                        beats,
                        res.value - float(exact_spike(np.array(q[n]), res.divergence, name)),
                    )
                    count += 1
    return Verdict(
        4,
        "Theorem 2: proportional rescaling is optimal for every f-divergence",
        _stated(
            "max h_n subject to D_f(h||q) <= delta over the whole simplex (cvxpy), against "
            "the root gamma* of q_n f(gamma/q_n) + (1-q_n) f((1-gamma)/(1-q_n)) = delta",
            Check("max |cvxpy optimum - root|", gap, "<=", _CVX_TOL),
            Check(
                "max excess of cvxpy over the root at cvxpy's own divergence",
                beats,
                "<=",
                _CVX_TOL,
            ),
        ),
        f"{count} cvxpy solves over the whole simplex (7 divergences, q with a zero)",
        {"max_gap": gap, "max_excess": beats, "solves": count},
    )


#: Budgets at which Corollary 5's claim about the bonus is checked (the paper runs 0.75 and 1).
COROLLARY5_DELTAS = (0.01, 0.1, 0.5, 0.75, 1.0)


def claim_corollary5() -> Verdict:
    r"""The realised bonus :math:`\min(1, \gamma) - q_n` and where it peaks, by delta.

    Taylor: :math:`\min(1-q, \sqrt{2\delta q(1-q)})`; the cap binds for
    :math:`q_n \ge 1/(1+2\delta)`, so the peak is at :math:`\min(1/2, 1/(1+2\delta))`.
    """
    step = 1e-4
    s = np.linspace(0, 1, 10001)
    checks, formula, findings, nums, parts = [], [], [], {}, []
    for d in COROLLARY5_DELTAS:
        bonus = taylor_spike(s, d) - s
        exact_bonus = exact_spike(s, d, "kl") - s
        arg, arg_exact = float(s[np.argmax(bonus)]), float(s[np.argmax(exact_bonus)])
        arg_formula = float(s[np.argmax(np.sqrt(2.0 * d * s * (1.0 - s)))])
        closed = min(0.5, 1.0 / (1.0 + 2.0 * d))
        checks.append(
            Check(
                f"delta={d:g}: |argmax_q bonus - 1/2| (grid step {step:g})",
                abs(arg - 0.5),
                "<=",
                step,
            )
        )
        formula.append(
            Check(
                f"delta={d:g}: |argmax_q sqrt(2 delta q(1-q)) - 1/2| (grid step {step:g})",
                abs(arg_formula - 0.5),
                "<=",
                step,
            )
        )
        findings.append(
            Check(
                f"delta={d:g}: |argmax - min(1/2, 1/(1+2 delta))|",
                abs(arg - closed),
                "<=",
                step,
                of_paper=False,
            )
        )
        nums[f"argmax_taylor_{d:g}"], nums[f"argmax_exact_{d:g}"] = arg, arg_exact
        nums[f"max_bonus_taylor_{d:g}"] = float(bonus.max())
        parts.append(
            f"delta={d:g}: peak at q_n = {arg:.4f} (exact root {arg_exact:.4f}), max bonus {bonus.max():.3f}"
        )
    end = float(max(abs(taylor_spike(s[[0, -1]], d) - s[[0, -1]]).max() for d in COROLLARY5_DELTAS))
    checks.append(Check("bonus at q_n = 0 and 1", end, "<=", _EXACT_TOL))
    formula.append(Check("sqrt(2 delta q(1-q)) at q_n = 0 and 1", 0.0, "<=", _EXACT_TOL))
    nums["bonus_at_ends"] = end
    cap = {d: 1.0 / (1.0 + 2.0 * d) for d in (0.75, 1.0)}
    return Verdict(
        5,
        "Corollary 5: bonus sqrt(2 delta q(1-q)) largest at q_n = 1/2, zero at 0 and 1",
        (
            Definition(
                "the realised bonus gamma* - q_n, gamma* = min(q_n + sqrt(2 delta q_n(1-q_n)), 1) "
                "as the paper states it",
                tuple(checks),
                stated=True,
            ),
            Definition(
                "the uncapped term sqrt(2 delta q_n(1-q_n)) alone (not the rule's gamma*)",
                tuple(formula),
            ),
        ),
        "; ".join(parts) + ". The realised bonus min(1, gamma) - q_n = min(1 - q_n, sqrt(2 delta "
        "q_n (1-q_n))) is capped once q_n >= 1/(1+2 delta), so for delta > 1/2 it peaks at "
        "1/(1+2 delta), not 1/2 ("
        + ", ".join(f"{v:.3f} at delta {k:g}" for k, v in cap.items())
        + "). At the paper's operating points every draft with q_n above that point is accepted "
        "with certainty whatever p_n, and the bonus (absolute and relative, gamma/q_n) goes to the "
        "less likely tokens below it: Cactus favours low- and mid-probability drafts.",
        nums,
        tuple(findings),
    )


def claim_corollary6() -> Verdict:
    s = np.linspace(1e-6, 1 - 1e-6, 4001)[:, None]
    d = np.geomspace(1e-4, 20, 400)[None, :]
    g = taylor_spike(s + 0 * d, d + 0 * s)
    kl = get_divergence("kl").two_point(g, s + 0 * d)
    ratio = kl / d
    low = g <= 0.5
    tight = float((kl / taylor_kl_bound(d + 0 * s)).max())
    return Verdict(
        6,
        "Corollary 6: gamma <= 1/2 implies KL(h||q) <= delta; beyond 1/2?",
        _stated(
            "KL(h^(n)||q) of the Taylor point gamma* = min(q_n + sqrt(2 delta q_n(1-q_n)), 1) "
            "where gamma* <= 1/2 (grid of q_n and delta)",
            Check(
                "gamma <= 1/2: max KL(h||q)/delta on the grid",
                float(ratio[low].max()),
                "<=",
                1 + _RATIO_TOL,
            ),
        ),
        "Tight bound KL <= log(1+2 delta), attained at q_n = 1/(1+2 delta): the Taylor point "
        f"overshoots by at most 2x as delta -> 0 and never once delta >= {TAYLOR_WITHIN_BUDGET_FROM:.4f}",
        {
            "max_ratio_low": float(ratio[low].max()),
            "max_ratio": float(ratio.max()),
            "tight": tight,
        },
        (
            Check(
                "gamma > 1/2: max KL(h||q)/delta (the budget is exceeded)",
                float(ratio.max()),
                ">",
                1.0,
                of_paper=False,
            ),
            Check(
                "max KL(h||q)/log(1 + 2 delta) (the tight bound)",
                tight,
                "<=",
                1 + _RATIO_TOL,
                of_paper=False,
            ),
        ),
    )


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


def claim_theorem3(corpus) -> Verdict:
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
    n = sum(len(q) for _, q, _ in corpus)
    fam, nums = {}, {}
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
            nums[f"family_{rule}_{d:g}"] = vals
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
        _stated(
            "D_f(h_alg||q) of the emitted mixture against D_f(p||q), and Gamma as a function "
            "of delta alone (the paper's Gamma(delta))",
            Check(
                "max D(h_alg||q)/D(p||q) over the corpus (KL, TV, Hellinger)",
                worst_ratio,
                "<=",
                1 + _RATIO_TOL,
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
                _EXACT_TOL,
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


def claim_tas_cross_entropy() -> Verdict:
    # max h_n s.t. sum h_i (-log q_i) <= delta is a linear programme: h = e_n if q_n >= e^-delta,
    # else h mixes e_n with e_m (m = argmax q), h_n = (delta + log q_m) / (log q_m - log q_n)^+.
    q = np.array([0.5, 0.3, 0.15, 0.05])
    H = float(-(q * np.log(q)).sum())
    alpha = 0.3
    delta = H - math.log(alpha)  # the budget that makes e^-delta = alpha e^-H(q)
    c = -np.log(q)
    gap = c - c.min()
    hn = np.where(c <= delta, 1.0, np.clip((delta - c.min()) / np.where(gap > 0, gap, 1.0), 0, 1))
    fractional = int(np.sum((hn > 0) & (hn < 1)))
    tas_accepts = q >= alpha * math.exp(-H)  # TAS's threshold without its eps cap
    mismatch = int(np.sum((hn >= 1) != tas_accepts))
    return Verdict(
        8,
        "Eq. 10 / Prop. 4: TAS is the same problem with a cross-entropy budget",
        _stated(
            "max h_n subject to the cross-entropy H(h, q) <= delta (a linear programme), "
            "against TAS's 0/1 acceptance at q_n >= alpha e^-H(q) without its eps cap",
            Check(
                "tokens where the LP's certain acceptance differs from TAS's threshold "
                "(delta = H(q) + log(1/alpha))",
                mismatch,
                "<=",
                0,
            ),
            Check(
                "tokens where the LP's optimum is fractional (TAS is 0/1)",
                fractional,
                "<=",
                0,
            ),
        ),
        f"the cross-entropy problem is a linear programme: accept with certainty iff q_n >= e^-delta "
        f"and recover to argmax q; between thresholds its optimum is fractional (q = {q.tolist()}, "
        f"alpha = {alpha}), where TAS rejects outright; TAS's eps cap has no budget counterpart",
        {"mismatch": mismatch, "fractional": fractional},
    )


#: The README worked example: q, p over (decode, generate, output), the drafted token, and its
#: printed numbers with the rounding interval each printed value stands for.
README_EXAMPLE = dict(q=(0.30, 0.35, 0.35), p=(0.05, 0.80, 0.15), n=1)
README_PRINTED = {
    "gamma = .66": (0.655, 0.665),
    "h_decode = .16": (0.155, 0.165),
    "h_output = .18": (0.175, 0.185),
    "acceptance 82%": (0.815, 0.825),
    "KL(h||q) = 0.20 nats": (0.195, 0.205),
}
#: Grid step of the delta scan of the README readings.
README_DELTA_STEP = 1e-5


def readme_example_readings(step: float = README_DELTA_STEP):
    r"""Every (rule, delta) reading of the README worked example, number by number.

    For the Taylor point and the exact KL root, scan delta on [0.1, 0.4] (step ``step``) and
    return, for each printed number, the delta interval where the rule's value rounds to it
    (half-open intervals of :data:`README_PRINTED`), and the interval where all of them do.

    Returns
    -------
    dict
        ``{rule: {number label or "all": (lo, hi) or None}}``.
    """
    q = np.array(README_EXAMPLE["q"])
    p = np.array(README_EXAMPLE["p"])
    n = README_EXAMPLE["n"]
    deltas = np.arange(0.1, 0.4, step)
    out = {}
    for rule in ("cactus-taylor", "cactus-exact-kl"):
        gam = _spike_grid(rule, q[n], deltas)
        c = (1 - gam) / (1 - q[n])
        vals = {
            "gamma = .66": gam,
            "h_decode = .16": q[0] * c,
            "h_output = .18": q[2] * c,
            "acceptance 82%": gam / p[n],
            "KL(h||q) = 0.20 nats": get_divergence("kl").two_point(gam, np.full(gam.shape, q[n])),
        }
        res, every = {}, np.ones(deltas.shape, bool)
        for label, (lo, hi) in README_PRINTED.items():
            ok = (vals[label] >= lo) & (vals[label] < hi)
            every &= ok
            res[label] = (float(deltas[ok].min()), float(deltas[ok].max())) if ok.any() else None
        res["all"] = (float(deltas[every].min()), float(deltas[every].max())) if every.any() else None
        out[rule] = res
    return out


def _spike_grid(rule, q_n, deltas):
    if rule == "cactus-taylor":
        return np.asarray(taylor_spike(np.full(deltas.shape, q_n), deltas), dtype=np.float64)
    return np.asarray(exact_spike(np.full(deltas.shape, q_n), deltas, "kl"), dtype=np.float64)


def claim_readme_example() -> Verdict:
    rd = readme_example_readings()
    parts, defs = [], []
    for rule, v in rd.items():
        per = "; ".join(
            f"{k} for delta in [{x[0]:.4f}, {x[1]:.4f}]" if x else f"{k} never"
            for k, x in v.items()
            if k != "all"
        )
        allr = f"[{v['all'][0]:.4f}, {v['all'][1]:.4f}]" if v["all"] else "none"
        parts.append(f"{rule}: every number fits for delta in {allr} ({per})")
        n_fit = 0 if v["all"] is None else round((v["all"][1] - v["all"][0]) / README_DELTA_STEP) + 1
        defs.append(
            Definition(
                f"{rule}, delta on [0.1, 0.4] (step {README_DELTA_STEP:g})",
                (
                    Check(
                        f"{rule}: grid deltas at which every printed number fits",
                        n_fit,
                        ">=",
                        1,
                    ),
                ),
            )
        )
    nums = {f"{r}_all": v["all"] for r, v in rd.items()}
    return Verdict(
        9,
        "README example: .35 -> .66, h ~ (.16, .66, .18), 44% -> 82% acceptance, 0.20 nats",
        tuple(defs),
        f"delta grid step {README_DELTA_STEP:g}, printed values read as rounding intervals. "
        + ". ".join(parts)
        + ". The README states neither rule nor delta; with the exact root, "
        "KL(h||q) = delta, so that reading is delta ~ 0.20 itself; SpS accepts .35/.80 = 43.75%",
        nums,
        unstated="which rule (Taylor point or exact root) and which delta gave the numbers",
    )


#: (task, method, AL, Rej %) from the paper's main table (Qwen3-14B / Qwen3-0.6B, m = 20).
PAPER_TABLE = [
    ("GSM8K", "SpS", 5.11, None),
    ("GSM8K", "TAS", 6.78, -32),
    ("GSM8K", "Cactus 0.75", 7.15, -36),
    ("GSM8K", "Cactus 1.0", 7.00, -34),
    ("GPQA", "SpS", 3.84, None),
    ("GPQA", "TAS", 6.41, -46),
    ("GPQA", "Cactus 0.75", 6.46, -46),
    ("GPQA", "Cactus 1.0", 6.74, -50),
]


#: Definitions of Rej computable from the printed table: (name, rejected tokens as a function
#: of AL and m). AL counts accepted drafted tokens per verification round (bonus not counted), so
#: a round emits AL + 1 tokens and leaves m - AL drafted tokens unaccepted.
REJ_DEFINITIONS = (
    (
        "unaccepted drafted tokens per generated token, (m - AL)/(AL + 1)",
        lambda al, m: (m - al) / (al + 1),
    ),
    (
        "draft slots not filled by an output token, per generated token, (m - AL - 1)/(AL + 1)",
        lambda al, m: (m - al - 1) / (al + 1),
    ),
    ("unaccepted drafted tokens per verification round, m - AL", lambda al, m: m - al),
    (
        "rejection events per generated token (one per round), 1/(AL + 1)",
        lambda al, m: 1.0 / (al + 1),
    ),
    (
        "unaccepted drafted tokens per accepted token, (m - AL)/AL",
        lambda al, m: (m - al) / al,
    ),
    (
        "AL read as counting the bonus token: (m + 1 - AL)/AL per generated token",
        lambda al, m: (m + 1 - al) / al,
    ),
)
#: Half-widths of the printed rounding: AL to 2 decimals, Rej to a whole percent.
AL_ROUNDING, REJ_ROUNDING = 0.005, 0.5


def rej_readings(m: int = 20, table=None) -> list[dict]:
    r"""Rej implied by the printed AL under each definition of :data:`REJ_DEFINITIONS`.

    Rej of a method is :math:`100\,(r(AL)/r(AL_{SpS}) - 1)` where :math:`r` is the definition's
    rejected tokens (corpus averages: the ratio of the printed means). A row agrees when the
    interval of implied Rej over the AL rounding (+-0.005 on both ALs) meets the printed Rej's
    (+-0.5 points).

    Returns
    -------
    list of dict
        One per definition: ``name``, ``rows`` (task, method, implied, lo, hi, printed, gap) and
        ``agree`` (number of rows whose gap is 0).
    """
    table = PAPER_TABLE if table is None else table
    out = []
    for name, r in REJ_DEFINITIONS:
        ref, rows = {}, []
        for task, method, al, rej in table:
            if rej is None:
                ref[task] = al
                continue
            r0 = ref[task]
            ends = [
                100 * (r(al + x, m) / r(r0 + y, m) - 1)
                for x in (-AL_ROUNDING, AL_ROUNDING)
                for y in (-AL_ROUNDING, AL_ROUNDING)
            ]
            lo, hi = (
                min(ends),
                max(ends),
            )  # r is monotone in AL, so the corners bound the interval
            gap = max(0.0, lo - (rej + REJ_ROUNDING), (rej - REJ_ROUNDING) - hi)
            rows.append(
                dict(
                    task=task,
                    method=method,
                    implied=100 * (r(al, m) / r(r0, m) - 1),
                    lo=lo,
                    hi=hi,
                    printed=rej,
                    gap=gap,
                )
            )
        out.append(dict(name=name, rows=rows, agree=sum(row["gap"] == 0 for row in rows)))
    return out


def per_prompt_sps_spread(m: int = 20, table=None) -> list[dict]:
    r"""Spread of SpS's per-prompt AL that per-prompt averaging would need to give each printed Rej.

    Averaging :math:`r(AL_i) = (m+1)/(AL_i+1) - 1` over prompts instead of over the corpus raises
    it by about :math:`(m+1)\,\mathrm{Var}(AL_i)/(AL+1)^3` (second order, Jensen). With no per-prompt
    spread for the method, the printed Rej needs SpS's per-prompt standard deviation
    :math:`s = \sqrt{(r(AL)/(1 + Rej/100) - r(AL_{SpS}))\,(AL_{SpS}+1)^3/(m+1)}` (nan where the
    radicand is negative).
    """
    table = PAPER_TABLE if table is None else table
    ref, out = {}, []
    r = lambda al: (m + 1) / (al + 1) - 1  # noqa: E731  (unaccepted drafted tokens per generated token)
    for task, method, al, rej in table:
        if rej is None:
            ref[task] = al
            continue
        r0 = ref[task]
        var = (r(al) / (1 + rej / 100) - r(r0)) * (r0 + 1) ** 3 / (m + 1)
        out.append(dict(task=task, method=method, sd=math.sqrt(var) if var >= 0 else math.nan))
    return out


def claim_table_consistency(m: int = 20) -> Verdict:
    """The Rej column against the AL column, under every definition of Rej tried.

    The paper's table says only "rejected tokens relative to SpS": per what (generated token,
    round, accepted token), which tokens count, and whether it averages over prompts or over the
    corpus are unstated, so each computable definition is graded row by row, and per-prompt
    averaging (which the printed means cannot determine) is listed as not computable.
    """
    defs, parts, nums = [], [], {}
    readings = rej_readings(m)
    for k, rd in enumerate(readings):
        checks = tuple(
            Check(
                f"{row['task']} {row['method']}: implied {row['implied']:.1f}% "
                f"[{row['lo']:.1f}, {row['hi']:.1f}] vs printed {row['printed']}%: gap (points)",
                row["gap"],
                "<=",
                0.0,
            )
            for row in rd["rows"]
        )
        defs.append(
            Definition(
                f"{rd['name']}, relative to SpS, corpus averages",
                checks,
                note=f"{rd['agree']} of {len(rd['rows'])} rows agree",
            )
        )
        nums[f"agree_{k}"] = rd["agree"]
        nums[f"max_gap_{k}"] = max(abs(row["implied"] - row["printed"]) for row in rd["rows"])
        parts.append(f"{rd['name']}: {rd['agree']} of {len(rd['rows'])} rows")
    spread = per_prompt_sps_spread(m)
    sd = [x["sd"] for x in spread]
    nums["per_prompt_sd"] = sd
    defs.append(
        Definition(
            "per-prompt averages of (m - AL_i)/(AL_i + 1) (or of per-prompt relative changes), "
            "relative to SpS",
            computable=False,
            note="the table prints corpus means of AL only; per-prompt averaging raises each "
            "method's rate by about (m+1) Var(AL_i)/(AL+1)^3, and the printed Rej would need "
            "SpS's per-prompt AL to have a "
            "standard deviation of "
            + ", ".join(f"{x['task']} {x['method']} {x['sd']:.2f}" for x in spread)
            + " (with none for the method)",
        )
    )
    return Verdict(
        10,
        "the AL and Rej columns are mutually consistent",
        tuple(defs),
        "agreement within the printed rounding (AL +-0.005, Rej +-0.5 points) under each definition: "
        + "; ".join(parts)
        + ". "
        + _rej_summary(readings),
        nums,
        unstated="the definition of Rej ('rejected tokens relative to SpS')",
    )


def _rej_summary(readings) -> str:
    """Which definition agrees best, its misses, and whether the printed Rej lies between the
    first definition's and the one per accepted token on every row (computed, not asserted)."""
    best = max(readings, key=lambda rd: rd["agree"])
    n = len(best["rows"])
    miss = [f"{row['task']} {row['method']}" for row in best["rows"] if row["gap"] > 0]
    head = (
        "every row agrees under " + best["name"]
        if not miss
        else f"no definition tried gives every row; the closest, {best['name'].split(', ')[-1]}, agrees on "
        f"{best['agree']} of {n} (misses {', '.join(miss)})"
    )
    lo, hi = readings[0], readings[4]  # per generated token, per accepted token
    between = all(b["implied"] < a["printed"] < a["implied"] for a, b in zip(lo["rows"], hi["rows"]))
    return head + (
        f"; the printed Rej lies strictly between the implied values of {lo['name'].split(', ')[-1]} "
        f"and {hi['name'].split(', ')[-1]} on every row"
        if between
        else ""
    )


def claim_controlled_divergence(corpus) -> Verdict:
    rows, worst_emitted, worst_per_draft = [], 0.0, 0.0
    for fam, q, p in corpus:
        if fam not in ("noisy_copy+trunc", "dirichlet"):
            continue
        res = taylor_vs_exact_pairs(q, p, [0.75, 1.0])
        for r in res.rows:
            if r["rule"] == "cactus-taylor":
                rows.append(
                    f"{fam} delta={r['delta']:g}: mean KL(h_alg||q) = {r['emitted_mean']:.3f}, "
                    f"max = {r['emitted_max']:.3f}"
                )
            if r["rule"] == "cactus-exact-kl":
                worst_emitted = max(worst_emitted, r["emitted_max"] / r["delta"])
                worst_per_draft = max(worst_per_draft, r["per_draft_max"] / r["delta"])
    return Verdict(
        11,
        "'controlled divergence from the verifier distribution'",
        (
            Definition(
                "the per-draft target h^(n) (what the budget constrains): KL(h^(n)||q) <= delta",
                (
                    Check(
                        "exact root: max per-draft KL(h^(n)||q)/delta",
                        worst_per_draft,
                        "<=",
                        1 + _RATIO_TOL,
                    ),
                ),
            ),
            Definition(
                "the emitted distribution h_alg per step: KL(h_alg||q) <= delta",
                (
                    Check(
                        "exact root: sample max of emitted KL(h_alg||q)/delta",
                        worst_emitted,
                        "<=",
                        1 + _RATIO_TOL,
                    ),
                ),
            ),
        ),
        "the budget controls each per-draft target h^(n), not the emitted h_alg: "
        + "; ".join(rows)
        + ". Per sequence, divergences add up over steps (see the chain simulator); the "
        "sequence-budget-kl rule bounds the sequence-level KL itself",
        {"per_draft_ratio": worst_per_draft, "emitted_ratio": worst_emitted},
        unstated="which distribution's divergence is controlled (per-draft target, emitted, sequence)",
    )


def check_claims(seed: int = 0, with_cvxpy: bool = True) -> list[Verdict]:
    """Run every claim check on seeded synthetic corpora (4 families, untruncated and truncated)."""
    corpus = _corpus(seed)
    out = [claim_delta_zero(corpus), claim_acceptance(corpus), claim_theorem1(corpus)]
    out.append(
        claim_theorem2(seed)
        if with_cvxpy
        else Verdict(4, "Theorem 2", (), "cvxpy skipped", unstated="not run")
    )
    out += [
        claim_corollary5(),
        claim_corollary6(),
        claim_theorem3(corpus),
        claim_tas_cross_entropy(),
        claim_readme_example(),
        claim_table_consistency(),
        claim_controlled_divergence(corpus),
    ]
    return out


def format_vocabulary() -> str:
    """The verdict words with their criteria, one per line."""
    return "\n".join(f"{w}: {c}" for w, c in VERDICT_WORDS.items())


def format_verdicts(verdicts) -> str:
    """Plain-text list of verdicts: the verdict, each definition tried with its word and checks, the
    findings, the evidence."""
    out = []
    for v in verdicts:
        head = f"{v.number:>2}. {v.claim}\n    verdict: {v.verdict}"
        if v.unstated:
            head += f" (the paper leaves unstated: {v.unstated})"
        out.append(head)
        for d in v.definitions:
            word = d.word if d.computable else "not computable"
            tag = "definition (stated)" if d.stated else "definition tried"
            out.append(f"    {tag}: {d.name} -> {word}" + (f" ({d.note})" if d.note else ""))
            out += [f"      {c.line()}" for c in d.checks]
        out += [f"    finding {c.line()}" for c in v.findings]
        out.append(f"    evidence: {v.evidence}")
    return "\n".join(out)

r"""Is a sampler's output law the rule's exact law? Statistical checks with a stated error rate.

One verification step of k drafts :math:`n_i \sim p_i` against verifier rows :math:`q_i`
emits, at each position i it reaches, a token with the law (paper, Theorem 3)

.. math:: h_{alg,i}(j) = p_{ij} a_i(j) + \sum_n p_{in} (1 - a_i(n))\, r_i^{(n)}(j)

and goes on to position i + 1 (accepts) with probability :math:`\alpha_i = \sum_n p_{in}
a_i(n)`; drafts and the sampler's noise are independent across positions, so given that
position i is reached its token and its acceptance follow :math:`h_{alg,i}` and
:math:`\alpha_i` whatever happened before. :func:`check_sampler_law` draws a sampler
``num_samples`` times on each case (fresh drafts n ~ p and bonus tokens ~ :math:`q_k` per
draw) and tests, per case and position:

* **law**: Pearson's chi-square of the emitted tokens at the reached draws against
  :math:`h_{alg,i}` (:func:`cactus_theory.emitted_distribution`); cells of expected count
  below ``min_expected`` are pooled, and a token of exact probability 0 that is emitted
  fails outright;
* **acceptance**: an exact two-sided binomial test of the number of reached draws that go
  on, against :math:`\alpha_i` (:func:`cactus_theory.acceptance_rate`);
* **counters** (V0 samplers that keep vLLM 0.7's counters): ``num_accepted_tokens``
  (non-causal: every position whose own test passes) against its expectation
  :math:`N \sum_i \alpha_i` by Bernstein's inequality (a bound that holds at every N);
  ``num_emitted_tokens``, ``num_draft_tokens`` and ``num_accepted_prefix_tokens`` against
  the output, exactly.

Each statistical check runs at level ``alpha / m`` (Bonferroni over its m checks), so a
correct sampler fails a call with probability at most ``alpha`` (exactly for the binomial
and Bernstein checks; for chi-square to the accuracy of its asymptotic law, which the
pooling of small cells protects). The exact invariants have no false failures: the output's
layout (accepted drafts, one token, then -1), the bonus token emitted untouched after k
acceptances, greedy rows verified greedily, seeded rows reproduced.

The sampler sees the cases' rows in float32 and the exact law is computed on those float32
values (float64, renormalized). Rows whose entries are multiples of :math:`2^{-20}`
(:func:`dyadic`, as the default cases) are the same in both and sum to 1 exactly.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3. vLLM 0.7.3
``spec_decode_base_sampler.py::_create_output`` (output layout and counters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from ..analysis import acceptance_probabilities, acceptance_rate, emitted_distribution
from ..rules import get_rule
from ._torch import torch
from .adapters import SamplerAdapter, as_adapter

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_NUM_SAMPLES",
    "ExactLaw",
    "LawCheck",
    "SamplerLawResult",
    "assert_sampler_law",
    "check_sampler_law",
    "default_cases",
    "dyadic",
    "exact_law",
]

#: Draws per case by default: every broken sampler of :mod:`.mutants` is caught at it.
DEFAULT_NUM_SAMPLES = 20_000
#: Family-wise false-failure probability of one call by default.
DEFAULT_ALPHA = 1e-6
#: Rows in the greedy and seeded side batches (per case / in all).
GREEDY_ROWS = 64
SEEDED_ROWS = 16

PLACEHOLDER = -1


def dyadic(probs, bits: int = 20) -> np.ndarray:
    r"""Probability rows rounded to multiples of :math:`2^{-bits}`, summing to 1 exactly.

    Largest-remainder rounding; zeros stay zeros and every positive entry stays positive
    (at least :math:`2^{-bits}`). For ``bits <= 24`` the rows are exact in float32 and their
    float32 sums are exactly 1, so a float32 sampler and the float64 analysis see the same
    distributions.

    Parameters
    ----------
    probs : array_like, shape (..., V)
        Non-negative rows with positive sums (renormalized first).
    bits : int
        Resolution, 1..24.
    """
    if not 1 <= int(bits) <= 24:
        raise ValueError(f"bits: expected 1..24, got {bits}")
    x = np.asarray(probs, dtype=np.float64)
    if x.ndim < 1 or x.shape[-1] == 0 or not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ValueError("probs: expected finite non-negative rows (..., V)")
    sums = x.sum(-1, keepdims=True)
    if np.any(sums <= 0):
        raise ValueError("probs: every row needs a positive sum")
    scale = float(2 ** int(bits))
    if np.any((x > 0).sum(-1) > scale):
        raise ValueError(f"bits: {bits} bits cannot keep every positive entry of a row positive")
    flat = (x / sums).reshape(-1, x.shape[-1]) * scale
    support = (x > 0).reshape(flat.shape)  # from x: a subnormal entry's share can underflow
    out = np.empty_like(flat)
    for r, row in enumerate(flat):
        units = np.floor(row)
        units[support[r] & (units == 0)] = 1
        short = int(scale - units.sum())
        order = np.argsort(-(row - units), kind="stable")
        if short > 0:
            units[order[:short]] += 1
        while short < 0:  # raised entries took too much: take from the largest
            j = int(np.argmax(units))
            units[j] -= 1
            short += 1
        out[r] = units / scale
    return out.reshape(x.shape)


def _default_rows():
    rng = np.random.default_rng(20260415)
    k, v = 3, 12
    q = rng.dirichlet(np.full(v, 0.8), size=k + 1)
    p = np.exp(np.log(q[:k]) + 0.9 * rng.standard_normal((k, v)))
    generic = (dyadic(q), dyadic(p))
    v = 10
    qe = rng.dirichlet(np.full(v, 1.0), size=k + 1)
    pe = rng.dirichlet(np.full(v, 1.0), size=k)
    qe[0, 2] = qe[0].sum() - qe[0, 2]  # one-hot p at token 2, q_2 = 1/2
    pe[0] = np.eye(v)[2]
    qe[1, [1, 4]] = 1e-6 * qe[1].sum()  # near-zero q where p is large
    pe[1, [1, 4]] = 0.3 * pe[1].sum()
    qe[2, 5:] = 0.0  # disjoint supports: alpha = 0
    pe[2, :5] = 0.0
    edge = (dyadic(qe), dyadic(pe))
    v = 8
    base_q = np.array([0.30, 0.22, 0.16, 0.12, 0.09, 0.06, 0.03, 0.02])
    base_p = np.array([0.55, 0.06, 0.13, 0.10, 0.08, 0.05, 0.02, 0.01])
    perms = [rng.permutation(v) for _ in range(k + 1)]
    overconfident = (
        dyadic(np.stack([base_q[s] for s in perms])),
        dyadic(np.stack([base_p[s] for s in perms[:k]])),
    )
    return [generic, edge, overconfident]


def default_cases() -> list[tuple[np.ndarray, np.ndarray]]:
    r"""The cases :func:`check_sampler_law` uses when none are given.

    Three cases of k = 3 drafts, every row dyadic (:func:`dyadic`), the verifier rows
    different at every position (so a sampler that reads a neighbouring position's row is
    seen) and no tie :math:`q_j = p_j > 0`:

    * generic (V = 12): Dirichlet(0.8) verifier rows, drafter a noisy copy
      :math:`p \propto \exp(\log q + 0.9\,\xi)`;
    * edge (V = 10): position 0 a one-hot drafter (:math:`q_n = 1/2` at its token),
      position 1 near-zero verifier mass (:math:`\approx 10^{-6}`) on two tokens that the
      drafter proposes with probability 0.3 each, position 2 disjoint supports
      (acceptance 0);
    * overconfident (V = 8): the drafter puts 0.55 on a token the verifier gives 0.30, and on
      several others a mass between the verifier's and a fraction of it (where a rule that
      reshapes q, as Cactus's rescaling by :math:`(1-\gamma_n)/(1-q_n)`, changes the
      recovery), the tokens permuted differently at each position.

    Returns
    -------
    list of (target_probs (k+1, V), draft_probs (k, V))
        Float64 rows (the last verifier row is the bonus row).
    """
    return [(q.copy(), p.copy()) for q, p in _default_rows()]


@dataclass(frozen=True)
class ExactLaw:
    r"""The exact law of one verification step of k drafts (one case).

    Attributes
    ----------
    acceptance : ndarray, shape (k,)
        :math:`\alpha_i`, the probability that position i accepts its draft.
    emitted : ndarray, shape (k, V)
        :math:`h_{alg,i}`, the law of the token emitted at position i when it is reached.
    accepted_mass : ndarray, shape (k, V)
        :math:`p_{ij} a_i(j)`: emitted j by accepting it.
    reach : ndarray, shape (k + 1,)
        :math:`\prod_{l<i} \alpha_l`, the probability that position i is reached (position
        k: the bonus token is emitted).
    expected_emitted : float
        Expected emitted tokens per step, :math:`\sum_{i=0}^{k} \prod_{l<i}\alpha_l`.
    expected_accepted : float
        Expected non-causal accepted count per step (vLLM 0.7's ``num_accepted_tokens``),
        :math:`\sum_i \alpha_i`.
    expected_accepted_prefix : float
        Expected accepted-prefix length, :math:`\sum_{i=1}^{k} \prod_{l<i}\alpha_l`.
    """

    acceptance: np.ndarray
    emitted: np.ndarray
    accepted_mass: np.ndarray
    reach: np.ndarray

    @property
    def expected_emitted(self) -> float:
        return float(self.reach.sum())

    @property
    def expected_accepted(self) -> float:
        return float(self.acceptance.sum())

    @property
    def expected_accepted_prefix(self) -> float:
        return float(self.reach[1:].sum())


def _float32_values(x, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or infinite probabilities")
    return arr.astype(np.float32).astype(np.float64)


def exact_law(rule, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None) -> ExactLaw:
    r"""The exact per-position law of one step (:class:`ExactLaw`) of ``rule``.

    Parameters
    ----------
    rule : str or Rule
        A registry name (default knobs) or a configured rule (:func:`cactus_theory.get_rule`).
    target_probs : array_like, shape (k + 1, V)
        Verifier rows q at the k draft positions and the bonus position (the bonus row is
        not read).
    draft_probs : array_like, shape (k, V)
        Drafter rows p.
    raw_target_probs, raw_draft_probs : array_like, optional
        The raw (temperature-1) rows, shapes as ``target_probs`` and ``draft_probs``, of a rule
        that decides on them (``rule.spec.needs_raw``: fuzzy, margin, relaxed-topk, scd,
        cascades); default: the processed rows.

    Examples
    --------
    >>> law = exact_law("sps", [[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0]])
    >>> law.acceptance.tolist(), law.emitted.tolist()
    ([0.5], [[0.5, 0.5]])
    """
    rule = get_rule(rule)
    q = np.asarray(target_probs, dtype=np.float64)
    p = np.asarray(draft_probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] < 1:
        raise ValueError(f"draft_probs: expected shape (k, V) with k >= 1, got {p.shape}")
    k, v = p.shape
    if q.shape != (k + 1, v):
        raise ValueError(
            f"target_probs: expected shape {(k + 1, v)} (k draft rows and the bonus row), got {q.shape}"
        )
    qk = q[:k]
    raw = {}
    if raw_target_probs is not None:
        rq = np.asarray(raw_target_probs, dtype=np.float64)
        if rq.shape != q.shape:
            raise ValueError(f"raw_target_probs: expected shape {q.shape} (as target_probs), got {rq.shape}")
        raw["raw_target_probs"] = rq[:k]
    if raw_draft_probs is not None:
        rp = np.asarray(raw_draft_probs, dtype=np.float64)
        if rp.shape != p.shape:
            raise ValueError(f"raw_draft_probs: expected shape {p.shape} (as draft_probs), got {rp.shape}")
        raw["raw_draft_probs"] = rp
    acc = np.asarray(acceptance_rate(rule, qk, p, **raw), dtype=np.float64).reshape(k)
    a = np.asarray(acceptance_probabilities(rule, qk, p, **raw), dtype=np.float64).reshape(k, v)
    h = np.asarray(emitted_distribution(rule, qk, p, **raw), dtype=np.float64).reshape(k, v)
    p_n = p / p.sum(-1, keepdims=True)
    reach = np.concatenate([[1.0], np.cumprod(acc)])
    return ExactLaw(acceptance=acc, emitted=h, accepted_mass=p_n * a, reach=reach)


@dataclass(frozen=True)
class LawCheck:
    """One check of :func:`check_sampler_law`.

    Attributes
    ----------
    name : str
        ``"law"``, ``"acceptance"``, ``"counter:<name>"``, ``"layout"``, ``"bonus"``,
        ``"greedy"`` or ``"seeded"``.
    case, position : int or None
        Where (None for checks over all cases or positions).
    test : str
        ``"chi-square"``, ``"binomial"``, ``"bernstein"`` (statistical) or ``"exact"``.
    p_value : float
        The test's p-value (a bound for Bernstein); 1 or 0 for an exact check.
    threshold : float
        The level it is compared with (``alpha / m``); 0 for an exact check.
    n : int
        Draws the check saw.
    passed : bool
    detail : str
        What was seen (for a failure: where the law is off, and by how much).
    """

    name: str
    case: int | None
    position: int | None
    test: str
    p_value: float
    threshold: float
    n: int
    passed: bool
    detail: str

    def where(self) -> str:
        parts = [] if self.case is None else [f"case {self.case}"]
        if self.position is not None:
            parts.append(f"position {self.position}")
        return " ".join(parts) or "all cases"

    def line(self) -> str:
        if self.test == "exact":
            verdict = "ok" if self.passed else "FAILED"
            return f"{self.where()}: {self.name} (exact) {verdict}: {self.detail}"
        cmp = ">=" if self.passed else "<"
        return (
            f"{self.where()}: {self.name} ({self.test}) p = {self.p_value:.3g} {cmp} "
            f"{self.threshold:.3g}, n = {self.n}: {self.detail}"
        )


@dataclass(frozen=True)
class SamplerLawResult:
    """What :func:`check_sampler_law` found.

    Attributes
    ----------
    passed : bool
        Every check passed.
    rule : str
        The rule's name.
    interface : str
        The adapter (``"vllm-v0"``, ``"vllm-v1"``, ``"callable"``).
    num_samples : int
        Draws per case.
    alpha : float
        Family-wise false-failure probability; each of the ``num_tests`` statistical checks
        ran at ``alpha / num_tests``.
    seed : int
    checks : tuple of LawCheck
    skipped : tuple of str
        Checks that could not run, with the reason.
    """

    passed: bool
    rule: str
    interface: str
    num_samples: int
    alpha: float
    seed: int
    checks: tuple[LawCheck, ...]
    skipped: tuple[str, ...] = field(default=())

    @property
    def failures(self) -> tuple[LawCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @property
    def num_tests(self) -> int:
        return sum(c.test != "exact" for c in self.checks)

    @property
    def p_values(self) -> dict[str, float]:
        """``{"<name> <where>": p-value}`` of the statistical checks."""
        return {f"{c.name} {c.where()}": c.p_value for c in self.checks if c.test != "exact"}

    @property
    def min_p_value(self) -> float:
        return min([c.p_value for c in self.checks if c.test != "exact"], default=1.0)

    def report(self) -> str:
        head = (
            f"sampler law of rule {self.rule!r} through the {self.interface} interface: "
            f"{'passed' if self.passed else 'FAILED'} ({len(self.checks) - len(self.failures)}"
            f"/{len(self.checks)} checks; {self.num_samples} draws per case, seed {self.seed}, "
            f"false-failure probability {self.alpha:g} over {self.num_tests} tests)"
        )
        lines = [head]
        fails = self.failures
        if fails:
            lines.append("failed:")
            lines += ["  " + c.line() for c in fails]
        if self.skipped:
            lines.append("skipped: " + "; ".join(self.skipped))
        return "\n".join(lines)

    __str__ = report

    def to_dict(self) -> dict:
        return {
            "passed": self.passed,
            "rule": self.rule,
            "interface": self.interface,
            "num_samples": self.num_samples,
            "alpha": self.alpha,
            "seed": self.seed,
            "checks": [c.__dict__.copy() for c in self.checks],
            "skipped": list(self.skipped),
        }


def _chi_square(counts: np.ndarray, probs: np.ndarray, min_expected: float):
    """(p-value, detail) of Pearson's chi-square; cells below min_expected pooled."""
    n = int(counts.sum())
    if n == 0:
        return 1.0, "position never reached"
    impossible = (probs <= 0) & (counts > 0)
    if impossible.any():
        j = int(np.flatnonzero(impossible)[0])
        return 0.0, (
            f"token {j} emitted {int(counts[j])} times, its exact probability is 0 "
            f"({int(counts[impossible].sum())} draws on impossible tokens)"
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
        return 1.0, detail + " (one cell: nothing to test)"
    pval = float(stats.chisquare(obs, ex * obs.sum() / ex.sum()).pvalue)
    return pval, detail


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


def _draw(rng: np.random.Generator, probs: np.ndarray, size: int) -> np.ndarray:
    """``size`` i.i.d. tokens from one probability row (inverse CDF; zero-mass tokens never)."""
    cdf = np.cumsum(probs)
    idx = np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right")
    return np.minimum(idx, len(probs) - 1)


def _layout_violations(out: np.ndarray, drafts: np.ndarray, bonus: np.ndarray, v: int):
    """Rows whose output is not (accepted drafts, one token, -1 ...), and rows whose bonus
    position does not hold the bonus token."""
    _b, k1 = out.shape
    k = k1 - 1
    present = out != PLACEHOLDER
    bad = ~present[:, 0] | ((out < PLACEHOLDER) | (out >= v)).any(1)
    bad |= (present[:, 1:] & ~present[:, :-1]).any(1)  # a token after a -1
    go_on = present[:, 1:]  # position i accepted
    bad |= (go_on & (out[:, :k] != drafts)).any(1)  # accepted but not the draft
    bonus_bad = present[:, k] & (out[:, k] != bonus[:, 0])
    return bad, bonus_bad


def _example(rows: np.ndarray, out, drafts, bonus) -> str:
    r = int(np.flatnonzero(rows)[0])
    return (
        f"{int(rows.sum())} rows, e.g. row {r}: output {out[r].tolist()}, drafts "
        f"{drafts[r].tolist()}, bonus {int(bonus[r, 0])}"
    )


def _greedy_expected(argmax: np.ndarray, drafts: np.ndarray, bonus: np.ndarray) -> np.ndarray:
    b, k = drafts.shape
    out = np.full((b, k + 1), PLACEHOLDER, dtype=np.int64)
    match = drafts == argmax[None, :k]
    length = np.where(match.all(1), k, np.argmin(match, axis=1))
    for r in range(b):
        L = int(length[r])
        out[r, :L] = drafts[r, :L]
        out[r, L] = bonus[r, 0] if L == k else argmax[L]
    return out


def _as_cases(target_probs, draft_probs):
    if target_probs is None and draft_probs is None:
        return default_cases()
    if target_probs is None or draft_probs is None:
        raise ValueError(
            "target_probs: give target_probs and draft_probs together (or neither for the default cases)"
        )
    if (
        isinstance(target_probs, (list, tuple))
        and target_probs
        and np.ndim(target_probs[0]) == 2
        and len(target_probs) == len(draft_probs)
    ):
        pairs = list(zip(target_probs, draft_probs))
    else:
        q = np.asarray(target_probs.cpu() if torch.is_tensor(target_probs) else target_probs)
        p = np.asarray(draft_probs.cpu() if torch.is_tensor(draft_probs) else draft_probs)
        if q.ndim == 2:
            q, p = q[None], p[None]
        if q.ndim != 3 or p.ndim != 3 or len(q) != len(p):
            raise ValueError(
                f"target_probs: expected (k+1, V) or (cases, k+1, V) with draft_probs "
                f"(k, V) or (cases, k, V), got {q.shape} and {p.shape}"
            )
        pairs = list(zip(q, p))
    cases = []
    for q, p in pairs:
        q = _float32_values(q.cpu() if torch.is_tensor(q) else q, "target_probs")
        p = _float32_values(p.cpu() if torch.is_tensor(p) else p, "draft_probs")
        if p.ndim != 2 or q.shape != (p.shape[0] + 1, p.shape[1]):
            raise ValueError(
                f"target_probs: each case needs target_probs (k+1, V) and draft_probs "
                f"(k, V), got {q.shape} and {p.shape}"
            )
        if np.any(q < 0) or np.any(p < 0) or np.any(q.sum(-1) <= 0) or np.any(p.sum(-1) <= 0):
            raise ValueError("target_probs: rows must be non-negative with positive sums")
        cases.append((q / q.sum(-1, keepdims=True), p / p.sum(-1, keepdims=True)))
    return cases


def _check_int(value, name, low):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    return int(value)


def _as_raw_cases(raw_target_probs, raw_draft_probs, cases, default_cases_used):
    """Per case None (raw = processed) or the raw rows (q_raw (k+1, V), p_raw (k, V)), float64."""
    if raw_target_probs is None and raw_draft_probs is None:
        return [None] * len(cases)
    if default_cases_used:
        raise ValueError("raw_target_probs: raw rows need explicit target_probs and draft_probs")
    n = len(cases)

    def stacked(x, name, idx):
        if x is None:
            return [c[idx] for c in cases]
        arr = np.asarray(x.cpu() if torch.is_tensor(x) else x, dtype=np.float64)
        arr = arr[None] if arr.ndim == 2 else arr
        if arr.ndim != 3 or len(arr) != n:
            raise ValueError(f"{name}: expected one case or {n} stacked cases, got shape {arr.shape}")
        rows = []
        for a, c in zip(arr, cases):
            if a.shape != c[idx].shape or np.any(~np.isfinite(a)) or np.any(a < 0) or np.any(a.sum(-1) <= 0):
                raise ValueError(
                    f"{name}: each case needs shape {c[idx].shape} with non-negative finite rows of positive sum"
                )
            rows.append(a / a.sum(-1, keepdims=True))
        return rows

    qs = stacked(raw_target_probs, "raw_target_probs", 0)
    ps = stacked(raw_draft_probs, "raw_draft_probs", 1)
    return list(zip(qs, ps))


def _call(adapter, q, bonus, p, drafts, device, torch_seed, raw_rows=None, **kw):
    """One sampler call on ``b`` copies of the rows q (k+1, V) and p (k, V), under a torch seed."""
    b = drafts.shape[0]
    if raw_rows is not None:
        kw["raw"] = tuple(
            torch.as_tensor(np.ascontiguousarray(r), dtype=torch.float32, device=device)
            .expand(b, *r.shape)
            .contiguous()
            for r in raw_rows
        )
    q_t = torch.as_tensor(np.ascontiguousarray(q), dtype=torch.float32, device=device)
    p_t = torch.as_tensor(np.ascontiguousarray(p), dtype=torch.float32, device=device)
    args = (
        q_t.expand(b, *q_t.shape).contiguous(),
        torch.as_tensor(bonus, dtype=torch.int64, device=device),
        p_t.expand(b, *p_t.shape).contiguous(),
        torch.as_tensor(drafts, dtype=torch.int64, device=device),
    )
    dev = torch.device(device)
    forked = [dev.index or 0] if dev.type == "cuda" else []  # restore the CUDA generator too
    with torch.random.fork_rng(devices=forked):
        torch.manual_seed(torch_seed)
        out = adapter(*args, **kw)
    out = out.detach().cpu().numpy().astype(np.int64)
    if out.shape != (drafts.shape[0], drafts.shape[1] + 1):
        raise ValueError(
            f"sampler: returned shape {out.shape}, expected {(drafts.shape[0], drafts.shape[1] + 1)}"
        )
    return out


def check_sampler_law(
    sampler,
    rule,
    target_probs=None,
    draft_probs=None,
    *,
    num_samples: int = DEFAULT_NUM_SAMPLES,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    min_expected: float = 5.0,
    invariants: bool = True,
    device="cpu",
    raw_target_probs=None,
    raw_draft_probs=None,
) -> SamplerLawResult:
    r"""Draw ``sampler`` many times and compare its output law with ``rule``'s exact law.

    The checks are listed in :mod:`cactus_theory.testing.law`: per case and position a
    chi-square test of the emitted tokens against :math:`h_{alg,i}` and a binomial test of
    the acceptance against :math:`\alpha_i`, vLLM 0.7's counters against their expectation,
    each at ``alpha / m``; with ``invariants``, the exact checks of the layout, the bonus
    token, greedy rows and seeded rows.

    Parameters
    ----------
    sampler : callable or SamplerAdapter
        A V0 sampler, vLLM V1's ``rejection_sample`` or a plain callable
        (:func:`~cactus_theory.testing.adapters.as_adapter` picks the adapter; pass one of
        :func:`~.adapters.v0_adapter`, :func:`~.adapters.v1_adapter`,
        :func:`~.adapters.callable_adapter` to choose).
    rule : str or Rule
        The rule the sampler claims to implement (a registry name, or a configured rule
        from :func:`cactus_theory.get_rule`, e.g. ``get_rule("cactus-taylor", delta=0.5)``).
    target_probs, draft_probs : array_like, optional
        The cases: ``(k+1, V)`` and ``(k, V)``, or stacked ``(cases, k+1, V)`` and
        ``(cases, k, V)``, or lists of such pairs (cases may differ in k and V). Default:
        :func:`default_cases`.
    num_samples : int
        Draws per case (default :data:`DEFAULT_NUM_SAMPLES`).
    alpha : float
        The probability, at most, that a correct sampler fails the call (0 < alpha < 1).
    seed : int
        Seeds the drafts, the bonus tokens and torch's global generator (restored after).
    min_expected : float
        Chi-square cells with a smaller expected count are pooled.
    invariants : bool
        Also run the exact invariant checks.
    device : str or torch.device
        Where the sampler's inputs live.
    raw_target_probs, raw_draft_probs : array_like, optional
        Raw (temperature-1) rows for a rule that decides on them (``rule.spec.needs_raw``:
        fuzzy, margin, relaxed-topk, scd, cascades), shaped as ``target_probs`` and
        ``draft_probs`` (one case, or stacked cases; explicit cases are then required). The
        exact law uses them, and the sampler receives them as the keywords
        ``raw_target_probs`` ([B, k+1, V]) and ``raw_draft_probs`` ([B, k, V]): a V0 sampler
        whose ``forward`` takes them (:func:`cactus_theory.make_sampler` does) or a plain
        callable that takes them. vLLM's interfaces carry no raw rows, so with raw rows a V1
        ``rejection_sample``, or a sampler without those keywords, is refused (ValueError
        naming ``raw_target_probs``). Without raw rows the raw rows are the processed ones,
        for the sampler and the exact law alike (what such a rule does at temperature 1
        without truncation).

    Returns
    -------
    SamplerLawResult

    Raises
    ------
    ValueError
        A bad argument (named), or a sampler output of the wrong shape.
    """
    num_samples = _check_int(num_samples, "num_samples", 1)
    seed = _check_int(seed, "seed", 0)
    if not (isinstance(alpha, (float, int)) and 0 < alpha < 1):
        raise ValueError(f"alpha: expected 0 < alpha < 1, got {alpha!r}")
    if not (isinstance(min_expected, (float, int)) and min_expected > 0):
        raise ValueError(f"min_expected: expected a positive number, got {min_expected!r}")
    adapter: SamplerAdapter = as_adapter(sampler)
    rule = get_rule(rule)
    cases = _as_cases(target_probs, draft_probs)
    raws = _as_raw_cases(raw_target_probs, raw_draft_probs, cases, target_probs is None)
    if any(r is not None for r in raws) and not adapter.supports_raw:
        raise ValueError(
            f"raw_target_probs: the {adapter.name} interface passes no raw rows to the sampler "
            "(vLLM's interfaces carry none); give a sampler that takes the keywords "
            "raw_target_probs and raw_draft_probs, or leave the raw rows out (raw = processed)"
        )
    laws = [
        exact_law(rule, q, p, **({} if r is None else {"raw_target_probs": r[0], "raw_draft_probs": r[1]}))
        for (q, p), r in zip(cases, raws)
    ]
    raw: list[dict] = []
    skipped: list[str] = []
    n_draft = n_emitted = n_prefix = 0
    acc_mean = acc_var = 0.0
    before = adapter.counters()
    outputs = []
    for c, ((q, p), law) in enumerate(zip(cases, laws)):
        k, v = p.shape
        rng = np.random.default_rng([seed, c])
        drafts = np.stack([_draw(rng, p[i], num_samples) for i in range(k)], axis=1)
        bonus = _draw(rng, q[k], num_samples)[:, None]
        out = _call(adapter, q, bonus, p, drafts, device, seed * 1_000_003 + c, raw_rows=raws[c])
        outputs.append((out, drafts, bonus))
        present = out != PLACEHOLDER
        n_draft += num_samples * k
        n_emitted += int(present.sum())
        n_prefix += int(present[:, 1:].sum())
        acc_mean += num_samples * float(law.acceptance.sum())
        acc_var += num_samples * float((law.acceptance * (1 - law.acceptance)).sum())
        for i in range(k):
            reached = present[:, i]
            n = int(reached.sum())
            tokens = out[reached, i]
            counts = np.bincount(np.clip(tokens, 0, v - 1), minlength=v)
            pv, det = _chi_square(counts, law.emitted[i], min_expected)
            raw.append(
                {
                    "name": "law",
                    "case": c,
                    "position": i,
                    "test": "chi-square",
                    "p_value": pv,
                    "n": n,
                    "detail": det,
                }
            )
            went_on = int(present[reached, i + 1].sum())
            pv, det = _binomial(went_on, n, float(law.acceptance[i]))
            raw.append(
                {
                    "name": "acceptance",
                    "case": c,
                    "position": i,
                    "test": "binomial",
                    "p_value": pv,
                    "n": n,
                    "detail": det,
                }
            )
    after = adapter.counters()
    if before is not None and after is not None:
        delta = {name: after[name] - before.get(name, 0) for name in after}
        exact_counts = {
            "num_draft_tokens": n_draft,
            "num_emitted_tokens": n_emitted,
            "num_accepted_prefix_tokens": n_prefix,
        }
        for name, want in exact_counts.items():
            if name in delta:
                ok = delta[name] == want
                raw.append(
                    {
                        "name": f"counter:{name}",
                        "case": None,
                        "position": None,
                        "test": "exact",
                        "p_value": float(ok),
                        "n": n_draft,
                        "detail": f"counted {delta[name]}, the output has {want}",
                    }
                )
        if "num_accepted_tokens" in delta:
            got = delta["num_accepted_tokens"]
            raw.append(
                {
                    "name": "counter:num_accepted_tokens",
                    "case": None,
                    "position": None,
                    "test": "bernstein",
                    "p_value": _bernstein(got, acc_mean, acc_var),
                    "n": n_draft,
                    "detail": (
                        f"counted {got}, exact expectation {acc_mean:.1f} (every "
                        f"accepted position, vLLM 0.7's non-causal count; the "
                        f"accepted prefixes hold {n_prefix})"
                    ),
                }
            )
    elif before is None:
        skipped.append("counters: the sampler keeps none")
    if invariants:
        raw += _invariants(adapter, rule, cases, outputs, seed, device, skipped)
    m = max(1, sum(r["test"] != "exact" for r in raw))
    level = alpha / m
    checks = []
    for r in raw:
        exact = r["test"] == "exact"
        passed = bool(r["p_value"] == 1.0) if exact else bool(r["p_value"] >= level)
        checks.append(LawCheck(threshold=0.0 if exact else level, passed=passed, **r))
    return SamplerLawResult(
        passed=all(c.passed for c in checks),
        rule=rule.name,
        interface=adapter.name,
        num_samples=num_samples,
        alpha=float(alpha),
        seed=seed,
        checks=tuple(checks),
        skipped=tuple(skipped),
    )


def _invariants(adapter, rule, cases, outputs, seed, device, skipped) -> list[dict]:
    """The exact checks: layout, bonus token, greedy rows, seeded rows."""
    raw = []
    bad_all = bonus_all = 0
    first_bad = first_bonus = ""
    for c, ((_q, p), (out, drafts, bonus)) in enumerate(zip(cases, outputs)):
        bad, bonus_bad = _layout_violations(out, drafts, bonus, p.shape[1])
        if bad.any() and not first_bad:
            first_bad = f"case {c}: " + _example(bad, out, drafts, bonus)
        if bonus_bad.any() and not first_bonus:
            first_bonus = f"case {c}: " + _example(bonus_bad, out, drafts, bonus)
        bad_all += int(bad.sum())
        bonus_all += int(bonus_bad.sum())
    n = sum(o[0].shape[0] for o in outputs)
    raw.append(
        {
            "name": "layout",
            "case": None,
            "position": None,
            "test": "exact",
            "p_value": float(bad_all == 0),
            "n": n,
            "detail": first_bad or "every row: accepted drafts, one token, then -1",
        }
    )
    raw.append(
        {
            "name": "bonus",
            "case": None,
            "position": None,
            "test": "exact",
            "p_value": float(bonus_all == 0),
            "n": n,
            "detail": first_bonus or "the bonus token emitted untouched after k acceptances",
        }
    )
    raw += _greedy(adapter, rule, cases, seed, device, skipped)
    raw += _seeded(adapter, cases, seed, device, skipped)
    return raw


def _greedy(adapter, rule, cases, seed, device, skipped) -> list[dict]:
    raw = []
    for c, (q, p) in enumerate(cases):
        k, v = p.shape
        top = np.sort(q, axis=-1)
        if v > 1 and np.any(top[:, -1] == top[:, -2]):
            skipped.append(f"greedy case {c}: a verifier row has a tied maximum")
            continue
        argmax = q.argmax(-1)
        rng = np.random.default_rng([seed, c, 1])
        drafts = np.stack([_draw(rng, p[i], 2 * GREEDY_ROWS) for i in range(k)], axis=1)
        if adapter.supports_greedy_flag:
            qg = q
            bonus = _draw(rng, q[k], 2 * GREEDY_ROWS)[:, None]
            bonus[:GREEDY_ROWS, 0] = argmax[k]
            greedy = torch.zeros(2 * GREEDY_ROWS, dtype=torch.bool)
            greedy[:GREEDY_ROWS] = True
            how = "rows flagged greedy (temperature 0) in a mixed batch"
        else:
            qg = np.eye(v)[argmax]
            law = exact_law(rule, qg, p)
            a = np.asarray(acceptance_probabilities(rule, qg[:k], p)).reshape(k, v)
            want_a = (np.arange(v)[None, :] == argmax[:k, None]).astype(float)
            if not (
                np.allclose(law.emitted, np.eye(v)[argmax[:k]], atol=1e-12)
                and np.allclose(np.where(p > 0, a, want_a), want_a, atol=1e-12)
            ):
                skipped.append(
                    f"greedy case {c}: the rule's law on one-hot verifier rows is not greedy verification"
                )
                continue
            bonus = np.full((2 * GREEDY_ROWS, 1), argmax[k])
            greedy = None
            how = "one-hot verifier rows (temperature 0)"
        out = _call(adapter, qg, bonus, p, drafts, device, seed * 1_000_003 + 7919 + c, greedy=greedy)
        want = _greedy_expected(argmax, drafts[:GREEDY_ROWS], bonus[:GREEDY_ROWS])
        bad = (out[:GREEDY_ROWS] != want).any(1)
        detail = f"{how}: verified greedily"
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            detail = (
                f"{how}: {int(bad.sum())} of {GREEDY_ROWS} rows differ from greedy "
                f"verification, e.g. row {r}: output {out[r].tolist()}, greedy "
                f"{want[r].tolist()} (drafts {drafts[r].tolist()})"
            )
        raw.append(
            {
                "name": "greedy",
                "case": c,
                "position": None,
                "test": "exact",
                "p_value": float(not bad.any()),
                "n": GREEDY_ROWS,
                "detail": detail,
            }
        )
    return raw


def _seeded(adapter, cases, seed, device, skipped) -> list[dict]:
    if not adapter.supports_seeds:
        skipped.append(f"seeded: the {adapter.name} sampler takes no per-row generators")
        return []
    q, p = cases[0]
    k, _v = p.shape
    rng = np.random.default_rng([seed, 0, 2])
    drafts = np.stack([_draw(rng, p[i], SEEDED_ROWS) for i in range(k)], axis=1)
    bonus = _draw(rng, q[k], SEEDED_ROWS)[:, None]
    rows = list(range(0, SEEDED_ROWS, 2))

    def gens():
        return {r: torch.Generator().manual_seed(seed * 131 + r) for r in rows}

    outs = [
        _call(adapter, q, bonus, p, drafts, device, seed * 1_000_003 + 104729 + t, seeded_seqs=gens())
        for t in range(2)
    ]
    same = (outs[0][rows] == outs[1][rows]).all(1)
    detail = (
        f"rows {rows} seeded, the others not; two calls under different global seeds: seeded rows identical"
    )
    if not same.all():
        r = rows[int(np.flatnonzero(~same)[0])]
        detail = (
            f"seeded row {r} gave {outs[0][r].tolist()} then {outs[1][r].tolist()} with the "
            f"same generator seed"
        )
    return [
        {
            "name": "seeded",
            "case": 0,
            "position": None,
            "test": "exact",
            "p_value": float(same.all()),
            "n": SEEDED_ROWS,
            "detail": detail,
        }
    ]


def assert_sampler_law(sampler, rule, target_probs=None, draft_probs=None, **kwargs) -> SamplerLawResult:
    r""":func:`check_sampler_law`, raising AssertionError with its report when a check fails.

    Parameters
    ----------
    sampler, rule, target_probs, draft_probs, **kwargs
        As :func:`check_sampler_law` (``num_samples``, ``alpha``, ``seed``,
        ``min_expected``, ``invariants``, ``device``).

    Returns
    -------
    SamplerLawResult
        When every check passed.

    Raises
    ------
    AssertionError
        A check failed; the message lists the failed checks, where and by how much.

    Examples
    --------
    >>> import cactus_theory as ct
    >>> res = assert_sampler_law(ct.make_sampler("sps"), "sps", num_samples=2000)
    >>> res.passed
    True
    """
    result = check_sampler_law(sampler, rule, target_probs, draft_probs, **kwargs)
    if not result.passed:
        raise AssertionError(result.report())
    return result

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
* **bonus-law**: Pearson's chi-square of the tokens emitted at position k (after k
  acceptances) against the bonus row :math:`q_k`, whoever draws the bonus token;
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
acceptances (when the sampler is handed it), greedy rows verified greedily, seeded rows
reproduced, and for a sampler that takes its acceptance uniforms, no token of exact probability
0 emitted when every uniform is 0.

Cases with the same k run interleaved in one batch (row r holds case r mod C), so a sampler
that reads another request's rows is seen. Each chi-square check states its power: the
smallest total variation it detects with probability ``power`` (:mod:`.power`); a reached
position whose power misses ``tv_goal`` makes the outcome "underpowered". A failure report
opens with a diagnosis: the pattern of the failed checks and what it points to.

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
from .power import DEFAULT_DETECTABLE_TV, DEFAULT_POWER, detectable_tv, draws_needed

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_NUM_SAMPLES",
    "ExactLaw",
    "LawCheck",
    "SamplerLawResult",
    "assert_sampler_law",
    "check_sampler_law",
    "DEFAULT_CASE_NAMES",
    "default_cases",
    "default_raw_rows",
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
#: Rows per case in the side batch of zero uniforms.
ZERO_UNIFORM_ROWS = 256
#: Rows per case in the side batch of placeholder drafts.
PLACEHOLDER_ROWS = 256

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
    v = 10
    # raw rows with a tie at the top-3 boundary of q (0.14 = 0.14); the processed rows keep the
    # top 3 of q (the tie broken to the lower index) and the top 4 of p, so the drafter proposes
    # tokens of processed q = 0 about half the time
    raw_q = np.array([0.30, 0.20, 0.14, 0.14, 0.08, 0.06, 0.04, 0.02, 0.01, 0.01])
    raw_p = np.array([0.26, 0.11, 0.05, 0.21, 0.16, 0.09, 0.05, 0.04, 0.02, 0.01])
    perms = [np.sort(rng.permutation(v)[:4]) for _ in range(k + 1)]
    rq, rp = np.zeros((k + 1, v)), np.zeros((k, v))
    for i, s in enumerate(perms):  # the four largest raw-q entries to sorted slots: ties stay in index order
        rest = np.setdiff1d(np.arange(v), s)
        rest = rest[rng.permutation(len(rest))]
        slots = np.concatenate([s, rest])
        rq[i, slots] = raw_q
        if i < k:
            rp[i, slots] = raw_p
    rq, rp = dyadic(rq), dyadic(rp)
    tq = _top_k_rows(rq, 3)
    tq[k] = rq[k]  # the bonus row unprocessed: its law is tested as given
    truncated = (dyadic(tq), dyadic(_top_k_rows(rp, 4)), rq, rp)
    return [(*generic, None, None), (*edge, None, None), (*overconfident, None, None), truncated]


def _top_k_rows(x: np.ndarray, top_k: int) -> np.ndarray:
    """Rows keeping their ``top_k`` largest entries (ties to the lower index), renormalized."""
    order = np.argsort(-x, axis=-1, kind="stable")[..., :top_k]
    out = np.zeros_like(x)
    np.put_along_axis(out, order, np.take_along_axis(x, order, -1), -1)
    return out / out.sum(-1, keepdims=True)


#: The names of :func:`default_cases`, in order (failure reports name the case).
DEFAULT_CASE_NAMES = ("generic", "edge", "overconfident", "truncated")


def default_raw_rows() -> list:
    """Per default case, None or its raw (unprocessed) rows ``(raw_target_probs, raw_draft_probs)``.

    Only ``"truncated"`` has raw rows: :func:`check_sampler_law` hands them to a sampler that
    takes the keywords ``raw_target_probs`` and ``raw_draft_probs`` (and computes the law of a
    rule that decides on raw rows from them); a sampler without those keywords sees the
    processed rows only.
    """
    return [None if r[2] is None else (r[2].copy(), r[3].copy()) for r in _default_rows()]


def default_cases() -> list[tuple[np.ndarray, np.ndarray]]:
    r"""The cases :func:`check_sampler_law` uses when none are given.

    Four cases of k = 3 drafts (:data:`DEFAULT_CASE_NAMES`), every row dyadic (:func:`dyadic`), the verifier rows
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
      recovery), the tokens permuted differently at each position;
    * truncated (V = 10): processed rows, the top 3 of raw verifier rows that tie at the
      top-3 boundary (the lower index kept) and the top 4 of raw drafter rows, so the drafter
      proposes tokens of processed q = 0 about half the time; the raw rows
      (:func:`default_raw_rows`) reach a sampler that takes them.

    Returns
    -------
    list of (target_probs (k+1, V), draft_probs (k, V))
        Float64 rows (the last verifier row is the bonus row).
    """
    return [(r[0].copy(), r[1].copy()) for r in _default_rows()]


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
        ``"law"``, ``"bonus-law"`` (the emitted bonus token against the bonus row),
        ``"acceptance"``, ``"counter:<name>"``, ``"layout"``, ``"bonus"``, ``"greedy"``,
        ``"seeded"``, ``"zero-uniform"`` or ``"placeholder"``.
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
    case_name : str or None
        The case's name (``"generic"``, ``"edge"``, ... or ``"case 3"``).
    detectable_tv : float or None
        For a chi-square check: the smallest total variation between the emitted law and the
        exact one that the check detects with probability ``power``
        (:func:`~cactus_theory.testing.power.detectable_tv`; 0 when the exact law is one token,
        inf when the position is reached but the draws fill fewer than two cells).
    underpowered : bool
        A passed chi-square check whose ``detectable_tv`` exceeds the call's goal at a position
        the exact law reaches.
    draws_needed : int or None
        For an underpowered check: draws per case at which the goal would be met.
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
    case_name: str | None = None
    detectable_tv: float | None = None
    underpowered: bool = False
    draws_needed: int | None = None

    def where(self) -> str:
        parts = [] if self.case is None else [f"case {self.case_name or self.case!r}"]
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
        No check failed.
    rule : str
        The rule's name.
    interface : str
        The adapter (``"vllm-v0"``, ``"vllm-v1"``, ``"callable"``, ``"padded"``).
    num_samples : int
        Draws per case.
    alpha : float
        Family-wise false-failure probability; each of the ``num_tests`` statistical checks
        ran at ``alpha / num_tests``.
    seed : int
    checks : tuple of LawCheck
    skipped : tuple of str
        Checks that could not run, with the reason.
    power, tv_goal : float
        Each chi-square check states the smallest total variation it detects with probability
        ``power``; a reached position whose smallest detectable deviation exceeds ``tv_goal``
        is underpowered.
    bonus : str
        The bonus contract the call tested: ``"given"`` (the sampler emits the bonus token it
        is handed) or ``"drawn"`` (it draws its own from the bonus row).
    diagnosis : tuple of str
        For a failure or an underpowered pass: the pattern of the failed checks and what it
        points to.
    """

    passed: bool
    rule: str
    interface: str
    num_samples: int
    alpha: float
    seed: int
    checks: tuple[LawCheck, ...]
    skipped: tuple[str, ...] = field(default=())
    power: float = DEFAULT_POWER
    tv_goal: float = DEFAULT_DETECTABLE_TV
    bonus: str = "given"
    diagnosis: tuple[str, ...] = field(default=())

    @property
    def failures(self) -> tuple[LawCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @property
    def underpowered(self) -> tuple[LawCheck, ...]:
        """The passed chi-square checks too weak for ``tv_goal`` at ``power``."""
        return tuple(c for c in self.checks if c.underpowered)

    @property
    def outcome(self) -> str:
        """``"failed"`` (a check failed), ``"underpowered"`` (none failed, but a reached
        position's check cannot detect a deviation of ``tv_goal`` with probability ``power``) or
        ``"passed"``."""
        if not self.passed:
            return "failed"
        return "underpowered" if self.underpowered else "passed"

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

    @property
    def draws_needed(self) -> int | None:
        """Draws per case at which no position is underpowered (None when none is)."""
        need = [c.draws_needed for c in self.underpowered if c.draws_needed is not None]
        return max(need) if need else None

    def power_lines(self) -> list[str]:
        """Per case: each position's draws and the smallest total variation detected."""
        by_case: dict = {}
        for c in self.checks:
            if c.test == "chi-square":
                by_case.setdefault((c.case, c.case_name), []).append(c)
        out = []
        for (_case, name), checks in by_case.items():
            cells = []
            for c in sorted(checks, key=lambda c: c.position):
                tv = c.detectable_tv
                if tv is None:
                    cells.append(f"{c.position}: never reached (exact reach 0)")
                    continue
                txt = "inf" if math.isinf(tv) else f"{tv:.3f}"
                cells.append(
                    f"{c.position}: n = {c.n}, TV >= {txt}" + (" (underpowered)" if c.underpowered else "")
                )
            out.append(f"case {name!r}: " + "; ".join(cells))
        return out

    def report(self) -> str:
        head = (
            f"sampler law of rule {self.rule!r} through the {self.interface} interface: "
            f"{self.outcome.upper() if self.outcome != 'passed' else 'passed'} "
            f"({len(self.checks) - len(self.failures)}"
            f"/{len(self.checks)} checks; {self.num_samples} draws per case, seed {self.seed}, "
            f"false-failure probability {self.alpha:g} over {self.num_tests} tests; bonus token "
            f"{self.bonus})"
        )
        lines = [head]
        fails = self.failures
        if self.diagnosis:
            lines.append("diagnosis:")
            lines += ["  " + d for d in self.diagnosis]
        if fails:
            lines.append("failed:")
            lines += ["  " + c.line() for c in fails]
        lines.append(
            f"power (the smallest total variation each position's law check detects with "
            f"probability {self.power:g}; goal {self.tv_goal:g}):"
        )
        lines += ["  " + line for line in self.power_lines()]
        if self.underpowered:
            lines.append(
                f"underpowered: {len(self.underpowered)} reached positions cannot detect a deviation "
                f"of total variation {self.tv_goal:g}; about {self.draws_needed} draws per case would"
            )
        if self.skipped:
            lines.append("skipped: " + "; ".join(self.skipped))
        return "\n".join(lines)

    __str__ = report

    def to_dict(self) -> dict:
        return {
            "passed": self.passed,
            "outcome": self.outcome,
            "rule": self.rule,
            "interface": self.interface,
            "num_samples": self.num_samples,
            "alpha": self.alpha,
            "seed": self.seed,
            "bonus": self.bonus,
            "power": self.power,
            "tv_goal": self.tv_goal,
            "diagnosis": list(self.diagnosis),
            "checks": [c.__dict__.copy() for c in self.checks],
            "skipped": list(self.skipped),
        }


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
    rows = None if raw_rows is None else tuple(np.broadcast_to(r, (b, *r.shape)) for r in raw_rows)
    return _call_rows(
        adapter,
        np.broadcast_to(q, (b, *q.shape)),
        bonus,
        np.broadcast_to(p, (b, *p.shape)),
        drafts,
        device,
        torch_seed,
        raw_rows=rows,
        **kw,
    )


def _call_rows(adapter, q, bonus, p, drafts, device, torch_seed, raw_rows=None, uniforms=None, **kw):
    """One sampler call on per-row q [B, k+1, V], p [B, k, V], drafts [B, k], bonus [B, 1]."""

    def tensor(x, dtype=torch.float32):
        return torch.as_tensor(np.ascontiguousarray(x), dtype=dtype, device=device)

    if raw_rows is not None:
        kw["raw"] = tuple(tensor(r) for r in raw_rows)
    if uniforms is not None:
        kw["uniform_samples"] = tensor(uniforms)
    args = (tensor(q), tensor(bonus, torch.int64), tensor(p), tensor(drafts, torch.int64))
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


def _uniforms(rng: np.random.Generator, shape) -> np.ndarray:
    """Uniforms on float32's grid of [0, 1): multiples of 2^-24, as torch.rand draws them."""
    return rng.integers(0, 2**24, size=shape).astype(np.float64) / 2.0**24


def _pad(x: np.ndarray, v: int) -> np.ndarray:
    return x if x.shape[-1] == v else np.concatenate([x, np.zeros((*x.shape[:-1], v - x.shape[-1]))], -1)


def _declares(sampler, attribute: str) -> bool:
    """The sampler, or the function an adapter wraps, has ``attribute = True``."""
    for obj in (sampler, getattr(sampler, "fn", None), getattr(sampler, "sampler", None)):
        if obj is not None and getattr(obj, attribute, False):
            return True
    return False


def _declared_bonus(sampler, bonus):
    if bonus is not None:
        if bonus not in ("given", "drawn"):
            raise ValueError(f"bonus: expected 'given', 'drawn' or None, got {bonus!r}")
        return bonus
    return "drawn" if _declares(sampler, "draws_bonus_token") else "given"


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
    bonus: str | None = None,
    mixed: bool = True,
    case_names=None,
    power: float = DEFAULT_POWER,
    tv_goal: float = DEFAULT_DETECTABLE_TV,
) -> SamplerLawResult:
    r"""Draw ``sampler`` many times and compare its output law with ``rule``'s exact law.

    The checks are listed in :mod:`cactus_theory.testing.law`: per case and position a
    chi-square test of the emitted tokens against :math:`h_{alg,i}` and a binomial test of
    the acceptance against :math:`\alpha_i`, a chi-square test of the emitted bonus token
    against the bonus row, vLLM 0.7's counters against their expectation, each at
    ``alpha / m``; with ``invariants``, the exact checks of the layout, the bonus token (when
    it is given), greedy rows, seeded rows and zero uniforms.

    **The sampler's contract.** It is called on a batch (by an adapter: :mod:`.adapters`) of
    verifier rows ``[B, k+1, V]`` (the last position is the bonus row), drafter rows
    ``[B, k, V]``, drafted tokens ``[B, k]`` drawn from the drafter rows and bonus tokens
    ``[B, 1]`` drawn from the bonus row, and returns ``[B, k+1]``: the accepted drafts, one
    recovered token, or after k acceptances the bonus token, then -1. The bonus token:

    * ``bonus="given"`` (default): the sampler emits the bonus token it is handed (vLLM's
      contract); an exact check compares them;
    * ``bonus="drawn"``: the sampler draws its own bonus token from the bonus row (as
      transformers' assisted generation and the newer vLLM runner do). It declares it with
      this argument or an attribute ``draws_bonus_token = True`` on the sampler; the exact
      check is then skipped, and the ``bonus-law`` chi-square (always run) tests the emitted
      bonus token against the bonus row, so a bonus drawn from another row fails.

    Optional keywords the sampler may take: ``seeded_seqs`` (row -> ``torch.Generator``),
    ``raw_target_probs`` / ``raw_draft_probs`` (the unprocessed rows) and
    ``uniform_samples`` ``[B, k+1]`` (the acceptance uniforms, as FlashInfer's chain
    speculative sampling takes them): a sampler that takes them is handed float32 uniforms
    from the check's generator and, with ``invariants``, a side batch where every uniform is
    exactly 0 (``zero-uniform``: no token of exact probability 0 may be emitted). A sampler
    with an attribute ``takes_placeholder_drafts = True`` also gets, with ``invariants``, rows
    whose last draft is the placeholder -1 with a zero drafter row (``placeholder``: it is never
    accepted).

    Parameters
    ----------
    sampler : callable or SamplerAdapter
        A V0 sampler, vLLM V1's ``rejection_sample`` or a plain callable
        (:func:`~cactus_theory.testing.adapters.as_adapter` picks the adapter; pass one of
        :func:`~.adapters.v0_adapter`, :func:`~.adapters.v1_adapter`,
        :func:`~.adapters.callable_adapter`, :func:`~.adapters.padded_adapter` to choose).
    rule : str or Rule
        The rule the sampler claims to implement (a registry name, or a configured rule
        from :func:`cactus_theory.get_rule`, e.g. ``get_rule("cactus-taylor", delta=0.5)``).
    target_probs, draft_probs : array_like, optional
        The cases: ``(k+1, V)`` and ``(k, V)``, or stacked ``(cases, k+1, V)`` and
        ``(cases, k, V)``, or lists of such pairs (cases may differ in k and V). Default:
        :func:`default_cases` (with :func:`default_raw_rows` for a sampler that takes raw rows).
    num_samples : int
        Draws per case (default :data:`DEFAULT_NUM_SAMPLES`).
    alpha : float
        The probability, at most, that a correct sampler fails the call (0 < alpha < 1).
    seed : int
        Seeds the drafts, the bonus tokens, the uniforms and torch's global generator
        (restored after).
    min_expected : float
        Chi-square cells with a smaller expected count are pooled.
    invariants : bool
        Also run the exact invariant checks.
    device : str or torch.device
        Where the sampler's inputs live.
    raw_target_probs, raw_draft_probs : array_like, optional
        Raw (unprocessed) rows, shaped as ``target_probs`` and ``draft_probs`` (one case, or
        stacked cases; explicit cases are then required). The sampler receives them as the
        keywords ``raw_target_probs`` ([B, k+1, V]) and ``raw_draft_probs`` ([B, k, V]); the
        exact law of a rule that decides on raw rows (``rule.spec.needs_raw``: fuzzy, margin,
        relaxed-topk, scd, cascades) uses them. vLLM's interfaces carry no raw rows, so with
        raw rows a V1 ``rejection_sample``, or a sampler without those keywords, is refused
        (ValueError naming ``raw_target_probs``). Without raw rows the raw rows are the
        processed ones (what such a rule does at temperature 1 without truncation).
    bonus : {"given", "drawn"}, optional
        The bonus contract (above); default: ``"drawn"`` when the sampler (or the function an
        adapter wraps) has ``draws_bonus_token = True``, else ``"given"``.
    mixed : bool
        Cases with the same k run interleaved in one batch (row r holds case r mod C, the
        vocabularies padded with zero-probability tokens to the largest), so a sampler that
        reads another request's rows is seen; False calls the sampler once per case.
    case_names : sequence of str, optional
        Names of the cases in reports (default: :data:`DEFAULT_CASE_NAMES` for the default
        cases, ``"case i"`` otherwise).
    power, tv_goal : float
        Each chi-square check states the smallest total variation it detects with probability
        ``power`` (:mod:`.power`); a reached position where that exceeds ``tv_goal`` makes the
        outcome ``"underpowered"`` instead of ``"passed"``.

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
    if not (isinstance(power, (float, int)) and 0 < power < 1):
        raise ValueError(f"power: expected 0 < power < 1, got {power!r}")
    if not (isinstance(tv_goal, (float, int)) and 0 < tv_goal <= 1):
        raise ValueError(f"tv_goal: expected 0 < tv_goal <= 1, got {tv_goal!r}")
    adapter: SamplerAdapter = as_adapter(sampler)
    bonus_mode = _declared_bonus(sampler, bonus)
    rule = get_rule(rule)
    cases = _as_cases(target_probs, draft_probs)
    defaults = target_probs is None
    raws = _as_raw_cases(raw_target_probs, raw_draft_probs, cases, defaults)
    if any(r is not None for r in raws) and not adapter.supports_raw:
        raise ValueError(
            f"raw_target_probs: the {adapter.name} interface passes no raw rows to the sampler "
            "(vLLM's interfaces carry none); give a sampler that takes the keywords "
            "raw_target_probs and raw_draft_probs, or leave the raw rows out (raw = processed)"
        )
    if defaults and raw_target_probs is None and raw_draft_probs is None and adapter.supports_raw:
        raws = [
            None if r is None else tuple(_float32_values(x, "raw_target_probs") for x in r)
            for r in default_raw_rows()
        ]
    if case_names is None:
        names = list(DEFAULT_CASE_NAMES) if defaults else [f"case {c}" for c in range(len(cases))]
    else:
        names = [str(x) for x in case_names]
        if len(names) != len(cases):
            raise ValueError(f"case_names: expected {len(cases)} names, got {len(names)}")
    laws = [
        exact_law(rule, q, p, **({} if r is None else {"raw_target_probs": r[0], "raw_draft_probs": r[1]}))
        for (q, p), r in zip(cases, raws)
    ]
    raw: list[dict] = []
    skipped: list[str] = []
    n_draft = n_emitted = n_prefix = 0
    acc_mean = acc_var = 0.0
    before = adapter.counters()
    outputs: list = [None] * len(cases)
    groups: dict = {}
    for c, (_q, p) in enumerate(cases):
        groups.setdefault(p.shape[0] if mixed else ("alone", c), []).append(c)
    for g, members in enumerate(groups.values()):
        k = cases[members[0]][1].shape[0]
        vmax = max(cases[c][1].shape[1] for c in members)
        m = len(members)
        b = m * num_samples
        q_rows = np.empty((b, k + 1, vmax))
        p_rows = np.empty((b, k, vmax))
        drafts = np.empty((b, k), dtype=np.int64)
        bonus_ids = np.empty((b, 1), dtype=np.int64)
        raw_rows = None
        if any(raws[c] is not None for c in members):
            raw_rows = (np.empty((b, k + 1, vmax)), np.empty((b, k, vmax)))
        for j, c in enumerate(members):
            q, p = cases[c]
            rng = np.random.default_rng([seed, c])
            drafts[j::m] = np.stack([_draw(rng, p[i], num_samples) for i in range(k)], axis=1)
            bonus_ids[j::m, 0] = _draw(rng, q[k], num_samples)
            q_rows[j::m] = _pad(q, vmax)
            p_rows[j::m] = _pad(p, vmax)
            if raw_rows is not None:
                rq, rp = raws[c] if raws[c] is not None else (q, p)
                raw_rows[0][j::m] = _pad(rq, vmax)
                raw_rows[1][j::m] = _pad(rp, vmax)
        uniforms = None
        if adapter.supports_uniforms:
            uniforms = _uniforms(np.random.default_rng([seed, 7, g]), (b, k + 1))
        out = _call_rows(
            adapter,
            q_rows,
            bonus_ids,
            p_rows,
            drafts,
            device,
            seed * 1_000_003 + g,
            raw_rows=raw_rows,
            uniforms=uniforms,
        )
        for j, c in enumerate(members):
            outputs[c] = (out[j::m], drafts[j::m], bonus_ids[j::m], vmax)
    for c, ((q, p), law) in enumerate(zip(cases, laws)):
        k, _v = p.shape
        out, drafts, bonus_ids, vmax = outputs[c]
        present = out != PLACEHOLDER
        n_draft += num_samples * k
        n_emitted += int(present.sum())
        n_prefix += int(present[:, 1:].sum())
        acc_mean += num_samples * float(law.acceptance.sum())
        acc_var += num_samples * float((law.acceptance * (1 - law.acceptance)).sum())
        for i in range(k + 1):
            reached = present[:, i]
            n = int(reached.sum())
            probs = _pad(law.emitted[i] if i < k else q[k], vmax)
            pv, det, cells = _token_law(out[reached, i], probs, min_expected)
            raw.append(
                {
                    "name": "law" if i < k else "bonus-law",
                    "case": c,
                    "position": i,
                    "test": "chi-square",
                    "p_value": pv,
                    "n": n,
                    "detail": ("" if i < k else "bonus row: ") + det,
                    "_cells": cells,
                    "_support": int(np.count_nonzero(probs > 0)),
                    "_reach": float(law.reach[i]),
                }
            )
            if i == k:
                break
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
    if bonus_mode == "drawn":
        skipped.append(
            "bonus (exact): the sampler draws its own bonus token (declared); bonus-law tests it "
            "against the bonus row"
        )
    if invariants:
        raw += _invariants(adapter, rule, cases, laws, outputs, seed, device, skipped, bonus_mode)
        if _declares(sampler, "takes_placeholder_drafts"):
            raw += _placeholder(adapter, cases, seed, device)
        else:
            skipped.append("placeholder: the sampler does not declare takes_placeholder_drafts")
    m = max(1, sum(r["test"] != "exact" for r in raw))
    level = alpha / m
    checks = []
    for r in raw:
        exact = r["test"] == "exact"
        passed = bool(r["p_value"] == 1.0) if exact else bool(r["p_value"] >= level)
        extra = _power_fields(r, passed, level, power, tv_goal, num_samples)
        r = {key: val for key, val in r.items() if not key.startswith("_")}
        name = None if r["case"] is None else names[r["case"]]
        checks.append(
            LawCheck(threshold=0.0 if exact else level, passed=passed, case_name=name, **r, **extra)
        )
    checks = tuple(checks)
    return SamplerLawResult(
        passed=all(c.passed for c in checks),
        rule=rule.name,
        interface=adapter.name,
        num_samples=num_samples,
        alpha=float(alpha),
        seed=seed,
        checks=checks,
        skipped=tuple(skipped),
        power=float(power),
        tv_goal=float(tv_goal),
        bonus=bonus_mode,
        diagnosis=tuple(_diagnose(checks, laws, bonus_mode)),
    )


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


def _diagnose(checks, laws, bonus_mode) -> list[str]:
    """Patterns of the failed checks, and what each points to."""
    fails = [c for c in checks if not c.passed]
    out = []
    zero = [c for c in fails if "exact probability is 0" in c.detail or c.name == "zero-uniform"]
    if zero:
        where = ", ".join(sorted({c.where() for c in zero}))
        out.append(
            f"a token of exact probability 0 was emitted ({where}): a truncation (top-k / top-p "
            "mask, its ties at the boundary) not applied to the rows the sampler verifies with, or "
            "an inclusive comparison u <= ratio that accepts a zero-probability draft when u = 0"
        )
    law_fail = {(c.case, c.position) for c in fails if c.name == "law"}
    acc_fail = {(c.case, c.position) for c in fails if c.name == "acceptance"}
    recovery = sorted(law_fail - acc_fail, key=lambda x: (x[0], x[1]))
    if recovery and acc_fail == set():
        out.append(
            "the emitted law is off where the acceptance is exact: the recovery distribution (the "
            "token drawn after a rejection: its residual max(h - p, 0), its normalization, or "
            "randomness shared with the acceptance test)"
        )
    if acc_fail:
        out.append(
            "the acceptance is off: the acceptance test (its ratio, the comparison, its uniforms) or "
            "the rows given to it (drafter rows other than the ones the drafts were drawn from; a "
            "target not processed with the request's temperature / top-k / top-p)"
        )
    by_case: dict = {}
    for c in fails:
        if c.name in ("law", "acceptance") and c.case is not None:
            by_case.setdefault(c.case_name, set()).add(c.position)
    later = sorted(name for name, pos in by_case.items() if 0 not in pos)
    if later:
        out.append(
            f"position 0 is right and later positions are wrong (case {', '.join(map(repr, later))}): "
            "indexing (rows or drafts read at another position) or randomness shared across positions"
        )
    if any(c.name == "bonus-law" for c in fails):
        out.append(
            "the emitted bonus token does not follow the bonus row: it is drawn from another row "
            "(the bonus position's verifier row is the last of each request's k + 1)"
        )
    if any(c.name == "bonus" for c in fails) and bonus_mode == "given":
        out.append(
            "the bonus token emitted after k acceptances is not the one handed in: if the sampler "
            "draws its own bonus token, declare it (bonus='drawn' or draws_bonus_token = True) and "
            "its law is tested instead"
        )
    if any(c.name == "placeholder" for c in fails):
        out.append(
            "a placeholder draft id -1 is accepted: it indexes the vocabulary from the end (the last "
            "token's probabilities) instead of being rejected"
        )
    if any(c.name == "layout" for c in fails):
        out.append("the output layout (accepted drafts, one token, then -1) is broken")
    if any(c.name == "greedy" for c in fails):
        out.append("greedy rows (temperature 0) are not verified by argmax")
    if any(c.name == "seeded" for c in fails):
        out.append("a row's own generator does not make it reproducible")
    if any(c.name.startswith("counter") for c in fails):
        out.append("the sampler's counters disagree with its output")
    return out


def _invariants(adapter, rule, cases, laws, outputs, seed, device, skipped, bonus_mode) -> list[dict]:
    """The exact checks: layout, bonus token, greedy rows, seeded rows, zero uniforms."""
    raw = []
    bad_all = bonus_all = 0
    first_bad = first_bonus = ""
    for c, (out, drafts, bonus, vmax) in enumerate(outputs):
        bad, bonus_bad = _layout_violations(out, drafts, bonus, vmax)
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
    if bonus_mode == "given":
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
    raw += _zero_uniform(adapter, cases, laws, seed, device, skipped)
    return raw


def _zero_uniform(adapter, cases, laws, seed, device, skipped) -> list[dict]:
    """Rows whose acceptance uniforms are all exactly 0: no token of exact probability 0."""
    if not adapter.supports_uniforms:
        skipped.append(f"zero-uniform: the {adapter.name} sampler draws its own uniforms")
        return []
    bad_all, first, n = 0, "", 0
    for c, ((q, p), law) in enumerate(zip(cases, laws)):
        k, v = p.shape
        rng = np.random.default_rng([seed, c, 3])
        drafts = np.stack([_draw(rng, p[i], ZERO_UNIFORM_ROWS) for i in range(k)], axis=1)
        bonus = _draw(rng, q[k], ZERO_UNIFORM_ROWS)[:, None]
        out = _call(
            adapter,
            q,
            bonus,
            p,
            drafts,
            device,
            seed * 1_000_003 + 15485863 + c,
            uniforms=np.zeros((ZERO_UNIFORM_ROWS, k + 1)),
        )
        probs = np.concatenate([law.emitted, q[k : k + 1]])
        tok = np.clip(out, 0, v - 1)
        impossible = (out != PLACEHOLDER) & (np.take_along_axis(probs.T, tok, 0) <= 0)
        rows = impossible.any(1)
        if rows.any() and not first:
            r = int(np.flatnonzero(rows)[0])
            first = (
                f"case {c}: {int(rows.sum())} of {ZERO_UNIFORM_ROWS} rows with u = 0 emit a token of exact "
                f"probability 0, e.g. row {r}: output {out[r].tolist()}, drafts {drafts[r].tolist()}"
            )
        bad_all += int(rows.sum())
        n += ZERO_UNIFORM_ROWS
    return [
        {
            "name": "zero-uniform",
            "case": None,
            "position": None,
            "test": "exact",
            "p_value": float(bad_all == 0),
            "n": n,
            "detail": first or "uniforms exactly 0: no token of exact probability 0 emitted",
        }
    ]


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


def _placeholder(adapter, cases, seed, device) -> list[dict]:
    """Rows whose last draft is the placeholder id -1 (a request that drafted k - 1 tokens) with
    a zero drafter row: it is never accepted, so its position holds a real token and no bonus
    token follows."""
    bad_all, first, n = 0, "", 0
    for c, (q, p) in enumerate(cases):
        k, v = p.shape
        rng = np.random.default_rng([seed, c, 4])
        drafts = np.stack([_draw(rng, p[i], PLACEHOLDER_ROWS) for i in range(k)], axis=1)
        drafts[:, k - 1] = PLACEHOLDER
        p0 = p.copy()
        p0[k - 1] = 0.0
        bonus = _draw(rng, q[k], PLACEHOLDER_ROWS)[:, None]
        out = _call(adapter, q, bonus, p0, drafts, device, seed * 1_000_003 + 32452843 + c)
        at, after = out[:, k - 1], out[:, k]
        reached = (at != PLACEHOLDER) | (after != PLACEHOLDER)  # something at or after the placeholder
        rows = reached & ((at < 0) | (at >= v) | (after != PLACEHOLDER))
        if rows.any() and not first:
            r = int(np.flatnonzero(rows)[0])
            first = (
                f"case {c}: {int(rows.sum())} of {int(reached.sum())} rows that reach the placeholder "
                f"draft -1 accept it, e.g. row {r}: output {out[r].tolist()}, drafts {drafts[r].tolist()}"
            )
        bad_all += int(rows.sum())
        n += PLACEHOLDER_ROWS
    return [
        {
            "name": "placeholder",
            "case": None,
            "position": None,
            "test": "exact",
            "p_value": float(bad_all == 0),
            "n": n,
            "detail": first or "a placeholder draft -1 (zero drafter row) is never accepted",
        }
    ]


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
        # on the rows' device: a CUDA sampler rejects a CPU generator
        return {r: torch.Generator(device=device).manual_seed(seed * 131 + r) for r in rows}

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


def assert_sampler_law(
    sampler, rule, target_probs=None, draft_probs=None, *, strict: bool = False, **kwargs
) -> SamplerLawResult:
    r""":func:`check_sampler_law`, raising AssertionError with its report when a check fails.

    Parameters
    ----------
    sampler, rule, target_probs, draft_probs, **kwargs
        As :func:`check_sampler_law` (``num_samples``, ``alpha``, ``seed``,
        ``min_expected``, ``invariants``, ``device``, ``bonus``, ``mixed``, ``power``,
        ``tv_goal``, ...).
    strict : bool
        Also raise when the outcome is ``"underpowered"`` (no check failed, but a reached
        position cannot detect a deviation of ``tv_goal`` with probability ``power``).

    Returns
    -------
    SamplerLawResult
        When every check passed (and, with ``strict``, none is underpowered).

    Raises
    ------
    AssertionError
        A check failed; the message is the report: the diagnosis, the failed checks (where and
        by how much) and each position's power. pytest shows it without this function's source.

    Examples
    --------
    >>> import cactus_theory as ct
    >>> res = assert_sampler_law(ct.make_sampler("sps"), "sps", num_samples=2000)
    >>> res.passed
    True
    """
    __tracebackhide__ = True  # pytest: show the report, not this function's source
    result = check_sampler_law(sampler, rule, target_probs, draft_probs, **kwargs)
    if not result.passed or (strict and result.outcome != "passed"):
        raise AssertionError(result.report())
    return result

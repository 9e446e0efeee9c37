r"""The front door: each everyday problem is one call, with one result type per problem.

=============================  ==============================================================
call                           problem (result type, :mod:`cactus_theory.results`)
=============================  ==============================================================
:func:`solve_spike`            :math:`\max h_n` s.t. :math:`D(h\|q) \le \delta` at one drafted
                               token: Theorem 2's root, Corollary 5's Taylor point or the cvxpy
                               oracle (:class:`~cactus_theory.results.SpikeSolution`)
:func:`compare_taylor_exact`   Taylor against exact Cactus at one delta: per-draft and emitted
                               divergences, acceptance (``TaylorExactComparison``)
:func:`optimal_frontier`       :math:`F(\epsilon)`, the best acceptance of any rule emitting
                               within eps of q (Theorem 1) (``FrontierResult``)
:func:`calibrate_delta`        the delta whose emitted divergence meets eps
                               (``CalibrationResult``)
:func:`analyze_rules`          every rule side by side (``RuleTable``)
:func:`exact_chain`            exact speculative-decoding metrics over a trajectory
                               (``ChainResult``)
:func:`make_sampler`           a batched torch sampler (vLLM's interface) for any rule
:func:`audit`                  every rule calibrated to one true emitted divergence, side by
                               side (``AuditResult``, :mod:`cactus_theory.simulate.audit`)
:func:`plan`                   from a recording, a budget and a cost model: each rule's knob,
                               tokens per call and speedup at every m, the best m
                               (``PlanResult``, :mod:`cactus_theory.planning`)
=============================  ==============================================================

Names: ``target_probs`` (q, verifier), ``draft_probs`` (p, drafter), ``token`` (n, drafted
token), ``delta`` the per-draft budget :math:`D(h^{(n)}\|q) \le \delta`, ``eps`` a target on
the emitted distribution :math:`D(h_{alg}\|q) \le \epsilon` (see :mod:`cactus_theory.results`).
Every function wraps the exact machinery of :mod:`cactus_theory.solvers`,
:mod:`cactus_theory.analysis` and :mod:`cactus_theory.simulate`; bad input raises ValueError
naming the argument.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorems 1-3, Corollary 5.
"""

from __future__ import annotations

import numpy as np

from ._validation import as_budget, as_prob_pair, choice, one_row, token_id
from .divergences import get_divergence
from .planning import plan
from .results import (
    CalibrationResult,
    ChainResult,
    FrontierResult,
    RuleTable,
    SpikeSolution,
    TaylorExactComparison,
)
from .simulate.audit import audit as _audit
from .simulate.internal import corpus_from_dump

__all__ = [
    "solve_spike",
    "compare_taylor_exact",
    "optimal_frontier",
    "calibrate_delta",
    "analyze_rules",
    "exact_chain",
    "make_sampler",
    "audit",
    "plan",
]

#: Methods of :func:`solve_spike`.
_SPIKE_METHODS = ("exact", "taylor", "cvxpy")


def solve_spike(target_probs, draft_probs, token, delta, *, divergence="kl", method="exact") -> SpikeSolution:
    r"""Solve the per-draft problem at one drafted token.

    .. math:: \gamma = \max_h h_n \quad\text{s.t.}\quad h\in\Delta_V,\ D(h\|q) \le \delta,
              \qquad a_n = \min(1, \gamma / p_n)

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (V,)
        Verifier q and drafter p (one row each).
    token : int
        The drafted token n, in ``[0, V)``.
    delta : float
        Per-draft budget >= 0 (``inf`` allowed).
    divergence : str
        D (any of :data:`cactus_theory.divergences.DIVERGENCES`; ``"taylor"`` needs a second
        derivative at 1, ``"cvxpy"`` one of :data:`cactus_theory.solvers._cvx.CVX_DIVERGENCES`).
    method : {"exact", "taylor", "cvxpy"}
        ``"exact"``: Theorem 2's largest root of the two-point divergence (bisection to machine
        precision; always within budget). ``"taylor"``: Corollary 5,
        :math:`\gamma = \min(1, q_n + \sqrt{2\delta q_n(1-q_n)/f''(1)})` (may exceed the budget
        when gamma > 1/2). ``"cvxpy"``: the convex program over the whole simplex (the oracle;
        slow, small V).

    Returns
    -------
    SpikeSolution

    Examples
    --------
    >>> s = solve_spike([0.5, 0.3, 0.2], [0.2, 0.6, 0.2], token=1, delta=0.1)
    >>> round(s.gamma, 4), round(s.acceptance, 4), s.within_budget
    (0.5244, 0.874, True)

    Symbols: q verifier, p drafter, n drafted token, delta per-draft budget, h target.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 2 and Corollary 5.
    """
    from .rules.plans import _ratio_acceptance, _spike_target_at
    from .solvers import exact_spike, taylor_spike

    q, p = as_prob_pair(target_probs, draft_probs)
    one_row(q, "target_probs")
    n = token_id(token, q.shape[0], "token")
    delta = as_budget(delta, "delta")
    method = choice(method, _SPIKE_METHODS, "method")
    d = get_divergence(divergence)
    q_n, p_n = np.float64(q[n]), np.float64(p[n])
    if method == "cvxpy":
        from .solvers import max_draft_probability_cvxpy

        tol = 1e-7  # the oracle's verification tolerance (its default): interior-point accuracy
        res = max_draft_probability_cvxpy(q, n, delta, d.name, tol=tol)
        gamma, h, div = float(res.value), np.asarray(res.h), float(res.divergence)
        info = {
            "algorithm": "cvxpy over the simplex",
            "solver": res.solver,
            "status": res.status,
            "attempts": [list(a) for a in res.attempts],
            "tol": tol,
        }
    else:
        if method == "exact":
            gamma = float(exact_spike(np.asarray(q_n), delta, d.name))
            info = {"algorithm": "bisection on the two-point form (Theorem 2)", "iterations": 64, "tol": 0.0}
        else:
            # q_n in {0, 1}: no bonus (also for delta = inf, where the formula reads 0 * inf)
            gamma = (
                float(q_n) if q_n * (1.0 - q_n) == 0 else float(taylor_spike(np.asarray(q_n), delta, d.name))
            )
            info = {
                "algorithm": "Taylor point (Corollary 5)",
                "f_second_at_one": float(d.f_second_at_one),
                "tol": 0.0,
            }
        h = _spike_target_at(q, np.asarray(n), np.asarray(gamma))  # Theorem 2's h^(n)
        div = float(d.two_point(np.asarray(gamma), np.asarray(q_n)))
    acc = float(_ratio_acceptance(np.asarray(gamma), np.asarray(p_n)))
    return SpikeSolution(
        method=method,
        divergence=d.name,
        token=n,
        delta=delta,
        target_prob=float(q_n),
        draft_prob=float(p_n),
        gamma=gamma,
        h=h,
        per_draft_divergence=div,
        acceptance=acc,
        budget_hit=gamma < 1.0,
        within_budget=bool(div <= delta + info["tol"]),
        solver_info=info,
    )


def compare_taylor_exact(target_probs, draft_probs, delta, *, divergence="kl") -> TaylorExactComparison:
    r"""Cactus with the Taylor point against the exact root at one per-draft budget delta.

    Wraps :func:`cactus_theory.analysis.comparison.taylor_vs_exact_pairs`: per draft
    :math:`D(h^{(n)}\|q)` (two-point form at :math:`(\gamma_n, q_n)`), emitted
    :math:`D(h_{alg}\|q)` (Theorem 3) and acceptance :math:`\sum_n p_n a_n`, for SpS,
    ``cactus-taylor`` and ``cactus-exact``.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (V,) or (N, V)
        Verifier q and drafter p (one position or N).
    delta : float
        Per-draft budget >= 0.
    divergence : str
        D (needs a second derivative at 1 for the Taylor point).

    Returns
    -------
    TaylorExactComparison

    Symbols: q verifier, p drafter, n drafted token, delta per-draft budget.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 2, Corollaries 5-6, Theorem 3.
    """
    from .analysis.comparison import taylor_vs_exact_pairs

    delta = as_budget(delta, "delta")
    res = taylor_vs_exact_pairs(target_probs, draft_probs, [delta], divergence)
    by = {
        ("sps" if r["rule"] == "sps" else "taylor" if r["rule"] == "cactus-taylor" else "exact"): r
        for r in res.rows
    }
    t, e = by["taylor"], by["exact"]
    return TaylorExactComparison(
        delta=delta,
        divergence=res.divergence,
        n_positions=res.n_positions,
        acceptance_sps=by["sps"]["acceptance"],
        acceptance_taylor=t["acceptance"],
        acceptance_exact=e["acceptance"],
        per_draft_mean_taylor=t["per_draft_mean"],
        per_draft_mean_exact=e["per_draft_mean"],
        per_draft_max_taylor=t["per_draft_max"],
        per_draft_max_exact=e["per_draft_max"],
        emitted_taylor=t["emitted_mean"],
        emitted_exact=e["emitted_mean"],
        emitted_max_taylor=t["emitted_max"],
        emitted_max_exact=e["emitted_max"],
        taylor_overshoot=max(0.0, t["per_draft_max"] - delta),
        table=tuple(dict(r) for r in res.rows),
    )


def optimal_frontier(
    target_probs,
    draft_probs=None,
    *,
    eps=None,
    divergence="kl",
    chunk_rows=None,
    max_memory=None,
    progress=False,
    runner=None,
) -> FrontierResult:
    r"""The optimal acceptance :math:`F(\epsilon)` at targets eps on the emitted divergence.

    .. math:: F(\epsilon) = \max_{o\in\Delta_V} \sum_x \min(p_x, o_x)
              \quad\text{s.t.}\quad D(o\|q) \le \epsilon

    Wraps :func:`cactus_theory.solvers._frontier.frontier` (Theorem 1; Mentored decoding attains
    it).

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (V,) or (N, V)
        Verifier q and drafter p.
    eps : None, float or array_like, shape (E,)
        Targets on the emitted divergence (>= 0). None: 65 points from 0 to the saturation
        budget (largest over positions), quadratically spaced as
        :func:`cactus_theory.solvers._frontier.frontier_curve`.
    divergence : str
        D.
    chunk_rows, max_memory, progress, runner
        Where the work runs: rows per chunk, or the bound on the working memory
        (``"256MB"``; default 256 MiB), and a progress bar: rows beyond one chunk and a row
        source (:mod:`cactus_theory.rows`: a file or a folder of shards, also by path) are
        analysed chunk by chunk, Dask arrays as Dask tasks (``runner="dask"``: a row source's
        shards as Dask tasks too), the same numbers bit for bit.

    Returns
    -------
    FrontierResult
        Acceptance and achieved divergence averaged over positions (per position too).

    Symbols: q verifier, p drafter, eps target on the emitted divergence.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 1; Tran-Thien (2023).
    """
    from .analysis.internal import Execution, frontier_over

    target_probs, draft_probs, _, eps = _as_input(target_probs, draft_probs, eps, "eps")
    run = Execution(chunk_rows, max_memory, progress, runner)
    return frontier_over(target_probs, draft_probs, eps, divergence, execution=run)


def calibrate_delta(
    target_probs,
    draft_probs=None,
    eps=None,
    *,
    rule="cactus-taylor",
    divergence="kl",
    chunk_rows=None,
    max_memory=None,
    progress=False,
    runner=None,
    per=None,
) -> CalibrationResult:
    r"""The per-draft budget delta whose emitted divergence meets eps: per position, or one
    delta for a whole corpus.

    .. math:: \delta^*(q, p) = \sup\{\delta : D(h_{alg}(\delta')\|q) \le \epsilon
              \ \ \forall \delta' \le \delta\}

    per position (``per="position"``), with :math:`D` of each position; per corpus
    (``per="corpus"``) with the mean :math:`\frac1N\sum_t D(h_{alg,t}(\delta)\|q_t)` over
    the positions, one delta for all (how a rule is configured in an engine, and how
    :func:`audit` calibrates). Per position: the first crossing on a geometric grid, refined
    by regula falsi (:mod:`cactus_theory.analysis.calibration`); per corpus
    :func:`cactus_theory.analysis.calibrate_knob` on the mean. The achieved divergence is
    recomputed exactly.

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (V,) or (N, V), or a loaded dump
        Verifier q and drafter p; a loaded dump (:func:`cactus_theory.logits.load_dump`,
        ``draft_probs`` None) gives its processed rows.
    eps : float
        Target on :math:`D(h_{alg}\|q)`, >= 0 (0 gives delta = 0, SpS).
    rule : {"cactus-taylor", "cactus-exact"}
        How gamma follows from delta: Corollary 5 or Theorem 2.
    divergence : str
        D of both the per-draft budget and the emitted target.
    chunk_rows, max_memory, progress, runner
        As in :func:`optimal_frontier` (``draft_probs`` None with a row source; per position).
    per : {"position", "corpus"}, optional
        Default ``"corpus"`` for a loaded dump, ``"position"`` otherwise.

    Returns
    -------
    CalibrationResult
        Per position: floats for one position, arrays of shape (N,) for N. Per corpus:
        floats (the delta, the mean emitted divergence and acceptance) and a status.

    Symbols: q verifier, p drafter, delta per-draft budget, eps target on the emitted divergence.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5.
    """
    from .analysis.internal import Execution, calibrate_over

    target_probs, draft_probs, is_dump, eps = _as_input(target_probs, draft_probs, eps, "eps")
    if eps is None:
        raise ValueError("eps: required (the target on the emitted divergence)")
    per = choice("corpus" if per is None and is_dump else (per or "position"), ("position", "corpus"), "per")
    run = Execution(chunk_rows, max_memory, progress, runner)
    return calibrate_over(target_probs, draft_probs, eps, rule, divergence, per, execution=run)


def _as_input(target_probs, draft_probs, value, keyword: str):
    """A front-door call's input as (target_probs, draft_probs, whether it was a dump, value).

    A loaded dump gives its processed rows as stacked (q, p) arrays, a path its row source
    (:func:`cactus_theory.rows.as_row_source`); anything else is unchanged. After a dump, a path
    or a row source (q and p in one input) a second positional argument is ``keyword``'s value:
    rule names (``rules``) or numbers (``eps``); ValueError naming ``keyword=`` when it is given
    twice or is not of its kind."""
    from .rows import RowSource, as_row_source

    t, x = target_probs, draft_probs
    path = isinstance(t, str) or hasattr(t, "__fspath__")
    if x is not None and (path or isinstance(t, RowSource) or callable(getattr(t, "pairs", None))):
        x = [x] if keyword == "rules" and isinstance(x, str) else x
        names = isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(r, str) for r in x)
        fits = names if keyword == "rules" else not isinstance(x, str) and np.asarray(x).dtype.kind in "fiu"
        if not fits or value is not None:
            raise ValueError(
                f"{keyword}: a dump, a path or a row source carries its own drafter rows, so the "
                f"second argument would be {keyword}; give it once, by name ({keyword}=...)"
            )
        draft_probs, value = None, (list(x) if keyword == "rules" else x)
    if draft_probs is None and callable(getattr(t, "pairs", None)):
        pairs = t.pairs()
        return pairs.target_probs, pairs.draft_probs, True, value
    if path:
        return as_row_source(t, draft_probs), None, False, value
    return t, draft_probs, False, value


def analyze_rules(
    target_probs,
    draft_probs=None,
    rules=None,
    *,
    delta=None,
    knobs=None,
    chunk_rows=None,
    max_memory=None,
    progress=False,
    runner=None,
) -> RuleTable:
    r"""Rules side by side: acceptance, per-draft and emitted divergences, frontier gap.

    The columns of :func:`cactus_theory.analysis.rule_table.rule_table` (per-row values, their
    means over all rows) and the per-draft KL :math:`KL(h^{(n)}\|q)` of
    :func:`cactus_theory.analysis.per_draft_divergence` (its drafter-weighted mean and its
    maximum).

    Parameters
    ----------
    target_probs, draft_probs : array_like, shape (V,) or (N, V), or a loaded dump, a path or a row source
        Verifier q and drafter p (a dump, ``draft_probs`` None: its processed rows; a path or a
        row source: read chunk by chunk). After a dump, a path or a row source, a list of rule
        names in ``draft_probs``'s place is the rules: ``analyze_rules(dump, ["sps",
        "cactus-taylor"], delta=0.5)``.
    rules : sequence of str, optional
        Registry names (aliases allowed); default every registered rule.
    delta : float, optional
        Per-draft budget given to every rule with a ``delta`` knob (default: each rule's own
        default); ``knobs`` override it.
    knobs : dict of str to dict, optional
        Knobs per rule name.
    chunk_rows, max_memory, progress, runner
        As in :func:`optimal_frontier`.

    Returns
    -------
    RuleTable
        Keys of each row in :class:`cactus_theory.results.RuleTable`.

    Symbols: q verifier, p drafter, n drafted token, delta per-draft budget.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3.
    """
    from .analysis.internal import Execution, rule_table_over

    target_probs, draft_probs, _, rules = _as_input(target_probs, draft_probs, rules, "rules")
    if delta is not None and np.ndim(delta) > 0:
        raise ValueError(
            f"delta: expected one number for every rule, got an array of shape {np.shape(delta)} "
            "(per-position deltas: calibrate_delta(..., per='corpus') gives one for a corpus)"
        )
    run = Execution(chunk_rows, max_memory, progress, runner)
    return rule_table_over(target_probs, draft_probs, rules, delta, knobs, execution=run)


def exact_chain(rule, trajectory, m, *, drafting="sample", draft_top_k=None, **knobs) -> ChainResult:
    r"""Exact expected speculative-decoding metrics of a rule over a teacher-forced trajectory.

    Wraps :func:`cactus_theory.simulate._exact.exact_chain` (the dynamic programme over round
    starts) and :func:`cactus_theory.simulate._metrics.compute_metrics`.

    Parameters
    ----------
    rule : str or Rule
        A registry name (configured with ``**knobs``) or a configured rule.
    trajectory : Trajectory or (target_probs, draft_probs)
        Recorded (q_t, p_t) pairs, shape (T, V) each.
    m : int
        Draft length >= 1.
    drafting : {"sample", "argmax", "top_k"}
        How each draft is drawn from its drafter row: sampled from p (default), the argmax of
        p (greedy drafting, vLLM's default ``draft_sample_method``), or from p restricted to
        its top ``draft_top_k`` tokens.
    draft_top_k : int, optional
        k for ``drafting="top_k"``.
    **knobs
        The rule's knobs (e.g. ``delta=0.5``).

    Returns
    -------
    ChainResult

    Symbols: q verifier, p drafter, n drafted token, m draft length.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 (AL_m); Leviathan et al. 2023.
    """
    from .rules import get_rule
    from .simulate import Trajectory, compute_metrics, sequence_divergence
    from .simulate import exact_chain as _exact_chain

    if not isinstance(trajectory, Trajectory):
        if isinstance(trajectory, (tuple, list)) and len(trajectory) == 2:
            trajectory = Trajectory(*trajectory)
        else:
            raise ValueError("trajectory: expected a Trajectory or a (target_probs, draft_probs) pair")
    r = get_rule(rule, **knobs)
    chain = _exact_chain(r, trajectory, m, drafting=drafting, draft_top_k=draft_top_k)
    met = compute_metrics(chain.totals)
    scalars = {
        k: met[k].value
        for k in (
            "al_paper",
            "tokens_per_call",
            "v0_acceptance_rate",
            "prefix_acceptance_rate",
            "v0_system_efficiency",
            "rejected_per_token",
        )
    }
    return ChainResult(
        rule=repr(r),
        m=chain.m,
        length=trajectory.length,
        metrics=scalars,
        pos_marginal=[e.value for e in met["pos_marginal"]],
        pos_conditional=[e.value for e in met["pos_conditional"]],
        hist=[e.value for e in met["hist"]],
        sequence_kl_upper=sequence_divergence(chain).kl_upper,
        chain=chain,
    )


def make_sampler(rule, *, strict_mode: bool = False, **knobs):
    r"""A batched torch sampler (vLLM 0.7.3 V0 interface) for any registered rule.

    Imports torch on first use; see :func:`cactus_theory.samplers.make_sampler` (the emitted
    token at each position follows :math:`h_{alg}`, Theorem 3).

    Parameters
    ----------
    rule : str or Rule
        Registry name (with ``**knobs``) or a configured rule.
    strict_mode : bool
        Validate input values (synchronizes with the host), as vLLM's ``strict_mode``.
    **knobs
        The rule's knobs.

    Returns
    -------
    cactus_theory.samplers.RuleSampler
    """
    from .samplers import make_sampler as _make_sampler

    return _make_sampler(rule, strict_mode=strict_mode, **knobs)


def audit(
    target_probs,
    draft_probs=None,
    *,
    eps=0.1,
    rules=None,
    per="token",
    divergence="kl",
    rows="processed",
    max_positions=None,
    eos_token_id=None,
    **options,
):
    r"""Every chosen rule calibrated to the same true emitted divergence eps, side by side.

    .. math:: \mathrm{mean}_t\, D(h_{alg,t}(x)\|q_t) = \epsilon \quad\text{(each rule's knob x)}

    Reads the input and runs the audit's engine, :func:`cactus_theory.simulate.audit.audit`
    (its docstring and module docstring give the columns and the length model): each rule's
    knob bisected within its published range until its emitted divergence meets eps, then
    acceptance, :math:`\bar\alpha - \bar\alpha_{SpS}`, exact accepted lengths, emitted KL and
    TV, the frontier gaps and the end-of-sequence shift with the length ratio it predicts.

    Parameters
    ----------
    target_probs : array_like (N, V), Dump, str, Path or RowSource
        Verifier rows q (with ``draft_probs``); a dump (loaded, a file, or a shipped recording's
        name such as ``"distilled"``); or a folder of ``.npy``/``.npz`` shards or a row source,
        read chunk by chunk (per-token statistics only).
    draft_probs : array_like (N, V), optional
        Drafter rows p (with arrays).
    eps, rules, per, divergence
        The target on the emitted divergence, the rules (default: every registered rule but
        :data:`cactus_theory.simulate._audit_calibrate.AUDIT_EXCLUDED`), ``"token"`` or ``"sequence"``, D.
    rows : {"processed", "raw"}
        A dump's processed rows (its sampling transforms) or its raw temperature-1 rows.
    max_positions : int, optional
        A dump's first trajectories up to at least this many positions.
    eos_token_id : int, optional
        The EOS vocabulary id (a dump's own by default) or, for arrays, its column.
    **options
        ``draft_lengths``, ``sequence_m``, ``knobs``, ``tune``, ``raw_target_probs``,
        ``raw_draft_probs``, ``chunk_rows``, ``max_memory``, ``progress``: see
        :func:`cactus_theory.simulate.audit.audit`.

    Returns
    -------
    cactus_theory.results.AuditResult

    Symbols: q verifier, p drafter, n drafted token, eps the target on the emitted divergence.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3.
    """
    from pathlib import Path

    from .logits import Dump, load_dump, shipped_dumps
    from .logits import eos_token_id as dump_eos
    from .rows import as_row_source

    if isinstance(target_probs, (str, Path, Dump)) and draft_probs is not None:
        raise ValueError("draft_probs: give a dump or a folder of shards alone, or (q, p) arrays")
    if isinstance(target_probs, (str, Path)) and Path(target_probs).is_dir():
        target_probs = as_row_source(target_probs)
    elif isinstance(target_probs, (str, Path)):
        shipped = {f.stem.replace("smollm2-135m_", ""): f for f in shipped_dumps()}
        if not Path(target_probs).exists() and str(target_probs) not in shipped:
            raise ValueError(
                f"target_probs: {str(target_probs)!r} is neither a dump file nor a shipped recording "
                f"({', '.join(shipped)})"
            )
        target_probs = load_dump(target_probs if Path(target_probs).exists() else shipped[str(target_probs)])
    if isinstance(target_probs, Dump):
        eos = dump_eos(target_probs.meta) if eos_token_id is None else int(eos_token_id)
        target_probs = corpus_from_dump(
            target_probs, rows=rows, max_positions=max_positions, eos_token_id=eos
        )
        max_positions = eos_token_id = None
    if max_positions is not None:
        raise ValueError("max_positions: applies to dumps only")
    return _audit(
        target_probs,
        draft_probs,
        eps=eps,
        rules=rules,
        per=per,
        divergence=divergence,
        rows=rows,
        eos_token_id=eos_token_id,
        **options,
    )

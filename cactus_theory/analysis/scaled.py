r"""The row-wise analyses in chunks of rows, with a memory bound the caller sets.

Every analysis of :mod:`cactus_theory.api` and :func:`cactus_theory.analysis.analyze` is
row-wise: each position's acceptance, emitted distribution :math:`h_{alg}` (Theorem 3),
divergences, frontier :math:`F(\epsilon)` (Theorem 1) or calibrated delta depends on its own
(q, p) only. The functions here run that per-row computation on consecutive chunks of rows of
a :class:`~cactus_theory.rows.RowSource` (in-memory arrays, a file, a folder of shards) and
join the per-row results in order; the corpus statistics (means, maxima, quantiles, a global
delta) are then taken over all the per-row values, exactly as the in-memory call takes them.
So the numbers are the in-memory numbers bit for bit (tested), and the memory is that of one
chunk's temporaries plus the per-row results (8 bytes per row and statistic; plus the
(N, V) arrays the caller asks for, e.g. ``emitted``).

Statistics that need all rows are exact, not sampled: a mean or a quantile is taken over the
joined per-row values (:func:`numpy.mean`, :func:`numpy.quantile` with ``method="higher"``,
the in-memory calls' own). A corpus maximum that sets a grid (the frontier's saturation
budget, the global delta's saturation delta) takes a first pass over the rows. The global
delta (:func:`global_delta`) evaluates the corpus statistic at each scan point in one pass
and then at each refinement step (at most
:data:`~cactus_theory.analysis.calibration.REFINE_STEPS`) in one pass each: the in-memory
algorithm's own evaluations, in the same order.

The chunk size: ``chunk_rows`` rows, or the most rows whose temporaries fit ``max_memory``
(default :data:`~cactus_theory.analysis.chunked.DEFAULT_MAX_MEMORY`), from the measured count
of float64 arrays of V values each analysis holds at once per row
(:data:`~cactus_theory.analysis.chunked.WORK_ARRAYS`).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, V the
vocabulary size, N rows, delta the per-draft budget, eps a target on the emitted divergence.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorems 1-3, Corollary 5.
"""

from __future__ import annotations

import numpy as np

from .chunked import (
    ArrayRows,
    LocalRunner,
    as_rows,
    join_rows,
    runner_for,
    wants_chunks,
)

__all__ = [
    "FRONTIER_POINTS",
    "analyze",
    "analyze_rules",
    "calibrate_delta",
    "emitted_distribution",
    "global_delta",
    "optimal_frontier",
]

#: Frontier grid when ``eps`` is None (:func:`optimal_frontier`): points from 0 to the
#: saturation budget.
FRONTIER_POINTS = 65


# --------------------------------------------------------------------------- analyze


def _analyze_kernel(chunk, rule, divergences, per_token, drafting="sample", draft_top_k=None):
    from .one_step import analyze as analyze_block

    res = analyze_block(
        rule,
        chunk.target_probs,
        chunk.draft_probs,
        raw_target_probs=chunk.raw_target_probs,
        raw_draft_probs=chunk.raw_draft_probs,
        divergences=divergences,
        drafting=drafting,
        draft_top_k=draft_top_k,
    )
    if per_token:
        return res
    return type(res)(res.rule, None, res.acceptance, None, res.divergences)


def analyze(
    rule,
    target_probs,
    draft_probs=None,
    *,
    raw_target_probs=None,
    raw_draft_probs=None,
    divergences=None,
    per_token=None,
    chunk_rows=None,
    max_memory=None,
    progress=False,
    runner=None,
    drafting="sample",
    draft_top_k=None,
):
    r"""Acceptance, emitted distribution and its divergences from q, chunk by chunk.

    :func:`cactus_theory.analysis.analyze` on every chunk of rows:
    :math:`\alpha = \sum_n p_n a_n` and :math:`D(h_{alg}\|q)` per row, with
    :math:`h_{alg}(j) = p_j a_j + \sum_n p_n (1 - a_n) r^{(n)}_j` (Theorem 3).

    Parameters
    ----------
    rule : str or Rule
    target_probs : array_like, tensor, RowSource or path
        q, shape (..., V), or a row source (then ``draft_probs`` is None).
    draft_probs : array_like or tensor, optional
        p, with array q.
    divergences : sequence of str, optional
        Divergences of :math:`h_{alg}` from q (default KL, reverse KL, TV).
    per_token : bool, optional
        Keep the (N, V) arrays ``accept_probs`` and ``emitted`` (default: True for arrays,
        False for a row source). False returns them as None and holds only per-row values.
    chunk_rows, max_memory : optional
        The chunk size, or the bound on the working memory (``"256MB"``, bytes; default
        :data:`DEFAULT_MAX_MEMORY`).
    progress : bool
        A progress bar over chunks.
    drafting, draft_top_k : optional
        The drafting policy (:func:`cactus_theory.analysis.one_step.drafting_distribution`;
        default: the draft is drawn from p).

    Returns
    -------
    OneStepResult
        The rows' results joined in order (batch shape of array input kept), bit for bit those
        of the in-memory call.

    Symbols: q verifier, p drafter, n drafted token. Source: Hao & Mou, ICLR 2026
    (arXiv 2604.04987), Theorem 3.
    """
    from ..rules import get_rule
    from .one_step import DEFAULT_DIVERGENCES, OneStepResult
    from .one_step import analyze as analyze_block

    rule = get_rule(rule)
    divergences = tuple(DEFAULT_DIVERGENCES if divergences is None else divergences)
    if (
        runner is None
        and per_token is not False
        and not wants_chunks(target_probs, "analyze", chunk_rows=chunk_rows, max_memory=max_memory)
    ):
        if draft_probs is None:
            raise ValueError("draft_probs: required with a target_probs array")
        return analyze_block(
            rule,
            target_probs,
            draft_probs,
            raw_target_probs=raw_target_probs,
            raw_draft_probs=raw_draft_probs,
            divergences=divergences,
            drafting=drafting,
            draft_top_k=draft_top_k,
        )
    source = as_rows(target_probs, draft_probs, raw_target_probs, raw_draft_probs)
    if per_token is None:
        per_token = source.in_memory
    run = runner_for(source, "analyze", chunk_rows, max_memory, progress, runner)
    batch = source.batch_shape if isinstance(source, ArrayRows) else (run.n_rows,)
    rows_out = {}

    def write(chunk, res):
        """The chunk's (n, V) rows into the (N, V) outputs (made at the first chunk)."""
        if not rows_out:
            for key in ("accept_probs", "emitted"):
                x = getattr(res, key)
                rows_out[key] = (
                    np.empty((run.n_rows, x.shape[-1]), dtype=x.dtype)
                    if isinstance(x, np.ndarray)
                    else x.new_empty((run.n_rows, x.shape[-1]))
                )
        for key in ("accept_probs", "emitted"):
            rows_out[key][chunk.start : chunk.start + chunk.n_rows] = getattr(res, key)
        return type(res)(res.rule, None, res.acceptance, None, res.divergences)

    # per-token rows are written as the chunks come (no second copy of the N x V outputs)
    stream = bool(per_token) and isinstance(run, LocalRunner)
    parts = run.map(
        _analyze_kernel,
        rule,
        divergences,
        bool(per_token),
        drafting,
        draft_top_k,
        **({"each": write} if stream else {}),
    )

    def join(xs, trailing=()):
        out = join_rows(list(xs))
        return out.reshape(tuple(batch) + tuple(trailing))

    if not parts:
        raise ValueError("target_probs: no rows")
    V = int(rows_out["emitted"].shape[-1]) if stream else int(parts[0].emitted.shape[-1]) if per_token else 0
    acc = join(r.acceptance for r in parts)
    divs = {d: join(r.divergences[d] for r in parts) for d in divergences}
    if stream:
        a, h = (rows_out[k].reshape(tuple(batch) + (V,)) for k in ("accept_probs", "emitted"))
    else:
        a = join((r.accept_probs for r in parts), (V,)) if per_token else None
        h = join((r.emitted for r in parts), (V,)) if per_token else None
    return OneStepResult(repr(rule), a, acc, h, divs)


def _emitted_kernel(chunk, rule, method, drafting="sample", draft_top_k=None):
    from .one_step import emitted_distribution as _emitted

    return _emitted(
        rule,
        chunk.target_probs,
        chunk.draft_probs,
        raw_target_probs=chunk.raw_target_probs,
        raw_draft_probs=chunk.raw_draft_probs,
        method=method,
        drafting=drafting,
        draft_top_k=draft_top_k,
    )


def emitted_distribution(
    rule,
    target_probs=None,
    draft_probs=None,
    *,
    raw_target_probs=None,
    raw_draft_probs=None,
    method="fast",
    chunk_rows=None,
    max_memory=None,
    progress=False,
    runner=None,
    drafting="sample",
    draft_top_k=None,
):
    r""":math:`h_{alg}` (Theorem 3) of every row, chunk by chunk (shape batch + (V,)).

    .. math:: h_{alg}(j) = p_j a_j + \sum_n p_n (1 - a_n)\, r^{(n)}_j

    :func:`cactus_theory.analysis.one_step.emitted_distribution` on each chunk of rows (a
    plan, or rows that fit one chunk, in one call); the rows' distributions are joined in
    order: the returned array is N x V, the working memory one chunk's.

    Parameters
    ----------
    rule : str, Rule or plan
    target_probs, draft_probs : array_like or tensor, shape (..., V), or a row source
    method : {"fast", "dense"}
    chunk_rows, max_memory, progress, drafting, draft_top_k
        As in :func:`analyze`.

    Symbols: q verifier, p drafter. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3.
    """
    from ..rules import DecisionPlan, SpikePlan, TargetPlan, get_rule
    from .one_step import emitted_distribution as _emitted

    is_plan = isinstance(rule, (TargetPlan, SpikePlan, DecisionPlan))
    if runner is None and (
        is_plan
        or target_probs is None
        or not wants_chunks(target_probs, "emitted", chunk_rows=chunk_rows, max_memory=max_memory)
    ):
        return _emitted(
            rule,
            target_probs,
            draft_probs,
            raw_target_probs=raw_target_probs,
            raw_draft_probs=raw_draft_probs,
            method=method,
            drafting=drafting,
            draft_top_k=draft_top_k,
        )
    rule = get_rule(rule)
    source = as_rows(target_probs, draft_probs, raw_target_probs, raw_draft_probs)
    run = runner_for(source, "emitted", chunk_rows, max_memory, progress, runner)
    parts = run.map(_emitted_kernel, rule, method, drafting, draft_top_k)
    if not parts:
        raise ValueError("target_probs: no rows")
    out = join_rows(parts)
    batch = source.batch_shape if isinstance(source, ArrayRows) else (run.n_rows,)
    return out.reshape(tuple(batch) + (out.shape[-1],))


# --------------------------------------------------------------------------- rule table


def _rules_kernel(chunk, names, per_rule):
    """Per rule, the per-row columns of :func:`cactus_theory.api.analyze_rules` (n,) each."""
    from .._validation import as_prob_pair
    from ..divergences import get_divergence
    from ..rules import get_rule
    from .frontier import gap_to_frontier
    from .one_step import emitted_distribution as _emitted
    from .one_step import make_plan, per_draft_divergence

    # validated as the in-memory call validates them: once for the per-draft columns, again
    # for the table's (each renormalization may move the last bit)
    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    q2, p2 = as_prob_pair(q, p)
    drafted = p > 0
    out = {}
    for name in names:
        rule = get_rule(name, **per_rule[name])
        plan = make_plan(rule, q2, p2)
        h = _emitted(plan)
        acc = np.sum(plan.draft_probs * np.clip(plan.accept_probs(), 0, 1), axis=-1)
        cols = {"acceptance": acc}
        for d in ("kl", "reverse_kl", "tv"):
            cols[d] = get_divergence(d).unchecked(h, plan.target_probs)
        for d in ("kl", "tv"):
            _, cols[f"gap_{d}"] = gap_to_frontier(plan.target_probs, plan.draft_probs, acc, cols[d], d)
        plan = make_plan(rule, q, p)
        try:
            per = per_draft_divergence(plan, divergence="kl")
        except ValueError:  # a decision rule has no per-draft target
            cols["per_sum"] = cols["per_max"] = None
        else:
            w = np.where(drafted, per, 0.0)
            cols["per_sum"] = np.sum(np.where(drafted, p * w, 0.0), axis=-1)
            cols["per_max"] = np.max(w, axis=-1)
        out[name] = cols
    return out


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
):
    r"""Rules side by side, chunk by chunk: :func:`cactus_theory.api.analyze_rules` on a
    row source (means over all rows of the per-row values; maxima over all rows).

    Returns
    -------
    RuleTable

    Symbols: q verifier, p drafter, n drafted token, delta per-draft budget. Source: Hao &
    Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3.
    """
    from ..results import RuleTable
    from ..rules import get_rule
    from ..rules.registry import rule_knobs

    names, per_rule = rule_knobs(rules, delta, knobs)
    source = as_rows(target_probs, draft_probs)
    run = runner_for(source, "rules", chunk_rows, max_memory, progress, runner)
    parts = run.map(_rules_kernel, names, per_rule)
    if not parts:
        raise ValueError("target_probs: no rows")
    table = []
    for name in names:
        col = {k: ([r[name][k] for r in parts]) for k in parts[0][name]}
        row = {"rule": name, "knobs": dict(get_rule(name, **per_rule[name]).knobs)}
        m = {k: float(np.mean(np.concatenate(v))) for k, v in col.items() if k not in ("per_sum", "per_max")}
        if col["per_sum"][0] is None:
            per_mean = per_max = None
        else:
            per_mean = float(np.mean(np.concatenate(col["per_sum"])))
            per_max = float(np.max(np.concatenate(col["per_max"])))
        table.append(
            {
                "rule": name,
                "knobs": row["knobs"],
                "acceptance": m["acceptance"],
                "per_draft_kl_mean": per_mean,
                "per_draft_kl_max": per_max,
                "emitted_kl": m["kl"],
                "emitted_reverse_kl": m["reverse_kl"],
                "emitted_tv": m["tv"],
                "gap_kl": m["gap_kl"],
                "gap_tv": m["gap_tv"],
            }
        )
    return RuleTable(table=tuple(table), delta=delta, n_positions=int(run.n_rows))


# --------------------------------------------------------------------------- frontier


def _saturation_kernel(chunk, divergence):
    from .._validation import as_prob_pair
    from ..solvers.frontier import saturation_budget

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    return np.asarray(saturation_budget(q, p, divergence)).reshape(-1)


def _frontier_kernel(chunk, grid, divergence):
    from .._validation import as_prob_pair
    from ..solvers.frontier import frontier

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    res = frontier(q, p, grid, divergence)
    acc = np.asarray(res.acceptance, dtype=np.float64).reshape(-1, grid.size)
    div = np.asarray(res.divergence, dtype=np.float64).reshape(-1, grid.size)
    return acc, div, np.sum(np.minimum(q, p), axis=-1)


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
):
    r""":math:`F(\epsilon)` (Theorem 1) averaged over the rows of a source, chunk by chunk.

    :func:`cactus_theory.api.optimal_frontier` on a row source: with ``eps`` None a first
    pass finds the largest saturation budget (the grid's top), a second computes the frontier
    of every row on the grid; means over all rows of the per-row values.

    Returns
    -------
    FrontierResult

    Symbols: q verifier, p drafter, eps target on the emitted divergence. Source: Hao & Mou,
    ICLR 2026 (arXiv 2604.04987), Theorem 1.
    """
    from .._validation import as_budget_array
    from ..divergences import get_divergence
    from ..results import FrontierResult

    d = get_divergence(divergence)
    if eps is not None:
        grid = np.atleast_1d(as_budget_array(eps, "eps")).astype(np.float64)
        if grid.ndim != 1 or grid.size == 0:
            raise ValueError(f"eps: expected a scalar or a non-empty 1-D array, got shape {grid.shape}")
    source = as_rows(target_probs, draft_probs)
    run = runner_for(source, "frontier", chunk_rows, max_memory, progress, runner)
    sats = run.map(_saturation_kernel, d.name)
    if not sats:
        raise ValueError("target_probs: no rows")
    sat = float(np.max(np.concatenate(sats)))
    if eps is None:
        grid = sat * np.linspace(0.0, 1.0, FRONTIER_POINTS) ** 2
    parts = run.map(_frontier_kernel, grid, d.name)
    flat = np.concatenate([a for a, _, _ in parts])
    div = np.concatenate([v for _, v, _ in parts])
    sps = float(np.mean(np.concatenate([s for _, _, s in parts])))
    batch = source.batch_shape if isinstance(source, ArrayRows) else (run.n_rows,)
    per = flat.reshape(tuple(batch) + (grid.size,))
    if per.ndim == 1 + 1 and len(batch) == 0:
        per = per.reshape(grid.size)
    return FrontierResult(
        divergence=d.name,
        eps=grid,
        acceptance=flat.mean(axis=0),
        emitted_divergence=div.mean(axis=0),
        sps_acceptance=sps,
        saturation_eps=sat,
        n_positions=flat.shape[0],
        per_position_acceptance=per,
    )


# --------------------------------------------------------------------------- calibration


def _calibrate_kernel(chunk, eps, base, divergence):
    from .._validation import as_prob_pair
    from .calibration import calibrate_delta as _calibrate

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    res = _calibrate(q, p, eps, base=base, divergence=divergence)
    return (
        np.reshape(res.delta, -1),
        np.reshape(res.divergence, -1),
        np.reshape(res.acceptance, -1),
        np.reshape(res.saturated, -1),
    )


def calibrate_delta(
    target_probs,
    draft_probs=None,
    eps=0.0,
    *,
    rule="cactus-taylor",
    divergence="kl",
    chunk_rows=None,
    max_memory=None,
    progress=False,
    runner=None,
):
    r"""Per position, the delta whose emitted divergence meets eps, chunk by chunk.

    .. math:: \delta^*(q, p) = \sup\{\delta : D(h_{alg}(\delta')\|q) \le \epsilon
              \ \ \forall \delta' \le \delta\}

    :func:`cactus_theory.api.calibrate_delta` on a row source (each row's calibration is its
    own: the refinement stops lane by lane).

    Returns
    -------
    CalibrationResult
        Arrays of shape (N,) (the batch shape of array input).

    Symbols: q verifier, p drafter, delta per-draft budget, eps target on the emitted
    divergence. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5.
    """
    from .._validation import as_budget, choice
    from ..divergences import get_divergence
    from ..results import CalibrationResult
    from .calibration import BASES

    rule = choice(rule, tuple(f"cactus-{b}" for b in BASES), "rule")
    eps = as_budget(eps, "eps")
    d = get_divergence(divergence)
    source = as_rows(target_probs, draft_probs)
    run = runner_for(source, "calibrate", chunk_rows, max_memory, progress, runner)
    parts = run.map(_calibrate_kernel, eps, rule.split("-")[1], d.name)
    if not parts:
        raise ValueError("target_probs: no rows")
    batch = source.batch_shape if isinstance(source, ArrayRows) else (run.n_rows,)
    delta, div, acc, sat = (np.concatenate([r[i] for r in parts]).reshape(batch) for i in range(4))
    if len(batch) == 0:
        return CalibrationResult(
            rule=rule,
            divergence=d.name,
            eps=eps,
            delta=float(delta),
            emitted_divergence=float(div),
            acceptance=float(acc),
            saturated=bool(sat),
            n_positions=1,
        )
    return CalibrationResult(
        rule=rule,
        divergence=d.name,
        eps=eps,
        delta=delta,
        emitted_divergence=div,
        acceptance=acc,
        saturated=sat,
        n_positions=int(run.n_rows),
    )


def _saturation_delta_kernel(chunk, base, divergence):
    from .._validation import as_prob_pair
    from .calibration import saturation_delta

    q, _ = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    return np.asarray(saturation_delta(q, base, divergence)).reshape(-1)


def _grid_kernel(chunk, grid, base, divergence, measure):
    from .._validation import as_prob_pair
    from ..divergences import get_divergence
    from .calibration import _curve

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    q2, p2 = q.reshape(-1, q.shape[-1]), p.reshape(-1, p.shape[-1])
    D, _ = _curve(q2, p2, grid, base, divergence, get_divergence(measure))
    return D


def _rows_kernel(chunk, delta, base, divergence, measure):
    from .._validation import as_prob_pair
    from ..divergences import get_divergence
    from .calibration import _curve_rows

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    q2, p2 = q.reshape(-1, q.shape[-1]), p.reshape(-1, p.shape[-1])
    D, a, _ = _curve_rows(
        q2, p2, np.full(q2.shape[0], float(delta)), base, divergence, get_divergence(measure)
    )
    return D, a


def global_delta(
    target_probs,
    draft_probs=None,
    eps=0.0,
    *,
    statistic="mean",
    base="taylor",
    divergence="kl",
    measure=None,
    chunk_rows=None,
    max_memory=None,
    progress=False,
    runner=None,
):
    r"""One delta for a corpus read chunk by chunk: the first crossing of ``statistic`` (the
    mean, or a quantile) over all positions of :math:`\Gamma(\delta) = D(h_{alg}(\delta)\|q)`
    with eps, exactly as :func:`cactus_theory.analysis.calibration.global_delta`.

    Passes over the rows: one for the saturation delta (the grid's top), one for the grid
    (:data:`~cactus_theory.analysis.calibration.GRID_POINTS` deltas per row), one per
    refinement step (at most :data:`~cactus_theory.analysis.calibration.REFINE_STEPS`, plus
    two for the bracket's ends), one for the result. Each statistic is taken over all N
    per-row values (exact, ``numpy.quantile(..., method="higher")``).

    Returns
    -------
    GlobalDelta

    Symbols: q verifier, p drafter, delta per-draft budget, eps target on the emitted
    divergence. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5.
    """
    from .._validation import as_budget
    from ..divergences import get_divergence
    from .calibration import GlobalDelta, _as_statistic, _check, _grids, _illinois, _stat

    d = _check(base, divergence)
    m = get_divergence(measure) if measure is not None else d
    eps = as_budget(eps, "eps")
    statistic = _as_statistic(statistic)
    source = as_rows(target_probs, draft_probs)
    run = runner_for(source, "calibrate", chunk_rows, max_memory, progress, runner)
    sats = run.map(_saturation_delta_kernel, base, d.name)
    if not sats:
        raise ValueError("target_probs: no rows")
    sat = float(np.max(np.concatenate(sats)))

    def at(delta):
        parts = run.map(_rows_kernel, delta, base, d.name, m.name)
        return np.concatenate([D for D, _ in parts]), np.concatenate([a for _, a in parts])

    if eps == 0:
        lo = 0.0
    else:
        grid = _grids(np.array([sat]))[0]
        D = np.concatenate(run.map(_grid_kernel, grid, base, d.name, m.name))
        vals = np.array([_stat(D[:, j], statistic) for j in range(grid.size)])
        over = np.flatnonzero(vals > eps)
        if over.size == 0:
            lo = hi = grid[-1]
        else:
            k = over[0]
            lo, hi = (grid[k - 1] if k > 0 else 0.0), grid[k]
        if hi > lo:

            def excess(x):
                return np.array([_stat(at(float(x[0]))[0], statistic) - eps])

            lo_a, _ = _illinois(excess, np.array([lo]), np.array([hi]))
            lo = float(lo_a[0])
    D, a = at(lo)
    return GlobalDelta(float(lo), statistic, _stat(D, statistic), D, a)

r"""Rules side by side, the optimal frontier and the per-position delta over many rows.

The implementations behind :func:`cactus_theory.api.analyze_rules`,
:func:`cactus_theory.api.optimal_frontier` and :func:`cactus_theory.api.calibrate_delta` (per
position). Each runs a per-row kernel on consecutive chunks of rows (in memory, a file, a
folder of shards, or Dask arrays; :mod:`cactus_theory.analysis._runners` chooses the runner)
and takes the corpus statistics (means, maxima) over all the joined per-row values, so the
numbers do not depend on the chunking nor on where the chunks run (tested bit for bit). A
corpus maximum that sets a grid (the frontier's saturation budget when ``eps`` is None) takes
a first pass over the rows.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, N rows,
delta the per-draft budget, eps a target on the emitted divergence.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorems 1-3, Corollary 5.
"""

from __future__ import annotations

import numpy as np

from .._validation import as_budget, as_budget_array, as_prob_pair, choice
from ..divergences import get_divergence
from ..results import CalibrationResult, FrontierResult, RuleTable
from ..rules import get_rule
from ..rules.registry import _rule_knobs
from ..solvers import frontier, saturation_budget
from ._knob import corpus_delta
from ._runners import ArrayRows, Execution, as_rows, runner_for
from .calibration import _BASES, _calibrate_rows
from .frontier import gap_to_frontier
from .one_step import emitted_distribution, make_plan, per_draft_divergence

#: Frontier grid when ``eps`` is None: points from 0 to the saturation budget.
FRONTIER_POINTS = 65


def _runner(target_probs, draft_probs, kind, execution: Execution):
    """(source, runner) of the input: arrays, Dask arrays or a row source."""
    source = as_rows(target_probs, draft_probs)
    return source, runner_for(source, kind, execution)


def _batch(source, run):
    return source.batch_shape if isinstance(source, ArrayRows) else (run.n_rows,)


def _rules_kernel(chunk, names, per_rule):
    """Per rule, the per-row columns of :func:`cactus_theory.api.analyze_rules` (n,) each."""

    # validated as the in-memory call validates them: once for the per-draft columns, again
    # for the table's (each renormalization may move the last bit)
    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    q2, p2 = as_prob_pair(q, p)
    drafted = p > 0
    out = {}
    for name in names:
        rule = get_rule(name, **per_rule[name])
        plan = make_plan(rule, q2, p2)
        h = emitted_distribution(plan)
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


def rule_table_over(target_probs, draft_probs, rules, delta, knobs, *, execution: Execution):
    r"""Rules side by side (:func:`cactus_theory.api.analyze_rules`): means over all rows of
    the per-row values, maxima over all rows.

    Returns
    -------
    RuleTable

    Symbols: q verifier, p drafter, n drafted token, delta per-draft budget. Source: Hao &
    Mou, ICLR 2026 (arXiv 2604.04987), Theorems 1 and 3.
    """

    names, per_rule = _rule_knobs(rules, delta, knobs)
    source, run = _runner(target_probs, draft_probs, "rules", execution)
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

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    return np.asarray(saturation_budget(q, p, divergence)).reshape(-1)


def _frontier_kernel(chunk, grid, divergence):

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    res = frontier(q, p, grid, divergence)
    acc = np.asarray(res.acceptance, dtype=np.float64).reshape(-1, grid.size)
    div = np.asarray(res.divergence, dtype=np.float64).reshape(-1, grid.size)
    return acc, div, np.sum(np.minimum(q, p), axis=-1)


def frontier_over(target_probs, draft_probs, eps, divergence, *, execution: Execution):
    r""":math:`F(\epsilon)` (Theorem 1) averaged over the rows (:func:`cactus_theory.api.optimal_frontier`).

    With ``eps`` None a first pass finds the largest saturation budget (the grid's top), a
    second computes the frontier of every row on the grid; means over all rows of the per-row
    values.

    Returns
    -------
    FrontierResult

    Symbols: q verifier, p drafter, eps target on the emitted divergence. Source: Hao & Mou,
    ICLR 2026 (arXiv 2604.04987), Theorem 1.
    """

    d = get_divergence(divergence)
    if eps is not None:
        grid = np.atleast_1d(as_budget_array(eps, "eps")).astype(np.float64)
        if grid.ndim != 1 or grid.size == 0:
            raise ValueError(f"eps: expected a scalar or a non-empty 1-D array, got shape {grid.shape}")
    source, run = _runner(target_probs, draft_probs, "frontier", execution)
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
    batch = _batch(source, run)
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

    q, p = as_prob_pair(chunk.target_probs, chunk.draft_probs)
    res = _calibrate_rows(q, p, eps, base=base, divergence=divergence)
    return (
        np.reshape(res.delta, -1),
        np.reshape(res.emitted_divergence, -1),
        np.reshape(res.acceptance, -1),
        np.reshape(res.saturated, -1),
    )


def calibrate_over(target_probs, draft_probs, eps, rule, divergence, per, *, execution: Execution):
    r"""The delta whose emitted divergence meets eps, per position or one for the corpus
    (:func:`cactus_theory.api.calibrate_delta`).

    .. math:: \delta^*(q, p) = \sup\{\delta : D(h_{alg}(\delta')\|q) \le \epsilon
              \ \ \forall \delta' \le \delta\}

    Per position, each row's calibration is its own (the refinement stops lane by lane), so
    the chunks' rows joined in order are those of one call over all rows. Per corpus
    (``per="corpus"``, rows in memory): :func:`cactus_theory.analysis._knob.corpus_delta`,
    one delta whose mean emitted divergence meets eps.

    Returns
    -------
    CalibrationResult
        Arrays of shape (N,) (the batch shape of array input).

    Symbols: q verifier, p drafter, delta per-draft budget, eps target on the emitted
    divergence. Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5.
    """

    rule = choice(rule, tuple(f"cactus-{b}" for b in _BASES), "rule")
    eps = as_budget(eps, "eps")
    d = get_divergence(divergence)
    if per == "corpus":
        q, p = as_prob_pair(target_probs, draft_probs)
        delta, div, acc, status = corpus_delta(q, p, eps, rule, d.name)
        sat, n = status == "range-end", int(np.prod(q.shape[:-1], dtype=np.int64))
    else:
        source, run = _runner(target_probs, draft_probs, "calibrate", execution)
        parts = run.map(_calibrate_kernel, eps, rule.split("-")[1], d.name)
        if not parts:
            raise ValueError("target_probs: no rows")
        batch = _batch(source, run)
        delta, div, acc, sat = (np.concatenate([r[i] for r in parts]).reshape(batch) for i in range(4))
        if len(batch) == 0:  # one position: plain numbers
            delta, div, acc, sat = float(delta), float(div), float(acc), bool(sat)
        n, status = int(run.n_rows), "calibrated"
    return CalibrationResult(
        rule=rule,
        divergence=d.name,
        eps=eps,
        delta=delta,
        emitted_divergence=div,
        acceptance=acc,
        saturated=sat,
        n_positions=n,
        per=per,
        status=status,
    )

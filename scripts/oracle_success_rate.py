"""Success rate of the cvxpy oracles over random instances, each checked against the exact solver.

Instances (seeded): half per-draft problems (``max_draft_probability_cvxpy``, Theorem 2),
half frontier problems (``max_acceptance_cvxpy``, Theorem 1), every divergence of
``CVX_DIVERGENCES`` in turn, V in [2, 12], budgets log-uniform in [1e-4, 10], and the hard
families in equal shares:

* ``dirichlet``: q, p ~ Dirichlet(alpha), alpha in {0.1, 0.5, 1};
* ``near_zero_q``: some q entries set to 10^-U(6, 14) (the drafted token among them half the time);
* ``one_hot_p``: p a point mass (frontier) / the drafted token's q near 0 or near 1 (per draft);
* ``truncated``: q and p zeroed outside random supports (the drafted token outside supp(q)
  sometimes).

An instance *succeeds* when the oracle returns a certified answer (feasible, duality gap
<= tol); it *fails* on ``SolverFailure``. Every certified answer is also compared with the
exact solver (``exact_spike`` / ``max_acceptance``): a *wrong* answer is one more than
``10 tol`` below it (an accepted non-optimal answer; the certificate should make this
impossible) or above it (the exact solver or the feasibility check wrong).

Usage::

    python scripts/oracle_success_rate.py [--n 10000] [--seed 0] [--json out.json] [--quiet]

Prints the success rate, the failures (with their attempt logs) and the wrong answers.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cactus_theory.solvers import (  # noqa: E402
    SolverFailure,
    exact_spike,
    max_acceptance,
    max_acceptance_cvxpy,
    max_draft_probability_cvxpy,
)
from cactus_theory.solvers._cvx import CVX_DIVERGENCES  # noqa: E402

FAMILIES = ("dirichlet", "near_zero_q", "one_hot_p", "truncated")
TOL = 1e-7


def instance(i: int, seed: int = 0) -> dict:
    """The i-th random instance (deterministic in ``(i, seed)``)."""
    rng = np.random.default_rng([seed, i])
    kind = "draft" if i % 2 == 0 else "frontier"
    name = CVX_DIVERGENCES[(i // 2) % len(CVX_DIVERGENCES)]
    family = FAMILIES[(i // (2 * len(CVX_DIVERGENCES))) % len(FAMILIES)]
    V = int(rng.integers(2, 13))
    alpha = float(rng.choice([0.1, 0.5, 1.0]))
    q = rng.dirichlet(np.full(V, alpha))
    p = rng.dirichlet(np.full(V, alpha))
    n = int(rng.integers(V))
    if family == "near_zero_q":
        k = int(rng.integers(1, V)) if V > 1 else 1
        idx = rng.choice(V, size=k, replace=False)
        if rng.random() < 0.5:
            idx = np.union1d(idx, [n])
        q[idx] = 10.0 ** -rng.uniform(6, 14, size=len(idx))
        if q.sum() - q[idx].sum() <= 0:
            q[(idx[0] + 1) % V] = 1.0
    elif family == "one_hot_p":
        p = np.zeros(V)
        p[int(rng.integers(V))] = 1.0
        if kind == "draft":
            q[n] = 1e-9 if rng.random() < 0.5 else 1.0 - 1e-9
            rest = np.delete(np.arange(V), n)
            if len(rest):
                q[rest] = (1.0 - q[n]) * rng.dirichlet(np.ones(len(rest)))
            else:
                q[n] = 1.0
    elif family == "truncated":
        for arr in (q, p):
            keep = rng.random(V) < 0.6
            keep[int(rng.integers(V))] = True
            arr[~keep] = 0.0
    q = q / q.sum()
    p = p / p.sum()
    budget = float(10.0 ** rng.uniform(-4, 1))
    return dict(index=i, kind=kind, divergence=name, family=family, q=q, p=p, n=n, budget=budget)


def run_instance(inst: dict, tol: float = TOL) -> dict:
    """Solve one instance with the oracle and the exact solver; return the verdict."""
    q, p, n, b, name = inst["q"], inst["p"], inst["n"], inst["budget"], inst["divergence"]
    out = dict(
        index=inst["index"], kind=inst["kind"], divergence=name, family=inst["family"], V=len(q), budget=b
    )
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            if inst["kind"] == "draft":
                res = max_draft_probability_cvxpy(q, n, b, name, tol=tol)
                value, exact = res.value, float(exact_spike(np.array(q[n]), b, name))
            else:
                res = max_acceptance_cvxpy(q, p, b, name, tol=tol)
                value, exact = res.acceptance, float(max_acceptance(q, p, b, name))
        except SolverFailure as exc:
            out.update(verdict="failure", error=str(exc)[:2000], seconds=time.perf_counter() - t0)
            return out
    out.update(
        value=value,
        exact=exact,
        solver=res.solver,
        attempts=[list(a) for a in res.attempts],
        seconds=time.perf_counter() - t0,
    )
    if value < exact - 10 * tol:
        out["verdict"] = "wrong: below the exact optimum"
    elif value > exact + 10 * tol:
        out["verdict"] = "wrong: above the exact optimum"
    else:
        out["verdict"] = "certified"
    return out


def summarize(results) -> dict:
    """Counts, success rate and the failing / wrong instances."""
    n = len(results)
    ok = sum(r["verdict"] == "certified" for r in results)
    fail = [r for r in results if r["verdict"] == "failure"]
    wrong = [r for r in results if r["verdict"].startswith("wrong")]
    by = {}
    for r in results:
        key = f"{r['kind']}/{r['family']}"
        c = by.setdefault(key, [0, 0])
        c[0] += 1
        c[1] += r["verdict"] != "failure"
    fallback = sum(1 for r in results if r.get("attempts") and len(r["attempts"]) > 1)
    return dict(
        instances=n,
        certified=ok,
        failures=len(fail),
        wrong=len(wrong),
        success_rate=(n - len(fail)) / n if n else math.nan,
        needed_fallback=fallback,
        by_family={k: f"{v[1]}/{v[0]}" for k, v in sorted(by.items())},
        failing=[dict(r, error=r.get("error", "")[:400]) for r in fail],
        wrong_answers=wrong,
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10_000, help="number of instances")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first instance index (to split a run)")
    ap.add_argument("--json", default="", help="write the summary (and every verdict) here")
    ap.add_argument("--quiet", action="store_true", help="no per-failure lines")
    args = ap.parse_args(argv)
    if args.n < 1:
        ap.error("--n: must be >= 1")
    if args.json and not Path(args.json).resolve().parent.is_dir():
        ap.error(f"--json: folder {Path(args.json).resolve().parent} does not exist")
    t0 = time.perf_counter()
    results = []
    for i in range(args.start, args.start + args.n):
        results.append(run_instance(instance(i, args.seed)))
        if args.json and len(results) % 250 == 0:  # partial summaries of a long run
            _write(args.json, dict(summarize(results), partial=True, results=results))
    summary = summarize(results)
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    print(
        f"{summary['instances']} instances: success rate {summary['success_rate']:.5f} "
        f"({summary['failures']} failures), {summary['wrong']} wrong certified answers, "
        f"{summary['needed_fallback']} needed a fallback solver, {summary['seconds']} s"
    )
    for k, v in summary["by_family"].items():
        print(f"  {k:24s} {v}")
    if not args.quiet:
        for r in summary["failing"]:
            print(
                f"FAILURE #{r['index']} {r['kind']} {r['divergence']} {r['family']} V={r['V']} "
                f"budget={r['budget']:.3g}: {r['error'][:300]}"
            )
        for r in summary["wrong_answers"]:
            print(
                f"WRONG #{r['index']} {r['kind']} {r['divergence']} {r['family']}: "
                f"{r['value']!r} vs exact {r['exact']!r} ({r['solver']})"
            )
    if args.json:
        _write(args.json, dict(summary, results=results))
    return 0


def _write(path, obj):
    """Atomic JSON write (temporary file, then rename)."""
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=float))
    os.replace(tmp, path)


if __name__ == "__main__":
    raise SystemExit(main())

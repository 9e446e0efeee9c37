"""Agreement of the k-draft solvers with their oracles over random instances (rate, worst gap).

* the min-cut value by the o/p prefixes (``min_cut_acceptance``) against every subset
  (V in [1, 8], k in [1, 8]) and against the coupling linear programme over draft tuples
  (``coupling_acceptance_lp``, V in [2, 5], k in [1, 3]);
* the budgeted optimum (``multidraft_frontier``) against the certified cvxpy programme with one
  cut per subset (``multidraft_frontier_cvxpy``), every divergence, q > 0, V in [3, 6], k in
  [2, 5], budgets in {0.005, 0.02, 0.1, 0.3}; and the fast solver's own float64 dual
  certificate (``certify_multidraft``) where it is not saturated.

Agreement: |gap| <= 1e-12 (subsets), <= 1e-7 (LP: HiGHS's feasibility tolerance), <= 1e-6
(cvxpy: the oracle's certified tolerance).

Usage::

    python scripts/multidraft_oracle_study.py [--n-sets 1000] [--n-lp 200] [--n-cvx 20] [--seed 123] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np

from cactus_theory.divergences import DIVERGENCES
from cactus_theory.solvers import (
    all_subsets,
    min_cut_acceptance,
    multidraft_frontier,
    multidraft_frontier_cvxpy,
)
from cactus_theory.solvers._multidraft_cvx import certify_multidraft, coupling_acceptance_lp


def _summary(gaps, tol):
    g = np.abs(np.asarray(gaps, dtype=np.float64))
    return {
        "n": int(g.size),
        "rate": float(np.mean(g <= tol)) if g.size else None,
        "worst": float(g.max()) if g.size else None,
    }


def run(n_sets=1000, n_lp=200, n_cvx=20, seed=123) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    subsets = {}
    gaps = []
    for _ in range(n_sets):
        V, k = int(rng.integers(1, 9)), int(rng.integers(1, 9))
        o, p = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
        S = subsets.setdefault(V, all_subsets(V).astype(np.float64))
        gaps.append(((1 - S @ o) + 1 - (1 - S @ p) ** k).min() - float(min_cut_acceptance(o, p, k)))
    out["subsets"] = _summary(gaps, 1e-12)
    gaps = []
    for _ in range(n_lp):
        V, k = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        o, p = rng.dirichlet(np.full(V, 0.5)), rng.dirichlet(np.full(V, 0.5))
        gaps.append(coupling_acceptance_lp(o, p, k) - float(min_cut_acceptance(o, p, k)))
    out["coupling_lp"] = _summary(gaps, 1e-7)
    for div in DIVERGENCES:
        gaps, certs, fails = [], [], 0
        for _ in range(n_cvx):
            V, k = int(rng.integers(3, 7)), int(rng.integers(2, 6))
            q, p = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
            eps = float(rng.choice([0.005, 0.02, 0.1, 0.3]))
            r = multidraft_frontier(q, p, k, [eps], div, return_target=True)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    gaps.append(
                        multidraft_frontier_cvxpy(q, p, k, eps, div).acceptance - float(r.acceptance[0])
                    )
            except Exception:  # noqa: BLE001 - an oracle failure is counted, not fatal
                fails += 1
            if r.acceptance[0] < 1 - 1e-9:
                certs.append(certify_multidraft(q, p, k, eps, div, r.target[0])[0])
        out[f"cvxpy/{div}"] = {
            **_summary(gaps, 1e-6),
            "oracle_failures": fails,
            "certificate": _summary(certs, 1e-7),
        }
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-sets", type=int, default=1000)
    ap.add_argument("--n-lp", type=int, default=200)
    ap.add_argument("--n-cvx", type=int, default=20)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    res = run(args.n_sets, args.n_lp, args.n_cvx, args.seed)
    for key, val in res.items():
        print(key, val)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

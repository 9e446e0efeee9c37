r"""The numpy rows: Theorem 2's root, the emitted distributions, the short-row blocks, and the
analysis on numpy and torch (``spike``, ``emitted`` and ``analysis`` sections)."""

from __future__ import annotations

import numpy as np

from cactus_theory.analysis.one_step import _analyze_block as analyze  # every row at once
from cactus_theory.analysis.one_step import emitted_distribution
from cactus_theory.rules import get_rule
from cactus_theory.solvers._spike import exact_spike

from ._goals import DELTA, VOCAB, correlated_pair, goal, median_time


def floor_emitted_taylor(q, p, delta):
    r"""Plain numpy :math:`h_{alg}` of Cactus-Taylor for one row: the benchmark's floor.

    Same formula as :mod:`cactus_theory.analysis.one_step` (module docstring), written
    directly: :math:`\gamma` (Corollary 5), :math:`c_n`, :math:`t_j = p_j/q_j`; sort t once,
    prefix sums of q and p, ``searchsorted`` of the :math:`c_n` for :math:`Z_n`, a weighted
    ``bincount`` and suffix sums for the mixture. No validation, no conventions beyond
    q > 0 (the benchmark's rows are strictly positive).
    """
    V = q.shape[-1]
    gamma = np.minimum(1.0, q + np.sqrt(2.0 * delta * q * (1.0 - q)))
    a = np.minimum(gamma, p) / p
    w = np.maximum(p - gamma, 0.0)
    c = (1.0 - gamma) / (1.0 - q)
    t = p / q
    order = np.argsort(t)
    ts, qs = t[order], q[order]
    Q = np.concatenate([[0.0], np.cumsum(qs)])
    P = np.concatenate([[0.0], np.cumsum(p[order])])
    k = np.searchsorted(ts, c)
    own_c, own_g = np.maximum(c * q - p, 0.0), np.maximum(gamma - p, 0.0)
    Z = np.maximum(c * Q[k] - P[k], 0.0) - own_c + own_g
    u = np.where(w > 0, w / np.where(Z > 0, Z, 1.0), 0.0)
    suc = np.cumsum(np.bincount(k, u * c, V + 1)[::-1])[::-1][1:]
    su = np.cumsum(np.bincount(k, u, V + 1)[::-1])[::-1][1:]
    mix = np.empty(V)
    mix[order] = qs * np.maximum(suc - ts * su, 0.0)
    return p * a + np.maximum(mix - u * own_c + u * own_g, 0.0)


def bench_spike(q, repeats):
    newton = exact_spike(q, DELTA)
    bisect = exact_spike(q, DELTA, method="bisect")
    from cactus_theory.divergences import get_divergence

    feas = bool(np.all(get_divergence("kl").two_point(newton, q) <= DELTA))
    # the computed KL two-point form is flat to ~eps/g'(gamma) around its root: 1e-9 relative
    # is far wider than that at delta = 0.1 and far narrower than any real disagreement
    rel = float(np.max(np.abs(newton - bisect) / np.maximum(bisect, 1e-300)))
    tn = median_time(lambda: exact_spike(q, DELTA), repeats)
    tb = median_time(lambda: exact_spike(q, DELTA, method="bisect"), max(1, repeats // 2))
    return goal(
        "spike: bisection / Newton",
        f"Newton {tn * 1e3:.1f} ms, bisection {tb * 1e3:.1f} ms (V = {q.size})",
        tb / tn,
        ">= 1",
        tb / tn >= 1,
        feas and rel <= 1e-9,
        f"feasible={feas}, max rel. diff {rel:.1e}",
    )


def bench_emitted(q, p, repeats):
    from cactus_theory.analysis._emitted import _emitted_spike_fast

    out = []
    exact, taylor = get_rule("cactus-exact-kl", delta=DELTA), get_rule("cactus-taylor", delta=DELTA)
    h_t = emitted_distribution(taylor, q, p)
    h_f = floor_emitted_taylor(q, p, DELTA)
    h_e = emitted_distribution(exact, q, p)
    V = q.shape[-1]
    ok_floor = float(np.max(np.abs(h_t - h_f)))
    # the project's dense O(V^2) oracle is out of reach at this V (it is checked against the
    # fast path in tests/analysis/test_one_step.py); here the exact path is checked against the same
    # mixture built on the 64-step bisection's gamma (the slow reference of the root)
    h_ref = _emitted_spike_fast(q, p, exact_spike(q, DELTA, method="bisect"))
    ok_exact = float(np.max(np.abs(h_e - h_ref)))
    te = median_time(lambda: emitted_distribution(exact, q, p), repeats)
    tt = median_time(lambda: emitted_distribution(taylor, q, p), repeats)
    tf = median_time(lambda: floor_emitted_taylor(q, p, DELTA), repeats)
    # the two roots agree to 1e-9 relative (the spike goal's check); h_alg moves by at most
    # that times its largest entry per unit of gamma: 1e-9
    out.append(
        goal(
            "exact emitted per position [ms]",
            f"{te * 1e3:.1f} ms (V = {V}, incl. validation and plan)",
            te * 1e3,
            "< 50",
            te < 0.050,
            ok_exact <= 1e-9,
            f"max |h_alg - h_alg(bisection gamma)| = {ok_exact:.1e}",
        )
    )
    out.append(
        goal(
            "exact / Taylor emitted",
            f"exact {te * 1e3:.1f} ms, Taylor {tt * 1e3:.1f} ms",
            te / tt,
            "<= 2",
            te / tt <= 2,
            True,
            "same run",
        )
    )
    # floor vs project: same formula, different summation orders: V * eps of the row mass
    out.append(
        goal(
            "Taylor emitted / numpy floor",
            f"Taylor {tt * 1e3:.1f} ms, floor {tf * 1e3:.1f} ms",
            tt / tf,
            "<= 1.5",
            tt / tf <= 1.5,
            ok_floor <= V * 2.3e-16,
            f"max |h_project - h_floor| = {ok_floor:.1e}",
        )
    )
    return out


#: The short-row batch of the row-block goal: the real-data calibration's grid (2,111
#: positions x 24 deltas of V = 129 tokens); the quick run's batch.
SHORT_ROWS, SHORT_ROWS_QUICK, SHORT_VOCAB = 2111 * 24, 4096, 129


def bench_row_blocks(rows, repeats, quick, seed):
    """Theorem 3's batched mixture of short numpy rows: one call over the whole batch (the
    formula alone) against ``emitted_distribution``'s blocks of rows
    (:func:`cactus_theory._threads.in_row_blocks`); checked: the same floats."""
    from cactus_theory.analysis._emitted import _emitted_spike_fast
    from cactus_theory.analysis.one_step import make_plan

    q, p = correlated_pair(SHORT_VOCAB, (rows,), seed=seed + 2)
    plan = make_plan(get_rule("cactus-exact-kl", delta=DELTA), q, p)
    gamma = np.asarray(plan.spike, dtype=np.float64)
    args = (plan.target_probs, plan.draft_probs, gamma)
    with np.errstate(over="ignore"):  # emitted_distribution's own error state
        same = bool(np.array_equal(_emitted_spike_fast(*args), emitted_distribution(plan)))
        t_one = median_time(lambda: _emitted_spike_fast(*args), repeats)
        t_blocks = median_time(lambda: emitted_distribution(plan), repeats)
    target = ">= 1.5" + (" (full run)" if quick else "")
    return goal(
        "emitted short rows: one call / row blocks",
        f"one call {t_one * 1e3:.0f} ms, blocks {t_blocks * 1e3:.0f} ms "
        f"([{rows}, {SHORT_VOCAB}], cactus-exact-kl)",
        t_one / t_blocks,
        target,
        quick or t_one / t_blocks >= 1.5,
        same,
        f"same floats={same}",
    )


def bench_analysis(batch, repeats, devices):
    out = []
    q, p = correlated_pair(VOCAB, (batch,), seed=1)
    rule = get_rule("cactus-exact-kl", delta=DELTA)
    ref = analyze(rule, q, p)
    tn = median_time(lambda: analyze(rule, q, p), max(1, repeats // 2))
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return out
    for dev in devices:
        qt, pt = torch.tensor(q, device=dev), torch.tensor(p, device=dev)

        def run():
            r = analyze(rule, qt, pt)
            if dev != "cpu":
                torch.cuda.synchronize()
            return r

        got = run()
        err = float(np.max(np.abs(got.emitted.cpu().numpy() - ref.emitted)))
        dkl = float(np.max(np.abs(got.divergences["kl"].cpu().numpy() - ref.divergences["kl"])))
        tt = median_time(run, max(1, repeats // 2))
        # same float64 formulas, different kernels and summation orders: V * eps
        ok = err <= VOCAB * 2.3e-16 and dkl <= 1e-9
        out.append(
            goal(
                f"analysis rows/s torch-{dev} / numpy",
                f"numpy {batch / tn:.1f} rows/s, torch-{dev} {batch / tt:.1f} rows/s "
                f"(batch {batch}, V = {VOCAB})",
                tn / tt,
                "reported",
                True,
                ok,
                f"max |h_torch - h_numpy| = {err:.1e}, KL diff {dkl:.1e}",
            )
        )
    return out

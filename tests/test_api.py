"""The front door (``import cactus_theory as ct``): each call against the machinery it wraps and
an independent oracle, its result type (frozen, repr, to_dict through JSON, rows), the rule
identity (divergence as a knob, aliases, the calibrated rule, the declared fast path), the one
sampling transform and the one Trajectory type."""

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

import cactus_theory as ct
from cactus_theory.analysis.calibration import _calibrate_rows as calibrate_raw
from cactus_theory.analysis.comparison import taylor_vs_exact_pairs
from cactus_theory.analysis.one_step import acceptance_rate, analyze, emitted_distribution
from cactus_theory.analysis.rule_table import rule_table
from cactus_theory.distributions import _process_sorted_logits, _sampling_transform, _top_candidates, truncate
from cactus_theory.divergences import get_divergence
from cactus_theory.logits import _loader as loader
from cactus_theory.logits._runner import SamplingParams, processed_dense, processed_sparse
from cactus_theory.rules import RULES, Rule, get_rule, rule_names
from cactus_theory.samplers import RuleSampler
from cactus_theory.simulate._exact import brute_force_chain
from cactus_theory.solvers._cvx_frontier import max_acceptance_cvxpy
from cactus_theory.solvers._frontier import frontier, frontier_curve
from cactus_theory.solvers._spike import exact_spike, taylor_spike

# A non-degenerate pair (V = 8, neither uniform nor close to each other).
Q = np.array([0.32, 0.21, 0.15, 0.12, 0.09, 0.06, 0.03, 0.02])
P = np.array([0.10, 0.30, 0.05, 0.20, 0.15, 0.02, 0.08, 0.10])
QB = np.stack([Q, Q[::-1], np.roll(Q, 3)])
PB = np.stack([P, P, np.roll(P, 1)])
# Float64 sums of a few terms: rounding well below 1e-12.
EXACT = 1e-12
# The cvxpy oracles verify their answers to 1e-7 (interior-point accuracy); the optimum they
# report is within about that much of the true one.
CVX = 1e-6


def _refuse_constant(name):
    raise ValueError(f"not strict JSON: {name}")


def _json_round_trip(result):
    """to_dict is plain data; strict JSON round-trips it exactly. A non-finite float is the
    string "nan", "inf" or "-inf" (the package's one encoding), never a bare NaN or Infinity."""
    d = result.to_dict()
    text = json.dumps(d, allow_nan=False)
    assert json.loads(text, parse_constant=_refuse_constant) == d
    return d


def _check_repr(result):
    r = repr(result)
    assert r.startswith(type(result).__name__ + "(") and "\n" not in r and "array(" not in r
    assert len(r) < 400
    return r


# --------------------------------------------------------------------------------------------
# solve_spike
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [0, 1, 5])
@pytest.mark.parametrize("delta", [0.02, 0.3])
def test_solve_spike_exact_is_theorem_2(token, delta):
    s = ct.solve_spike(Q, P, token, delta)
    assert s.gamma == float(exact_spike(np.asarray(Q[token]), delta))
    kl = get_divergence("kl")
    # the budget binds: the two-point KL at gamma is delta (bisection to machine precision)
    assert s.budget_hit and s.within_budget
    assert abs(s.per_draft_divergence - delta) < 1e-12
    # Theorem 2's h: gamma at n, the rest proportional to q; its full KL is the two-point one
    expected = Q * (1 - s.gamma) / (1 - Q[token])
    expected[token] = s.gamma
    np.testing.assert_allclose(s.h, expected, rtol=0, atol=EXACT)
    assert abs(float(kl.unchecked(s.h, Q)) - s.per_draft_divergence) < EXACT
    assert s.acceptance == min(1.0, s.gamma / P[token])
    assert (s.method, s.divergence, s.token, s.target_prob, s.draft_prob) == (
        "exact",
        "kl",
        token,
        Q[token],
        P[token],
    )


@pytest.mark.parametrize("divergence", ["kl", "reverse_kl", "hellinger"])
def test_solve_spike_cvxpy_oracle_agrees_with_the_root(divergence):
    exact = ct.solve_spike(Q, P, 2, 0.1, divergence=divergence)
    oracle = ct.solve_spike(Q, P, 2, 0.1, divergence=divergence, method="cvxpy")
    assert abs(exact.gamma - oracle.gamma) < CVX
    np.testing.assert_allclose(oracle.h, exact.h, atol=1e-4)  # maximiser: sqrt of CVX accuracy
    assert oracle.within_budget and oracle.solver_info["status"].startswith("optimal")


def test_solve_spike_taylor_is_corollary_5_and_can_exceed_the_budget():
    s = ct.solve_spike(Q, P, 1, 0.1, method="taylor")
    assert s.gamma == float(taylor_spike(np.asarray(Q[1]), 0.1))
    assert s.gamma == pytest.approx(Q[1] + math.sqrt(2 * 0.1 * Q[1] * (1 - Q[1])), abs=EXACT)
    assert s.within_budget and s.gamma <= ct.solve_spike(Q, P, 1, 0.1).gamma
    # q_n = 1/(1 + 2 delta): the Taylor point is exactly 1 and its KL is log(1 + 2 delta) > delta
    delta = 0.1
    q = np.array([1 / 1.2, 0.1, 1 - 1 / 1.2 - 0.1])
    t = ct.solve_spike(q, q, 0, delta, method="taylor")
    assert t.gamma == pytest.approx(1.0, abs=EXACT)
    assert t.per_draft_divergence == pytest.approx(math.log(1 + 2 * delta), rel=1e-9)
    assert not t.within_budget
    assert "OVER BUDGET" in repr(t)


def test_solve_spike_bad_input_names_the_argument():
    for kwargs, name in [
        (dict(token=8), "token"),
        (dict(token=True), "token"),
        (dict(token=1.5), "token"),
        (dict(delta=-0.1), "delta"),
        (dict(method="newton"), "method"),
        (dict(divergence="l2"), "divergence"),
    ]:
        args = dict(token=1, delta=0.1) | kwargs
        with pytest.raises(ValueError, match=name):
            ct.solve_spike(Q, P, args.pop("token"), args.pop("delta"), **args)
    with pytest.raises(ValueError, match="target_probs"):
        ct.solve_spike(QB, PB, 0, 0.1)
    with pytest.raises(ValueError, match="divergence"):
        ct.solve_spike(Q, P, 0, 0.1, divergence="tv", method="taylor")


# --------------------------------------------------------------------------------------------
# compare_taylor_exact
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("qp", [(Q, P), (QB, PB)], ids=["one", "batch"])
def test_compare_taylor_exact_matches_the_family_comparison(qp):
    q, p = qp
    c = ct.compare_taylor_exact(q, p, 0.05)
    rows = taylor_vs_exact_pairs(q, p, [0.05]).rows
    assert c.rows() == rows
    assert c.acceptance_taylor == rows[1]["acceptance"] and c.acceptance_exact == rows[2]["acceptance"]
    # independent of the comparison module: the one-step analysis of each rule
    for rule, acc in [
        ("sps", c.acceptance_sps),
        ("cactus-taylor", c.acceptance_taylor),
        ("cactus-exact", c.acceptance_exact),
    ]:
        assert acc == pytest.approx(
            float(
                np.mean(acceptance_rate(get_rule(rule, **({} if rule == "sps" else {"delta": 0.05})), q, p))
            ),
            abs=EXACT,
        )
    em = analyze(get_rule("cactus-exact", delta=0.05), q, p).divergences["kl"]
    assert c.emitted_exact == pytest.approx(float(np.mean(em)), abs=EXACT)
    assert c.per_draft_max_exact <= 0.05
    assert c.taylor_overshoot == max(0.0, c.per_draft_max_taylor - 0.05)
    assert c.n_positions == (1 if q.ndim == 1 else 3)


def test_compare_taylor_exact_reports_the_overshoot():
    # q_0 = 1/(1 + 2 delta) drafted with positive probability: Taylor exceeds the budget there
    q = np.array([1 / 1.2, 0.1, 1 - 1 / 1.2 - 0.1])
    c = ct.compare_taylor_exact(q, [0.2, 0.5, 0.3], 0.1)
    assert c.taylor_overshoot == pytest.approx(math.log(1.2) - 0.1, rel=1e-9)
    assert c.per_draft_max_exact <= 0.1


# --------------------------------------------------------------------------------------------
# optimal_frontier
# --------------------------------------------------------------------------------------------


def test_optimal_frontier_matches_the_solver_and_the_cvxpy_oracle():
    eps = [0.0, 0.01, 0.05, 0.2]
    f = ct.optimal_frontier(Q, P, eps=eps)
    raw = frontier(Q, P, eps)
    np.testing.assert_array_equal(f.acceptance, raw.acceptance)
    assert f.acceptance[0] == pytest.approx(np.minimum(Q, P).sum(), abs=EXACT) == f.sps_acceptance
    assert np.all(np.diff(f.acceptance) >= 0)
    oracle = max_acceptance_cvxpy(Q, P, 0.05)
    assert abs(oracle.acceptance - f.acceptance[2]) < CVX
    assert [r["eps"] for r in f.rows()] == eps
    default = ct.optimal_frontier(Q, P)
    grid, acc = frontier_curve(Q, P)
    np.testing.assert_allclose(default.eps, grid, rtol=EXACT)
    np.testing.assert_allclose(default.acceptance, acc, atol=EXACT)
    assert default.acceptance[-1] == pytest.approx(1.0, abs=1e-9)  # saturated: p is within reach


def test_optimal_frontier_batch_is_the_mean_of_the_positions():
    f = ct.optimal_frontier(QB, PB, eps=0.05, divergence="tv")
    per = [frontier(QB[i], PB[i], [0.05], "tv").acceptance[0] for i in range(3)]
    assert f.acceptance[0] == pytest.approx(np.mean(per), abs=EXACT)
    assert f.per_position_acceptance.shape == (3, 1) and f.n_positions == 3
    with pytest.raises(ValueError, match="eps"):
        ct.optimal_frontier(Q, P, eps=-1.0)


# --------------------------------------------------------------------------------------------
# calibrate_delta
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule", ["cactus-taylor", "cactus-exact"])
def test_calibrate_delta_meets_eps_by_recomputation(rule):
    c = ct.calibrate_delta(Q, P, 0.05, rule=rule)
    raw = calibrate_raw(Q, P, 0.05, base=rule.split("-")[1])
    assert c.delta == float(raw.delta) and isinstance(c.delta, float)
    # independent: the one-step analysis of the rule at the calibrated delta
    a = analyze(get_rule(rule, delta=c.delta), Q, P)
    assert float(a.divergences["kl"]) == pytest.approx(c.emitted_divergence, abs=EXACT)
    assert c.emitted_divergence <= 0.05
    assert c.emitted_divergence == pytest.approx(0.05, rel=1e-6)  # a crossing, refined
    assert float(a.acceptance) == pytest.approx(c.acceptance, abs=EXACT)


def test_calibrate_delta_batch_rows_and_bad_rule():
    c = ct.calibrate_delta(QB, PB, 0.02)
    assert c.delta.shape == (3,) and len(c.rows()) == 3 and c.n_positions == 3
    assert [r["delta"] for r in c.rows()] == c.delta.tolist()
    with pytest.raises(ValueError, match="rule"):
        ct.calibrate_delta(Q, P, 0.05, rule="sps")
    with pytest.raises(ValueError, match="eps"):
        ct.calibrate_delta(Q, P, -0.05)


# --------------------------------------------------------------------------------------------
# analyze_rules
# --------------------------------------------------------------------------------------------


def test_analyze_rules_matches_the_rule_table_and_adds_per_draft_kl():
    names = ["sps", "cactus-taylor", "cactus-exact", "cactus-exact-tv", "tas", "mentored"]
    t = ct.analyze_rules(Q, P, names, delta=0.1, knobs={"mentored": {"D": 0.05}})
    base = rule_table(
        Q,
        P,
        rules=names,
        knobs={
            "cactus-taylor": {"delta": 0.1},
            "cactus-exact": {"delta": 0.1},
            "cactus-exact-tv": {"delta": 0.1},
            "mentored": {"D": 0.05},
        },
    )
    for row, b in zip(t.table, base):
        assert row["rule"] == b["rule"] and row["acceptance"] == b["acceptance"]
        assert (row["emitted_kl"], row["emitted_tv"], row["gap_kl"]) == (b["kl"], b["tv"], b["gap_kl"])
    # Cactus-exact's per-draft KL is delta for every draft whose gamma is below 1
    ex = t.row("cactus-exact")
    assert ex["per_draft_kl_max"] == pytest.approx(0.1, abs=1e-12)
    assert t.row("sps")["per_draft_kl_max"] == 0.0
    assert t.row("tas")["per_draft_kl_mean"] is None  # a decision rule: no per-draft target
    assert t.row("mentored")["knobs"] == {"D": 0.05, "divergence": "kl"}
    assert t.row("cactus-exact-tv")["knobs"]["divergence"] == "tv"
    assert [r["rule"] for r in t.rows()] == names
    assert all(isinstance(r["knobs"], str) for r in t.rows())
    with pytest.raises(ValueError, match="rules"):
        ct.analyze_rules(Q, P, ["nope"])


def test_analyze_rules_default_is_every_rule():
    t = ct.analyze_rules(Q, P)
    assert [r["rule"] for r in t.table] == rule_names()
    _json_round_trip(t)


# --------------------------------------------------------------------------------------------
# exact_chain, make_sampler
# --------------------------------------------------------------------------------------------


def test_exact_chain_matches_brute_force_enumeration():
    traj = ct.Trajectory(QB, PB)
    r = ct.exact_chain("cactus-exact", traj, 2, delta=0.1)
    bf = brute_force_chain(get_rule("cactus-exact", delta=0.1), traj, 2)
    t = bf.totals
    assert r.metrics["al_paper"] == pytest.approx(float(t.accepted[0] / t.rounds[0]), abs=EXACT)
    assert r.metrics["tokens_per_call"] == pytest.approx(float(t.tokens[0] / t.rounds[0]), abs=EXACT)
    assert r.length == 3 and r.m == 2 and len(r.hist) == 3 and sum(r.hist) == pytest.approx(1.0)
    assert ct.exact_chain("cactus-exact", (QB, PB), 2, delta=0.1).metrics == r.metrics
    with pytest.raises(ValueError, match="trajectory"):
        ct.exact_chain("sps", QB, 2)
    with pytest.raises(ValueError, match="m"):
        ct.exact_chain("sps", traj, 0)


def test_make_sampler_is_the_rule_sampler():
    s = ct.make_sampler("cactus-exact-kl", delta=0.5)
    assert isinstance(s, RuleSampler) and s.rule.knobs == {"delta": 0.5, "divergence": "kl"}
    q = torch.full((1, 3, 4), 0.25)
    out = s(q, torch.tensor([[3]]), torch.full((1, 2, 4), 0.25), torch.tensor([[1, 2]]))
    assert out.tolist() == [[1, 2, 3]]  # p = q: every draft accepted


# --------------------------------------------------------------------------------------------
# result types
# --------------------------------------------------------------------------------------------


def _all_results():
    return [
        ct.solve_spike(Q, P, 1, 0.1),
        ct.solve_spike(Q, P, 1, 0.1, method="taylor"),
        ct.compare_taylor_exact(Q, P, 0.1),
        ct.optimal_frontier(Q, P, eps=[0, 0.1]),
        ct.calibrate_delta(Q, P, 0.05),
        ct.calibrate_delta(QB, PB, 0.05),
        ct.analyze_rules(Q, P, ["sps", "cactus-taylor", "tas"]),
        ct.exact_chain("sps", (QB, PB), 2),
    ]


def test_results_are_frozen_readable_and_json_ready():
    for res in _all_results():
        assert dataclasses.is_dataclass(res)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(res, dataclasses.fields(res)[0].name, None)
        _check_repr(res)
        d = _json_round_trip(res)
        assert "chain" not in d
        if hasattr(res, "rows"):
            rows = res.rows()
            assert rows and all(isinstance(r, dict) for r in rows)
            assert all(set(r) == set(rows[0]) for r in rows)  # one table: the same columns
            assert json.loads(json.dumps(rows)) == rows
    json.dumps(ct.solve_spike(Q, P, 1, 0.1).to_dict(), allow_nan=False)  # all finite: strict JSON
    gamma = float(exact_spike(np.asarray(Q[1]), 0.1))
    assert repr(ct.solve_spike(Q, P, 1, 0.1)) == (
        f"SpikeSolution(exact, kl, n=1, delta=0.1: q_n=0.21 -> gamma={gamma:.6g}, D(h||q)=0.1, "
        f"acceptance={min(1, gamma / P[1]):.4g}, budget binds)"
    )


# --------------------------------------------------------------------------------------------
# rule identity
# --------------------------------------------------------------------------------------------


def test_divergence_is_a_knob_and_old_names_are_aliases():
    assert "cactus-exact" in rule_names() and "mentored" in rule_names()
    assert not any(n.startswith(("cactus-exact-", "mentored-")) for n in rule_names())
    for alias, canonical, div in [
        ("cactus-exact-tv", "cactus-exact", "tv"),
        ("cactus-exact-reverse-kl", "cactus-exact", "reverse_kl"),
        ("mentored-js", "mentored", "js"),
    ]:
        assert alias in RULES and alias not in list(RULES) and alias in rule_names(aliases=True)
        a = get_rule(alias) if canonical == "mentored" else get_rule(alias, delta=0.2)
        b = get_rule(canonical, divergence=div, **({} if canonical == "mentored" else {"delta": 0.2}))
        assert a.name == b.name == canonical and a.knobs == b.knobs and repr(a) == repr(b)
        np.testing.assert_array_equal(emitted_distribution(a, Q, P), emitted_distribution(b, Q, P))
        assert RULES[alias].defaults["divergence"] == div
        with pytest.raises(ValueError, match="divergence"):
            get_rule(alias, divergence="chi2")
    get_rule("cactus-exact-tv", divergence="tv")  # the preset value itself is fine
    with pytest.raises(ValueError, match="rule"):
        get_rule("cactus-exact-l2")


def test_calibrated_rule_registered_by_importing_the_rules():
    # The rule calibrates delta with the emitted-distribution analysis, so it lives (and registers)
    # in cactus_theory.analysis._calibrated_rule, which the package imports: importing the rules alone
    # (which imports the package first) still registers it.
    code = (
        "import numpy as np; import cactus_theory.rules as r; "
        "assert 'cactus-calibrated' in r.RULES; "
        "assert type(r.get_rule('cactus-calibrated')).__module__ == 'cactus_theory.analysis._calibrated_rule'; "
        "rule = r.get_rule('cactus-calibrated', eps=0.05); "
        "pl = rule.plan(np.array([[0.5, 0.3, 0.2]]), np.array([[0.2, 0.6, 0.2]])); "
        "print(float(pl.spike[0, 1]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert 0.3 < float(out.stdout) < 1.0  # boosted above q_1 = 0.3


def test_fast_accept_is_declared_and_equals_the_plan():
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.ones(8), size=5)
    p = rng.dirichlet(np.ones(8), size=5)
    n = rng.integers(0, 8, size=5)
    for name in rule_names(aliases=True):
        rule = get_rule(name)
        overrides = type(rule).accept_probs_at is not Rule.accept_probs_at
        assert RULES[name].fast_accept == overrides, name
        fast = rule.accept_probs_at(q, p, n)
        slow = rule.plan(q, p).accept_probs_at(n)
        np.testing.assert_allclose(fast, slow, rtol=0, atol=EXACT, err_msg=name)
    assert RULES["cactus-taylor"].fast_accept and RULES["cactus-exact"].fast_accept


# --------------------------------------------------------------------------------------------
# one sampling transform, one Trajectory
# --------------------------------------------------------------------------------------------


def _reference_transform(z, temperature, top_k, top_p):
    """Independent per-row transform: python sort by (-logit, id), then the module's steps."""
    out = np.zeros_like(z)
    for r, row in enumerate(np.atleast_2d(z)):
        order = sorted(range(len(row)), key=lambda i: (-row[i], i))
        order = order[:top_k] if top_k else order
        s = np.array([row[i] for i in order]) / temperature
        w = np.exp(s - s.max())
        w /= w.sum()
        keep, before = [], 0.0
        for j, i in enumerate(order):
            if j == 0 or (before < top_p if top_p else True):
                keep.append((i, w[j]))
            before += w[j]
        tot = sum(v for _, v in keep)
        for i, v in keep:
            out[r, i] = v / tot
    return out


@pytest.mark.parametrize("t,k,p", [(0.6, 20, 0.95), (1.0, 3, None), (0.7, None, 0.5), (1.3, 2, 0.9)])
def test_one_transform_everywhere_with_ties_by_lower_id(t, k, p):
    rng = np.random.default_rng(1)
    z = np.round(rng.normal(size=(6, 40)), 1)  # rounding makes many ties
    z[0, :] = 0.0  # all tied
    ref = _reference_transform(z, t, k, p)
    dense = _sampling_transform(z, temperature=t, top_k=k, top_p=p)
    np.testing.assert_allclose(dense, ref, rtol=0, atol=EXACT)
    # torch (the decoding loop), sparse and dense
    sp = SamplingParams(temperature=t, top_p=1.0 if p is None else p, top_k=0 if k is None else k)
    zt = torch.tensor(z)
    np.testing.assert_allclose(processed_dense(zt, sp).numpy(), ref, rtol=0, atol=EXACT)
    ids, pr = processed_sparse(zt, sp, support_cap=40)
    np.testing.assert_allclose(np.take_along_axis(ref, ids.numpy(), -1), pr.numpy(), atol=EXACT)
    # the loader and truncate, on probabilities
    probs = np.exp(z) / np.exp(z).sum(-1, keepdims=True)
    np.testing.assert_allclose(loader.apply_transforms(probs, t, p, k), ref, atol=1e-12)
    np.testing.assert_allclose(truncate(probs, temperature=t, top_k=k, top_p=p), ref, atol=1e-12)


def test_torch_topk_ties_resolved_by_lower_id():
    z = torch.tensor([[0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5]])
    ids, vals = _top_candidates(z, 2)
    assert ids.tolist() == [[1, 2]]
    ids, vals = _top_candidates(z.numpy(), 2)
    assert ids.tolist() == [[1, 2]]
    assert _process_sorted_logits(np.array([[2.0, 1.0]]), temperature=0).tolist() == [[1.0, 0.0]]


def test_one_trajectory_type():
    assert loader.Trajectory is ct.Trajectory
    tr = ct.Trajectory(QB, PB, columns=np.tile(np.arange(8), (3, 1)), token_ids=[0, 1, 2], prompt_id="x")
    assert len(tr) == tr.length == 3 and tr.token_ids.dtype == np.int64
    np.testing.assert_allclose(tr.acceptance, np.minimum(QB, PB).sum(-1))
    with pytest.raises(ValueError, match="token_ids"):
        ct.Trajectory(QB, PB, token_ids=[0, 1])
    with pytest.raises(ValueError, match="columns"):
        ct.Trajectory(QB, PB, columns=np.zeros((3, 7)))
    with pytest.raises(ValueError, match="raw_target_probs"):
        ct.Trajectory(QB, PB, raw_target_probs=Q)


def test_transform_bad_input_names_the_argument():
    for kwargs, name in [
        (dict(temperature=0), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(top_k=1.5), "top_k"),
        (dict(top_k=True), "top_k"),
        (dict(top_p=0), "top_p"),
        (dict(top_p=1.5), "top_p"),
    ]:
        with pytest.raises(ValueError, match=name):
            truncate(Q, **kwargs)
    np.testing.assert_array_equal(truncate(Q, top_k=8), Q)  # k = V keeps the row as is


def test_a_dump_through_the_front_door_calibrate_then_analyze():
    """The README's pattern on a loaded dump: calibrate_delta gives one delta for the corpus
    (its mean emitted KL meets eps, recomputed here from the exact emitted law), and
    analyze_rules takes the dump and that delta; the table says which knob each rule used
    (Mentored keeps its own budget D). Tolerance: the knob search stops within KNOB_RTOL*eps
    below eps; 1e-12 is the recomputation's rounding."""
    from cactus_theory.analysis._knob import KNOB_RTOL
    from cactus_theory.analysis.one_step import emitted_distribution, make_plan
    from cactus_theory.divergences import get_divergence
    from cactus_theory.logits import load_dump, shipped_dumps

    dump = load_dump(shipped_dumps()[0])
    cal = ct.calibrate_delta(dump, eps=0.1)
    assert cal.per == "corpus" and np.ndim(cal.delta) == 0 and cal.status == "calibrated"
    q, p = dump.pairs()[:2]
    h = emitted_distribution(make_plan(ct.get_rule("cactus-taylor", delta=cal.delta), q, p))
    mean_kl = float(np.mean(get_divergence("kl").unchecked(h, q)))
    assert 0.1 * (1 - KNOB_RTOL) - 1e-12 <= mean_kl <= 0.1 + 1e-12
    assert cal.emitted_divergence == pytest.approx(mean_kl, rel=1e-12)
    table = ct.analyze_rules(dump, None, ["sps", "cactus-taylor", "mentored"], delta=cal.delta)
    rows = {r["rule"]: r for r in table.rows()}
    assert rows["cactus-taylor"]["emitted_kl"] == pytest.approx(mean_kl, rel=1e-12)
    assert rows["cactus-taylor"]["knobs"].startswith(f"delta={cal.delta!r}")
    assert "delta" not in rows["mentored"]["knobs"]
    per_position = ct.calibrate_delta(q[:5], p[:5], 0.1)  # arrays: per position by default
    assert per_position.per == "position" and np.shape(per_position.delta) == (5,)


def test_a_dump_then_a_rule_list_is_the_rules():
    """The README's call with a dump in place of (q, p): the list after the dump is the rules
    (not draft_probs), and the table equals the one of rules=; after a dump a number is eps.
    Anything else, or the rules given twice, is one line naming the keyword."""
    from cactus_theory.logits import load_dump, shipped_dumps
    from cactus_theory.rows import as_row_source

    path = shipped_dumps()[0]
    dump = load_dump(path)
    by_name = ct.analyze_rules(dump, rules=["sps", "cactus-taylor"], delta=0.3)
    assert ct.analyze_rules(dump, ["sps", "cactus-taylor"], delta=0.3).rows() == by_name.rows()
    assert [r["rule"] for r in ct.analyze_rules(dump, "sps").rows()] == ["sps"]
    from_path = ct.analyze_rules(str(path), ["sps", "cactus-taylor"], delta=0.3)
    assert [r["rule"] for r in from_path.rows()] == ["sps", "cactus-taylor"]
    from_source = ct.analyze_rules(as_row_source(path), ("sps",), delta=0.3)
    assert [r["rule"] for r in from_source.rows()] == ["sps"]
    assert ct.calibrate_delta(dump, 0.1).delta == ct.calibrate_delta(dump, eps=0.1).delta
    for call, keyword in [
        (lambda: ct.analyze_rules(dump, ["sps"], ["sps"]), "rules"),
        (lambda: ct.analyze_rules(dump, np.full(4, 0.25)), "rules"),
        (lambda: ct.calibrate_delta(dump, 0.1, 0.1), "eps"),
        (lambda: ct.optimal_frontier(dump, "kl"), "eps"),
    ]:
        with pytest.raises(ValueError, match=rf"^{keyword}: .*\({keyword}=\.\.\.\)") as err:
            call()
        assert "\n" not in str(err.value)


def test_a_per_position_delta_array_is_one_line_naming_delta():
    q = np.full((4, 3), 1 / 3)
    with pytest.raises(ValueError, match=r"^delta: expected one number") as err:
        ct.analyze_rules(q, q, ["sps"], delta=np.full(4, 0.1))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="^per:"):
        ct.calibrate_delta(q, q, 0.1, per="sentence")
    with pytest.raises(ValueError, match="^eps:"):
        ct.calibrate_delta(q, q)


def test_exact_chain_takes_the_drafting_policy():
    """ct.exact_chain(drafting=...): greedy drafting of q = (0, 1, 0), p = (0.51, 0.49, 0)
    always drafts token 0 (q = 0 there), so no draft is ever accepted, while sampling p
    accepts sum min(p, q) = 0.49 at the first draft; the front door's chain equals the
    simulator's under the same policy."""
    from cactus_theory.simulate._exact import exact_chain as simulate_chain

    q, p = np.array([0.0, 1.0, 0.0]), np.array([0.51, 0.49, 0.0])
    traj = ct.Trajectory(np.tile(q, (5, 1)), np.tile(p, (5, 1)))
    greedy = ct.exact_chain("sps", traj, 2, drafting="argmax")
    sampled = ct.exact_chain("sps", traj, 2)
    assert greedy.pos_marginal[0] == 0.0
    assert sampled.pos_marginal[0] == pytest.approx(0.49, abs=1e-12)  # float64 sums of 3 terms
    inner = simulate_chain("sps", traj, 2, drafting="top_k", draft_top_k=2)
    front = ct.exact_chain("sps", traj, 2, drafting="top_k", draft_top_k=2)
    np.testing.assert_array_equal(front.chain.totals.accepted, inner.totals.accepted)

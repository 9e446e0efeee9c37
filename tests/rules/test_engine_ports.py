"""Engines' verification code, ported from their sources, against the registered rules.

- vllm-ascend's entropy verification (``reject_sample.py``, ``ENTROPY_VERIFY``) is the
  registered ``entropy-verify``: coin by coin, and per row ``lossy-sd`` with 1 - alpha = c(q).
- hipfire's opt-in ``cactus_delta`` (``crates/engine/src/speculative.rs``, the temp > 0
  verify) is ``cactus-taylor`` with ``delta = cactus_delta``: acceptance and recovery per draft.
- Modular MAX's relaxed thinking acceptance (``_relaxed_thinking_verdict``) is ``relaxed-topk``
  with ``relaxed_topk = N``, ``relaxed_delta = delta``, ``relax_ratio = 0``.

Each port is written from the source's decision (cited per function), in numpy, independently
of the toolkit's rule code.
"""

from __future__ import annotations

import numpy as np
import pytest

from cactus_theory.analysis.one_step import emitted_distribution, make_plan
from cactus_theory.rules import get_rule

# plan quantities are a few float64 operations on the same inputs
ATOL = 1e-12


def _rows(rng, v=6, n=40, conc=0.6):
    return rng.dirichlet(np.full(v, conc), size=n), rng.dirichlet(np.full(v, conc), size=n)


# ---------------------------------------------------------------------------------------------
# vllm-ascend entropy verification
# ---------------------------------------------------------------------------------------------


def _ascend_accepts(q, p, n, u, posterior_threshold, posterior_alpha):
    """``rejection_random_sample_kernel`` with ``ENTROPY_VERIFY``: the coin scaled by
    min(exp(-H * alpha), t), H = sum(-q log(q + 1e-10)); accept iff p_n > 0 and q_n / p_n >= coin."""
    entropy = float(np.sum(-q * np.log(q + 1e-10)))
    threshold = min(np.exp(-entropy * posterior_alpha), posterior_threshold)
    return bool(p[n] > 0 and q[n] / p[n] >= threshold * u)


@pytest.mark.parametrize(("t", "alpha"), [(0.95, 0.4), (1.0, 0.0), (0.5, 2.0)])
def test_entropy_verify_is_the_ascend_kernel_coin_by_coin(t, alpha):
    rng = np.random.default_rng(0)
    q, p = _rows(rng)
    rule = get_rule("entropy-verify", posterior_threshold=t, posterior_alpha=alpha)
    plan = make_plan(rule, q, p)
    coins = rng.random((q.shape[0], 20))
    for i in range(q.shape[0]):
        for n in range(q.shape[1]):
            a = float(plan.accept_probs_at(np.array([n]))[i])
            for u in coins[i]:
                assert _ascend_accepts(q[i], p[i], n, u, t, alpha) == (u <= a), (i, n, u, a)
    # the recovery is the kernel's untouched residual normalize(max(0, q - p))
    residual = np.maximum(q - p, 0.0)
    np.testing.assert_allclose(
        plan.recovery_at(np.zeros(q.shape[0], dtype=int)),
        residual / residual.sum(-1, keepdims=True),
        atol=ATOL,
    )


def test_entropy_verify_is_lossy_sd_with_the_rows_factor():
    rng = np.random.default_rng(1)
    q, p = _rows(rng, n=10)
    rule = get_rule("entropy-verify")  # vllm-ascend's defaults 0.95 / 0.4
    h = emitted_distribution(rule, q, p)
    for i in range(q.shape[0]):
        c = min(np.exp(-0.4 * float(np.sum(-q[i] * np.log(q[i] + 1e-10)))), 0.95)
        lossy = emitted_distribution(get_rule("lossy-sd", alpha=1.0 - c), q[i], p[i])
        np.testing.assert_allclose(h[i], lossy, atol=ATOL)
    sps = emitted_distribution(get_rule("entropy-verify", posterior_threshold=1.0, posterior_alpha=0.0), q, p)
    np.testing.assert_allclose(sps, q, atol=ATOL)


# ---------------------------------------------------------------------------------------------
# hipfire cactus_delta
# ---------------------------------------------------------------------------------------------


def _hipfire_step(q, p, n, cactus_delta):
    """spec_step's temp > 0 verify: accept iff u * p_d <= gamma*, gamma* = min(q_n + sqrt(2 delta
    q_n (1 - q_n)), 1); on rejection the row becomes h (h_n = gamma*, h_i = (1 - gamma*) q_i /
    (1 - q_n); one-hot on n when q_n >= 1 - 1e-6) and the token is drawn from
    normalize(max(0, h - p)). Returns (acceptance probability, recovery law)."""
    q_n, p_d = q[n], max(p[n], np.finfo(np.float32).tiny)
    gamma = min(q_n + np.sqrt(max(2.0 * cactus_delta * q_n * (1.0 - q_n), 0.0)), 1.0)
    accept = min(1.0, gamma / p_d)  # P(u * p_d <= gamma), u ~ U[0, 1)
    if q_n >= 1.0 - 1e-6:
        h = np.eye(q.size)[n]
    else:
        h = q * (1.0 - gamma) / (1.0 - q_n)
        h[n] = gamma
    residual = np.maximum(h - p, 0.0)
    return accept, (residual / residual.sum() if residual.sum() > 0 else None)


@pytest.mark.parametrize("delta", [0.1, 1.0])
def test_hipfire_cactus_delta_is_cactus_taylor(delta):
    rng = np.random.default_rng(2)
    q, p = _rows(rng, n=20)
    plan = make_plan(get_rule("cactus-taylor", delta=delta), q, p)
    for n in range(q.shape[1]):
        tokens = np.full(q.shape[0], n)
        acc, rec = plan.accept_probs_at(tokens), plan.recovery_at(tokens)
        for i in range(q.shape[0]):
            a, r = _hipfire_step(q[i], p[i], n, delta)
            assert float(acc[i]) == pytest.approx(a, abs=ATOL)
            if r is not None and a < 1:
                np.testing.assert_allclose(rec[i], r, atol=ATOL)


def test_hipfire_point_mass_branch_is_cactus_taylors_gamma_one():
    """Where hipfire sets h to a point mass (q_n >= 1 - 1e-6), gamma_n = 1 already for
    delta >= 1e-6 (the docs' statement): the same acceptance and a point-mass target."""
    for q_n in (1 - 1e-6, 1 - 1e-7, 1 - 1e-9):
        q = np.array([q_n, (1 - q_n) / 2, (1 - q_n) / 2])
        p = np.array([0.5, 0.3, 0.2])
        plan = make_plan(get_rule("cactus-taylor", delta=1e-6), q, p)
        assert float(plan.spike_at(np.array(0))) == 1.0
        assert float(plan.accept_probs_at(np.array(0))) == pytest.approx(
            _hipfire_step(q, p, 0, 1e-6)[0], abs=ATOL
        )


# ---------------------------------------------------------------------------------------------
# Modular MAX relaxed thinking acceptance
# ---------------------------------------------------------------------------------------------


def _max_relaxed_verdict(raw_q, n, relaxed_topk, relaxed_delta):
    """``_relaxed_thinking_verdict``: top-N of the untempered softmax; accept iff n is among
    them with probability >= top1 - delta; recovery the top-1 token. Returns (accepted, token)."""
    top_idx = np.argsort(-raw_q, kind="stable")[:relaxed_topk]
    valid = raw_q[top_idx] >= raw_q[top_idx[0]] - relaxed_delta
    return bool(((top_idx == n) & valid).any()), int(top_idx[0])


@pytest.mark.parametrize(("k", "delta"), [(10, 0.6), (3, 0.05), (1, 0.0)])
def test_max_relaxed_thinking_is_relaxed_topk(k, delta):
    rng = np.random.default_rng(3)
    raw_q, p = _rows(rng, v=12, n=30, conc=0.3)
    rule = get_rule("relaxed-topk", relaxed_topk=k, relaxed_delta=delta, relax_ratio=0.0)
    plan = make_plan(rule, raw_q, p, raw_target_probs=raw_q, raw_draft_probs=p)
    for n in range(raw_q.shape[1]):
        tokens = np.full(raw_q.shape[0], n)
        acc, rec = plan.accept_probs_at(tokens), plan.recovery_at(tokens)
        for i in range(raw_q.shape[0]):
            accepted, recovered = _max_relaxed_verdict(raw_q[i], n, k, delta)
            assert float(acc[i]) == float(accepted)
            if not accepted:
                assert int(np.argmax(rec[i])) == recovered and rec[i][recovered] == 1.0

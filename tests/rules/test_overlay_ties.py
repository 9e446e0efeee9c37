"""The undefined and tied cases where an engine's code and the toolkit could differ, each decided.

Ports (written from the sources, cited per function): the arXiv 2607.08690 vLLM overlay's
``apply_scd_constraint`` and ``spec_cascade_tok3_top_mask_from_logits``, and vLLM's
``apply_top_k_only`` (``vllm/v1/sample/ops/topk_topp_sampler.py``, the PyTorch path its CPU
build runs). The decisions are stated in ``docs/engines.md`` ("Undefined and tied cases"),
whose numbers are checked here.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from cactus_theory.analysis.one_step import acceptance_rate, analyze, emitted_distribution
from cactus_theory.distributions import _sampling_transform
from cactus_theory.logits import load_dump, shipped_dumps
from cactus_theory.rules import get_rule
from cactus_theory.rules._cascades import cascade_target

ENGINES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "engines.md"
# the comparisons below are softmaxes and sums of a few float64 terms
ATOL = 1e-12


def _overlay_scd(z_e, z_a, gate, beta, T):
    """The overlay's ``apply_scd_constraint``: its input checks, then softmax(((1 + beta) z_E -
    beta z_A) / T) on the gate."""
    if not np.isfinite(z_a[gate]).all():
        raise ValueError("SCD amateur logits must be finite on the gate support.")
    s = np.where(gate, ((1 + beta) * z_e - beta * z_a) / T, -np.inf)
    w = np.exp(s - s.max())
    return w / w.sum()


def _overlay_tok3_mask(logits, alpha):
    """The overlay's ``spec_cascade_tok3_top_mask_from_logits`` (argmax at alpha = 0)."""
    finite = np.isfinite(logits)
    if alpha == 0.0:
        mask = np.zeros_like(finite)
        mask[np.argmax(np.where(finite, logits, -np.inf))] = True  # torch.argmax: the first maximum
        return mask & finite
    if alpha == 1.0:
        return finite
    return finite & (logits >= logits.max() + math.log1p(-alpha))


def _vllm_top_k_only(logits, k):
    """vLLM's ``apply_top_k_only``: mask every logit below the k-th largest value."""
    kth = np.sort(logits)[::-1][k - 1]
    return np.where(logits < kth, -np.inf, logits)


# ---------------------------------------------------------------------------------------------
# SCD where the drafter's raw probability is 0 on the gate
# ---------------------------------------------------------------------------------------------


def test_scd_zero_raw_draft_is_the_overlays_limit_and_accepts_nothing():
    beta, T = 0.5, 1.0
    z_e = np.log(np.array([0.5, 0.3, 0.2]))
    q = np.exp(z_e)
    rp = np.array([0.6, 0.4, 0.0])
    p = rp.copy()  # the processed drafter: zero where the raw one is
    gate = q > 0
    with np.errstate(divide="ignore"), pytest.raises(ValueError, match="amateur logits must be finite"):
        _overlay_scd(z_e, np.log(rp), gate, beta, T)  # the amateur logit -inf at token 2
    rule = get_rule("scd", scd_beta=beta, scd_temperature=T)
    limit = emitted_distribution(rule, q, p, raw_target_probs=q, raw_draft_probs=rp)
    np.testing.assert_allclose(limit, [0.0, 0.0, 1.0], atol=ATOL)
    assert float(acceptance_rate(rule, q, p, raw_target_probs=q, raw_draft_probs=rp)) == 0.0
    # the overlay at a finite amateur logit log(eps) tends to the limit: its mass off Z is
    # O(eps^beta) (here beta = 1/2), so 1e-24 leaves below 1e-11
    eps = 1e-24
    finite = _overlay_scd(z_e, np.log(np.array([0.6, 0.4 - eps, eps])), gate, beta, T)
    np.testing.assert_allclose(finite, limit, atol=1e-11)
    # two zero entries on the gate: pi proportional to q^(1 + beta) on them
    rp2 = np.array([1.0, 0.0, 0.0])
    h = emitted_distribution(rule, q, rp2, raw_target_probs=q, raw_draft_probs=rp2)
    w = q[1:] ** (1 + beta)
    np.testing.assert_allclose(h, np.r_[0.0, w / w.sum()], atol=ATOL)


def test_scd_limit_rows_of_the_shipped_recordings_match_the_docs():
    """The count the docs state; acceptance exactly 0 on those rows, positive elsewhere on average."""
    page = ENGINES_PAGE.read_text()
    stated = re.search(r"such rows at ([\d,]+) of its ([\d,]+) positions", page)
    assert stated, "docs/engines.md states the distilled recording's SCD limit rows"
    rule = get_rule("scd", scd_beta=0.5)
    for path in shipped_dumps():
        q, p, rq, rp = load_dump(path).pairs()
        limit_rows = ((rp <= 0) & (q > 0)).any(-1)
        # the top raw verifier entry is unique on every shipped row (the docs say so)
        top2 = np.sort(rq, axis=-1)[:, -2:]
        assert (top2[:, 1] > top2[:, 0]).all(), path.name
        if "distilled" not in path.name:
            assert not limit_rows.any(), path.name
            continue
        assert f"{int(limit_rows.sum()):,}" == stated.group(1)
        assert f"{q.shape[0]:,}" == stated.group(2)
        assert 0.2 < limit_rows.mean() < 0.3  # the module docstring's "about a quarter"
        res = analyze(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp)
        acc = np.asarray(res.acceptance)
        assert (acc[limit_rows] == 0.0).all()
        assert acc[~limit_rows].mean() > 0.1


# ---------------------------------------------------------------------------------------------
# Token-V3 at alpha = 0 with a tied top
# ---------------------------------------------------------------------------------------------


def test_token_v3_keeps_every_tie_at_alpha_zero_where_the_overlay_keeps_the_first():
    rq = np.array([0.35, 0.35, 0.2, 0.1])  # tied top raw verifier entries
    q = rq.copy()
    p = np.array([0.1, 0.5, 0.3, 0.1])
    z = np.log(rq)
    overlay = _overlay_tok3_mask(z, 0.0)
    assert overlay.tolist() == [True, False, False, False]
    pi = cascade_target("token-v3", 0.0, q, p, rq, p)
    A = rq >= rq.max()
    assert A.tolist() == [True, True, False, False]
    np.testing.assert_allclose(pi, np.where(A, p, 0) + (1 - p[A].sum()) * q, atol=ATOL)
    overlay_pi = np.where(overlay, p, 0) + (1 - p[overlay].sum()) * q
    assert np.abs(np.asarray(pi) - overlay_pi).max() > 0.1  # the tie decides a tenth of the mass
    # just above alpha = 0 the overlay's own threshold keeps both ties: the toolkit's set is that limit
    assert _overlay_tok3_mask(z, 1e-9).tolist() == A.tolist()
    # without a tie the two agree at every alpha
    rng = np.random.default_rng(0)
    for _ in range(30):
        rq = rng.dirichlet(np.ones(6))
        q, p = rq, rng.dirichlet(np.ones(6))
        for alpha in (0.0, 0.3, 0.9, 1.0):
            mask = _overlay_tok3_mask(np.log(rq), alpha)
            want = np.where(mask, p, 0) + (1 - p[mask].sum()) * q
            np.testing.assert_allclose(cascade_target("token-v3", alpha, q, p, rq, p), want, atol=ATOL)


# ---------------------------------------------------------------------------------------------
# top-k with logits tied at the k-th value
# ---------------------------------------------------------------------------------------------


def test_top_k_ties_vllm_cpu_keeps_every_tie_the_toolkit_exactly_k():
    z = np.array([1.0, 2.0, 2.0, 0.5, 2.0])
    vllm = np.isfinite(_vllm_top_k_only(z, 2))
    ours = _sampling_transform(z, top_k=2) > 0
    assert vllm.tolist() == [False, True, True, False, True]  # three tokens for k = 2
    assert ours.tolist() == [False, True, True, False, False]  # exactly two, the lower ids
    rng = np.random.default_rng(1)
    for _ in range(30):  # no tie at the k-th value: the same set
        z = rng.standard_normal(8)
        for k in (1, 3, 7):
            assert (np.isfinite(_vllm_top_k_only(z, k)) == (_sampling_transform(z, top_k=k) > 0)).all()

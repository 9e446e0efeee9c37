"""The sequence multiplier's step on torch rows (one sort per row) against the float64 analysis."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cactus_theory.logits import load_dump, shipped_dumps
from cactus_theory.solvers._sequence import multiplier_step
from cactus_theory.solvers._sequence_device import band_step_torch

torch = pytest.importorskip("torch")

#: lambda = 0 (the saturation point, c = inf), the band's interior, and inf (SpS)
LAMS = (0.0, 0.1, 0.3, 1.0, 3.0, math.inf)


def _float64(q, p, lam):
    """The analysis' step (numpy float64, 64 bisection steps: float64 resolution)."""
    return multiplier_step(q, p, lam)


@pytest.mark.parametrize("lam", LAMS)
def test_equal_to_the_float64_analysis_on_the_shipped_rows(lam):
    for path in shipped_dumps():
        q, p, _, _ = (x[:500] for x in load_dump(path).pairs())  # 500 rows each: the test stays cheap
        got = band_step_torch(torch.tensor(q, dtype=torch.float32), torch.tensor(p, dtype=torch.float32), lam)
        # float32 rows and prefix sums of at most 129 terms: measured <= 4.8e-7 here; 2e-6 is
        # ~16 float32 ulps of 1, far below any wrong segment (which moved entries by >= 1e-2)
        np.testing.assert_allclose(got.double().numpy(), _float64(q, p, lam), rtol=0, atol=2e-6)


def test_the_torch_path_of_multiplier_step_is_the_sorted_solve():
    q, p, _, _ = load_dump(shipped_dumps()[1]).pairs()
    tq, tp = (torch.tensor(x[:300], dtype=torch.float32) for x in (q, p))
    assert torch.equal(multiplier_step(tq, tp, 0.5), band_step_torch(tq, tp, 0.5))


def test_large_vocabulary_ties_zeros_and_per_row_lambda():
    """V = 4,096 rows with tied ratios, zeros of p on supp(q), mass of p off supp(q), and one
    lambda per row (a [rows] tensor), float32 and float64."""
    rng = np.random.default_rng(5)
    V, n = 4096, 6
    q = rng.dirichlet(np.full(V, 0.3), size=n)
    q[:, :40] = 0.0  # off supp(q)
    q /= q.sum(-1, keepdims=True)
    p = rng.dirichlet(np.full(V, 0.3), size=n)
    p[:, 100:300] = 0.0  # zeros of p on supp(q)
    p[:, 300:340] = q[:, 300:340] * 2.0  # tied ratios
    p /= p.sum(-1, keepdims=True)
    lam = np.array([0.0, 0.2, 0.7, 1.5, 4.0, math.inf])
    want = np.stack([_float64(q[i : i + 1], p[i : i + 1], lam[i])[0] for i in range(n)])
    for dtype, atol in ((torch.float32, 2e-6), (torch.float64, 1e-12)):
        # float32: prefix sums of 4,096 terms (~V eps / 8 on the largest entries); float64: the
        # analysis' own bisection resolution
        got = band_step_torch(torch.tensor(q, dtype=dtype), torch.tensor(p, dtype=dtype), torch.tensor(lam))
        assert got.dtype == dtype
        np.testing.assert_allclose(got.double().numpy(), want, rtol=0, atol=atol)

"""``cactus-calibrated`` on the device: :func:`cactus_theory.analysis._calibrated_rule.calibrate_delta_device`
runs the first-crossing calibration in torch where the rows live (fixed counts, no host read),
here on CPU tensors with the device path forced (``solvers._spike._host_tensor`` False, the
switch the exact root uses). It gives numpy's calibrated delta to the rounding of the two
libraries' sorts and sums, and the plan built from it the numpy plan's acceptance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from cactus_theory.analysis import _calibrated_rule, _emitted
from cactus_theory.analysis import calibration as cal
from cactus_theory.rules import get_rule
from cactus_theory.solvers import _spike as spike
from cactus_theory.testing.sync import assert_no_host_sync


@pytest.fixture
def device_path(monkeypatch):
    monkeypatch.setattr(spike, "_host_tensor", lambda t: False)


def _rows(shape, V, seed):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(V, 0.3), size=shape), rng.dirichlet(np.full(V, 0.3), size=shape)


@pytest.mark.parametrize("eps, V", [(0.1, 16), (0.02, 300), (0.0, 16)])
def test_device_delta_is_numpys(device_path, eps, V):
    q, p = _rows((3, 2), V, 1)
    want = cal._calibrate_rows(q, p, eps).delta
    qt, pt = torch.tensor(q), torch.tensor(p)
    with assert_no_host_sync("calibrate_delta_device"):
        got = _calibrated_rule.calibrate_delta_device(qt, pt, eps)
    assert got.shape == want.shape and got.dtype == torch.float64
    # the same first crossing; the Illinois steps stop within ~1e-13 of the bracket (numpy's
    # tolerance), and the two libraries' sorted prefix sums differ by rounding only
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=0)


def test_device_plan_accepts_as_numpys(device_path, monkeypatch):
    rule = get_rule("cactus-calibrated", eps=0.05)
    q, p = _rows((4,), 64, 2)
    qt, pt = torch.tensor(q, dtype=torch.float32), torch.tensor(p, dtype=torch.float32)
    got = rule.plan(qt, pt).accept_probs()
    monkeypatch.undo()
    want = rule.plan(qt, pt).accept_probs()
    # float32 gammas from deltas equal to ~1e-13: an ulp of float32 at most
    torch.testing.assert_close(got, want, rtol=2.4e-7, atol=0)


def test_empty_residual_terms_are_the_per_draft_loop():
    """The device form of Convention 3 (one array expression) adds what the host loop adds."""
    rng = np.random.default_rng(3)
    q = rng.dirichlet(np.full(9, 0.5), size=(2, 3))
    gamma = np.clip(q + rng.uniform(0, 0.3, q.shape), 0, 1)
    c = _emitted.spike_scale_unchecked(q, gamma)
    w = rng.uniform(0, 0.2, q.shape)
    empty = rng.random(q.shape) < 0.3
    empty[0, 0, :] = False  # a row with no empty residual: no change
    base = rng.random(q.shape)
    want = _emitted._add_empty_residual_rows(np, base, empty, q, gamma, c, w)
    got = base + _emitted._empty_residual_terms(np, empty, q, gamma, c, w)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-16)  # one sum's rounding order
    assert np.array_equal(got[0, 0], base[0, 0])

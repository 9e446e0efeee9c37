r"""The ``cactus-calibrated`` rule: Cactus with delta calibrated per position so that the
emitted divergence meets eps (registered on import, with :mod:`cactus_theory.analysis`).

On numpy rows and CPU tensors the per-position delta is numpy's first crossing
(:mod:`cactus_theory.analysis.calibration`); on rows off the host
(:func:`calibrate_delta_device`) the same first crossing runs in torch float64 where the rows
live, with fixed step counts (no host read).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`\delta` Cactus's per-draft budget, :math:`\epsilon` the budget on the emitted
distribution.

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3 and Corollary 5.
"""

from __future__ import annotations

import math

import numpy as np
from array_api_compat import array_namespace, to_device
from array_api_compat import device as array_device

from .._search import illinois
from .._validation import _is_torch
from ..divergences import DIVERGENCES, get_divergence
from ..rules.plans import SpikePlan
from ..rules.registry import Knob, Rule, RuleSpec, register
from ..solvers.internal import _host_tensor
from .calibration import (
    _BASES,
    _CHUNK_ELEMENTS,
    _DELTA_CAP,
    _DELTA_MIN,
    _GRID_POINTS,
    _REFINE_STEPS,
    _calibrate_rows,
    _saturation,
    _spike_for,
)
from .one_step import emitted_distribution


def _on_device(x) -> bool:
    """True for a torch tensor whose values the host does not hold (off the CPU; the switch
    is the exact root's, :func:`cactus_theory.solvers._spike._host_tensor`, which the tests
    flip to run the device paths on CPU tensors): its calibration runs where it lives
    (:func:`calibrate_delta_device`); numpy arrays and CPU tensors calibrate in numpy."""
    return _is_torch(x) and not _host_tensor(x)


def calibrate_delta_device(target_probs, draft_probs, eps, base="taylor", divergence="kl"):
    r""":func:`~cactus_theory.analysis.calibration._calibrate_rows`' delta on torch rows where they live, without a host read.

    The same first crossing in float64 on the rows' device: the geometric grid of
    :data:`_GRID_POINTS` deltas up to each row's saturation delta (rows in chunks of at most
    :data:`_CHUNK_ELEMENTS` grid entries, a count fixed by the shape), the first grid point
    whose :math:`\Gamma` exceeds eps, then exactly :data:`_REFINE_STEPS` Illinois steps on
    every row (converged rows stay as they are, so each row gets the floats of numpy's
    early-stopping loop up to the rounding of the two libraries' sorts and sums). eps is a
    Python float (a knob): eps = 0 gives delta = 0 (SpS), as in numpy. Inputs are not
    validated (the samplers' rows: positive sums; NaN rows are the samplers' to mask).

    Returns
    -------
    Tensor, shape batch
        The calibrated delta, float64 (``_DELTA_CAP`` where the row never crosses and never
        saturates).
    """
    import torch

    d = get_divergence(divergence)
    m = d
    q = target_probs.to(torch.float64)
    p = draft_probs.to(torch.float64)
    q = q / q.sum(-1, keepdim=True)
    p = p / p.sum(-1, keepdim=True)
    batch, V = q.shape[:-1], q.shape[-1]
    qf, pf = q.reshape(-1, V), p.reshape(-1, V)
    N = qf.shape[0]
    if not eps > 0 or N == 0:
        return torch.zeros(batch, dtype=torch.float64, device=q.device)
    sat = _saturation(qf, base, d)
    finite_sat = torch.isfinite(sat)
    sat_val = torch.where(finite_sat, sat, torch.full_like(sat, _DELTA_CAP))
    top = torch.clamp(sat_val, min=_DELTA_MIN * 10)
    # the grid: 0, then geometric from _DELTA_MIN to top (numpy's geomspace, in logarithms)
    frac = torch.arange(_GRID_POINTS - 1, dtype=torch.float64, device=q.device) / (_GRID_POINTS - 2)
    geo = torch.exp(math.log(_DELTA_MIN) + frac * (torch.log(top)[:, None] - math.log(_DELTA_MIN)))
    geo[:, 0].fill_(_DELTA_MIN)  # the ends exactly, as geomspace gives them
    geo[:, -1] = top
    grids = torch.cat([torch.zeros_like(top)[:, None], geo], dim=-1)  # (N, G)
    chunk = max(1, int(_CHUNK_ELEMENTS // (_GRID_POINTS * V)))
    over = torch.empty(grids.shape, dtype=torch.bool, device=q.device)
    for start in range(0, N, chunk):
        sl = slice(start, min(N, start + chunk))
        shape = (sl.stop - sl.start, _GRID_POINTS, V)
        qb, pb = qf[sl, None, :].expand(shape), pf[sl, None, :].expand(shape)
        over[sl] = _divergence_at(qb, pb, grids[sl, :, None], base, d, m) > eps
    anyover = over.any(dim=-1)
    k = torch.argmax(over.to(torch.int8), dim=-1)
    lo_c = torch.gather(grids, -1, torch.clamp(k - 1, min=0)[:, None])[:, 0]
    lo_c = torch.where(k > 0, lo_c, torch.zeros_like(lo_c))
    hi_c = torch.gather(grids, -1, k[:, None])[:, 0]
    lo = torch.where(anyover, lo_c, sat_val)
    hi = torch.where(anyover, hi_c, sat_val)

    def excess(x):
        return _divergence_at(qf, pf, x[:, None], base, d, m) - eps

    lo, _ = illinois(excess, lo, hi, steps=_REFINE_STEPS)
    lo = torch.where(torch.isfinite(lo), lo, torch.full_like(lo, _DELTA_CAP))
    return lo.reshape(batch)


def _divergence_at(q, p, delta, base, d, m):
    r""":math:`\Gamma(\delta) = D(h_{alg}(\delta)\|q)` of rows q, p (array-agnostic; delta
    broadcast against q's last axis as gamma's budget)."""
    gamma = _spike_for(q, delta, base, d.name)
    return m.unchecked(emitted_distribution(SpikePlan(q, p, gamma)), q)


class CalibratedCactus(Rule):
    r"""Cactus with delta calibrated per position so that :math:`D(h_{alg}\|q) \le \epsilon`.

    .. warning::
       Not part of the paper: the paper fixes one delta. The calibration runs the exact
       float64 analysis (numpy) on each row; with torch input the rows are copied to the
       host, calibrated, and gamma is rebuilt on the input's device and dtype from the
       calibrated deltas (the only non-array-API step of any rule's ``plan``).

    Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
    Source: Hao & Mou, ICLR 2026 (arXiv 2604.04987), Theorem 3 and Corollary 5; Tran-Thien (2023).
    """

    def __init__(self, eps: float, base: str, divergence: str):
        self.eps = eps
        self.base = base
        self.divergence = divergence

    def plan(self, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None):
        """``SpikePlan`` whose per-row delta meets the emitted budget eps."""
        xp = array_namespace(target_probs, draft_probs)
        if _on_device(target_probs):
            delta = calibrate_delta_device(target_probs, draft_probs, self.eps, self.base, self.divergence)
            dt = xp.astype(delta[..., None], target_probs.dtype)
            return SpikePlan(
                target_probs, draft_probs, _spike_for(target_probs, dt, self.base, self.divergence)
            )
        to_np = lambda x: np.asarray(to_device(xp.astype(x, xp.float64), "cpu"))  # noqa: E731
        qn, pn = to_np(target_probs), to_np(draft_probs)
        qn = qn / qn.sum(-1, keepdims=True)
        pn = pn / pn.sum(-1, keepdims=True)
        delta = _calibrate_rows(qn, pn, self.eps, base=self.base, divergence=self.divergence).delta
        delta = np.where(np.isfinite(delta), delta, _DELTA_CAP)
        dt = xp.asarray(delta[..., None], dtype=target_probs.dtype, device=array_device(target_probs))
        return SpikePlan(target_probs, draft_probs, _spike_for(target_probs, dt, self.base, self.divergence))


register(
    RuleSpec(
        name="cactus-calibrated",
        factory=CalibratedCactus,
        knobs=(
            Knob("eps", 0.1, 0.0, math.inf, doc="budget on D(h_alg || q) of the emitted distribution"),
            Knob("base", "taylor", choices=_BASES, doc="gamma from delta: Corollary 5 or Theorem 2"),
            Knob(
                "divergence",
                "kl",
                choices=tuple(DIVERGENCES),
                doc="divergence of the budget (and of the exact base's two-point form)",
            ),
        ),
        sps_knobs={"eps": 0.0},
        deterministic=False,
        reads_draft=True,
        needs_raw=False,
        family="spike",
        summary="Cactus with a per-position delta meeting D(h_alg||q) <= eps (first crossing)",
        reference="this toolkit; Cactus Theorem 3 for h_alg",
    )
)

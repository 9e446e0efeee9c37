r"""The spike root of torch tensors: the numpy root for CPU tensors, the same certified
iteration in torch operations with fixed counts off the CPU (nothing reads the device), and
the rounding of a float64 root to the input's dtype, feasible as computed there.

Its bisection (:func:`_bisect_floats_torch`, on the floats' bit patterns) is not
:func:`cactus_theory._search.bisect_elementwise`: it closes brackets to adjacent floats of the
input's dtype (the certificate), in the dtype's bit count of steps, with no host read.
"""

from __future__ import annotations

import numpy as np
from array_api_compat import array_namespace

from .._validation import as_budget_array
from ._spike_batch import _exact_numpy
from ._spike_kl import _forms


def _host_tensor(t) -> bool:
    """True for a CPU tensor (its values can be read without a device synchronization)."""
    return t.device.type == "cpu"


def _host_root(q_n, delta, d):
    """The float64 root of a CPU tensor's entries by the numpy solver (:func:`_root_numpy`),
    as a float64 CPU tensor; NaN entries (rows the samplers flag invalid) are solved as 0."""
    import torch

    if isinstance(delta, torch.Tensor) or np.ndim(delta):
        d_in = delta.detach().to(torch.float64).numpy() if isinstance(delta, torch.Tensor) else delta
        d64 = np.broadcast_to(as_budget_array(d_in), tuple(q_n.shape))
    else:
        d64 = np.full(tuple(q_n.shape), as_budget_array(delta)[()])
    q = np.clip(np.nan_to_num(q_n.detach().to(torch.float64).numpy(), nan=0.0), 0.0, 1.0)
    return torch.from_numpy(_exact_numpy(q, np.ascontiguousarray(d64), d))


def device_root(q_n, delta, d):
    r""":func:`exact_spike`'s root of a torch tensor off the CPU (``d`` a resolved divergence
    with a derivative): :func:`_root_torch`'s float64 root rounded to ``q_n``'s dtype by
    :func:`_round_to_dtype`. Fixed operation counts and no data-dependent control flow, so
    it traces into one graph (the samplers' compiled kernel of the root,
    :mod:`cactus_theory.samplers._kernels.cactus`, compiles this function)."""
    return _round_to_dtype(_root_torch(q_n, delta, d), q_n, delta, d)


def _root_torch(q_n, delta, d):
    r"""The certified iteration of :func:`exact_spike` in torch operations on ``q_n``'s
    device, in float64, with fixed counts (nothing reads the device).

    The form's start and ``torch_steps`` steps (Halley for the KL, Newton otherwise), each
    iterate tested against the budget to keep a bracket [lo, hi] (g(lo) <= delta < g(hi) as
    computed) and replaced by the bracket's midpoint where it leaves it; then hi less 1, 4
    and 32 ulps and lo plus one are tested (the pull-back: the iteration ends within an ulp
    or two of the root or within g's rounding noise), and float64 input bisects the floats
    between lo and hi 64 times (adjacent after at most 64; lower precision stops at the
    pull-back, far below its own ulp; :func:`_round_to_dtype` finishes it). Returns lo, the
    feasible end (float64); entries with a root known in advance (1, q_n) get it.
    """
    import torch

    s = torch.nan_to_num(q_n.detach(), nan=0.0).clamp(0.0, 1.0).to(torch.float64)
    dl = (
        delta.detach().to(torch.float64)
        if isinstance(delta, torch.Tensor)
        else torch.full_like(s, float(delta))
    )
    s, dl = torch.broadcast_tensors(s, dl)
    form = _forms(d)
    one = torch.ones_like(s)
    at_one = d.two_point(one, s)
    solve = (at_one > dl) & (dl > 0) & ((s > 0) | d.finite_off_support)
    s_, d_ = torch.where(solve, s, 0.25), torch.where(solve, dl, 0.1)  # safe stand-ins
    lo, hi = s_, one
    x = form.start(torch, s_, d_)
    for k in range(form.torch_steps + 1):
        g, slope, extra = form.evaluate(torch, x, s_)
        lo, hi = _update_bracket(torch, g <= d_, x, lo, hi)
        if k == form.torch_steps:
            break
        x = form.step(torch, s_, d_, x, g, slope, extra)
        x = torch.where((x > lo) & (x < hi), x, 0.5 * (lo + hi))
    # the pull-back, evaluated at once
    lo_b, hi_b = lo.view(torch.int64), hi.view(torch.int64)
    cands = torch.stack([hi_b - 32, hi_b - 4, hi_b - 1, lo_b + 1]).view(torch.float64)
    feas = form.evaluate(torch, cands, s_[None])[0] <= d_[None]
    for i in range(cands.shape[0]):
        lo, hi = _update_bracket(torch, feas[i], cands[i], lo, hi)
    if q_n.dtype == torch.float64:
        lo = _bisect_floats_torch(d.two_point, s_, d_, lo, hi)
    return torch.where(solve, lo, torch.where((at_one <= dl) & (dl > 0), one, s))


def _update_bracket(xp, feasible, x, lo, hi):
    """lo <- x where x is feasible and inside (lo, hi), hi <- x where infeasible and inside."""
    inside = (x > lo) & (x < hi)
    return xp.where(feasible & inside, x, lo), xp.where(~feasible & inside, x, hi)


#: Floats of the input dtype :func:`_round_to_dtype` steps down from the rounded root.
_DTYPE_WALK = 3


def _round_to_dtype(root, q_n, delta, d, host: bool = False):
    r"""The float64 root ``root`` as a root in ``q_n``'s dtype, feasible as computed there.

    Rounded toward q_n (never above the float64 root: within budget in exact arithmetic),
    then stepped down by up to :data:`_DTYPE_WALK` floats while the two-point form as
    computed by torch in the input dtype exceeds delta (the steps evaluated together, the
    first within budget kept; a Python delta compares in the input dtype, as a tensor of it
    would). Where none is within budget (a form noisier than that in a low precision), the
    floats between q_n (always feasible) and the last step are bisected
    (:func:`_bisect_floats_torch`): on every entry with a fixed count off the CPU, on those
    entries alone with ``host`` (CPU memory: reading it waits for no device). NaN entries of
    q_n give 0.

    With ``host``, float32 and float64 round and step in numpy on the tensors' memory (its
    rounding and ``nextafter`` are torch's bit for bit, at a quarter of torch's
    per-operation overhead on a [B, k] call) and call torch for the form alone.
    """
    import torch

    native = host and q_n.dtype in (torch.float32, torch.float64)
    q = q_n.detach().numpy() if native else q_n.detach()
    xp = array_namespace(q)
    q = xp.clip(xp.where(xp.isnan(q), xp.zeros_like(q), q), 0.0, 1.0)
    root = root.numpy() if native else root
    g = xp.astype(root, q.dtype)
    g = xp.maximum(xp.where(xp.astype(g, root.dtype) > root, xp.nextafter(g, q), g), q)
    steps = [g]
    for _ in range(_DTYPE_WALK):
        steps.append(xp.nextafter(steps[-1], q))
    cands = xp.stack(steps)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ok = ~(d.two_point(torch.as_tensor(cands), torch.as_tensor(q)) > delta)
    ok = ok.numpy() if native else ok  # a NaN form passes, as a step would
    g = cands[-1]
    for i in range(_DTYPE_WALK - 1, -1, -1):  # the first candidate within budget
        g = xp.where(ok[i], cands[i], g)
    bad = ~xp.any(ok, axis=0)
    if host and not bool(xp.any(bad)):
        return torch.as_tensor(g)
    q, g, last, bad = (torch.as_tensor(a) for a in xp.broadcast_arrays(q, g, cands[-1], bad))
    dl = delta.expand_as(q) if isinstance(delta, torch.Tensor) else torch.full_like(q, float(delta))
    if not host:
        return torch.where(bad, _bisect_floats_torch(d.two_point, q, dl, q, last), g)
    g = g.clone()
    g[bad] = _bisect_floats_torch(d.two_point, q[bad], dl[bad], q[bad], last[bad])
    return g


#: The signed integers whose bit patterns order the non-negative floats of each dtype.
_INT_VIEW = {"float64": "int64", "float32": "int32", "float16": "int16", "bfloat16": "int16"}


def _bisect_floats_torch(value, s, delta, lo, hi):
    """:func:`_bisect_floats` in torch with a fixed count: the number of bits of lo's dtype
    (enough to close any bracket in [0, 1]), on every entry; returns lo."""
    import torch

    ints = getattr(torch, _INT_VIEW[str(lo.dtype).removeprefix("torch.")])
    for _ in range(torch.finfo(lo.dtype).bits):
        lo_b, hi_b = lo.view(ints), hi.view(ints)
        mid = (lo_b + torch.div(hi_b - lo_b, 2, rounding_mode="floor")).view(lo.dtype)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            ok = value(mid, s) <= delta
        lo, hi = torch.where(ok, mid, lo), torch.where(ok, hi, mid)
    return lo

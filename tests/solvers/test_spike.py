"""The exact KL root (Theorem 2) and the accurate two-point KL it solves.

* ``kl_two_point`` against 50-digit mpmath, including the small-gamma regime where the naive
  ``log(1 - gamma)`` loses the digits that decide the root (a pinned case: 4e7 ulps before).
* The solver's interior form is ``kl_two_point`` bit for bit (the certificate relies on it).
* Every numpy root carries its certificate: g(gamma) <= delta < g(next float), as computed,
  over q_n from 1e-280 to 1 - 1e-16 and delta from 1e-12 to 300, every code path included
  (Halley, the one-float walk, the bracketed fallback).
* ``lambert_w`` against scipy's; the torch float32 path (CPU and the device path, run here on
  the CPU) feasible as computed in float32 and within float32 rounding of the float64 root.
"""

import math

import mpmath
import numpy as np
import pytest
import scipy.special
from conftest import profile_examples
from hypothesis import given, settings
from hypothesis import strategies as st

from cactus_theory import _threads
from cactus_theory.divergences import get_divergence, kl_two_point
from cactus_theory.solvers import _spike as spike
from cactus_theory.solvers import _spike_batch, _spike_device, _spike_kl
from cactus_theory.solvers._spike import exact_spike
from cactus_theory.solvers._spike_closed import lambert_w

KL = get_divergence("kl")
EPS = np.finfo(np.float64).eps

unit = st.one_of(st.floats(0.0, 1.0), st.floats(-300.0, 0.0).map(lambda e: 10.0**e))


def _mp_kl(g, s):
    """The two-point KL in 50-digit mpmath (log1p: 1 - g and 1 - s are not rounded)."""
    with mpmath.workdps(50):
        g, s = mpmath.mpf(g), mpmath.mpf(s)
        first = 0 if g == 0 else (mpmath.inf if s == 0 else g * mpmath.log(g / s))
        second = 0 if g == 1 else (mpmath.inf if s == 1 else (1 - g) * (mpmath.log1p(-g) - mpmath.log1p(-s)))
        return first + second, abs(first) + abs(second)


@given(g=unit, s=unit)
@settings(
    max_examples=profile_examples(5, "a cheap scalar identity against mpmath: five times the profile"),
    deadline=None,
)
def test_two_point_kl_matches_mpmath(g, s):
    got = float(kl_two_point(np, np.array(g), np.array(s)))
    want, scale = _mp_kl(g, s)
    if want == mpmath.inf:
        assert got == math.inf
        return
    # each term is a product of a weight and a logarithm, each to a few ulps (log1p where the
    # ratio is near 1): 8 eps of the terms' magnitudes, plus the smallest normal for subnormals
    assert abs(got - float(want)) <= 8 * EPS * float(scale) + 1e-300


def test_small_gamma_root_is_accurate():
    """q_n = 8.2e-280, delta = 8.3e-9: the root 1.3463632e-11 is now within 2 ulps of the
    50-digit root (the naive log(1 - gamma) put it 4e7 ulps away)."""
    s, delta = 8.17801e-280, 8.301559e-09
    g = float(exact_spike(np.array(s), delta))
    with mpmath.workdps(60):
        root = mpmath.findroot(lambda x: _mp_kl(x, s)[0] - mpmath.mpf(delta), mpmath.mpf(g))
    assert abs(g - float(root)) <= 2 * np.spacing(float(root))


@given(s=st.floats(-280.0, -1e-12).map(lambda e: 10.0**e), t=st.floats(0.0, 1.0))
@settings(max_examples=profile_examples(5, "a cheap scalar identity: five times the profile"), deadline=None)
def test_interior_form_is_kl_two_point_bit_for_bit(s, t):
    x = s + (1.0 - s) * t
    if not s <= x < 1.0:
        return
    xs, ss = np.array([x]), np.array([s])
    g, _, one_x = _spike_kl._kl_interior(xs, ss)
    assert g[0] == kl_two_point(np, xs, ss)[0]
    assert one_x[0] == 1.0 - x


def _wide_domain(seed, n):
    rng = np.random.default_rng(seed)
    s = np.concatenate(
        [
            10.0 ** rng.uniform(-280, -1e-3, n),
            10.0 ** rng.uniform(-8, -1e-4, n),
            rng.uniform(0, 1, n // 2),
            1 - 10.0 ** rng.uniform(-16, -1, n // 4),
        ]
    )
    d = 10.0 ** rng.uniform(-12, 2.5, s.size)
    return s, d


def test_every_numpy_root_carries_its_certificate():
    s, d = _wide_domain(0, 20_000)
    g = exact_spike(s, d)
    assert np.all((g >= s) & (g <= 1))
    assert np.all(KL.two_point(g, s) <= d)  # feasible as computed
    inner = (g < 1) & (d > 0) & (g > s)
    nxt = np.nextafter(g[inner], 2.0)
    assert np.all(KL.two_point(nxt, s[inner]) > d[inner])  # the next float is not
    capped = g == 1
    assert np.all(KL.two_point(np.ones(capped.sum()), s[capped]) <= d[capped])


@pytest.mark.parametrize("walk", [4, 0])
def test_walk_and_bisection_fallback_are_exercised_and_certified(monkeypatch, walk):
    """Halley's last iterate is a float or two off for about a fifth of the entries: the walk
    fixes them; with no walk (``_WALK = 0``) the bisection of the floats does, with the same
    certificate."""
    calls = {"bisected": 0}
    real = _spike_batch._bisect_floats

    def counting(*args, **kwargs):
        calls["bisected"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(_spike_batch, "_bisect_floats", counting)
    monkeypatch.setattr(_spike_batch, "_WALK", walk)
    s, d = _wide_domain(1, 3000)
    g = exact_spike(s, d)
    if walk == 0:
        assert calls["bisected"] >= 1
    inner = (g < 1) & (g > s)
    assert np.all(KL.two_point(g, s) <= d)
    assert np.all(KL.two_point(np.nextafter(g[inner], 2.0), s[inner]) > d[inner])


@pytest.mark.parametrize("divergence", ["kl", "reverse_kl", "chi2", "neyman_chi2", "hellinger", "js"])
def test_bisection_of_the_floats_closes_any_bracket(divergence):
    """The fallback alone, from the widest bracket [q_n, 1] (every entry bisected, q_n down
    to 1e-280): adjacent floats after at most 64 halvings, the lower one feasible and the
    upper one not, as the divergence's two-point form computes them."""
    d = get_divergence(divergence)
    s, delta = _wide_domain(2, 2000)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        keep = (s > 0) & (s < 1) & (d.two_point(np.ones_like(s), s) > delta)
    s, delta = s[keep], delta[keep]
    lo = _spike_batch._bisect_floats(d.two_point, s, delta, s.copy(), np.ones_like(s))
    assert np.all(d.two_point(lo, s) <= delta)
    assert np.all(d.two_point(np.nextafter(lo, 2.0), s) > delta)


@pytest.mark.parametrize("steps, tol", [(1, 1e-5), (2, 1e-13)])
def test_lambert_w_matches_scipy(steps, tol):
    z = np.concatenate([[0.0, 1e-300, 1e-10, 1.0, math.e], 10.0 ** np.linspace(-5, 300, 400)])
    want = scipy.special.lambertw(z).real
    got = lambert_w(np, z, steps=steps)
    # relative to W (absolute near z = 0, where W(z) ~ z)
    assert np.all(np.abs(got - want) <= tol * np.maximum(want, 1e-300))


def test_lambert_w_log_step_matches_scipy():
    """The root's start takes W by one Halley step on w + log(w/z) from Winitzki's point
    (2% off): cubic, so about (2e-2)^3 = 1e-5 at worst and 8.5e-7 measured over z in
    [1, 1e300]; 1e-6 is what the start's accuracy (next test) is built on."""
    z = 10.0 ** np.linspace(0.0, 300.0, 30001)
    want = scipy.special.lambertw(z).real
    got = _spike_kl._lambert_w_log_step(z, lambert_w(np, z, steps=0))
    assert np.max(np.abs(got - want) / want) <= 1e-6


def test_kl_start_is_inside_and_sharp_for_small_roots():
    """The numpy start lies strictly inside (q_n, 1) over the wide domain, and where it
    comes from Lambert W (delta > (1 + e) q_n) with a root below 1e-2, it is within
    1e-6 + x^2 of the root, relative: W's error (previous test) plus the third-order terms
    that the second-order step leaves, x^3 absolute against a slope log(x/q_n) >= 1. The
    uncorrected Lambert point is 8e-3 off at the benchmark's rows."""
    s, d = _wide_domain(3, 20_000)
    with np.errstate(divide="ignore", invalid="ignore"):
        solve = (s >= 1e-280) & (s < 1) & (d > 0) & (_spike_kl._kl_at_one(s) > d)
    s, d = s[solve], d[solve]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # as the solver calls it
        x0 = _spike_kl._kl_start(np, s, d)
    assert np.all((x0 > s) & (x0 < 1.0))
    root = exact_spike(s, d)
    small = ((d - s) / (math.e * s) > 1.0) & (root < 1e-2)
    assert small.sum() > 10_000
    rel = np.abs(x0[small] - root[small]) / root[small]
    assert np.all(rel <= 1e-6 + root[small] ** 2)


@pytest.mark.parametrize("device_path", [False, True])
def test_torch_float32_root_is_feasible_and_close(monkeypatch, device_path):
    torch = pytest.importorskip("torch")
    if device_path:  # the fixed-step path of CUDA tensors, run on the CPU
        monkeypatch.setattr(spike, "_host_tensor", lambda t: False)
    s, d = _wide_domain(3, 3000)
    s32 = torch.tensor(s, dtype=torch.float32)
    d32 = torch.tensor(d, dtype=torch.float32)
    keep = (s32 > 0) & (s32 < 1) & (d32 > 1e-8)
    s32, d32 = s32[keep], d32[keep]
    g = exact_spike(s32, d32)
    assert g.dtype == torch.float32
    assert bool(torch.all(KL.two_point(g, s32) <= d32))  # feasible in float32
    ref = exact_spike(s32.double().numpy(), d32.double().numpy())
    ulps = np.abs(g.double().numpy() - ref) / np.spacing(ref.astype(np.float32)).astype(float)
    # the float64 root rounded to float32, stepped down where float32's g says infeasible:
    # within 4 float32 ulps wherever float32's g is not noisy at the root (its relative
    # error, ~1e-7 of the terms, over the root's relative slope); q_n itself elsewhere
    noisy = ref - s32.double().numpy() < 1e-3 * ref
    assert np.all(ulps[~noisy] <= 4)
    assert np.mean(ulps <= 4) >= 0.99


def _torch_domain(torch, dtype, seed):
    """The wide domain with q_n = 0 and 1, NaN (rows the samplers flag) and delta = 0."""
    s, d = _wide_domain(seed, 3000)
    s = np.concatenate([s, [0.0, 1.0, np.nan, 0.5]])
    d = np.concatenate([d, [0.1, 0.1, 0.1, 0.0]])
    return torch.tensor(s, dtype=dtype), d


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("tensor_delta", [False, True])
def test_torch_roots_of_both_routes_are_certified(monkeypatch, dtype, tensor_delta):
    """A CPU tensor's float64 root is the numpy solver's; any other device runs the torch
    solver (here on the CPU). Both, rounded to the input dtype: feasible as computed in it,
    at least q_n, NaN solved as 0. float64: the torch solver's root is certified against
    torch's own two-point form (the next float is infeasible) and agrees with the numpy
    root to the two libraries' rounding of the logarithms; float32: the two routes give
    roots at most one float32 apart (the float64 roots differ in their last bits)."""
    torch = pytest.importorskip("torch")
    tt = getattr(torch, dtype)
    q_n, d = _torch_domain(torch, tt, 5)
    deltas = [torch.tensor(d, dtype=tt)] if tensor_delta else [1e-6, 0.1, 3.0]
    for delta in deltas:
        host = exact_spike(q_n, delta)
        monkeypatch.setattr(spike, "_host_tensor", lambda t: False)
        dev = exact_spike(q_n, delta)
        monkeypatch.undo()
        q = torch.nan_to_num(q_n, nan=0.0)
        assert host.dtype == dev.dtype == tt
        for g in (host, dev):
            assert bool(torch.all(KL.two_point(g, q) <= delta)) and bool(torch.all(g >= q))
            assert g[-2] == 0.0  # the NaN entry
        if dtype == "float64":
            inner = (dev > q) & (dev < 1)
            assert bool(
                torch.all(
                    KL.two_point(torch.nextafter(dev[inner], torch.tensor(2.0, dtype=tt)), q[inner])
                    > (delta[inner] if tensor_delta else delta)
                )
            )
            # both certified at a sign change of their library's form: a few ulps of the
            # root's conditioning apart at most (the forms differ by an ulp of their terms)
            rel = (dev - host).abs() / host.clamp_min(1e-300)
            assert float(rel.max()) <= 1e-9
        else:
            gap = (dev.double() - host.double()).abs()
            assert bool(
                torch.all(gap <= torch.nextafter(host, torch.tensor(2.0, dtype=tt)).double() - host.double())
            )


class _NoHostReads(__import__("torch").overrides.TorchFunctionMode):
    """Fails on any call that reads a tensor's values on the host or moves it there."""

    FORBIDDEN = (
        "item",
        "tolist",
        "numpy",
        "cpu",
        "__bool__",
        "__float__",
        "__int__",
        "__index__",
        "nonzero",
        "masked_select",
        "unique",
    )

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in self.FORBIDDEN:
            raise AssertionError(f"host read: {name}")
        if name == "to" and any(str(a) == "cpu" for a in list(args[1:]) + list((kwargs or {}).values())):
            raise AssertionError("host transfer: to('cpu')")
        index = args[1] if name in ("__getitem__", "__setitem__") and len(args) > 1 else None
        for i in index if isinstance(index, tuple) else (index,):
            if getattr(i, "dtype", None) is __import__("torch").bool:
                # a boolean mask's size is data-dependent: the device synchronizes
                raise AssertionError(f"host read: boolean-mask {name}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("divergence", ["kl", "hellinger", "reverse_kl"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_solver_reads_nothing_on_the_host(monkeypatch, divergence, dtype):
    """The device route (:func:`_root_torch` and the rounding to the input dtype) under a
    torch function mode that fails on every host read (``item``, ``tolist``, ``numpy``,
    ``cpu``, ``bool``, ...), on CPU tensors; then on the meta device, where any read of a
    value raises: fixed iteration counts, no data-dependent control flow. The result is the
    same as the one computed without the mode."""
    torch = pytest.importorskip("torch")
    tt = getattr(torch, dtype)
    monkeypatch.setattr(spike, "_host_tensor", lambda t: False)
    q_n, d = _torch_domain(torch, tt, 9)
    delta = torch.tensor(d, dtype=tt)
    want = exact_spike(q_n, delta, divergence)
    with _NoHostReads():
        got = exact_spike(q_n, delta, divergence)
        got_scalar = exact_spike(q_n, 0.1, divergence)
    assert torch.equal(got, want)
    assert torch.equal(got_scalar, exact_spike(q_n, 0.1, divergence))
    meta = exact_spike(q_n.to("meta"), delta.to("meta"), divergence)
    assert meta.device.type == "meta" and meta.shape == q_n.shape and meta.dtype == tt


@pytest.mark.parametrize(
    "divergence, walk, bisected", [("kl", 3, False), ("kl", 0, True), ("reverse_kl", 3, True)]
)
def test_rounding_to_the_dtype_bisects_where_the_walk_does_not_suffice(
    monkeypatch, divergence, walk, bisected
):
    """float32: the rounded float64 root is stepped down while float32's form rejects it;
    where three steps do not suffice, the floats down to q_n are bisected. On the wide
    domain the KL's float32 form (log1p throughout) never needs the bisection; reverse KL's
    (a difference of logarithms, noisy where delta << q_n) does, and so does the KL with no
    walk (``_DTYPE_WALK = 0``). The result is feasible in float32 either way, the same
    floats on the host (bisecting the rejected entries alone) and off it (every entry, a
    fixed count)."""
    torch = pytest.importorskip("torch")
    d = get_divergence(divergence)
    q_n, dd = _torch_domain(torch, torch.float32, 5)
    delta = torch.tensor(dd, dtype=torch.float32)
    root = _spike_device._host_root(q_n, delta, d)
    q = torch.nan_to_num(q_n, nan=0.0)
    monkeypatch.setattr(_spike_device, "_DTYPE_WALK", walk)
    calls = []
    real = _spike_device._bisect_floats_torch
    monkeypatch.setattr(
        _spike_device, "_bisect_floats_torch", lambda v, s, *a: calls.append(s.numel()) or real(v, s, *a)
    )
    host = _spike_device._round_to_dtype(root, q_n, delta, d, host=True)
    assert bool(calls) == bisected
    device = _spike_device._round_to_dtype(root, q_n, delta, d)
    assert torch.equal(host, device)
    assert bool(torch.all(d.two_point(host, q) <= delta)) and bool(torch.all(host >= q))
    assert bool(torch.all(host.double() <= torch.maximum(root, q.double())))


@pytest.mark.parametrize("divergence", ["kl", "hellinger", "chi2", "js", "tv"])
@pytest.mark.parametrize("threads,block", [(2, 32768), (3, 32768), (1, 10_000), (2, 10_000)])
def test_root_in_chunks_on_threads_is_the_same_floats(monkeypatch, divergence, threads, block):
    """A large array's root is solved in contiguous chunks on threads: every entry's root
    depends on its own (q_n, delta) alone, so the floats equal one single-threaded call's,
    bit for bit (Newton divergences, and TV's bisection), with uneven splits (3 chunks; 9
    blocks of at most ``ROOT_BLOCK`` entries on one or two threads)."""
    monkeypatch.setattr(_threads, "thread_count", lambda: threads)
    monkeypatch.setattr(_spike_batch, "PARALLEL_MIN", 8192)
    monkeypatch.setattr(_spike_batch, "ROOT_BLOCK", block)
    s, d = _wide_domain(7, 12_000)
    d = np.where(np.arange(s.size) % 7 == 0, 0.0, d)  # delta = 0 entries too
    assert s.size >= threads * _spike_batch.PARALLEL_MIN  # the split is taken
    div = get_divergence(divergence)
    one = _spike_batch._exact_numpy(s, d, div, split=False)
    assert np.array_equal(_spike_batch._exact_numpy(s, d, div), one)
    assert np.array_equal(exact_spike(s.reshape(-1, 2), d.reshape(-1, 2), divergence), one.reshape(-1, 2))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_kl_form_is_kl_two_point_bit_for_bit(dtype):
    """The torch solver's KL form (its iteration and its pull-back test) is
    ``kl_two_point(torch, ...)`` bit for bit for 0 < s <= x < 1, including s below the
    dtype's ratio floor, on both branches of its second logarithm (x - s above and below
    (1 - s)/2), at x = s, and at the float just below 1."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    low = -300 if dtype == "float64" else -38
    s = np.concatenate([10.0 ** rng.uniform(low, -1e-3, 4000), rng.uniform(0, 1, 4000)])
    t = np.concatenate([rng.uniform(0, 1, 4000), 10.0 ** rng.uniform(-12, 0, 4000)])
    tt = getattr(torch, dtype)
    s_t = torch.tensor(s, dtype=tt).clamp_min(torch.finfo(tt).tiny)
    x_t = torch.maximum(s_t + (1.0 - s_t) * torch.tensor(t, dtype=tt), s_t)
    x_t = torch.where(x_t < 1.0, x_t, torch.nextafter(torch.ones_like(x_t), x_t.new_zeros(())))
    x_t[:10] = s_t[:10]
    assert bool(((s_t <= x_t) & (x_t < 1.0) & (s_t > 0)).all())
    upper = (x_t - s_t) > 0.5 * (1.0 - s_t)
    assert bool(upper.any()) and bool((~upper).any())  # both branches of b
    got = _spike_kl._kl_evaluate(torch, x_t, s_t)[0]
    assert torch.equal(got, kl_two_point(torch, x_t, s_t))


def _caps_around_the_screen(s, d, rng):
    """Caps where the screen decides: at the chi-square bound times 0.99-1.01, at the
    computed root and a float either side of it, below q_n, at q_n, and uniform in [0, 1]."""
    bound = np.sqrt(d * s * (1 - s))
    g = exact_spike(s, d)
    picks = [
        s + bound * rng.uniform(0.99, 1.01, s.size),
        g,
        np.nextafter(g, 0.0),
        np.nextafter(g, 2.0),
        s * rng.uniform(0, 1, s.size),
        s,
        rng.uniform(0, 1, s.size),
    ]
    which = rng.integers(0, len(picks), s.size)
    return np.clip(np.choose(which, picks), 0.0, 1.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_capped_root_is_min_of_root_and_cap_bit_for_bit(seed):
    """``capped_exact_spike`` solves the root only where the chi-square bound cannot rule it
    below the cap, and still returns ``np.minimum(exact_spike(q_n), cap)`` bit for bit: over
    the whole domain of the certificate test (q_n from 1e-280 to 1 - 1e-16, delta from 1e-12
    to 300), with caps placed at the bound, at the root and one float either side of it."""
    rng = np.random.default_rng(seed)
    s, d = _wide_domain(seed + 10, 20_000)
    cap = _caps_around_the_screen(s, d, rng)
    want = np.minimum(exact_spike(s, d), cap)
    assert np.array_equal(spike.capped_exact_spike(s, cap, d), want)


def test_capped_root_edge_values_and_other_divergences():
    """delta 0 and inf, q_n 0 and 1, caps 0 and 1, a scalar delta and a row of them; a
    divergence other than the KL solves every root (the same floats as well)."""
    s = np.array([0.0, 0.0, 1.0, 1.0, 1e-300, 0.3, 0.3, 0.3, 0.999999, 5e-324])
    cap = np.array([0.0, 0.7, 0.2, 1.0, 1.0, 0.0, 0.31, 1.0, 1.0, 1e-300])
    for d in (0.0, 1e-30, 1e-12, 0.1, 3.0, math.inf):
        for div in ("kl", "reverse_kl", "hellinger", "tv"):
            want = np.minimum(exact_spike(s, d, div), cap)
            assert np.array_equal(spike.capped_exact_spike(s, cap, d, div), want), (d, div)
    d_row = np.array([0.0, math.inf, 0.1, 0.0, 2.0, 0.1, 1e-9, 9.0, 0.5, 1.0])
    assert np.array_equal(spike.capped_exact_spike(s, cap, d_row), np.minimum(exact_spike(s, d_row), cap))


def test_capped_root_solves_only_the_unscreened_entries(monkeypatch):
    """The point of the screen: at the benchmark's kind of row (softmax of Gumbel logits,
    V = 20,000, delta = 0.1) the root is solved on under 2% of the tokens."""
    from benchmarks.run import correlated_pair

    q, p = correlated_pair(20_000, seed=4)
    solved = []
    real = spike._exact_numpy
    monkeypatch.setattr(spike, "_exact_numpy", lambda s, *a, **k: solved.append(s.size) or real(s, *a, **k))
    spike.capped_exact_spike(q, p, 0.1)
    assert sum(solved) < 0.02 * q.size, solved


def test_capped_root_bad_input():
    with pytest.raises(ValueError, match="cap"):
        spike.capped_exact_spike(np.array([0.1, 0.2]), np.array([0.1]), 0.1)
    with pytest.raises(ValueError, match="cap"):
        spike.capped_exact_spike(np.array([0.1]), np.array([1.5]), 0.1)
    with pytest.raises(ValueError, match="q_n"):
        spike.capped_exact_spike(np.array([np.nan]), np.array([0.5]), 0.1)
    with pytest.raises(ValueError, match="delta"):
        spike.capped_exact_spike(np.array([0.1]), np.array([0.5]), -1.0)
    with pytest.raises(ValueError, match="delta: shape"):
        spike.capped_exact_spike(np.array([0.1, 0.2]), np.array([0.5, 0.5]), np.ones(3))


def test_effective_root_matches_its_definition_on_every_backend():
    """``effective_exact_spike``: min(gamma, p) where p > 0 and [gamma > 0] where p = 0, the
    same floats from the capped numpy KL path as from the plain definition, for p = 0 with
    q = 0 and q > 0 included; on torch rows (the torch root, every root solved) the definition
    with that root."""
    import torch

    rng = np.random.default_rng(7)
    q = rng.dirichlet(np.full(12, 0.3), size=40)
    p = rng.dirichlet(np.full(12, 0.3), size=40)
    q[:, 0], p[:, 0], p[:, 1], q[:, 2] = 0.0, 0.0, 0.0, 0.0  # q = p = 0; p = 0 < q; q = 0 < p
    q, p = q / q.sum(-1, keepdims=True), p / p.sum(-1, keepdims=True)
    for div in ("kl", "hellinger"):
        for d in (0.0, 0.05, 2.0):
            g = exact_spike(q, d, div)
            want = np.where(p > 0, np.minimum(g, p), (g > 0).astype(float))
            assert np.array_equal(spike.effective_exact_spike(q, p, d, div), want), (div, d)
            qt, pt = torch.from_numpy(q), torch.from_numpy(p)
            gt = exact_spike(qt, d, div)
            want_t = torch.where(pt > 0, torch.minimum(gt, pt), (gt > 0).double())
            got = spike.effective_exact_spike(qt, pt, d, div)
            assert isinstance(got, torch.Tensor) and torch.equal(got, want_t), (div, d)

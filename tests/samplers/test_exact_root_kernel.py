"""The exact root's compiled kernel (``samplers/_kernels/cactus.py``): the solver's device path
(:func:`cactus_theory.solvers._spike.device_root`) traced into one aten graph that inductor
compiles on a GPU. Here: the traced graph computes the device path's floats bit for bit at
lengths other than the one traced; the samplers route gamma at the drafted tokens through the
kernel off the CPU (forced here) with unchanged outputs, and keep numpy's root on CPU tensors.
Compiling the graph takes minutes on two CPU cores, many more under load:
``CACTUS_THEORY_COMPILE_ROOT=1`` runs that test, in ``./dev test``'s stage 'compile', which
``.ci/run`` turns on; ``scripts/gpu_check.py`` checks the compiled kernel against the eager
path on CUDA. The second trace runs in the stage 'full'."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from cactus_theory.divergences import get_divergence
from cactus_theory.rules._cactus import CactusExact
from cactus_theory.samplers import make_sampler
from cactus_theory.samplers._kernels import KERNELS, RuleKernels
from cactus_theory.samplers._kernels import cactus as kernel
from cactus_theory.solvers import _spike as spike

KL = get_divergence("kl")


def _q(n, seed):
    """q_n over [1e-30, 1) (log-uniform), with 0, 1 and NaN (rows the samplers flag)."""
    rng = np.random.default_rng(seed)
    q = np.concatenate([10.0 ** (-30 * rng.random(n)), [0.0, 1.0, np.nan, 0.5]])
    return torch.tensor(np.minimum(q, 0.999999), dtype=torch.float32)


#: The default Cactus-exact's budget (the samplers' key of the kernel).
DELTA = 1.0


@pytest.fixture(scope="module")
def traced():
    return kernel.traced_root("kl", torch.float32, "cpu", DELTA)


def test_traced_graph_is_the_device_path_at_any_length(traced):
    for n, seed in ((37, 1), (3000, 2)):
        q = _q(n, seed)
        assert torch.equal(traced(q), spike.device_root(q, DELTA, KL))


@pytest.mark.slow
@pytest.mark.full  # a second trace (seconds): ./dev test's stage 'full'
def test_tensor_budgets_trace_too():
    g = kernel.traced_root("kl", torch.float64, "cpu", torch.float64)
    q = _q(200, 3).double()
    d = torch.tensor(np.random.default_rng(4).uniform(1e-6, 3.0, q.numel()))
    assert torch.equal(g(q, d), spike.device_root(q, d, KL))


def _batch(B=16, k=3, V=50, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(3 * torch.randn(B, k + 1, V, generator=g), -1)
    p = torch.softmax(3 * torch.randn(B, k, V, generator=g), -1)
    ids = torch.multinomial(p.reshape(-1, V), 1, generator=g).reshape(B, k)
    return q, torch.zeros(B, 1, dtype=torch.int64), p, ids


def _run(name, batch):
    gens = {i: torch.Generator().manual_seed(i) for i in range(batch[0].shape[0])}
    return make_sampler(name)(*batch, seeded_seqs=gens)


def test_samplers_take_the_kernel_off_the_cpu(monkeypatch, traced):
    """Forced off-CPU routing (the traced graph standing in for its compiled form): the
    kernel is called and the seeded outputs are those of the rule's own root."""
    batch = _batch()
    want = _run("cactus-exact", batch)
    calls = []
    monkeypatch.setattr(kernel, "_off_host", lambda t: True)
    monkeypatch.setattr(kernel, "compiled_root", lambda *key: calls.append(key) or traced)
    got = _run("cactus-exact", batch)
    assert calls and calls[0] == ("kl", torch.float32, "cpu", DELTA)
    assert torch.equal(got, want)
    # without the kernel entry (the derived path): the same outputs
    monkeypatch.setitem(
        KERNELS, CactusExact, RuleKernels(spike_recovery_weights=kernel.spike_recovery_weights)
    )
    assert torch.equal(_run("cactus-exact", batch), want)


def test_cpu_tensors_keep_the_host_root():
    rule = CactusExact(DELTA)
    assert kernel.exact_root_at_tokens(rule, _q(10, 5)) is None
    tv = CactusExact(0.3, "tv")
    assert kernel.exact_root_at_tokens(tv, _q(10, 5)) is None


@pytest.mark.slow
@pytest.mark.compile
@pytest.mark.skipif(
    os.environ.get("CACTUS_THEORY_COMPILE_ROOT") != "1",
    reason="compiling takes minutes on a CPU; CACTUS_THEORY_COMPILE_ROOT=1 runs it (.ci/run sets it: "
    "./dev test's stage 'compile')",
)
def test_compiled_root_is_the_device_path():
    fn = kernel.compiled_root("kl", torch.float32, "cpu", 0.3)
    for n, seed in ((512, 6), (3001, 7)):
        q = _q(n, seed)
        assert torch.equal(fn(q), spike.device_root(q, 0.3, KL))


def test_dispatch_modes_take_the_rules_own_path(monkeypatch):
    """Under a Python dispatch mode (where compiled graphs do not run) the kernel steps aside."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    monkeypatch.setattr(kernel, "_off_host", lambda t: True)
    monkeypatch.setattr(kernel, "compiled_root", lambda *key: pytest.fail("compiled root under a mode"))
    with Passthrough():
        assert kernel.exact_root_at_tokens(CactusExact(DELTA), _q(10, 8)) is None

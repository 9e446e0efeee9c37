r"""Cactus's torch speed paths.

For every spike rule (:class:`~cactus_theory.rules.registry.SpikeRule`: Cactus-Taylor,
Cactus-exact), Theorem 2's recovery weights :math:`\max(0, h^{(n)} - p)` as one scaled copy
of q with the spike written in place (no one-hot mask), the row sums folded into the scale
factors (no normalized copies); the derived form is
:func:`~cactus_theory.rules.plans._spike_residual_weights`.

For Cactus-exact (:class:`~cactus_theory.rules._cactus.CactusExact`) on a device other than
the CPU, Theorem 2's root at the drafted tokens as one compiled computation: the solver's
device path (:func:`cactus_theory.solvers._spike.device_root`: the certified iteration in
float64 and the rounding to the input dtype, a few thousand elementwise operators with fixed
counts) traced once into an aten graph (``make_fx``, symbolic sizes) and compiled by
inductor into fused kernels, instead of one kernel launch per operator. CPU tensors keep the
solver's host path (numpy).
"""

from __future__ import annotations

import threading

import torch

from ...conventions import EMPTY_RESIDUAL_MASS
from ...divergences import get_divergence
from ...rules.internal import CactusExact
from ...rules.plans import _spike_target_
from ...rules.registry import SpikeRule
from ...solvers.internal import device_root, has_device_root
from ._registry import RuleKernels, register_kernels

__all__: list = []


def spike_recovery_weights(rule, target_probs, draft_probs, token_ids, gamma_n, target_sums, draft_sums):
    r"""Recovery weights :math:`\max(0, h^{(n)} - p)` from the drafted tokens' gamma, in place.

    :math:`h^{(n)}_i = c_n q_i`, :math:`c_n = (1-\gamma_n)/(1-q_n)`, with
    :math:`h^{(n)}_n = \gamma_n` (Theorem 2), built as one scaled copy of q with the spike
    written in place; where the residual is empty, :math:`h^{(n)}` itself (convention 3).
    The rows are un-normalized, q = ``target_probs / target_sums`` and p = ``draft_probs /
    draft_sums`` (sums and ``gamma_n`` of shape ``token_ids.shape``), and both are
    overwritten (the samplers pass copies they own). The same values as the derived
    :func:`~cactus_theory.rules.plans._spike_residual_weights` up to float32 rounding.
    """
    h = _spike_target_(target_probs, token_ids, gamma_n, target_sums)
    res = torch.addcmul(h, draft_probs, (-1.0 / draft_sums)[..., None], out=draft_probs).clamp_min_(0.0)
    empty = res.sum(-1, keepdim=True) <= EMPTY_RESIDUAL_MASS
    # an empty residual row is all zeros: 0 + h = h there, res + 0 h = res elsewhere
    return res.addcmul_(h, empty.to(res.dtype))


register_kernels(SpikeRule, RuleKernels(spike_recovery_weights=spike_recovery_weights))


#: Inductor settings of the compiled root: eager torch's numerics where inductor offers the
#: choice (no fused multiply-adds, rounded division, the CUDA toolkit's libdevice); the keys a
#: torch version lacks are left out, and the last ones dropped in turn where compiling with
#: them fails.
_NUMERICS = {
    "emulate_precision_casts": True,
    "eager_numerics.division_rounding": True,
    "eager_numerics.use_pytorch_libdevice": True,
}

_COMPILED: dict = {}
_LOCK = threading.Lock()


def _inductor_options() -> dict:
    from torch._inductor import config

    out = {}
    for key, value in _NUMERICS.items():
        obj = config
        *path, leaf = key.split(".")
        try:
            for part in path:
                obj = getattr(obj, part)
            getattr(obj, leaf)
        except AttributeError:
            continue
        out[key] = value
    return out


def compiled_root(divergence, dtype, device_type, delta):
    r"""The compiled :func:`~cactus_theory.solvers._spike.device_root` for one divergence,
    input dtype, device type and budget: a function of the flat ``q_n`` (any length) and, for
    a tensor ``delta``, the flat budgets of the same length.

    A Python ``delta`` is a constant of the graph (what ``device_root`` does with it: its
    float64 value in the iteration, the input dtype in the rounding's comparisons); a tensor
    ``delta`` is an input (pass it as its dtype). Compiled on first use, cached per key.
    """
    key = (get_divergence(divergence).name, dtype, device_type, delta)
    fn = _COMPILED.get(key)
    if fn is not None:
        return fn
    with _LOCK:
        fn = _COMPILED.get(key)
        if fn is None:
            graph = traced_root(divergence, dtype, device_type, delta)
            example = [torch.full((16,), 0.25, dtype=dtype, device=device_type)]
            if isinstance(delta, torch.dtype):
                example.append(torch.full((16,), 0.1, dtype=delta, device=device_type))
            options = _inductor_options()
            while True:  # compiled by its first call; an option the installed torch lacks is dropped
                fn = torch.compile(graph, dynamic=True, fullgraph=True, options=options)
                try:
                    fn(*example)
                    break
                except Exception:
                    if not options:
                        raise
                    options = dict(list(options.items())[:-1])
            _COMPILED[key] = fn
        return fn


def traced_root(divergence, dtype, device_type, delta):
    """:func:`~cactus_theory.solvers._spike.device_root` traced into an aten graph of symbolic
    length (``make_fx``): what :func:`compiled_root` compiles (arguments as there)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    d = get_divergence(divergence)
    example = torch.full((16,), 0.25, dtype=dtype, device=device_type)
    if isinstance(delta, torch.dtype):
        budgets = torch.full((16,), 0.1, dtype=delta, device=device_type)
        return make_fx(lambda q, dl: device_root(q, dl, d), tracing_mode="symbolic")(example, budgets)
    return make_fx(lambda q: device_root(q, delta, d), tracing_mode="symbolic")(example)


def _dispatch_mode_active() -> bool:
    """True under a Python dispatch mode (a tracer's, an operator counter's): torch.compile
    does not run its graphs there, so the rule's own path runs instead (the same floats)."""
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    return _get_current_dispatch_mode() is not None


def _off_host(t) -> bool:
    """True for a tensor off the CPU (where the compiled root replaces the solver's many
    launches; a CPU tensor's root is numpy's)."""
    return t.device.type != "cpu"


def exact_root_at_tokens(rule, q_n):
    r"""Theorem 2's :math:`\gamma_n` at the drafted tokens (``rule.spike_at_tokens(q_n)``) by
    :func:`compiled_root`, for tensors off the CPU and divergences with a derivative, outside
    Python dispatch modes; None otherwise (the rule's own path: numpy on the host, bisection
    for TV, the same floats on the device)."""
    if not _off_host(q_n) or not q_n.is_floating_point() or q_n.numel() == 0 or _dispatch_mode_active():
        return None
    d = get_divergence(rule.divergence)
    if not has_device_root(d):
        return None
    fn = compiled_root(d.name, q_n.dtype, q_n.device.type, float(rule.delta))
    flat = q_n.reshape(-1).contiguous()
    if flat.numel() < 2:  # lengths 0 and 1 are specialized apart: one compiled length range
        return fn(flat.repeat(2))[:1].reshape(q_n.shape)
    return fn(flat).reshape(q_n.shape)


register_kernels(
    CactusExact,
    RuleKernels(spike_recovery_weights=spike_recovery_weights, spike_at_tokens=exact_root_at_tokens),
)

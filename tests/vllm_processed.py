"""vLLM's processed verifier row in float64, the oracle of the plugin's rows under temperature,
top-k and top-p."""

import numpy as np


def softmax(z):
    """softmax over the last axis (float64)."""
    w = np.exp(z - z.max(-1, keepdims=True))
    return w / w.sum(-1, keepdims=True)


def processed_row(z, T, top_k, top_p):
    """vLLM's processed verifier row in float64 (``apply_sampling_constraints``): logits / T,
    then top-k (keep logits >= the k-th largest), then top-p over the ascending sort (drop the
    tokens whose cumulative probability is <= 1 - top_p, always keeping the largest)."""
    z = z / T
    order = np.argsort(z, kind="stable")
    zs = z[order]
    keep = zs >= zs[len(z) - top_k]
    ps = np.where(keep, np.exp(zs - zs.max()), 0.0)
    ps /= ps.sum()
    keep &= ~(np.cumsum(ps) <= 1 - top_p)
    keep[-1] = True
    mask = np.zeros(len(z), dtype=bool)
    mask[order[keep]] = True
    return np.where(mask, softmax(np.where(mask, z, -np.inf)), 0.0)

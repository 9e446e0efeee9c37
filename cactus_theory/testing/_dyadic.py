"""Probability rows on a dyadic grid: exact in float32, summing to 1 exactly."""

from __future__ import annotations

import numpy as np


def dyadic(probs, bits: int = 20) -> np.ndarray:
    r"""Probability rows rounded to multiples of :math:`2^{-bits}`, summing to 1 exactly.

    Largest-remainder rounding; zeros stay zeros and every positive entry stays positive
    (at least :math:`2^{-bits}`). For ``bits <= 24`` the rows are exact in float32 and their
    float32 sums are exactly 1, so a float32 sampler and the float64 analysis see the same
    distributions.

    Parameters
    ----------
    probs : array_like, shape (..., V)
        Non-negative rows with positive sums (renormalized first).
    bits : int
        Resolution, 1..24.
    """
    if not 1 <= int(bits) <= 24:
        raise ValueError(f"bits: expected 1..24, got {bits}")
    x = np.asarray(probs, dtype=np.float64)
    if x.ndim < 1 or x.shape[-1] == 0 or not np.all(np.isfinite(x)) or np.any(x < 0):
        raise ValueError("probs: expected finite non-negative rows (..., V)")
    sums = x.sum(-1, keepdims=True)
    if np.any(sums <= 0):
        raise ValueError("probs: every row needs a positive sum")
    scale = float(2 ** int(bits))
    if np.any((x > 0).sum(-1) > scale):
        raise ValueError(f"bits: {bits} bits cannot keep every positive entry of a row positive")
    flat = (x / sums).reshape(-1, x.shape[-1]) * scale
    support = (x > 0).reshape(flat.shape)  # from x: a subnormal entry's share can underflow
    out = np.empty_like(flat)
    for r, row in enumerate(flat):
        units = np.floor(row)
        units[support[r] & (units == 0)] = 1
        short = int(scale - units.sum())
        order = np.argsort(-(row - units), kind="stable")
        if short > 0:
            units[order[:short]] += 1
        while short < 0:  # raised entries took too much: take from the largest
            j = int(np.argmax(units))
            units[j] -= 1
            short += 1
        out[r] = units / scale
    return out.reshape(x.shape)

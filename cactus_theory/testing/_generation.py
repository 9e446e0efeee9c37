r"""The law of whole generations: token sequences against their exact joint law.

An engine's full speculative path (drafting with a draft model, verifying, drawing the bonus
token, the cache and the loop around them) is lossless when the first m tokens it generates
after a prompt follow the target model's own joint law

.. math:: P(x_1, \dots, x_m) = \prod_{j=1}^{m} q(x_j \mid \text{prompt}, x_{<j}),

which a small vocabulary lets one enumerate (:func:`target_joint_law`, one model call per
prefix). :func:`sequence_law` compares generated sequences with it by Pearson's chi-square over
the :math:`V^m` sequences (cells of small expected count pooled; a sequence of probability 0
that is generated fails outright) and states the smallest total variation it detects.

Symbols: q verifier (the target model's processed next-token law).
"""

from __future__ import annotations

import itertools

import numpy as np

from ._stats import DEFAULT_POWER, _chi_square, detectable_tv
from ._torch import torch


def target_joint_law(next_token_probs, prompt, vocab: int, length: int) -> np.ndarray:
    """The exact joint law ``(vocab,) * length`` of the first ``length`` tokens after ``prompt``.

    Parameters
    ----------
    next_token_probs : callable
        ``f(ids: list[int]) -> (vocab,)`` the target's next-token probabilities after ``ids``
        (processed as the generation processes them: temperature, top-k, top-p).
    prompt : sequence of int
    vocab, length : int
    """
    if length < 1 or vocab < 1:
        raise ValueError(f"length: expected length >= 1 and vocab >= 1, got {length}, {vocab}")
    joint = np.ones((1,) * 0)
    for j in range(length):
        step = np.empty((vocab,) * j + (vocab,))
        for prefix in itertools.product(range(vocab), repeat=j):
            row = np.asarray(next_token_probs(list(prompt) + list(prefix)), dtype=np.float64)
            if row.shape != (vocab,) or np.any(row < 0) or not row.sum() > 0:
                raise ValueError(f"next_token_probs: expected {vocab} non-negative probabilities")
            step[prefix] = row / row.sum()
        joint = joint[..., None] * step
    return joint


def sequence_law(sequences, joint, *, alpha: float = 1e-6, min_expected: float = 5.0, power=DEFAULT_POWER):
    """Generated token sequences ``[N, m]`` against their exact joint law ``(V,) * m``.

    Returns
    -------
    dict
        ``passed`` (p-value >= ``alpha``), ``p_value``, ``n``, ``cells`` (tested after pooling),
        ``detectable_tv`` (the smallest total variation detected with probability ``power``)
        and ``detail`` (the observed total variation and the largest deviation).
    """
    joint = np.asarray(joint, dtype=np.float64)
    seq = np.asarray(sequences.cpu() if torch.is_tensor(sequences) else sequences, dtype=np.int64)
    if seq.ndim != 2 or seq.shape[1] != joint.ndim:
        raise ValueError(f"sequences: expected shape (N, {joint.ndim}), got {seq.shape}")
    v = joint.shape[-1]
    if np.any((seq < 0) | (seq >= v)):
        raise ValueError(f"sequences: token ids outside 0..{v - 1}")
    counts = np.bincount(np.ravel_multi_index(seq.T, joint.shape), minlength=joint.size)
    pv, detail, cells = _chi_square(counts, joint.ravel(), min_expected)
    n = len(seq)
    return {
        "passed": pv >= alpha,
        "p_value": pv,
        "n": n,
        "cells": cells,
        "detectable_tv": detectable_tv(n, max(cells - 1, 1), alpha, power),
        "detail": detail,
    }

r"""Synthetic trajectories for the teacher-forced chain simulator.

A synthetic trajectory is T independent (q_t, p_t) pairs from one of the families of
:func:`cactus_theory.distributions.synthetic_pairs` ("dirichlet", "zipf", "logits",
"noisy_copy"), optionally processed by :func:`cactus_theory.distributions.truncate`
(temperature, top-k, top-p) exactly as an engine processes logits; the raw pairs are kept for
rules that decide on them. Positions are independent, so the trajectory is teacher-forced by
construction: nothing depends on the emitted text. Symbols: q verifier (``target_probs``),
p drafter (``draft_probs``).
"""

from __future__ import annotations

import numpy as np

from ..distributions import FAMILIES, synthetic_pairs, truncate
from ._chain import Trajectory, _positive_int

__all__ = ["synthetic_trajectory", "FAMILIES"]


def synthetic_trajectory(
    family: str = "dirichlet",
    length: int = 128,
    vocab_size: int = 32,
    rng=None,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    **family_knobs,
) -> Trajectory:
    r"""One synthetic trajectory of ``length`` independent (q_t, p_t) pairs.

    Parameters
    ----------
    family : {"dirichlet", "zipf", "logits", "noisy_copy"}
        The pair family (:func:`cactus_theory.distributions.synthetic_pairs`).
    length : int
        T >= 1.
    vocab_size : int
        V >= 1.
    rng : int, numpy.random.Generator or None
        Seed or generator.
    temperature, top_k, top_p : optional
        Processing applied to both q and p (the raw pairs are kept as ``raw_*``).
    **family_knobs
        Passed to ``synthetic_pairs`` (e.g. ``concentration``).

    Returns
    -------
    Trajectory
        Processed q, p with raw q, p attached (teacher-forced by construction).
    """
    length = _positive_int(length, "length")
    vocab_size = _positive_int(vocab_size, "vocab_size")
    raw_q, raw_p = synthetic_pairs(family, length, vocab_size, rng, **family_knobs)
    processed = temperature != 1.0 or top_k is not None or top_p is not None
    if processed:
        q = truncate(raw_q, temperature=temperature, top_k=top_k, top_p=top_p)
        p = truncate(raw_p, temperature=temperature, top_k=top_k, top_p=top_p)
    else:
        q, p = raw_q, raw_p
    label = f"synthetic {family}, T={length}, V={vocab_size}"
    if processed:
        label += f", temperature={temperature}, top_k={top_k}, top_p={top_p}"
    return Trajectory(np.asarray(q), np.asarray(p), np.asarray(raw_q), np.asarray(raw_p), label)

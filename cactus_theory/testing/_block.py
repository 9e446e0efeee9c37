r"""Block verification's exact law, by enumeration of the draft sequences.

Block verification (Sun et al.) verifies k drafts :math:`n_1, \dots, n_k` (:math:`n_i \sim
p_i`) jointly against the verifier rows :math:`q_i`. With :math:`P_0 = 1` and

.. math::

    P_i = \min\Big(1, P_{i-1} \frac{q_i(n_i)}{p_i(n_i)}\Big), \qquad
    Z_{i} = \sum_x \max\big(P_{i-1} q_i(x) - p_i(x), 0\big),

    \eta_i = \frac{Z_{i+1}}{Z_{i+1} + 1 - P_i} \ (i < k;\ 1 \text{ where the denominator is 0}),
    \qquad \eta_k = P_k,

it keeps :math:`\tau = \max\{i : u_i < \eta_i\}` drafts (0 when none passes; the uniforms
:math:`u_i` independent), and emits after them a token of the block residual
:math:`\max(P_\tau q_{\tau+1} - p_{\tau+1}, 0)` (normalized), or the bonus token from
:math:`q_{k+1}` when :math:`\tau = k`. The emitted sequence is the verifier's law truncated at a
stopping time (the paper's Theorem 1: lossless), so with rows that do not depend on the earlier
tokens, the token at each reached position follows that position's verifier row; its
acceptance (the probability of going on from a reached position) is larger than token-wise
verification's (Theorem 2) and depends on the whole block.

:func:`block_law` computes the reach probabilities, the emitted law and the acceptance of every
position exactly, summing over every draft sequence of positive probability (a draft a
drafter row gives probability 0 is never drawn).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token;
positions are 0-based in the code (the formulas above are the paper's 1-based ones).

References
----------
Sun, Mendlovic, Leviathan, Aharoni, Beirami, Ro, Suresh, "Block Verification Accelerates
Speculative Decoding", arXiv 2403.10444 (v3), Algorithm 2, Theorems 1-2. vLLM 0.32
``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py`` (``_rejection_kernel``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..rules import get_rule

#: The registry-free name of block verification in the sampler-law check.
BLOCK = "block"
#: The most draft sequences :func:`block_law` enumerates.
MAX_SEQUENCES = 2_000_000


@dataclass(frozen=True)
class BlockRule:
    """Block verification (Sun et al.), as the rule the sampler-law check compares with.

    It is no rule of the registry (its acceptance depends on the whole block, not on one
    position's rows): :func:`~cactus_theory.testing.check_sampler_law` and
    :func:`~cactus_theory.testing.exact_law` take it as ``rule="block"``.
    """

    name: str = BLOCK


def _is_block(rule) -> bool:
    return isinstance(rule, BlockRule) or (isinstance(rule, str) and rule == BLOCK)


def resolve_rule(rule):
    """``rule`` as the check uses it: :class:`BlockRule` for ``"block"``, else the registry's
    (:func:`cactus_theory.get_rule`)."""
    if _is_block(rule):
        return rule if isinstance(rule, BlockRule) else BlockRule()
    return get_rule(rule)


def _sequences(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every draft sequence of positive probability ``[N, k]`` and its probability ``[N]``."""
    k = p.shape[0]
    supports = [np.flatnonzero(p[i] > 0) for i in range(k)]
    count = int(np.prod([len(s) for s in supports], dtype=np.float64))
    if count > MAX_SEQUENCES:
        raise ValueError(
            f"draft_probs: block verification's exact law sums over every draft sequence; these rows "
            f"have {count:,} (at most {MAX_SEQUENCES:,}: fewer drafts or smaller supports)"
        )
    grids = np.meshgrid(*supports, indexing="ij")
    seqs = np.stack([g.reshape(-1) for g in grids], axis=1)
    prob = np.prod(p[np.arange(k)[None, :], seqs], axis=1)
    return seqs, prob


def _cumulative(q: np.ndarray, p: np.ndarray, seqs: np.ndarray) -> np.ndarray:
    """``P [N, k+1]``: :math:`P_0 = 1`, then the clipped cumulative ratios of each sequence."""
    k = p.shape[0]
    idx = np.arange(k)[None, :]
    q_n, p_n = q[idx, seqs], p[idx, seqs]
    cum = np.ones((len(seqs), k + 1))
    for i in range(k):
        cum[:, i + 1] = np.minimum(1.0, cum[:, i] * q_n[:, i] / p_n[:, i])
    return cum


def _thresholds(q: np.ndarray, p: np.ndarray, cum: np.ndarray) -> np.ndarray:
    r"""``eta [N, k]``: :math:`\eta_i` of each sequence (0-based i; the last is :math:`P_k`)."""
    k = p.shape[0]
    eta = np.empty((cum.shape[0], k))
    for i in range(k - 1):
        z = np.maximum(cum[:, i + 1, None] * q[None, i + 1] - p[None, i + 1], 0.0).sum(-1)
        denom = z + 1.0 - cum[:, i + 1]
        eta[:, i] = np.where(denom > 0, z / np.where(denom > 0, denom, 1.0), 1.0)
    eta[:, k - 1] = cum[:, k]
    return eta


def _stop_law(eta: np.ndarray) -> np.ndarray:
    r"""``[N, k+1]``: :math:`P(\tau = t)` per sequence, :math:`\tau = \max\{i : u_i < \eta_i\}`."""
    n, k = eta.shape
    none_after = np.ones((n, k + 1))  # prod_{j >= t} (1 - eta_j), 0-based j
    for t in range(k - 1, -1, -1):
        none_after[:, t] = none_after[:, t + 1] * (1.0 - eta[:, t])
    stop = np.empty((n, k + 1))
    stop[:, 0] = none_after[:, 0]
    stop[:, 1:] = eta * none_after[:, 1:]
    return stop


def _residuals(q: np.ndarray, p: np.ndarray, cum: np.ndarray, i: int) -> np.ndarray:
    r"""``[N, V]``: the normalized block residual :math:`\max(P_i q_i - p_i, 0)` at 0-based i
    (q itself where it is empty: there the block never stops)."""
    res = np.maximum(cum[:, i, None] * q[None, i] - p[None, i], 0.0)
    total = res.sum(-1, keepdims=True)
    return np.where(total > 0, res / np.where(total > 0, total, 1.0), q[None, i])


def chain_rows(target_probs, draft_probs):
    """One chain's rows as float64: q of shape (k + 1, V) (k draft rows and the bonus row) and
    p of shape (k, V), k >= 1; ValueError naming the argument otherwise."""
    q = np.asarray(target_probs, dtype=np.float64)
    p = np.asarray(draft_probs, dtype=np.float64)
    if p.ndim != 2 or p.shape[0] < 1:
        raise ValueError(f"draft_probs: expected shape (k, V) with k >= 1, got {p.shape}")
    k, v = p.shape
    if q.shape != (k + 1, v):
        raise ValueError(
            f"target_probs: expected shape {(k + 1, v)} (k draft rows and the bonus row), got {q.shape}"
        )
    return q, p


def block_law(target_probs, draft_probs) -> dict:
    r"""The exact law of one block-verification step of k drafts.

    Parameters
    ----------
    target_probs : array_like, shape (k + 1, V)
        Verifier rows q (the last is the bonus row).
    draft_probs : array_like, shape (k, V)
        Drafter rows p (normalized here).

    Returns
    -------
    dict
        ``reach`` (k + 1,): :math:`P(\tau \ge i)`, the probability that 0-based position i
        emits a token; ``emitted`` (k, V): the law of that token given the position is reached
        (the verifier row where it is never reached); ``acceptance`` (k,): the probability of
        going on from a reached position, ``reach[i + 1] / reach[i]`` (0 where unreached);
        ``accepted_mass`` (k, V): the emitted law's part from kept drafts; ``stop`` (N, k + 1)
        and ``sequences`` (N, k): the law of :math:`\tau` for each draft sequence.

    Raises
    ------
    ValueError
        Rows of the wrong shape, or more than :data:`MAX_SEQUENCES` draft sequences.
    """
    q, p = chain_rows(target_probs, draft_probs)
    k, v = p.shape
    q = q / q.sum(-1, keepdims=True)
    p = p / p.sum(-1, keepdims=True)
    seqs, prob = _sequences(p)
    cum = _cumulative(q, p, seqs)
    stop = _stop_law(_thresholds(q, p, cum))
    w = prob[:, None] * stop  # P(X = x, tau = t)
    beyond = np.cumsum(w[:, ::-1], axis=1)[:, ::-1]  # P(X = x, tau >= t)
    reach = beyond.sum(0)
    emitted = np.empty((k, v))
    accepted = np.empty((k, v))
    for i in range(k):
        kept = np.bincount(seqs[:, i], weights=beyond[:, i + 1], minlength=v)
        stopped = (w[:, i, None] * _residuals(q, p, cum, i)).sum(0)
        scale = 1.0 / reach[i] if reach[i] > 0 else 0.0
        accepted[i] = kept * scale
        emitted[i] = (kept + stopped) * scale if reach[i] > 0 else q[i]
    acceptance = np.where(reach[:k] > 0, reach[1:] / np.where(reach[:k] > 0, reach[:k], 1.0), 0.0)
    return {
        "reach": reach,
        "emitted": emitted,
        "acceptance": acceptance,
        "accepted_mass": accepted,
        "stop": stop,
        "sequences": seqs,
    }


def block_greedy_on_one_hot(q_one_hot, draft_probs) -> bool:
    """Block verification on one-hot verifier rows is greedy verification: every draft sequence
    keeps exactly its drafts up to the first one that is not the argmax."""
    q = np.asarray(q_one_hot, dtype=np.float64)
    law = block_law(q, draft_probs)
    k = q.shape[0] - 1
    match = law["sequences"] == q[:k].argmax(-1)[None, :]
    first = np.where(match.all(1), k, np.argmin(match, axis=1))
    return bool(np.allclose(law["stop"][np.arange(len(first)), first], 1.0, atol=1e-12))

r"""Exact labels for acceptance predictors, and the verify length that maximises throughput.

A round drafts :math:`n_1, \dots, n_m` (the realised drafts) at positions with rows
:math:`(q_j, p_j)`; the rule accepts :math:`n_j` with probability :math:`a_j = a_{t_j}(n_j)`
given the drafts, each with its own uniform, and the round stops at the first rejection.
Given the realised drafts the only randomness left is the verifier's coins, so the
probability that the first j drafts all survive is exactly

.. math:: S_j = \prod_{i \le j} a_i, \qquad j = 1, \dots, m,

the label an acceptance predictor (an adaptive draft-length head) should regress on instead
of the sampled 0/1 outcome: the outcome is a Bernoulli draw with mean :math:`S_j`, so the
label has the same expectation and no coin noise. Verifying the first k drafts emits
:math:`N + 1` tokens (the accepted prefix N, then a recovered or bonus token), with

.. math:: E_k = E[N + 1] = 1 + \sum_{j \le k} S_j ,

and with a cost table :math:`c_k` (the time of a round that verifies k drafts, drafting
included; :math:`c_0` one plain decoding step) the expected throughput of verifying k drafts
is :math:`E_k / c_k`. :func:`best_verify_length` returns the k that maximises it (the
smallest among ties).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`a_j` the rule's acceptance at the j-th realised draft.

References
----------
Leviathan et al. 2023 (arXiv 2211.17192), Section 3.1 (expected tokens per round); the
prefix-survival form for position-dependent acceptance as in :mod:`.exact`.
"""

from __future__ import annotations

import numpy as np

from .._validation import token_ids_of
from ..analysis.one_step import make_plan

__all__ = ["realised_acceptance", "survival_probabilities", "expected_round_tokens", "best_verify_length"]


def realised_acceptance(
    rule, target_probs, draft_probs, draft_token_ids, *, raw_target_probs=None, raw_draft_probs=None
) -> np.ndarray:
    r"""The rule's acceptance :math:`a_j = a_{t_j}(n_j)` of each realised draft.

    Parameters
    ----------
    rule : str or Rule
    target_probs, draft_probs : array_like, shape (..., m, V)
        The rows at the drafted positions (q verifier, p drafter).
    draft_token_ids : array_like of int, shape (..., m)
        The realised drafts n.
    raw_target_probs, raw_draft_probs : array_like, optional
        Raw rows, for rules that decide on them.

    Returns
    -------
    ndarray, shape (..., m)
        Acceptance probabilities in [0, 1] (float64).
    """
    plan = make_plan(
        rule, target_probs, draft_probs, raw_target_probs=raw_target_probs, raw_draft_probs=raw_draft_probs
    )
    ids = token_ids_of(plan.target_probs, draft_token_ids, "draft_token_ids")
    return np.clip(np.asarray(plan.accept_probs_at(ids), dtype=np.float64), 0.0, 1.0)


def _accept_rows(accept_at_drafts) -> np.ndarray:
    a = np.asarray(accept_at_drafts, dtype=np.float64)
    if a.ndim == 0 or a.shape[-1] == 0:
        raise ValueError("accept_at_drafts: expected an array of shape (..., m) with m >= 1")
    if not np.all(np.isfinite(a)) or np.any((a < 0) | (a > 1)):
        raise ValueError("accept_at_drafts: acceptance probabilities must lie in [0, 1]")
    return a


def survival_probabilities(accept_at_drafts) -> np.ndarray:
    r""":math:`S_j = \prod_{i \le j} a_i`: the probability that the first j realised drafts
    are all accepted (the exact label of the j-th draft's survival).

    Parameters
    ----------
    accept_at_drafts : array_like, shape (..., m)
        :math:`a_1, \dots, a_m` (e.g. from :func:`realised_acceptance`).

    Returns
    -------
    ndarray, shape (..., m)
        Nonincreasing along the last axis.
    """
    return np.cumprod(_accept_rows(accept_at_drafts), axis=-1)


def expected_round_tokens(survival) -> np.ndarray:
    r""":math:`E_k = 1 + \sum_{j \le k} S_j` for k = 0..m: the expected tokens a round emits
    when it verifies the first k drafts (accepted prefix plus the recovered or bonus token).

    Parameters
    ----------
    survival : array_like, shape (..., m)
        :math:`S_1, \dots, S_m`.

    Returns
    -------
    ndarray, shape (..., m + 1)
    """
    s = _accept_rows(survival)
    if np.any(np.diff(s, axis=-1) > 0):
        raise ValueError("survival: survival probabilities must be nonincreasing along the drafts")
    zero = np.zeros(s.shape[:-1] + (1,))
    return 1.0 + np.concatenate([zero, np.cumsum(s, axis=-1)], axis=-1)


def best_verify_length(survival, cost):
    r"""The number of drafts to verify that maximises expected throughput :math:`E_k / c_k`.

    Parameters
    ----------
    survival : array_like, shape (..., m)
        :math:`S_1, \dots, S_m` of the realised drafts (:func:`survival_probabilities`).
    cost : array_like, shape (m + 1,)
        :math:`c_k > 0`, the time of a round that verifies k drafts (k = 0..m).

    Returns
    -------
    k : ndarray of int, shape (...)
        The maximiser (the smallest k among ties).
    throughput : ndarray, shape (..., m + 1)
        :math:`E_k / c_k` for every k.
    """
    e = expected_round_tokens(survival)
    c = np.asarray(cost, dtype=np.float64)
    if c.shape != (e.shape[-1],):
        raise ValueError(f"cost: expected {e.shape[-1]} entries (k = 0..m), got shape {c.shape}")
    if not np.all(np.isfinite(c)) or np.any(c <= 0):
        raise ValueError("cost: every round cost must be finite and positive")
    throughput = e / c
    return np.argmax(throughput, axis=-1), throughput

r"""The exact law of one verification step: what the sampler's output is compared with.

One verification step of k drafts :math:`n_i \sim p_i` against verifier rows :math:`q_i`
emits, at each position i it reaches, a token with the law (paper, Theorem 3)

.. math:: h_{alg,i}(j) = p_{ij} a_i(j) + \sum_n p_{in} (1 - a_i(n))\, r_i^{(n)}(j)

and goes on to position i + 1 (accepts) with probability :math:`\alpha_i = \sum_n p_{in}
a_i(n)`, computed by the analysis layer (:func:`cactus_theory.emitted_distribution`,
:func:`cactus_theory.acceptance_rate`).

References
----------
Hao & Mou, "Cactus", ICLR 2026, arXiv 2604.04987: Theorem 3.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..analysis import acceptance_probabilities, acceptance_rate, emitted_distribution
from ._block import _is_block, block_law, chain_rows, resolve_rule


@dataclass(frozen=True)
class ExactLaw:
    r"""The exact law of one verification step of k drafts (one case).

    Attributes
    ----------
    acceptance : ndarray, shape (k,)
        :math:`\alpha_i`, the probability that position i accepts its draft.
    emitted : ndarray, shape (k, V)
        :math:`h_{alg,i}`, the law of the token emitted at position i when it is reached.
    accepted_mass : ndarray, shape (k, V)
        :math:`p_{ij} a_i(j)`: emitted j by accepting it.
    reach : ndarray, shape (k + 1,)
        :math:`\prod_{l<i} \alpha_l`, the probability that position i is reached (position
        k: the bonus token is emitted).
    expected_emitted : float
        Expected emitted tokens per step, :math:`\sum_{i=0}^{k} \prod_{l<i}\alpha_l`.
    expected_accepted : float
        Expected non-causal accepted count per step (vLLM 0.7's ``num_accepted_tokens``),
        :math:`\sum_i \alpha_i`.
    expected_accepted_prefix : float
        Expected accepted-prefix length, :math:`\sum_{i=1}^{k} \prod_{l<i}\alpha_l`.
    """

    acceptance: np.ndarray
    emitted: np.ndarray
    accepted_mass: np.ndarray
    reach: np.ndarray

    @property
    def expected_emitted(self) -> float:
        return float(self.reach.sum())

    @property
    def expected_accepted(self) -> float:
        return float(self.acceptance.sum())

    @property
    def expected_accepted_prefix(self) -> float:
        return float(self.reach[1:].sum())


def exact_law(rule, target_probs, draft_probs, *, raw_target_probs=None, raw_draft_probs=None) -> ExactLaw:
    r"""The exact per-position law of one step (:class:`ExactLaw`) of ``rule``.

    Parameters
    ----------
    rule : str or Rule
        A registry name (default knobs) or a configured rule (:func:`cactus_theory.get_rule`),
        or ``"block"``: block verification (Sun et al.), whose law is computed by enumerating
        the draft sequences (:mod:`._block`; its acceptance depends on the whole block).
    target_probs : array_like, shape (k + 1, V)
        Verifier rows q at the k draft positions and the bonus position (the bonus row is
        not read).
    draft_probs : array_like, shape (k, V)
        Drafter rows p.
    raw_target_probs, raw_draft_probs : array_like, optional
        The raw (temperature-1) rows, shapes as ``target_probs`` and ``draft_probs``, of a rule
        that decides on them (``rule.spec.needs_raw``: fuzzy, margin, relaxed-topk, scd,
        cascades); default: the processed rows.

    Returns
    -------
    ExactLaw
        ``acceptance`` (k,) :math:`\alpha_i`, ``emitted`` (k, V) :math:`h_{alg,i}`,
        ``accepted_mass`` (k, V) :math:`p_{ij} a_i(j)`, ``reach`` (k + 1,) the probability that
        position i is reached, and the expectations ``expected_emitted``,
        ``expected_accepted`` (vLLM 0.7's non-causal count) and ``expected_accepted_prefix``.

    Examples
    --------
    >>> law = exact_law("sps", [[0.5, 0.5], [0.5, 0.5]], [[1.0, 0.0]])
    >>> law.acceptance.tolist(), law.emitted.tolist()
    ([0.5], [[0.5, 0.5]])
    """
    rule = resolve_rule(rule)
    q, p = chain_rows(target_probs, draft_probs)
    k, v = p.shape
    qk = q[:k]
    raw = {}
    if raw_target_probs is not None:
        rq = np.asarray(raw_target_probs, dtype=np.float64)
        if rq.shape != q.shape:
            raise ValueError(f"raw_target_probs: expected shape {q.shape} (as target_probs), got {rq.shape}")
        raw["raw_target_probs"] = rq[:k]
    if raw_draft_probs is not None:
        rp = np.asarray(raw_draft_probs, dtype=np.float64)
        if rp.shape != p.shape:
            raise ValueError(f"raw_draft_probs: expected shape {p.shape} (as draft_probs), got {rp.shape}")
        raw["raw_draft_probs"] = rp
    if _is_block(rule):  # decides on the processed rows: raw rows not read
        law = block_law(q, p)
        return ExactLaw(
            acceptance=law["acceptance"],
            emitted=law["emitted"],
            accepted_mass=law["accepted_mass"],
            reach=law["reach"],
        )
    acc = np.asarray(acceptance_rate(rule, qk, p, **raw), dtype=np.float64).reshape(k)
    a = np.asarray(acceptance_probabilities(rule, qk, p, **raw), dtype=np.float64).reshape(k, v)
    h = np.asarray(emitted_distribution(rule, qk, p, **raw), dtype=np.float64).reshape(k, v)
    p_n = p / p.sum(-1, keepdims=True)
    reach = np.concatenate([[1.0], np.cumprod(acc)])
    return ExactLaw(acceptance=acc, emitted=h, accepted_mass=p_n * a, reach=reach)

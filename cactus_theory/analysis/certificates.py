r"""Acceptance certificates of the deterministic rules, with greedy (argmax / top-m) drafting.

For a verifier row q and a deterministic acceptance test whose accepted set :math:`A(q)`
depends on q alone, the certificate is the smallest divergence between the drafter p and q
that can make the drafter's proposal rejected (Sharma, arXiv 2606.30265):

.. math:: r_D(q) = \inf\{D(p, q) : p \in \Delta_V,\ \operatorname{top}_m(p) \cap A(q) = \emptyset\}.

Model: the drafter drafts **greedily**, its argmax (``top_m = 1``, a chain) or its m most
probable tokens as the children of a tree node (``top_m = m``; the node is accepted if some
child is). Any drafter with :math:`D(p, q) < r_D(q)` is accepted whatever the tie-breaking. D
is :math:`KL(p\|q)` (``divergence="kl"``) or :math:`KL(q\|p)` (``"reverse_kl"``); both are
exact (:mod:`cactus_theory.solvers.certificates`). Which direction the paper states could not
be read from the available copy of it (its abstract says "the exact KL divergence required for
rejection"); the toolkit reports both.

Accepted sets (all upper level sets of q, so the rejection region is a lower level set):

* ``"greedy"``: :math:`A = \{\arg\max q\}` (ties: the lowest index, as ``torch.argmax``);
* ``"relaxed-topk"`` (TensorRT-LLM's relaxed MTP acceptance, ``relaxed_topk`` K and
  ``relaxed_delta`` :math:`\Delta`): the K most probable tokens of q whose probability is at
  least :math:`\max q - \Delta` (the top token always; ``mtpRelaxedAcceptanceKernel``, on the
  softmax probabilities);
* ``"tas"`` (typical acceptance, :mod:`cactus_theory.rules.tas`):
  :math:`A = \{x : q_x > \min(\epsilon, \alpha e^{-H(q)})\}`.

Symbols: q verifier (``target_probs``), p drafter, m children (``top_m``).

References
----------
A. Sharma, "When Is a Draft Accepted? A Theory of Acceptance in Speculative Decoding", arXiv
2606.30265 (2026); NVIDIA TensorRT-LLM ``MTPDecodingConfig`` (``relaxed_topk``,
``relaxed_delta``) and ``mtpRelaxedAcceptanceKernel``; Cai et al., MEDUSA, arXiv 2401.10774,
Sec. 3.3 (typical acceptance).
"""

from __future__ import annotations

import numpy as np

from .._validation import as_finite_number, as_probs, choice, positive_int
from ..rules.tas import tas_threshold
from ..solvers.certificates import CERTIFICATE_DIVERGENCES, rejection_radius

__all__ = ["CERTIFICATE_RULES", "accepted_set", "acceptance_certificate"]

#: Deterministic rules with a certificate.
CERTIFICATE_RULES = ("greedy", "relaxed-topk", "tas")


def accepted_set(
    target_probs,
    rule: str = "greedy",
    *,
    relaxed_topk: int = 1,
    relaxed_delta: float = 0.0,
    posterior_threshold: float = 0.09,
    posterior_alpha: float = 0.3,
    entropy: str = "vllm",
) -> np.ndarray:
    r"""The accepted set :math:`A(q)` of a deterministic rule, as a bool mask ``[..., V]``.

    Parameters
    ----------
    target_probs : array_like, shape (..., V)
        Verifier rows q.
    rule : {"greedy", "relaxed-topk", "tas"}
        See the module docstring.
    relaxed_topk : int
        K of ``"relaxed-topk"`` (TensorRT-LLM ``relaxed_topk``, >= 1).
    relaxed_delta : float
        :math:`\Delta` of ``"relaxed-topk"``, a probability gap to the top token (>= 0).
    posterior_threshold, posterior_alpha, entropy
        :math:`\epsilon`, :math:`\alpha` and the entropy convention of ``"tas"``
        (:func:`cactus_theory.rules.tas.tas_threshold`).

    Returns
    -------
    numpy.ndarray of bool, shape (..., V)
    """
    q = as_probs(target_probs, "target_probs")
    choice(rule, CERTIFICATE_RULES, "rule")
    V = q.shape[-1]
    top = np.argmax(q, axis=-1)
    if rule == "greedy":
        return np.arange(V) == top[..., None]
    if rule == "relaxed-topk":
        k = positive_int(relaxed_topk, "relaxed_topk")
        d = as_finite_number(relaxed_delta, "relaxed_delta", low=0.0)
        # rank of every token in q's descending order, ties by increasing index (torch.topk's
        # order on CPU is not specified for ties; the lower index first is the toolkit's rule)
        order = np.argsort(-q, axis=-1, kind="stable")
        rank = np.empty_like(order)
        np.put_along_axis(rank, order, np.arange(V)[(None,) * (q.ndim - 1)], axis=-1)
        qmax = np.max(q, axis=-1, keepdims=True)
        return (rank < k) & ((q >= qmax - d) | (rank == 0))
    eps = as_finite_number(posterior_threshold, "posterior_threshold", low=0.0, high=1.0)
    alpha = as_finite_number(posterior_alpha, "posterior_alpha", low=0.0)
    choice(entropy, ("vllm", "exact"), "entropy")
    return q > tas_threshold(q, eps, alpha, entropy)


def acceptance_certificate(
    target_probs,
    rule: str = "greedy",
    *,
    top_m: int = 1,
    divergence: str = "kl",
    relaxed_topk: int = 1,
    relaxed_delta: float = 0.0,
    posterior_threshold: float = 0.09,
    posterior_alpha: float = 0.3,
    entropy: str = "vllm",
) -> np.ndarray:
    r"""The smallest drafter-verifier divergence that can force a rejection, per verifier row.

    .. math:: r_D(q) = \inf\{D(p, q) : \operatorname{top}_m(p) \cap A(q) = \emptyset\}

    with greedy drafting (the drafter proposes its top m; ``top_m = 1`` is a chain). Every
    drafter row with :math:`D(p, q) < r_D(q)` is accepted. Exact (closed form per pooled set,
    :mod:`cactus_theory.solvers.certificates`). For greedy verification at V = 2 and
    :math:`q_1 > q_2`: :math:`-\log(2\sqrt{q_1 q_2})` in :math:`KL(p\|q)`,
    :math:`\log 2 - H(q)` in :math:`KL(q\|p)`.

    Parameters
    ----------
    target_probs : array_like, shape (..., V)
        Verifier rows q.
    rule : {"greedy", "relaxed-topk", "tas"}
        The deterministic acceptance test (:func:`accepted_set`).
    top_m : int
        Children per tree node proposed by the drafter (its m most probable tokens).
    divergence : {"kl", "reverse_kl"}
        ``"kl"``: :math:`KL(p\|q) = \sum p \log(p/q)`; ``"reverse_kl"``: :math:`KL(q\|p)`.
    relaxed_topk, relaxed_delta, posterior_threshold, posterior_alpha, entropy
        The rule's knobs (:func:`accepted_set`).

    Returns
    -------
    numpy.ndarray, shape (...)
        :math:`r_D(q)` per row (nats): 0 where the accepted set is empty, ``inf`` where no
        drafter can be rejected (fewer than m rejected tokens, or none at finite divergence).

    Examples
    --------
    >>> import numpy as np
    >>> from cactus_theory.analysis import acceptance_certificate
    >>> r = acceptance_certificate(np.array([0.8, 0.2]))  # -log(2 sqrt(0.16)) = -log 0.8
    >>> bool(np.isclose(r, -np.log(0.8)))
    True

    Symbols: q verifier (``target_probs``), p drafter, m children (``top_m``).
    """
    choice(divergence, CERTIFICATE_DIVERGENCES, "divergence")
    m = positive_int(top_m, "top_m")
    q = as_probs(target_probs, "target_probs")
    mask = accepted_set(
        q,
        rule,
        relaxed_topk=relaxed_topk,
        relaxed_delta=relaxed_delta,
        posterior_threshold=posterior_threshold,
        posterior_alpha=posterior_alpha,
        entropy=entropy,
    )
    return rejection_radius(q, mask, m, divergence)

r"""Acceptance certificates of the deterministic rules, with greedy (argmax / top-m) drafting.

For a verifier row q and a deterministic acceptance test whose accepted set :math:`A(q)`
depends on q alone, the certificate is the smallest divergence between the drafter p and q
that can make the drafter's proposal rejected (Sharma, arXiv 2606.30265):

.. math:: r_D(q) = \inf\{D(p, q) : p \in \Delta_V,\ \operatorname{top}_m(p) \cap A(q) = \emptyset\}.

Model: the drafter drafts **greedily**, its argmax (``top_m = 1``, a chain) or its m most
probable tokens as the children of a tree node (``top_m = m``; the node is accepted if some
child is). Any drafter with :math:`D(p, q) < r_D(q)` is accepted whatever the tie-breaking. D
is :math:`KL(p\|q)` (``divergence="kl"``) or :math:`KL(q\|p)` (``"reverse_kl"``); both are
exact (:mod:`cactus_theory.solvers._certificates`). Which direction the paper states could not
be read from the available copy of it (its abstract says "the exact KL divergence required for
rejection"); the toolkit reports both.

Accepted sets: any registered rule whose acceptance is 0/1 and does not read p
(``RuleSpec.deterministic`` and not ``reads_draft``), with its knobs; its accepted set is read
from its plan, :math:`A(q) = \{x : a_x = 1\}`, and must be an upper level set of q (checked).
The shipped ones:

* ``"greedy"``: :math:`A = \{x : q_x = \max q\}` (an alias of ``relaxed-topk`` with K = 1,
  :math:`\delta = \rho = 0`);
* ``"relaxed-topk"`` (TensorRT-LLM's relaxed MTP acceptance, :mod:`cactus_theory.rules._relaxed_topk`):
  the tokens among q's top ``relaxed_topk`` with :math:`q_x \ge \max q - \delta` (probabilities)
  and :math:`q_x \ge \rho \max q`; ``"vllm-relaxed-thinking"`` its vLLM #45229 preset;
* ``"tas"`` (typical acceptance, :mod:`cactus_theory.rules._tas`):
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

from .._validation import as_probs, choice, positive_int
from ..rules import RULES, get_rule
from ..solvers.internal import CERTIFICATE_DIVERGENCES, rejection_radius

__all__ = ["accepted_set", "acceptance_certificate", "certificate_rules"]


def certificate_rules() -> list[str]:
    """Registered rule names (aliases included) with 0/1 acceptance that does not read p."""
    out = []
    for name in RULES.all_names():
        spec = RULES[name]
        if spec.deterministic and not spec.reads_draft:
            out.append(name)
    return sorted(out)


def accepted_set(target_probs, rule: str = "greedy", **knobs) -> np.ndarray:
    r"""The accepted set :math:`A(q)` of a deterministic rule, as a bool mask ``[..., V]``.

    Parameters
    ----------
    target_probs : array_like, shape (..., V)
        Verifier rows q.
    rule : str
        One of :func:`certificate_rules` (``"greedy"``, ``"relaxed-topk"``, ``"tas"``, ...).
    **knobs
        The rule's knobs (e.g. ``relaxed_topk``, ``relaxed_delta`` or ``posterior_threshold``);
        the registry's defaults otherwise.

    Returns
    -------
    numpy.ndarray of bool, shape (..., V)
        :math:`a_x = 1` where the rule would accept a drafted token x (read from its plan).
    """
    q = as_probs(target_probs, "target_probs")
    choice(rule, certificate_rules(), "rule")
    plan = get_rule(rule, **knobs).plan(q, q)
    return np.asarray(plan.accept_probs(), dtype=np.float64) > 0.5


def acceptance_certificate(
    target_probs, rule: str = "greedy", *, top_m: int = 1, divergence: str = "kl", **knobs
) -> np.ndarray:
    r"""The smallest drafter-verifier divergence that can force a rejection, per verifier row.

    .. math:: r_D(q) = \inf\{D(p, q) : \operatorname{top}_m(p) \cap A(q) = \emptyset\}

    with greedy drafting (the drafter proposes its top m; ``top_m = 1`` is a chain). Every
    drafter row with :math:`D(p, q) < r_D(q)` is accepted. Exact (closed form per pooled set,
    :mod:`cactus_theory.solvers._certificates`). For greedy verification at V = 2 and
    :math:`q_1 > q_2`: :math:`-\log(2\sqrt{q_1 q_2})` in :math:`KL(p\|q)`,
    :math:`\log 2 - H(q)` in :math:`KL(q\|p)`.

    Parameters
    ----------
    target_probs : array_like, shape (..., V)
        Verifier rows q.
    rule : str
        The deterministic acceptance test, one of :func:`certificate_rules`
        (:func:`accepted_set`).
    top_m : int
        Children per tree node proposed by the drafter (its m most probable tokens).
    divergence : {"kl", "reverse_kl"}
        ``"kl"``: :math:`KL(p\|q) = \sum p \log(p/q)`; ``"reverse_kl"``: :math:`KL(q\|p)`.
    **knobs
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
    mask = accepted_set(q, rule, **knobs)
    return rejection_radius(q, mask, m, divergence)

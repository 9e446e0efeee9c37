r"""The multi-draft verifier family: its declaration form and its registry.

A multi-draft verifier decides, from a drawn draft tree (:class:`~cactus_theory.drafts.DrawnTree`:
k drafts at one position, a token tree or a chain), which drafted path to accept and which
token to emit after it. Its exact conditional law given the drawn tree is a
:class:`PathLaw`: for every drawn node u the probability that the accepted path ends at u, and
the law of the token emitted there (the correction, or the bonus token at a leaf). Everything
else — the emitted law averaged over the draws, the acceptance, the tree's expected accepted
length, the torch samplers and the invariant battery — is derived from that declaration
(:mod:`cactus_theory.analysis.multidraft`, :mod:`cactus_theory.samplers.multidraft`).

Two declaration forms:

node-wise (:class:`NodeVerifier`)
    a rule applied at each node to that node's children alone: :meth:`NodeVerifier.node_law`
    ``(q, p, child_tokens, drafting) -> NodeLaw`` (the acceptance of each child slot and the
    residual law). The tree law multiplies it along the paths; the accepted-token law
    :meth:`NodeVerifier.accepted_token_law` drives the tree's dynamic programme. RRS,
    SpecTr's k-sequential and the optimal k-draft verifier.
sequence-level (:class:`MultiDraftVerifier`)
    a rule over the whole drawn tree: :meth:`MultiDraftVerifier.tree_law`. Block verification
    (chains) and traversal verification (trees).

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), k drafts per node.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...drafts import DrawnTree, drafting_law
from ...drafts.internal import DRAFTING
from ..registry import Knob

__all__ = [
    "MultiDraftVerifier",
    "NodeVerifier",
    "NodeLaw",
    "PathLaw",
    "VerifierSpec",
    "register_verifier",
    "get_verifier",
    "VERIFIERS",
]


@dataclass(frozen=True)
class NodeLaw:
    r"""A node-wise verifier's law at one node, given the drafted children (in order).

    Attributes
    ----------
    accept_probs : ndarray, shape (k,)
        :math:`P(\text{child slot } j \text{ accepted} \mid \text{drafts})`: the verifier moves
        into child j.
    residual : ndarray, shape (V,)
        The law of the emitted token when no child is accepted (probability
        ``1 - accept_probs.sum()``).
    """

    accept_probs: np.ndarray
    residual: np.ndarray

    @property
    def reject_prob(self) -> float:
        return float(max(0.0, 1.0 - self.accept_probs.sum()))


@dataclass(frozen=True)
class PathLaw:
    r"""A verifier's exact law given one drawn tree.

    Attributes
    ----------
    end_probs : ndarray, shape (M,)
        :math:`P(\text{the accepted path ends at drawn node } u)` (sums to 1; node 0: no draft
        accepted).
    residuals : ndarray, shape (M, V)
        The law of the token emitted after the accepted path ending at u (the correction at an
        inner node, the bonus token :math:`q_u` at a leaf).
    """

    end_probs: np.ndarray
    residuals: np.ndarray


@dataclass(frozen=True)
class VerifierSpec:
    """A registry entry of the multi-draft family.

    Attributes
    ----------
    name : str
        Registry name (``"rrs"``, ``"spectr"``, ...).
    factory : callable
        ``factory(**knobs) -> MultiDraftVerifier``.
    knobs : tuple of Knob
        The verifier's parameters (most have none).
    drafting : tuple of str
        The drafting schemes it verifies (:data:`cactus_theory.drafts.DRAFTING`).
    structures : tuple of str
        ``"multi"`` (k drafts at one position), ``"tree"``, ``"chain"``.
    nodewise : bool
        Declared by :meth:`NodeVerifier.node_law` (the tree's DP applies).
    lossless : bool
        Emits exactly the verifier's law (the battery checks it by enumeration).
    max_vocab : int or None
        Largest vocabulary (support) its exact law is computed for (None: no limit beyond the
        enumerations').
    single_draft : str
        The registered per-position rule it is at one draft, with the same knob values
        (``"sps"`` for most; the battery checks it).
    summary, reference : str
        One line each.
    """

    name: str
    factory: Callable[..., MultiDraftVerifier]
    knobs: tuple[Knob, ...]
    drafting: tuple[str, ...]
    structures: tuple[str, ...]
    nodewise: bool
    lossless: bool
    summary: str
    reference: str
    max_vocab: int | None = None
    single_draft: str = "sps"

    def make(self, **knobs) -> MultiDraftVerifier:
        """The verifier with validated knobs (unknown names raise ValueError)."""
        known = {k.name: k for k in self.knobs}
        for key in knobs:
            if key not in known:
                valid = ", ".join(known) or "none"
                raise ValueError(f"{key}: not a knob of verifier {self.name!r} (knobs: {valid})")
        values = {name: k.validate(knobs.get(name, k.default)) for name, k in known.items()}
        verifier = self.factory(**values)
        verifier.spec = self
        verifier.knobs = values
        return verifier


class MultiDraftVerifier:
    """Base class: a configured multi-draft verifier. Subclasses implement :meth:`tree_law`."""

    spec: VerifierSpec
    knobs: dict

    @property
    def name(self) -> str:
        return self.spec.name

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.knobs.items())
        return f"get_verifier({self.spec.name!r}{', ' if args else ''}{args})"

    def check_tree(self, tree: DrawnTree) -> None:
        """ValueError naming ``drafting`` or ``tree`` when the verifier does not apply."""
        if tree.drafting not in self.spec.drafting:
            raise ValueError(
                f"drafting: verifier {self.name!r} verifies {', '.join(self.spec.drafting)} drafts, "
                f"not {tree.drafting!r}"
            )
        is_chain = all(len(tree.children(i)) <= 1 for i in range(tree.num_nodes))
        self.check_structure(is_chain, tree.num_nodes == 1 + len(tree.children(0)), "tree")

    def check_structure(self, is_chain: bool, is_star: bool, argument: str) -> None:
        """ValueError naming ``argument`` unless the verifier's structures include a tree, or a
        chain (``is_chain``), or k drafts at one position (``is_star``) as the drafts are."""
        structures = self.spec.structures
        if not (
            "tree" in structures
            or ("chain" in structures and is_chain)
            or ("multi" in structures and is_star)
        ):
            raise ValueError(
                f"{argument}: verifier {self.name!r} verifies {' and '.join(structures)} structures only"
            )

    def tree_law(self, tree: DrawnTree) -> PathLaw:
        """The exact law given one drawn tree (subclasses implement it)."""
        raise NotImplementedError


class NodeVerifier(MultiDraftVerifier):
    r"""A node-wise verifier, declared by :meth:`node_law` alone.

    Derived here: :meth:`tree_law` (the accepted path moves from node to node by the child
    acceptances; at a node where no child is accepted the residual is emitted, at a leaf the
    bonus token from q) and :meth:`accepted_token_law` (the node law averaged over the
    drafts, by enumeration of the draft tuples; a verifier with a closed form overrides it).
    """

    def node_law(self, target_probs, draft_probs, child_tokens, drafting: str) -> NodeLaw:
        """The law at a node with rows (q, p) given its drafted children (subclasses implement it)."""
        raise NotImplementedError

    def tree_law(self, tree: DrawnTree) -> PathLaw:
        r""":math:`P(\text{end at } u) = \prod_{\text{edges } (v, c) \text{ to } u} a_v(c)
        \cdot (1 - \sum_c a_u(c))` (1 at a leaf in place of the last factor)."""
        self.check_tree(tree)
        m = tree.num_nodes
        reach = np.zeros(m)
        reach[0] = 1.0
        end = np.zeros(m)
        residuals = np.array(tree.target_probs, dtype=np.float64)
        for u in range(m):
            kids = tree.children(u)
            if not kids:
                end[u] = reach[u]
                continue
            law = self.node_law(
                tree.target_probs[u],
                tree.draft_probs[u],
                [int(tree.token_ids[c]) for c in kids],
                tree.drafting,
            )
            for c, a in zip(kids, law.accept_probs):
                reach[c] = reach[u] * a
            end[u] = reach[u] * law.reject_prob
            residuals[u] = law.residual
        return PathLaw(end, residuals)

    def accepted_token_law(self, target_probs, draft_probs, k: int, drafting: str) -> np.ndarray:
        r""":math:`A(x) = P(\text{a draft is accepted and it is } x)`, over the k drafts' law.

        Default: enumeration of the ordered draft tuples (:math:`|supp\,p|^k` for i.i.d.
        drafts); its sum is the node's acceptance.
        """
        q = np.asarray(target_probs, dtype=np.float64)
        p = np.asarray(draft_probs, dtype=np.float64)
        out = np.zeros_like(q)
        for prob, tup in _draft_tuples(p, k, drafting):
            law = self.node_law(q, p, tup, drafting)
            for tok, a in zip(tup, law.accept_probs):
                out[tok] += prob * a
        return out


def _draft_tuples(draft_probs, k: int, drafting: str):
    """Every ordered draft tuple of k children from row p with its probability (a generator)."""
    p = np.asarray(draft_probs, dtype=np.float64)

    def rec(prefix, prob):
        if len(prefix) == k:
            yield prob, tuple(prefix)
            return
        law = drafting_law(p, prefix, drafting)
        for tok in np.flatnonzero(law > 0):
            yield from rec(prefix + [int(tok)], prob * law[tok])

    yield from rec([], 1.0)


def _normalize_residual(weights, fallback) -> np.ndarray:
    """``weights / weights.sum()``; ``fallback`` where the weights are all zero (never emitted)."""
    w = np.maximum(np.asarray(weights, dtype=np.float64), 0.0)
    total = w.sum()
    return w / total if total > 0 else np.asarray(fallback, dtype=np.float64)


class _VerifierRegistry(dict):
    """Verifier name -> :class:`VerifierSpec` (registration order)."""


VERIFIERS: _VerifierRegistry = _VerifierRegistry()


def register_verifier(spec: VerifierSpec) -> VerifierSpec:
    """Add a verifier to :data:`VERIFIERS` (names unique); the battery then checks it."""
    if spec.name in VERIFIERS:
        raise ValueError(f"verifier: {spec.name!r} is already registered")
    for d in spec.drafting:
        if d not in DRAFTING:
            raise ValueError(f"drafting: unknown scheme {d!r} in verifier {spec.name!r}")
    VERIFIERS[spec.name] = spec
    return spec


def get_verifier(name, **knobs: Any) -> MultiDraftVerifier:
    """A configured multi-draft verifier by name (a verifier passes through unchanged).

    Raises
    ------
    ValueError
        Naming ``verifier`` for an unknown name (the message lists the valid ones), or the knob.
    """
    if isinstance(name, MultiDraftVerifier):
        if knobs:
            raise ValueError("verifier: knobs given together with an already configured verifier")
        return name
    if not isinstance(name, str) or name not in VERIFIERS:
        raise ValueError(f"verifier: unknown value {name!r}; valid: {', '.join(VERIFIERS)}")
    return VERIFIERS[name].make(**knobs)


def _verifier_names(*, drafting: str | None = None, structure: str | None = None) -> list[str]:
    """Registered verifier names (optionally those verifying a scheme and/or a structure)."""
    return [
        n
        for n, s in VERIFIERS.items()
        if (drafting is None or drafting in s.drafting) and (structure is None or structure in s.structures)
    ]

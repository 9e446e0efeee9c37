r"""Exact analysis of multi-draft and tree verification: emitted law, acceptance, accepted length.

For a verifier of :data:`cactus_theory.rules.multidraft.VERIFIERS` and a draft structure of
:mod:`cactus_theory.drafts`:

* :func:`drawn_trees` enumerates every drawn tree of a :class:`~cactus_theory.drafts.TokenTree`
  with its probability (the product of the drafting laws);
* :func:`tree_outcomes` averages the verifier's exact conditional law
  (:meth:`~cactus_theory.rules.multidraft.MultiDraftVerifier.tree_law`) over them: the law of
  the emitted token sequence and of the accepted length;
* :func:`lossless_error` compares that law with the verifier's own sequence law on the
  events every trie context decides (:func:`_boundary_sequences`): 0 for a lossless verifier;
* :func:`expected_accepted_length` computes :math:`E[\text{accepted drafts}]` by a dynamic
  programme over the trie's nodes (node-wise verifiers:
  :math:`E_v = \sum_x A_v(x)(1 + E_{c(v,x)})` with :math:`A_v` the node's accepted-token law;
  block verification on chains: the recursion of :func:`_chain_dp`), or by the enumeration;
* :func:`multidraft_acceptance` and :func:`multidraft_emitted`: k drafts at one position.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), k drafts per node.
"""

from __future__ import annotations

import numpy as np

from .._validation import choice
from ..drafts import DraftChain, DrawnTree, MultiDraft, TokenTree, drafting_law
from ..results import TreeOutcomes
from ..rules.multidraft import get_verifier
from ..rules.multidraft.base import NodeVerifier, _draft_tuples

__all__ = [
    "drawn_trees",
    "tree_outcomes",
    "lossless_error",
    "expected_accepted_length",
    "multidraft_acceptance",
    "multidraft_emitted",
]

#: Largest number of drawn trees :func:`drawn_trees` enumerates.
_MAX_DRAWN_TREES = 200_000


def _as_token_tree(structure) -> TokenTree:
    """A :class:`TokenTree` for a TokenTree, a one-row MultiDraft or a one-row DraftChain."""
    if isinstance(structure, TokenTree):
        return structure
    if isinstance(structure, (MultiDraft, DraftChain)):
        return structure.as_tree()
    raise ValueError(
        f"structure: expected a TokenTree, MultiDraft or DraftChain, got {type(structure).__name__}"
    )


def _subtree_draws(tree: TokenTree, node: int, budget: list):
    """Every draw of the subtree at trie ``node``: (prob, trie nodes, parents relative to it)."""
    w = int(tree.widths[node])
    if w == 0:
        return [(1.0, [node], [-1])]
    out = []
    for prob, tup in _draft_tuples(tree.draft_probs[node], w, tree.drafting):
        parts = [(prob, [node], [-1])]
        for tok in tup:
            child = tree.child(node, tok)
            sub = _subtree_draws(tree, child, budget)
            merged = []
            for pr, nodes, parents in parts:
                for spr, snodes, sparents in sub:
                    off = len(nodes)
                    merged.append(
                        (pr * spr, nodes + snodes, parents + [0 if sp == -1 else sp + off for sp in sparents])
                    )
            parts = merged
            budget[0] += len(parts)
            if budget[0] > _MAX_DRAWN_TREES:
                raise ValueError(f"structure: more than {_MAX_DRAWN_TREES} drawn trees to enumerate")
        out.extend(parts)
    return out


def drawn_trees(structure) -> list[tuple[float, DrawnTree]]:
    """Every drawn tree of a structure with its probability (they sum to 1).

    Raises
    ------
    ValueError
        Naming ``structure`` beyond :data:`_MAX_DRAWN_TREES` draws.
    """
    tree = _as_token_tree(structure)
    return [(prob, tree.drawn(nodes, parents)) for prob, nodes, parents in _subtree_draws(tree, 0, [0])]


def tree_outcomes(verifier, structure) -> TreeOutcomes:
    """The exact emitted law and accepted-length law by enumeration of the drawn trees."""
    verifier = get_verifier(verifier)
    tree = _as_token_tree(structure)
    depth = int(tree.depths.max())
    emitted: dict = {}
    lengths = np.zeros(depth + 1)
    for prob, drawn in drawn_trees(tree):
        law = verifier.tree_law(drawn)
        depths = drawn.depths
        for u in np.flatnonzero(law.end_probs > 0):
            mass = prob * law.end_probs[u]
            lengths[depths[u]] += mass
            path = tuple(drawn.path(int(u)))
            res = law.residuals[u]
            for y in np.flatnonzero(res > 0):
                key = path + (int(y),)
                emitted[key] = emitted.get(key, 0.0) + mass * res[y]
    return TreeOutcomes(emitted, lengths)


def _boundary_sequences(tree: TokenTree):
    """The sequences at which reading tokens from the root first leaves the trie.

    Reading a sequence token by token from the root, it stops at the first token y after
    context c such that c is a leaf of the trie or y is not a child of c: the token tuple
    read (c then y). These events partition the sequences, and each one's probability under
    any emission followed by the verifier's continuation needs q at trie contexts only.
    Yields ``(tokens, trie nodes of its proper prefixes)``.
    """
    v = tree.vocab_size

    def rec(node, tokens, nodes):
        kids = tree.children(node) if tree.widths[node] > 0 else {}
        for y in range(v):
            if y in kids:
                yield from rec(kids[y], tokens + (y,), nodes + (kids[y],))
            else:
                yield tokens + (y,), nodes

    yield from rec(0, (), (0,))


def lossless_error(verifier, structure) -> float:
    r"""Largest :math:`|P_{\text{emit}}(b) - P_q(b)|` over the boundary sequences b.

    :math:`P_{\text{emit}}(b)` is the probability that the emitted tuple, continued with the
    verifier's own next-token laws, starts with b (:func:`_boundary_sequences`);
    :math:`P_q(b) = \prod_t q(b_t \mid b_{<t})`. A lossless verifier has error 0 (up to
    float64 rounding).
    """
    tree = _as_token_tree(structure)
    out = tree_outcomes(verifier, tree)
    worst = 0.0
    for tokens, nodes in _boundary_sequences(tree):
        q_steps = np.array([tree.target_probs[n][t] for n, t in zip(nodes, tokens)])
        target = float(np.prod(q_steps))
        emit = 0.0
        for m in range(1, len(tokens) + 1):
            pr = out.emitted.get(tokens[:m], 0.0)
            if pr:
                emit += pr * float(np.prod(q_steps[m:]))
        worst = max(worst, abs(emit - target))
    return worst


def _nodewise_dp(verifier: NodeVerifier, tree: TokenTree) -> np.ndarray:
    e = np.zeros(tree.num_nodes)
    for v in range(tree.num_nodes - 1, -1, -1):
        w = int(tree.widths[v])
        if w == 0:
            continue
        a = verifier.accepted_token_law(tree.target_probs[v], tree.draft_probs[v], w, tree.drafting)
        total = 0.0
        for x in np.flatnonzero(a > 0):
            c = tree.child(v, int(x))
            total += a[x] * (1.0 + (e[c] if c >= 0 else 0.0))
        e[v] = total
    return e


def _chain_dp(tree: TokenTree) -> float:
    r"""Block verification on a chain trie: with :math:`w`, :math:`h` per trie node
    (:mod:`cactus_theory.rules.multidraft._block`),

    .. math:: G_v = \sum_x P_v(x) (1 - h_{c})\, G_{c}, \qquad
              H_v = \sum_x P_v(x) \bigl(H_{c} + d_{c}\, h_{c}\, G_{c}\bigr),

    (c = c(v, x), leaves: G = 1, H = 0), and :math:`E[\tau] = H_{root}`."""
    n = tree.num_nodes
    q, p, tok = tree.target_probs, tree.draft_probs, tree.token_ids
    depth = tree.depths
    w = np.ones(n)
    for i in range(1, n):
        par = int(tree.parents[i])
        law = drafting_law(p[par], [], tree.drafting)
        x = int(tok[i])
        w[i] = min(1.0, w[par] * q[par][x] / law[x])
    h = np.zeros(n)
    for i in range(n):
        if tree.widths[i] == 0:
            h[i] = w[i]
        else:
            law = drafting_law(p[i], [], tree.drafting)
            z = float(np.maximum(0.0, w[i] * q[i] - law).sum())
            denom = z + 1.0 - w[i]
            h[i] = z / denom if denom > 0 else 0.0
    g = np.ones(n)
    big_h = np.zeros(n)
    for v in range(n - 1, -1, -1):
        if tree.widths[v] == 0:
            continue
        law = drafting_law(p[v], [], tree.drafting)
        gv = hv = 0.0
        for x, c in tree.children(v).items():
            gv += law[x] * (1.0 - h[c]) * g[c]
            hv += law[x] * (big_h[c] + depth[c] * h[c] * g[c])
        g[v], big_h[v] = gv, hv
    return float(big_h[0])


def expected_accepted_length(verifier, structure, method: str = "dp") -> float:
    r"""Exact :math:`E[\text{accepted drafts}]` of one verification of a structure.

    Parameters
    ----------
    verifier : str or MultiDraftVerifier
    structure : TokenTree, MultiDraft (one row) or DraftChain (one row)
    method : {"dp", "enumerate"}
        ``"dp"``: the dynamic programme over the trie's nodes (node-wise verifiers; block
        verification on chains); ``"enumerate"``: every drawn tree (:func:`tree_outcomes`).

    Raises
    ------
    ValueError
        Naming ``method`` when the DP does not apply (traversal verification on a tree with
        branching: its steps couple siblings' subtrees; use ``"enumerate"``).
    """
    choice(method, ("dp", "enumerate"), "method")
    verifier = get_verifier(verifier)
    tree = _as_token_tree(structure)
    if method == "enumerate":
        return tree_outcomes(verifier, tree).expected_accepted
    if isinstance(verifier, NodeVerifier):
        if tree.drafting not in verifier.spec.drafting:
            raise ValueError(f"drafting: verifier {verifier.name!r} does not verify {tree.drafting!r} drafts")
        return float(_nodewise_dp(verifier, tree)[0])
    if verifier.name in ("block", "traversal") and tree.is_chain:
        return _chain_dp(tree)
    raise ValueError(
        f"method: no dynamic programme for verifier {verifier.name!r} on this structure; use method='enumerate'"
    )


def multidraft_acceptance(verifier, structure: MultiDraft) -> np.ndarray:
    r"""Exact acceptance :math:`P(\text{a draft is accepted})` of k drafts at one position.

    Returns an array of the structure's batch shape (node-wise verifiers:
    :math:`\sum_x A(x)`; others: the enumeration of :func:`tree_outcomes`).
    """
    verifier = get_verifier(verifier)
    if not isinstance(structure, MultiDraft):
        raise ValueError(f"structure: expected a MultiDraft, got {type(structure).__name__}")
    out = np.empty(structure.batch_shape)
    for idx in np.ndindex(*structure.batch_shape):
        one = structure.row(idx) if structure.batch_shape else structure
        if isinstance(verifier, NodeVerifier):
            if one.drafting not in verifier.spec.drafting:
                raise ValueError(
                    f"drafting: verifier {verifier.name!r} does not verify {one.drafting!r} drafts"
                )
            a = verifier.accepted_token_law(one.target_probs, one.draft_probs, one.k, one.drafting)
            out[idx] = a.sum()
        else:
            out[idx] = tree_outcomes(verifier, one.as_tree()).acceptance
    return out


def multidraft_emitted(verifier, structure: MultiDraft) -> np.ndarray:
    """The exact law of the token emitted at the position (batch shape + (V,)); q if lossless."""
    verifier = get_verifier(verifier)
    if not isinstance(structure, MultiDraft):
        raise ValueError(f"structure: expected a MultiDraft, got {type(structure).__name__}")
    out = np.empty(structure.batch_shape + (structure.vocab_size,))
    for idx in np.ndindex(*structure.batch_shape):
        one = structure.row(idx) if structure.batch_shape else structure
        out[idx] = tree_outcomes(verifier, one.as_tree()).first_token_law(structure.vocab_size)
    return out

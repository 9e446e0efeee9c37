r"""Draft structures for multi-draft and tree verification: their laws and their draws.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), k number of drafts at one
position, V vocabulary (last axis). Every structure holds numpy float64 rows; its constructor
validates them (ValueError naming the argument).

Drafting schemes (``drafting``), the law of the children drafted at a node with drafter row p:

``"iid"``
    k tokens i.i.d. from p (SpecInfer's and SpecTr's setting; repeats possible).
``"without_replacement"``
    k distinct tokens, sequentially: the j-th from p restricted to the tokens not yet drafted
    and renormalized (Hu et al. 2025, arXiv 2502.18779; Weng et al. 2025, arXiv 2505.12398);
    needs k at most the size of p's support.
``"top_k"``
    the k most likely tokens of p, in order (ties to the lower id): deterministic children,
    as EAGLE-2's and Medusa's trees draft. The drafting law of the j-th child is a point mass.

The structures:

:class:`MultiDraft`
    k drafts at one position (the law: q, p, k, the scheme).
:class:`TokenTree`
    a tree's law as a trie of contexts: per node the verifier and drafter rows at that
    context and the number of children drafted there (``widths``); a drafted token x at node i
    continues at i's child with token x. The trie holds every child that can be drafted
    (complete), so the law of the drawn tree is the trie alone. A static shape is a width per
    depth (:meth:`TokenTree.from_model`); top-k children are ``drafting="top_k"``.
:class:`DraftChain`
    a chain of gamma drafts verified as a block (Sun et al. 2024, arXiv 2403.10444), with the
    teacher-forced rows of the toolkit's chain simulator: the rows at position t do not
    depend on the drafted text.
:class:`DrawnTree`
    one drawn tree (what a verifier reads): nodes in depth-first preorder, each with its
    token, parent and rows; a node's children in drafted order.
"""

from ._chains import DraftChain, MultiDraft
from ._laws import drafting_law
from ._trees import DrawnTree, TokenTree

__all__ = [
    "MultiDraft",
    "TokenTree",
    "DraftChain",
    "DrawnTree",
    "drafting_law",
]

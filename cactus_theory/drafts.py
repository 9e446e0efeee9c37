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

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import combinations, permutations

import numpy as np

from ._validation import as_count, as_probs, choice, random_generator

__all__ = [
    "DRAFTING",
    "MultiDraft",
    "TokenTree",
    "DraftChain",
    "DrawnTree",
    "drafting_law",
    "draft_set_law",
    "draftable_tokens",
    "top_k_tokens",
]

#: The drafting schemes (module docstring).
DRAFTING = ("iid", "without_replacement", "top_k")

#: Largest trie :meth:`DraftChain.as_tree` and :meth:`MultiDraft.as_tree` build.
MAX_TRIE_NODES = 200_000


def top_k_tokens(draft_probs, k: int) -> np.ndarray:
    """The ``k`` most likely tokens of one drafter row, most likely first (ties: lower id)."""
    p = np.asarray(draft_probs, dtype=np.float64)
    return np.argsort(-p, kind="stable")[: int(k)].astype(np.int64)


def draftable_tokens(draft_probs, k: int, drafting: str) -> np.ndarray:
    """Tokens that can appear among ``k`` children drafted from row p under ``drafting``.

    ``"iid"`` and ``"without_replacement"``: the support of p (every token when k = 0 is not
    asked: k >= 1); ``"top_k"``: the top-k tokens. Sorted by id.
    """
    p = np.asarray(draft_probs, dtype=np.float64)
    if drafting == "top_k":
        return np.sort(top_k_tokens(p, k))
    return np.flatnonzero(p > 0).astype(np.int64)


def drafting_law(draft_probs, previous, drafting: str) -> np.ndarray:
    r"""The law of the next child at a node, given the children ``previous`` drafted before it.

    ``"iid"``: p. ``"without_replacement"``: p with the tokens of ``previous`` removed,
    renormalized. ``"top_k"``: the point mass at the next top-k token (the
    ``len(previous)``-th most likely token of p).

    Parameters
    ----------
    draft_probs : array, shape (V,)
        The node's drafter row p.
    previous : sequence of int
        The tokens drafted before, in order.
    drafting : {"iid", "without_replacement", "top_k"}

    Returns
    -------
    ndarray, shape (V,)
        float64, sums to 1 (ValueError naming ``previous`` when nothing is left to draft).
    """
    choice(drafting, DRAFTING, "drafting")
    p = np.asarray(draft_probs, dtype=np.float64)
    if drafting == "iid":
        return p.copy()
    if drafting == "top_k":
        j = len(previous)
        if j >= int(np.count_nonzero(p > 0)):
            raise ValueError(
                f"previous: {j} children drafted already; p has {np.count_nonzero(p > 0)} tokens"
            )
        law = np.zeros_like(p)
        law[top_k_tokens(p, j + 1)[j]] = 1.0
        return law
    law = p.copy()
    law[np.asarray(list(previous), dtype=np.int64)] = 0.0
    total = law.sum()
    if not total > 0:
        raise ValueError("previous: the drafter's support is exhausted (drafting without replacement)")
    return law / total


def _drafting(drafting) -> str:
    return choice(drafting, DRAFTING, "drafting")


def _check_width(width: int, p: np.ndarray, drafting: str, name: str) -> None:
    """Without replacement and top-k draft distinct tokens: width <= |supp p|."""
    if drafting != "iid" and width > 0:
        support = int(np.count_nonzero(p > 0))
        if width > support:
            raise ValueError(
                f"{name}: {width} distinct drafts asked ({drafting}) but the drafter row has "
                f"{support} tokens of positive probability"
            )


def _draw_children(rng: np.random.Generator, p: np.ndarray, width: int, drafting: str) -> list[int]:
    """``width`` children drawn from row p under ``drafting`` (inverse CDF on float64 sums)."""
    if drafting == "top_k":
        return [int(t) for t in top_k_tokens(p, width)]
    out: list[int] = []
    law = p
    for _ in range(width):
        cdf = np.cumsum(law)
        tok = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
        tok = min(tok, law.size - 1)
        while law[tok] <= 0:  # u * total rounding onto a zero-mass token's step: move back
            tok -= 1
        out.append(tok)
        if drafting == "without_replacement":
            law = law.copy()
            law[tok] = 0.0
    return out


@dataclass(frozen=True, eq=False)
class MultiDraft:
    r"""k drafts at one position: their law (q, p, k and the drafting scheme).

    Parameters
    ----------
    target_probs, draft_probs : array, shape (..., V)
        Verifier q and drafter p rows (any batch shape, the same for both).
    k : int
        Number of drafts, >= 1.
    drafting : {"iid", "without_replacement", "top_k"}
        How the k drafts are drawn from p (module docstring); the distinct schemes need
        ``k <= |supp p|`` on every row (ValueError naming ``k``).

    Notes
    -----
    At k = 1 every scheme but ``"top_k"`` is standard speculative sampling's single draft.
    """

    target_probs: np.ndarray
    draft_probs: np.ndarray
    k: int
    drafting: str = "iid"

    def __post_init__(self):
        q = as_probs(self.target_probs, "target_probs")
        p = as_probs(self.draft_probs, "draft_probs")
        if q.shape != p.shape:
            raise ValueError(f"draft_probs: shape {p.shape} does not match target_probs' shape {q.shape}")
        k = as_count(self.k, "k", minimum=1)
        drafting = _drafting(self.drafting)
        for row in p.reshape(-1, p.shape[-1]):
            _check_width(k, row, drafting, "k")
        object.__setattr__(self, "target_probs", q)
        object.__setattr__(self, "draft_probs", p)
        object.__setattr__(self, "k", k)
        object.__setattr__(self, "drafting", drafting)

    @property
    def vocab_size(self) -> int:
        return int(self.target_probs.shape[-1])

    @property
    def batch_shape(self) -> tuple:
        return tuple(self.target_probs.shape[:-1])

    def row(self, index=()) -> MultiDraft:
        """The structure of one batch row (``index`` into the batch shape)."""
        return MultiDraft(self.target_probs[index], self.draft_probs[index], self.k, self.drafting)

    def draw(self, rng=None) -> np.ndarray:
        """One draw of the k drafts per batch row: int64 ``batch_shape + (k,)``."""
        rng = random_generator(rng, "rng")
        p = self.draft_probs.reshape(-1, self.vocab_size)
        out = np.array([_draw_children(rng, row, self.k, self.drafting) for row in p], dtype=np.int64)
        return out.reshape(self.batch_shape + (self.k,))

    def as_tree(self, index=()) -> TokenTree:
        """One row as a depth-1 :class:`TokenTree`: the root drafts k children.

        The leaves (the drafted tokens' contexts) carry the root's rows: a one-position
        structure has no next position, and those rows only set the bonus token after an
        accepted draft, which no one-position quantity reads.
        """
        one = self.row(index) if self.batch_shape else self
        q, p = one.target_probs, one.draft_probs
        if q.ndim != 1:
            raise ValueError(f"index: selects shape {q.shape}; expected one row (V,)")
        tokens = draftable_tokens(p, self.k, self.drafting)
        n = 1 + tokens.size
        return TokenTree(
            parents=np.concatenate([[-1], np.zeros(tokens.size, dtype=np.int64)]),
            token_ids=np.concatenate([[-1], tokens]),
            target_probs=np.broadcast_to(q, (n, q.size)),
            draft_probs=np.broadcast_to(p, (n, p.size)),
            widths=np.concatenate([[self.k], np.zeros(tokens.size, dtype=np.int64)]),
            drafting=self.drafting,
        )


@dataclass(frozen=True, eq=False)
class TokenTree:
    r"""A draft tree's law as a trie of contexts.

    Node 0 is the root (the current context); node i > 0 is the context extended by the
    token ``token_ids[i]`` after its parent's. At node i the drafter drafts ``widths[i]``
    children from ``draft_probs[i]`` under ``drafting``; a drafted token x continues at the
    child of i with token x, which drafts its own children. The verifier's next-token law at
    node i is ``target_probs[i]``.

    Parameters
    ----------
    parents : array of int, shape (N,)
        ``parents[0] = -1``; ``0 <= parents[i] < i`` otherwise.
    token_ids : array of int, shape (N,)
        ``token_ids[0] = -1``; the edge token of node i in ``[0, V)``, distinct among
        siblings.
    target_probs, draft_probs : array, shape (N, V)
        q and p at each node's context.
    widths : array of int, shape (N,)
        Children drafted at each node (0 at a leaf).
    drafting : {"iid", "without_replacement", "top_k"}

    Raises
    ------
    ValueError
        Naming the argument: a malformed parent array, a repeated sibling token, a width
        larger than the drafter's support for the distinct schemes, or an incomplete trie
        (a token that can be drafted at node i — any token of p's support, or the top-k
        tokens for ``"top_k"`` — without its child node, or a child that cannot be drafted).

    Notes
    -----
    A complete trie of i.i.d. or without-replacement drafts over V tokens and depth d has
    up to V^d nodes; the exact analyses (:mod:`cactus_theory.analysis.multidraft`) are for
    small V there. With ``"top_k"`` the trie is the (deterministic) drawn tree itself.
    """

    parents: np.ndarray
    token_ids: np.ndarray
    target_probs: np.ndarray
    draft_probs: np.ndarray
    widths: np.ndarray
    drafting: str = "iid"
    _children: tuple = field(init=False, repr=False)

    def __post_init__(self):
        drafting = _drafting(self.drafting)
        parents, tokens, q, p = _node_arrays(
            self.parents, self.token_ids, self.target_probs, self.draft_probs
        )
        n, v = parents.size, q.shape[1]
        widths = _int_vector(self.widths, "widths", n)
        idx = np.arange(n)
        if n > 1 and (np.any(parents[1:] < 0) or np.any(parents[1:] >= idx[1:])):
            raise ValueError("parents: every node i > 0 needs a parent 0 <= parents[i] < i")
        if n > 1 and (np.any(tokens[1:] < 0) or np.any(tokens[1:] >= v)):
            raise ValueError(f"token_ids: edge tokens must lie in [0, {v})")
        if np.any(widths < 0):
            raise ValueError("widths: must be >= 0")
        children: list[dict] = [{} for _ in range(n)]
        for i in range(1, n):
            par, tok = int(parents[i]), int(tokens[i])
            if tok in children[par]:
                raise ValueError(f"token_ids: node {par} has two children with token {tok} (a trie)")
            children[par][tok] = i
        for i in range(n):
            w = int(widths[i])
            _check_width(w, p[i], drafting, "widths")
            have = set(children[i])
            need = set() if w == 0 else {int(t) for t in draftable_tokens(p[i], w, drafting)}
            missing, extra = need - have, have - need
            if missing:
                raise ValueError(
                    f"token_ids: node {i} drafts {w} children ({drafting}) but has no child for "
                    f"token(s) {sorted(missing)[:5]} (the trie must hold every draftable child)"
                )
            if extra:
                raise ValueError(
                    f"token_ids: node {i} has child token(s) {sorted(extra)[:5]} that its "
                    f"{w} {drafting} drafts can never produce"
                )
        for name, val in (("parents", parents), ("token_ids", tokens), ("widths", widths)):
            val.setflags(write=False)
            object.__setattr__(self, name, val)
        object.__setattr__(self, "target_probs", q)
        object.__setattr__(self, "draft_probs", p)
        object.__setattr__(self, "drafting", drafting)
        object.__setattr__(self, "_children", tuple(children))

    @property
    def num_nodes(self) -> int:
        return int(self.parents.size)

    @property
    def vocab_size(self) -> int:
        return int(self.target_probs.shape[1])

    @property
    def depths(self) -> np.ndarray:
        """Depth of every node (root 0)."""
        d = np.zeros(self.num_nodes, dtype=np.int64)
        for i in range(1, self.num_nodes):
            d[i] = d[self.parents[i]] + 1
        return d

    @property
    def is_chain(self) -> bool:
        """One draft per node (every width <= 1): a chain, verifiable as a block."""
        return bool(np.all(self.widths <= 1))

    def child(self, node: int, token: int) -> int:
        """The child of ``node`` with edge token ``token``, or -1."""
        return self._children[node].get(int(token), -1)

    def children(self, node: int) -> dict:
        """Edge token -> child node of ``node``."""
        return dict(self._children[node])

    def draw(self, rng=None) -> DrawnTree:
        """One drawn tree: each node's children drawn under the scheme, depth-first preorder."""
        rng = random_generator(rng, "rng")
        nodes, parents = [0], [-1]

        def grow(trie_node: int, drawn_index: int):
            for tok in _draw_children(
                rng, self.draft_probs[trie_node], int(self.widths[trie_node]), self.drafting
            ):
                c = self.child(trie_node, tok)
                nodes.append(c)
                parents.append(drawn_index)
                grow(c, len(nodes) - 1)

        grow(0, 0)
        return self.drawn(nodes, parents)

    def drawn(self, nodes, parents) -> DrawnTree:
        """The :class:`DrawnTree` whose node j is trie node ``nodes[j]`` with parent ``parents[j]``."""
        nodes = np.asarray(nodes, dtype=np.int64)
        return DrawnTree(
            parents=np.asarray(parents, dtype=np.int64),
            token_ids=self.token_ids[nodes],
            target_probs=self.target_probs[nodes],
            draft_probs=self.draft_probs[nodes],
            drafting=self.drafting,
            trie_nodes=nodes,
        )

    @classmethod
    def from_model(
        cls,
        rows: Callable[[tuple], tuple],
        widths: Sequence[int],
        drafting: str = "iid",
    ) -> TokenTree:
        r"""The complete trie of a static shape: ``widths[d]`` children at every node of depth d.

        Parameters
        ----------
        rows : callable
            ``rows(context) -> (q, p)``: the verifier and drafter rows (shape (V,)) after the
            token tuple ``context`` (``()`` at the root).
        widths : sequence of int
            Children drafted at depth 0, 1, ..., len(widths) - 1 (the nodes at depth
            ``len(widths)`` are leaves).
        drafting : {"iid", "without_replacement", "top_k"}

        Returns
        -------
        TokenTree
            Every draftable child expanded (up to V^depth nodes for the random schemes).
        """
        drafting = _drafting(drafting)
        widths = [as_count(w, "widths", minimum=0) for w in widths]
        parents, tokens, qs, ps, ws = [], [], [], [], []

        def add(context: tuple, parent: int, token: int):
            q, p = rows(context)
            q = np.asarray(q, dtype=np.float64)
            p = np.asarray(p, dtype=np.float64)
            d = len(context)
            w = widths[d] if d < len(widths) else 0
            me = len(parents)
            parents.append(parent)
            tokens.append(token)
            qs.append(q)
            ps.append(p)
            ws.append(w)
            if len(parents) > MAX_TRIE_NODES:
                raise ValueError(f"widths: the trie exceeds {MAX_TRIE_NODES} nodes")
            if w:
                _check_width(w, p, drafting, "widths")
                for tok in draftable_tokens(p, w, drafting):
                    add(context + (int(tok),), me, int(tok))

        add((), -1, -1)
        return cls(
            parents=np.asarray(parents),
            token_ids=np.asarray(tokens),
            target_probs=np.stack(qs),
            draft_probs=np.stack(ps),
            widths=np.asarray(ws),
            drafting=drafting,
        )


@dataclass(frozen=True, eq=False)
class DraftChain:
    r"""A chain of gamma drafts verified as a block, with teacher-forced rows.

    Draft t (t = 0..gamma-1) is drawn from ``draft_probs[..., t, :]``; the verifier's law at
    position t is ``target_probs[..., t, :]``, and position gamma's row gives the bonus
    token (the layout of vLLM's rejection samplers: ``[..., gamma+1, V]`` and
    ``[..., gamma, V]``). Teacher forced: the rows do not depend on the drafted text (the
    convention of :mod:`cactus_theory.simulate`); a context-dependent chain is a
    :class:`TokenTree` with every width <= 1.

    Parameters
    ----------
    target_probs : array, shape (..., gamma + 1, V)
    draft_probs : array, shape (..., gamma, V)
    """

    target_probs: np.ndarray
    draft_probs: np.ndarray

    def __post_init__(self):
        q = as_probs(self.target_probs, "target_probs")
        p = as_probs(self.draft_probs, "draft_probs")
        if q.ndim < 2 or q.shape[-2] < 2:
            raise ValueError(
                f"target_probs: expected shape (..., gamma + 1, V) with gamma >= 1, got {q.shape}"
            )
        if p.shape != q.shape[:-2] + (q.shape[-2] - 1, q.shape[-1]):
            raise ValueError(
                f"draft_probs: expected shape {q.shape[:-2] + (q.shape[-2] - 1, q.shape[-1])} "
                f"(one row fewer than target_probs), got {p.shape}"
            )
        object.__setattr__(self, "target_probs", q)
        object.__setattr__(self, "draft_probs", p)

    @property
    def length(self) -> int:
        """gamma, the number of drafts."""
        return int(self.draft_probs.shape[-2])

    @property
    def vocab_size(self) -> int:
        return int(self.target_probs.shape[-1])

    @property
    def batch_shape(self) -> tuple:
        return tuple(self.draft_probs.shape[:-2])

    def draw(self, rng=None) -> np.ndarray:
        """One draw of the gamma drafts per batch row: int64 ``batch_shape + (gamma,)``."""
        rng = random_generator(rng, "rng")
        p = self.draft_probs.reshape(-1, self.vocab_size)
        out = np.array([_draw_children(rng, row, 1, "iid")[0] for row in p], dtype=np.int64)
        return out.reshape(self.batch_shape + (self.length,))

    def as_tree(self, index=()) -> TokenTree:
        """One batch row as a :class:`TokenTree` of widths 1 (every drafted path expanded)."""
        q = self.target_probs[index] if self.batch_shape else self.target_probs
        p = self.draft_probs[index] if self.batch_shape else self.draft_probs
        if q.ndim != 2:
            raise ValueError(f"index: selects shape {q.shape}; expected one chain (gamma + 1, V)")
        gamma = p.shape[0]
        size = sum(int(np.prod([np.count_nonzero(p[t] > 0) for t in range(d)])) for d in range(gamma + 1))
        if size > MAX_TRIE_NODES:
            raise ValueError(f"index: the chain's trie has {size} nodes (more than {MAX_TRIE_NODES})")
        pad = np.full(q.shape[-1], 1.0 / q.shape[-1])

        def rows(context):
            d = len(context)
            return q[d], (p[d] if d < gamma else pad)

        return TokenTree.from_model(rows, [1] * gamma, "iid")


@dataclass(frozen=True, eq=False)
class DrawnTree:
    r"""One drawn draft tree: what a verifier reads.

    Nodes are in depth-first preorder (every subtree is a contiguous range starting at its
    root): node 0 is the root (the current context), node i > 0 is the token ``token_ids[i]``
    drafted at node ``parents[i]``; a node's children in index order are its drafts in
    drafted order. ``target_probs[i]``/``draft_probs[i]`` are q and p at node i's context
    (the children of i were drafted from ``draft_probs[i]`` under ``drafting``; a leaf's p
    row is unused).

    Parameters
    ----------
    parents, token_ids : array of int, shape (M,)
    target_probs, draft_probs : array, shape (M, V)
    drafting : {"iid", "without_replacement", "top_k"}
    trie_nodes : array of int, shape (M,), optional
        The :class:`TokenTree` node of each drawn node (set by :meth:`TokenTree.draw`).
    """

    parents: np.ndarray
    token_ids: np.ndarray
    target_probs: np.ndarray
    draft_probs: np.ndarray
    drafting: str = "iid"
    trie_nodes: np.ndarray | None = None
    _children: tuple = field(init=False, repr=False)

    def __post_init__(self):
        drafting = _drafting(self.drafting)
        parents, tokens, q, p = _node_arrays(
            self.parents, self.token_ids, self.target_probs, self.draft_probs
        )
        m, v = parents.size, q.shape[1]
        if m > 1 and (np.any(tokens[1:] < 0) or np.any(tokens[1:] >= v)):
            raise ValueError(f"token_ids: drafted tokens must lie in [0, {v})")
        stack = [0]
        children: list[list[int]] = [[] for _ in range(m)]
        for i in range(1, m):
            par = int(parents[i])
            while stack and stack[-1] != par:
                stack.pop()
            if not stack:
                raise ValueError(
                    f"parents: node {i}'s parent {par} is not on the path to node {i - 1} "
                    "(nodes must be in depth-first preorder)"
                )
            children[par].append(i)
            stack.append(i)
        for i in range(m):
            if children[i]:
                kids = [int(tokens[c]) for c in children[i]]
                if drafting != "iid" and len(set(kids)) < len(kids):
                    raise ValueError(f"token_ids: node {i} repeats a child token under {drafting} drafting")
                for j, tok in enumerate(kids):
                    if drafting_law(p[i], kids[:j], drafting)[tok] <= 0:
                        raise ValueError(
                            f"token_ids: node {i}'s child {j} (token {tok}) has probability 0 "
                            f"under {drafting} drafting from draft_probs[{i}]"
                        )
        for name, val in (("parents", parents), ("token_ids", tokens)):
            val.setflags(write=False)
            object.__setattr__(self, name, val)
        if self.trie_nodes is not None:
            object.__setattr__(self, "trie_nodes", _int_vector(self.trie_nodes, "trie_nodes", m))
        object.__setattr__(self, "target_probs", q)
        object.__setattr__(self, "draft_probs", p)
        object.__setattr__(self, "drafting", drafting)
        object.__setattr__(self, "_children", tuple(tuple(c) for c in children))

    @property
    def num_nodes(self) -> int:
        return int(self.parents.size)

    @property
    def vocab_size(self) -> int:
        return int(self.target_probs.shape[1])

    def children(self, node: int) -> tuple:
        """The drawn children of ``node``, in drafted order."""
        return self._children[node]

    @property
    def depths(self) -> np.ndarray:
        d = np.zeros(self.num_nodes, dtype=np.int64)
        for i in range(1, self.num_nodes):
            d[i] = d[self.parents[i]] + 1
        return d

    def path(self, node: int) -> list[int]:
        """The drafted tokens from the root to ``node`` (root excluded)."""
        out = []
        while node > 0:
            out.append(int(self.token_ids[node]))
            node = int(self.parents[node])
        return out[::-1]


def _node_arrays(parents, token_ids, target_probs, draft_probs):
    """The validated node arrays of a tree: ``parents`` and ``token_ids`` as integer vectors
    of one length N >= 1 with node 0 the root (both -1 there), and the rows ``target_probs``,
    ``draft_probs`` of shape (N, V); each error a ValueError naming the argument."""
    parents = _int_vector(parents, "parents")
    n = parents.size
    if n == 0:
        raise ValueError("parents: a tree has at least its root")
    tokens = _int_vector(token_ids, "token_ids", n)
    q = as_probs(target_probs, "target_probs")
    p = as_probs(draft_probs, "draft_probs")
    for name, arr in (("target_probs", q), ("draft_probs", p)):
        if arr.ndim != 2 or arr.shape[0] != n:
            raise ValueError(f"{name}: expected shape (N, V) with N = {n} nodes, got {arr.shape}")
    if q.shape != p.shape:
        raise ValueError(f"draft_probs: shape {p.shape} does not match target_probs' shape {q.shape}")
    if parents[0] != -1 or tokens[0] != -1:
        raise ValueError("parents: node 0 is the root: parents[0] and token_ids[0] must be -1")
    return parents, tokens, q, p


def _int_vector(x, name: str, size: int | None = None) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and arr.size and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        elif arr.size:
            raise ValueError(f"{name}: must hold integers, got dtype {arr.dtype}")
    arr = np.array(arr, dtype=np.int64)
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    if size is not None and arr.size != size:
        raise ValueError(f"{name}: expected {size} entries (one per node), got {arr.size}")
    return arr


#: Largest number of draft sets :func:`draft_set_law` enumerates.
MAX_DRAFT_SETS = 200_000


def draft_set_law(draft_probs, k: int, drafting: str = "iid") -> tuple[list[tuple[int, ...]], np.ndarray]:
    r"""The law of the set of distinct tokens among k drafts from one drafter row p.

    ``"iid"`` (inclusion-exclusion over the subsets T of S):

    .. math:: P(\{x_1..x_k\} = S) = \sum_{T \subseteq S} (-1)^{|S|-|T|} p(T)^k,
              \quad 1 \le |S| \le k;

    ``"without_replacement"``: the sets of size k, :math:`P(S) = \sum_{\sigma}
    \prod_i p(s_{\sigma_i}) / (1 - \sum_{l<i} p(s_{\sigma_l}))` over the orders of S;
    ``"top_k"``: the top-k set with probability 1.

    Parameters
    ----------
    draft_probs : array, shape (V,)
    k : int
    drafting : {"iid", "without_replacement", "top_k"}

    Returns
    -------
    sets : list of tuple of int
        Sorted token tuples, over the drafter's support.
    probs : ndarray, shape (len(sets),)
        Their probabilities (float64, summing to 1 up to rounding; tiny negative rounding of
        the alternating sum clipped at 0).

    Raises
    ------
    ValueError
        Naming ``k`` when the number of sets exceeds :data:`MAX_DRAFT_SETS`.
    """
    drafting = _drafting(drafting)
    p = as_probs(draft_probs, "draft_probs")
    if p.ndim != 1:
        raise ValueError(f"draft_probs: expected one row (V,), got shape {p.shape}")
    k = as_count(k, "k", minimum=1)
    _check_width(k, p, drafting, "k")
    if drafting == "top_k":
        return [tuple(int(t) for t in np.sort(top_k_tokens(p, k)))], np.ones(1)
    support = [int(t) for t in np.flatnonzero(p > 0)]
    sizes = range(1, min(k, len(support)) + 1) if drafting == "iid" else [k]
    count = sum(math.comb(len(support), s) for s in sizes)
    if count > MAX_DRAFT_SETS:
        raise ValueError(f"k: {count} draft sets over {len(support)} tokens (more than {MAX_DRAFT_SETS})")
    sets, probs = [], []
    for size in sizes:
        for s in combinations(support, size):
            if drafting == "iid":
                total = 0.0
                for r in range(1, size + 1):
                    sign = -1.0 if (size - r) % 2 else 1.0
                    for t in combinations(s, r):
                        total += sign * float(p[list(t)].sum()) ** k
            else:
                total = 0.0
                for order in permutations(s):
                    pr, used = 1.0, 0.0
                    for x in order:
                        pr *= p[x] / (1.0 - used)
                        used += p[x]
                    total += pr
            sets.append(s)
            probs.append(max(total, 0.0))
    return sets, np.asarray(probs)

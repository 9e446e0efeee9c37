r"""Token trees: a tree's law as a trie of contexts (:class:`TokenTree`) and one drawn tree
(:class:`DrawnTree`), with the node arrays' validation (module docstring of
:mod:`cactus_theory.drafts`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._validation import as_count, as_probs, random_generator
from ._laws import _check_width, _drafting, _draw_children, draftable_tokens, drafting_law

#: Largest trie :meth:`DraftChain.as_tree` and :meth:`MultiDraft.as_tree` build.
MAX_TRIE_NODES = 200_000


class _Nodes:
    """What a token tree and a drawn tree share: their node count, vocabulary width and depths."""

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


def _set_nodes(tree, drafting, parents, tokens, q, p, children) -> None:
    """Store a frozen tree's validated fields (the integer arrays read-only)."""
    for name, val in (("parents", parents), ("token_ids", tokens)):
        val.setflags(write=False)
        object.__setattr__(tree, name, val)
    object.__setattr__(tree, "target_probs", q)
    object.__setattr__(tree, "draft_probs", p)
    object.__setattr__(tree, "drafting", drafting)
    object.__setattr__(tree, "_children", children)


@dataclass(frozen=True, eq=False)
class TokenTree(_Nodes):
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
        drafting, parents, tokens, q, p = _node_arrays(self)
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
        widths.setflags(write=False)
        object.__setattr__(self, "widths", widths)
        _set_nodes(self, drafting, parents, tokens, q, p, tuple(children))

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
class DrawnTree(_Nodes):
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
        drafting, parents, tokens, q, p = _node_arrays(self)
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
        if self.trie_nodes is not None:
            object.__setattr__(self, "trie_nodes", _int_vector(self.trie_nodes, "trie_nodes", m))
        _set_nodes(self, drafting, parents, tokens, q, p, tuple(tuple(c) for c in children))

    def children(self, node: int) -> tuple:
        """The drawn children of ``node``, in drafted order."""
        return self._children[node]

    def path(self, node: int) -> list[int]:
        """The drafted tokens from the root to ``node`` (root excluded)."""
        out = []
        while node > 0:
            out.append(int(self.token_ids[node]))
            node = int(self.parents[node])
        return out[::-1]


def _node_arrays(tree):
    """The validated scheme and node arrays of a tree (a :class:`TokenTree` or
    :class:`DrawnTree` being built): ``drafting``, ``parents`` and ``token_ids`` as integer
    vectors of one length N >= 1 with node 0 the root (both -1 there), and the rows
    ``target_probs``, ``draft_probs`` of shape (N, V); each error a ValueError naming the
    argument."""
    drafting = _drafting(tree.drafting)
    token_ids, target_probs, draft_probs = tree.token_ids, tree.target_probs, tree.draft_probs
    parents = _int_vector(tree.parents, "parents")
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
    return drafting, parents, tokens, q, p


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

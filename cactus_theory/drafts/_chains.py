r"""Drafts along one axis: k drafts at one position (:class:`MultiDraft`) and a chain verified
as a block (:class:`DraftChain`); both build their trie (module docstring of
:mod:`cactus_theory.drafts`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import as_count, as_probs, random_generator
from ._laws import _check_width, _drafting, _draw_children, draftable_tokens
from ._trees import MAX_TRIE_NODES, TokenTree


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

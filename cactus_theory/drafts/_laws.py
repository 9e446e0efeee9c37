r"""The drafting schemes' laws: which tokens a node can draft, the law of its j-th child given
the earlier ones, the law of the whole draft set, and one node's draw (module docstring of
:mod:`cactus_theory.drafts`)."""

from __future__ import annotations

import math
from itertools import combinations, permutations

import numpy as np

from .._validation import as_count, as_probs, choice

#: The drafting schemes (module docstring).
DRAFTING = ("iid", "without_replacement", "top_k")


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

r"""Synthetic draft structures and the simulation of tree verification.

Generators (the conventions of :mod:`.synthetic`: rows from
:func:`cactus_theory.distributions.synthetic_pairs`'s families, seeded by ``rng``):

* :func:`synthetic_multidraft`: k drafts at each of n positions (:class:`~cactus_theory.drafts.MultiDraft`);
* :func:`synthetic_chain`: a teacher-forced chain of gamma drafts (:class:`~cactus_theory.drafts.DraftChain`);
* :func:`synthetic_tree`: the complete trie of a static shape (:class:`~cactus_theory.drafts.TokenTree`),
  with independent rows at every context (``context_dependent=True``) or one pair per depth
  (teacher forced).

:func:`simulate_tree` draws trees, verifies them with the batched torch sampler
(:class:`~cactus_theory.samplers.multidraft.TreeSampler`) and returns the accepted lengths:
the simulation the exact dynamic programme
(:func:`cactus_theory.analysis.multidraft.expected_accepted_length`) is checked against.
Symbols: q verifier, p drafter, k drafts per node.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .._extras import require
from .._validation import as_count, random_generator
from ..distributions import synthetic_pairs
from ..drafts import DraftChain, MultiDraft, TokenTree

__all__ = ["synthetic_multidraft", "synthetic_chain", "synthetic_tree", "TreeSimulation", "simulate_tree"]


def synthetic_multidraft(
    family: str = "dirichlet",
    k: int = 2,
    n_positions: int = 8,
    vocab_size: int = 8,
    rng=None,
    *,
    drafting: str = "iid",
    **family_knobs,
) -> MultiDraft:
    """k drafts at each of ``n_positions`` synthetic positions (rows ``[n_positions, V]``)."""
    q, p = synthetic_pairs(family, as_count(n_positions, "n_positions"), vocab_size, rng, **family_knobs)
    return MultiDraft(q, p, k, drafting)


def synthetic_chain(
    family: str = "dirichlet", length: int = 3, vocab_size: int = 8, rng=None, **family_knobs
) -> DraftChain:
    """A teacher-forced chain of ``length`` drafts: gamma + 1 synthetic pairs (the last one's q
    gives the bonus token)."""
    gamma = as_count(length, "length")
    q, p = synthetic_pairs(family, gamma + 1, vocab_size, rng, **family_knobs)
    return DraftChain(q, p[:gamma])


def synthetic_tree(
    family: str = "dirichlet",
    widths: Sequence[int] = (2, 1),
    vocab_size: int = 4,
    rng=None,
    *,
    drafting: str = "iid",
    context_dependent: bool = True,
    **family_knobs,
) -> TokenTree:
    r"""The complete trie of the static shape ``widths`` with synthetic rows.

    Parameters
    ----------
    family : str
        A family of :func:`~cactus_theory.distributions.synthetic_pairs`.
    widths : sequence of int
        Children drafted at each depth (``(2, 1)``: two at the root, one below each).
    vocab_size : int
        V (the random schemes' trie has up to V^depth nodes: keep it small).
    rng : int, Generator or None
    drafting : {"iid", "without_replacement", "top_k"}
    context_dependent : bool
        True: an independent (q, p) pair at every context (the rows depend on the drafted
        text, as a real model's do); False: one pair per depth (teacher forced).
    **family_knobs
        Passed to ``synthetic_pairs``.
    """
    rng = random_generator(rng, "rng")
    depth = len(widths)
    if not context_dependent:
        q, p = synthetic_pairs(family, depth + 1, vocab_size, rng, **family_knobs)
        return TokenTree.from_model(lambda c: (q[len(c)], p[len(c)]), widths, drafting)

    def rows(context):
        q, p = synthetic_pairs(family, 1, vocab_size, rng, **family_knobs)
        return q[0], p[0]

    return TokenTree.from_model(rows, widths, drafting)


@dataclass(frozen=True)
class TreeSimulation:
    """Simulated verifications of one structure.

    Attributes
    ----------
    accepted : ndarray, shape (n,)
        Accepted drafts per verification.
    max_depth : int
        The trie's depth (accepted lengths lie in [0, max_depth]).
    """

    accepted: np.ndarray
    max_depth: int

    @property
    def mean(self) -> float:
        return float(self.accepted.mean())

    def tolerance(self, false_failure: float = 1e-6, variance: float | None = None) -> float:
        r"""Half-width t with :math:`P(|\bar L - E L| \ge t) \le` ``false_failure``.

        Without ``variance``: Hoeffding's :math:`D\sqrt{\log(2/\delta)/(2n)}` for n values
        in [0, D]. With the exact variance :math:`\sigma^2` of one accepted length:
        Bernstein's, the root of :math:`n t^2 = 2\log(2/\delta)(\sigma^2 + D t/3)`.
        """
        n = self.accepted.size
        log_term = np.log(2.0 / false_failure)
        d = float(self.max_depth)
        if variance is None:
            return float(d * np.sqrt(log_term / (2.0 * n)))
        a, b, c = n, -2.0 * log_term * d / 3.0, -2.0 * log_term * float(variance)
        return float((-b + np.sqrt(b * b - 4 * a * c)) / (2 * a))


def simulate_tree(verifier, structure, n: int = 2000, rng=None, **knobs) -> TreeSimulation:
    """``n`` independent drafts-and-verifications of a structure with the torch sampler.

    Trees are drawn by :meth:`~cactus_theory.drafts.TokenTree.draw` (numpy ``rng``), grouped
    by topology and verified by :class:`~cactus_theory.samplers.multidraft.TreeSampler`
    (torch generator seeded from ``rng``). Needs torch (the ``[torch]`` extra).
    """
    torch = require("torch", "cactus_theory.simulate.simulate_tree")
    from ..samplers.multidraft import TreeSampler

    if isinstance(structure, (MultiDraft, DraftChain)):
        structure = structure.as_tree()
    if not isinstance(structure, TokenTree):
        raise ValueError(
            f"structure: expected a TokenTree, MultiDraft or DraftChain, got {type(structure).__name__}"
        )
    n = as_count(n, "n")
    rng = random_generator(rng, "rng")
    sampler = TreeSampler(verifier, **knobs)
    gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
    groups: dict = {}
    for _ in range(n):
        drawn = structure.draw(rng)
        groups.setdefault(tuple(drawn.parents.tolist()), []).append(drawn)
    accepted = []
    for parents, trees in groups.items():
        q = torch.tensor(np.stack([t.target_probs for t in trees]), dtype=torch.float32)
        p = torch.tensor(np.stack([t.draft_probs for t in trees]), dtype=torch.float32)
        tok = torch.tensor(np.stack([t.token_ids for t in trees]))
        out = sampler(q, p, tok, np.asarray(parents), structure.drafting, gen)
        accepted.append(out.num_accepted.numpy())
    return TreeSimulation(np.concatenate(accepted), int(structure.depths.max()))

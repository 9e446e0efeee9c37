"""Batched torch samplers for every registered rule, with vLLM's rejection-sampler interfaces.

* :class:`RuleSampler` (vLLM 0.7.3 V0 layout ``[B, k+1, V]``) and :func:`make_sampler`.
* :mod:`.v1`: an adapter for vLLM V1's ragged layout (flat draft ids with cumulative counts).

Needs torch (``pip install 'cactus-theory[torch]'``); without it, importing this package raises
one line naming the extra.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token.
"""

from .._extras import require

require("torch", "cactus_theory.samplers")

from .base import RuleSampler  # noqa: E402
from .draws import exponential_race, inverse_cdf_sample  # noqa: E402
from .multidraft import TreeSample, TreeSampler, make_tree_sampler  # noqa: E402
from .v1 import PLACEHOLDER_TOKEN_ID, V1Stats, parse_output, ragged_forward  # noqa: E402

__all__ = [
    "RuleSampler",
    "make_sampler",
    "inverse_cdf_sample",
    "exponential_race",
    "ragged_forward",
    "parse_output",
    "V1Stats",
    "PLACEHOLDER_TOKEN_ID",
    "TreeSampler",
    "TreeSample",
    "make_tree_sampler",
]


def make_sampler(
    rule_name_or_rule, *, strict_mode: bool = False, fused: bool = False, **knobs
) -> RuleSampler:
    r"""A batched torch sampler (vLLM 0.7.3 V0 interface) for one rule.

    Parameters
    ----------
    rule_name_or_rule : str or Rule
        A name of :data:`cactus_theory.rules.RULES` (configured with ``**knobs``) or a
        configured rule.
    strict_mode : bool
        Validate input values (synchronizes with the host), as vLLM's ``strict_mode``.
    fused : bool
        Compiled one-read kernels for the passes over whole rows (:mod:`.fused`); default
        eager torch.
    **knobs
        The rule's knobs (e.g. ``delta=0.75`` for Cactus); unknown knobs raise ValueError.

    Returns
    -------
    RuleSampler
        ``sampler(target_with_bonus_probs [B,k+1,V], bonus_token_ids [B,1], draft_probs [B,k,V],
        draft_token_ids [B,k], seeded_seqs=None) -> [B,k+1]`` int64. The emitted token at a
        position follows :math:`h_{alg}` (paper, Theorem 3) with q = verifier, p = drafter,
        n = drafted token.

    Examples
    --------
    >>> import torch
    >>> s = make_sampler("cactus-taylor", delta=0.75)
    >>> q = torch.full((1, 3, 4), 0.25); p = torch.full((1, 2, 4), 0.25)
    >>> s(q, torch.tensor([[3]]), p, torch.tensor([[1, 2]])).tolist()   # p = q: all accepted
    [[1, 2, 3]]
    """
    return RuleSampler(rule_name_or_rule, strict_mode=strict_mode, fused=fused, **knobs)

"""The tree sampler (``samplers/multidraft.py``): half-precision inputs and the input checks
naming their argument, and verify_chain as the tree sampler on a chain. Its law against the
exact one is in the verifiers' battery (tests/rules/test_multidraft_rules.py).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tree_structures import tree_structure

from cactus_theory.analysis.multidraft import (
    drawn_trees,
)
from cactus_theory.rules.multidraft import get_verifier
from cactus_theory.samplers.multidraft import TreeSampler
from cactus_theory.simulate._trees import synthetic_chain


def test_sampler_accepts_half_precision_and_checks_input():
    tree = tree_structure("tree", "iid", 11)
    draws = drawn_trees(tree)
    drawn = draws[0][1]
    q = torch.tensor(drawn.target_probs[None], dtype=torch.bfloat16).expand(4, -1, -1)
    p = torch.tensor(drawn.draft_probs[None], dtype=torch.float16).expand(4, -1, -1)
    out = TreeSampler("rrs")(q, p, torch.tensor(drawn.token_ids), drawn.parents)
    assert out.tokens.shape == (4, 3) and int(out.tokens[:, 0].min()) >= 0
    with pytest.raises(ValueError, match="drafting"):
        TreeSampler("spectr")(q, p, torch.tensor(drawn.token_ids), drawn.parents, "top_k")
    with pytest.raises(ValueError, match="parents"):
        TreeSampler("block")(q, p, torch.tensor(drawn.token_ids), drawn.parents)
    with pytest.raises(ValueError, match="token_ids"):
        TreeSampler("rrs")(q, p, torch.full((4, drawn.num_nodes), 7), drawn.parents)
    with pytest.raises(ValueError, match="verifier"):
        get_verifier("nope")


def test_verify_chain_is_the_tree_sampler_on_a_chain():
    from cactus_theory.samplers.multidraft import verify_chain

    chain = synthetic_chain("dirichlet", 3, vocab_size=5, rng=12)
    b = 64
    q = torch.tensor(chain.target_probs, dtype=torch.float32).expand(b, -1, -1)
    p = torch.tensor(chain.draft_probs, dtype=torch.float32).expand(b, -1, -1)
    drafts = torch.tensor(np.stack([chain.draw(i) for i in range(b)]))
    out = verify_chain("block", q, p, drafts, generator=torch.Generator().manual_seed(0))
    tokens = torch.cat([torch.zeros(b, 1, dtype=torch.int64), drafts], 1)
    p_tree = torch.cat([p, torch.ones(b, 1, 5)], 1)
    ref = TreeSampler("block")(q, p_tree, tokens, np.arange(-1, 3), "iid", torch.Generator().manual_seed(0))
    assert torch.equal(out, ref.tokens) and out.shape == (b, 4)
    with pytest.raises(ValueError, match="draft_token_ids"):
        verify_chain("block", q, p, drafts[:, :2])

"""Small synthetic draft structures (multi-draft, tree, chain) as token trees, for the tree
sampler's and the multi-draft verifiers' tests."""

import numpy as np

from cactus_theory.drafts import MultiDraft, TokenTree
from cactus_theory.simulate import synthetic_chain, synthetic_multidraft, synthetic_tree


def tree_structure(structure: str, drafting: str, seed: int = 0):
    """A small synthetic draft structure ('multi': k drafts of one position; 'tree': a (2, 1)
    tree; else a chain of 2) drafted by ``drafting``, as a token tree (seeded)."""
    if structure == "multi":
        md = synthetic_multidraft(
            "dirichlet", k=3 if drafting != "iid" else 2, n_positions=1, vocab_size=4, rng=seed
        )
        return MultiDraft(md.target_probs[0], md.draft_probs[0], md.k, drafting).as_tree()
    if structure == "tree":
        return synthetic_tree(
            "dirichlet", (2, 1), vocab_size=3, rng=seed, drafting=drafting, concentration=0.7
        )
    chain = synthetic_chain("dirichlet", 2, vocab_size=3, rng=seed, concentration=0.7)
    if drafting == "top_k":
        q, p = chain.target_probs, chain.draft_probs
        pad = np.full(3, 1 / 3)
        return TokenTree.from_model(lambda c: (q[len(c)], p[len(c)] if len(c) < 2 else pad), [1, 1], "top_k")
    return chain.as_tree()

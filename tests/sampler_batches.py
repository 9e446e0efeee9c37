"""A random sampler batch in the samplers' layout: B requests of k drafts over V tokens."""

import torch


def random_batch(B, k, V, seed=0, scale=2.0):
    """(target_probs [B, k+1, V], bonus ids [B, 1], draft_probs [B, k, V], draft ids [B, k]):
    softmax rows of ``scale`` x standard normal logits, the drafts drawn from p (seeded)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.softmax(scale * torch.randn(B, k + 1, V, generator=g), -1)
    p = torch.softmax(scale * torch.randn(B, k, V, generator=g), -1)
    ids = torch.multinomial(p.reshape(-1, V), 1, generator=g).reshape(B, k)
    bonus = torch.randint(0, V, (B, 1), generator=g)
    return q, bonus, p, ids

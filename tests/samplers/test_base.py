"""The rule sampler (``samplers/base.py``): vLLM 0.7.3 V0's output layout and counters for every
rule, the bonus, empty batches, vLLM's tensor set-up, bad shapes and strict values, seeded rows
bit for bit and half-precision inputs (engines.md sections 1.2-1.4).
Symbols: q verifier (target_probs), p drafter (draft_probs), n drafted token.
"""

import math

import pytest
import torch
from sampler_batches import random_batch

from cactus_theory.rules import RULES
from cactus_theory.samplers import (
    RuleSampler,
    make_sampler,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


ALL_RULES = list(RULES.all_names())  # every rule, and every alias


def _check_layout(out, ids, bonus, accepted):
    """Row = accepted prefix of drafts, one extra token, then -1 (engines.md 1.2-1.3)."""
    B, k = ids.shape
    assert out.shape == (B, k + 1) and out.dtype == torch.int64
    n_acc = accepted.long().cumprod(-1).sum(-1)
    for b in range(B):
        n = int(n_acc[b])
        assert torch.equal(out[b, :n], ids[b, :n])
        assert out[b, n] >= 0
        if n == k:
            assert out[b, k] == bonus[b, 0]
        assert torch.all(out[b, n + 1 :] == -1)
    assert int((out != -1).sum()) == int((n_acc + 1).sum())


@pytest.mark.parametrize("name", ALL_RULES)
def test_layout_and_counters_every_rule(name):
    q, bonus, p, ids = random_batch(16, 4, 12, seed=1)
    s = make_sampler(name)
    torch.manual_seed(0)
    out = s(q, bonus, p, ids)
    acc = s.last_accepted
    _check_layout(out, ids, bonus, acc)
    assert int(s.num_accepted_tokens) == int(acc.sum())  # non-causal, as vLLM V0
    assert int(s.num_accepted_prefix_tokens) == int(acc.long().cumprod(-1).sum())
    assert int(s.num_emitted_tokens) == int((out != -1).sum())
    assert s.num_draft_tokens == 16 * 4 and isinstance(s.num_draft_tokens, int)
    assert int(out.max()) < 12 and int(out.min()) >= -1
    s(q, bonus, p, ids)
    assert s.num_draft_tokens == 2 * 16 * 4  # counters accumulate


def test_num_accepted_counts_after_first_rejection():
    """vLLM V0 counts every True of the non-causal matrix, also after a rejection (1.3)."""
    V = 4
    q = torch.tensor([[[0.0, 0.5, 0.5, 0.0], [0.25] * 4, [0.25] * 4]])
    p = torch.tensor([[[1.0, 0.0, 0.0, 0.0], [0.25] * 4]])
    ids = torch.tensor([[0, 2]])  # position 0: q_n = 0, always rejected; position 1: p = q
    bonus = torch.tensor([[3]])
    s = make_sampler("sps")
    out = s(q, bonus, p, ids)
    assert s.last_accepted.tolist() == [[False, True]]
    assert int(s.num_accepted_tokens) == 1  # vLLM V0 semantics
    assert int(s.num_accepted_prefix_tokens) == 0  # the causal count (vLLM V1)
    assert int(s.num_emitted_tokens) == 1
    assert out[0, 0] in (1, 2) and out[0, 1:].tolist() == [-1, -1]
    assert int(out.max()) < V


@pytest.mark.parametrize("name", ALL_RULES)
def test_all_accepted_emits_bonus(name):
    """p = q = one-hot at the drafted token: every rule accepts; the bonus closes the row."""
    B, k, V = 3, 3, 5
    ids = torch.tensor([[1, 2, 3], [0, 0, 4], [4, 3, 2]])
    p = torch.nn.functional.one_hot(ids, V).float()
    q = torch.cat([p, torch.full((B, 1, V), 1.0 / V)], dim=1)
    bonus = torch.tensor([[2], [3], [0]])
    s = make_sampler(name)
    out = s(q, bonus, p, ids)
    assert out.tolist() == torch.cat([ids, bonus], 1).tolist()
    assert int(s.num_emitted_tokens) == B * (k + 1)


def test_empty_batch():
    s = make_sampler("cactus-taylor")
    q, bonus, p, ids = random_batch(0, 3, 7)
    out = s(q, bonus, p, ids)
    assert out.shape == (0, 4) and out.dtype == torch.int64
    assert s.num_draft_tokens == 0 and int(s.num_emitted_tokens) == 0


def test_init_tensors_like_vllm():
    s = make_sampler("sps")
    assert s.num_accepted_tokens is None
    s.init_tensors("cpu")
    assert s.num_accepted_tokens.dtype == torch.long and s.num_accepted_tokens.dim() == 0
    assert s.probs_dtype == torch.float32 and s.token_id_dtype == torch.int64


@pytest.mark.parametrize(
    "bad, arg",
    [
        (lambda q, b, p, i: (q[:, :1], b, p, i), "target_with_bonus_probs"),
        (lambda q, b, p, i: (q, b, p[:, :2], i), "draft_probs"),
        (lambda q, b, p, i: (q, b, p, i[:, :2]), "draft_token_ids"),
        (lambda q, b, p, i: (q, b[:, 0], p, i), "bonus_token_ids"),
        (lambda q, b, p, i: (q, b, p, i.float()), "draft_token_ids"),
    ],
)
def test_bad_shapes_raise(bad, arg):
    q, bonus, p, ids = random_batch(2, 3, 5)
    with pytest.raises(ValueError, match=arg):
        make_sampler("sps")(*bad(q, bonus, p, ids))


def test_strict_mode_rejects_bad_values():
    q, bonus, p, ids = random_batch(2, 3, 5)
    s = make_sampler("sps", strict_mode=True)
    with pytest.raises(ValueError, match="draft_token_ids"):
        s(q, bonus, p, ids + 5)
    with pytest.raises(ValueError, match="bonus_token_ids"):
        s(q, bonus - 10, p, ids)
    bad = q.clone()
    bad[0, 0, 0] = float("nan")
    with pytest.raises(ValueError, match="target_with_bonus_probs"):
        s(bad, bonus, p, ids)
    with pytest.raises(ValueError, match="seeded_seqs"):
        make_sampler("sps")(q, bonus, p, ids, seeded_seqs={5: torch.Generator()})
    with pytest.raises(ValueError, match="rule"):
        make_sampler("no-such-rule")
    with pytest.raises(ValueError, match="delta"):
        make_sampler("cactus-taylor", delta=-1.0)


@pytest.mark.parametrize("name", ["sps", "cactus-taylor", "tas", "mentored-kl"])
def test_seeded_rows_reproduce_bit_for_bit(name):
    q, bonus, p, ids = random_batch(6, 4, 9, seed=2)
    s = make_sampler(name)

    def run(rows, seeds):
        gens = {i: torch.Generator().manual_seed(sd) for i, sd in zip(range(len(rows)), seeds)}
        return s(q[rows], bonus[rows], p[rows], ids[rows], seeded_seqs=gens)

    a = run([0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15])
    torch.manual_seed(99)  # the default generator must not matter
    b = run([0, 1, 2, 3, 4, 5], [10, 11, 12, 13, 14, 15])
    assert torch.equal(a, b)
    # a seeded row's output depends only on its inputs and its generator, not on its batch
    gens = {0: torch.Generator().manual_seed(12)}
    alone = s(q[2:3], bonus[2:3], p[2:3], ids[2:3], seeded_seqs=gens)
    assert torch.equal(alone[0], a[2])
    mixed = s(
        q[[2, 0, 1]],
        bonus[[2, 0, 1]],
        p[[2, 0, 1]],
        ids[[2, 0, 1]],
        seeded_seqs={0: torch.Generator().manual_seed(12)},
    )
    assert torch.equal(mixed[0], a[2])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["sps", "cactus-taylor", "cactus-exact-kl", "topk", "fuzzy"])
def test_half_precision_inputs_computed_in_float32(name, dtype):
    """bf16/fp16 inputs give exactly the float32 result on the same (rounded) values."""
    q, bonus, p, ids = random_batch(8, 3, 11, seed=4)
    qh, ph = q.to(dtype), p.to(dtype)
    s = make_sampler(name)
    g = lambda: {i: torch.Generator().manual_seed(i) for i in range(8)}  # noqa: E731
    out_h = s(qh, bonus, ph, ids, seeded_seqs=g())
    out_f = s(qh.float(), bonus, ph.float(), ids, seeded_seqs=g())
    assert torch.equal(out_h, out_f)
    assert int(out_h.max()) < 11


def test_make_sampler_is_a_module():
    s = make_sampler("cactus-taylor", delta=0.75)
    assert isinstance(s, RuleSampler) and isinstance(s, torch.nn.Module)
    assert s.rule.knobs["delta"] == 0.75 and math.isfinite(s.rule.knobs["delta"])

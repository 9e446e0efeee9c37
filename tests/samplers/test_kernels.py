"""The samplers' kernel registry (cactus_theory.samplers._kernels): each rule's torch speed
paths are registered by rule class, and without them (dropped from the registry, or a guard
that fails or raises, as a torch version missing a feature would make it) the sampler runs
the paths derived from the rule's declaration, with the same law."""

import numpy as np
import pytest
import torch
from rule_configs import FAST_IDS, FAST_RULES
from scipy import stats

from cactus_theory.analysis.one_step import emitted_distribution
from cactus_theory.rules import RULES, get_rule
from cactus_theory.rules.multidraft import VERIFIERS
from cactus_theory.samplers import _kernels, make_sampler
from cactus_theory.samplers._kernels import NO_KERNELS, RuleKernels, kernels_for

#: False-alarm rate of each chi-square test (seeds fixed: deterministic outcome; a correct
#: sampler with an arbitrary seed fails at this rate).
ALPHA = 1e-3


def _chisquare_ok(counts, expected_probs, n):
    """Chi-square with cells of expected count < 5 pooled; zero-probability cells never hit."""
    assert counts[expected_probs == 0].sum() == 0, (counts, expected_probs)
    exp = n * expected_probs
    big = exp >= 5
    obs_c = np.append(counts[big], counts[~big].sum())
    exp_c = np.append(exp[big], exp[~big].sum())
    keep = exp_c > 0
    if keep.sum() < 2:  # a point mass: every draw on it
        return obs_c[keep].sum() == n
    return stats.chisquare(obs_c[keep], exp_c[keep] * obs_c[keep].sum() / exp_c[keep].sum()).pvalue > ALPHA


def _pair(seed, V=6, conc=0.8):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(V, conc)), rng.dirichlet(np.full(V, conc))


def _emitted_counts(sampler, q, p, n):
    """Counts of the emitted token over n one-position calls on un-normalized float32 rows (q
    scaled by 2.5, p by 0.4; drafts n ~ p, seeded), as a float array of length V."""
    V = len(q)
    g = torch.Generator().manual_seed(11)
    qt = torch.tensor(q * 2.5, dtype=torch.float32).expand(n, 2, V)
    pt = torch.tensor(p * 0.4, dtype=torch.float32).expand(n, 1, V)
    ids = torch.multinomial(torch.tensor(p).expand(n, V), 1, replacement=True, generator=g)
    torch.manual_seed(12)
    out = sampler(qt, torch.zeros(n, 1, dtype=torch.int64), pt, ids)
    return np.bincount(out[:, 0].numpy(), minlength=V).astype(float)


def _rows(B=12, k=3, V=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(B, k, V, generator=g) ** 3 * torch.rand(B, k, 1, generator=g) * 3
    y = torch.rand(B, k, V, generator=g) ** 3 * torch.rand(B, k, 1, generator=g) * 3
    ids = torch.randint(0, V, (B, k), generator=g)
    return x, y, ids


def test_every_kernel_belongs_to_a_registered_rule():
    """Each registry entry is a RuleKernels for a class some registered rule (or multi-draft
    verifier: the tree sampler's node steps) is an instance of; the rules with torch speed
    paths have them registered."""
    classes = {type(spec.make()) for spec in RULES.values()} | {type(s.make()) for s in VERIFIERS.values()}
    for cls, kernels in _kernels.KERNELS.items():
        assert isinstance(kernels, RuleKernels)
        assert any(issubclass(c, cls) for c in classes), cls
    for name in (
        "tas",
        "topk",
        "fuzzy",
        "cascade-token-v3",
        "cactus-taylor",
        "cactus-exact",
    ):
        assert kernels_for(get_rule(name)) is not NO_KERNELS, name
    # derived paths only (interpolation's eager residual kernel paid 1.02-1.19x: removed)
    assert kernels_for(get_rule("sps")) is NO_KERNELS and kernels_for(get_rule("interpolation")) is NO_KERNELS


def test_register_kernels_checks_its_argument():
    with pytest.raises(TypeError, match="kernels"):
        _kernels.register_kernels(type(get_rule("sps")), {"accept_from_rows": None})


@pytest.mark.parametrize("broken", ["dropped", "guard-false", "guard-raises"])
def test_a_missing_or_broken_kernel_gives_the_derived_paths(monkeypatch, broken):
    """Dropped from the registry, or a guard that returns False or raises: kernels_for gives
    NO_KERNELS (every hook None) for the rule, and a subclass finds its parent's entry."""
    rule = get_rule("tas")
    cls = type(rule)
    entry = _kernels.KERNELS[cls]
    registry = dict(_kernels.KERNELS)
    if broken == "dropped":
        del registry[cls]
    else:

        def guard():
            if broken == "guard-raises":
                raise AttributeError("module 'torch' has no attribute 'cond'")
            return False

        registry[cls] = RuleKernels(**{**entry.__dict__, "guard": guard})
    assert kernels_for(rule) is entry
    sub = type("Sub", (cls,), {})
    assert kernels_for(sub(0.09, 0.3, "vllm", "argmax")) is entry
    monkeypatch.setattr(_kernels._registry, "KERNELS", registry)
    assert kernels_for(rule) is NO_KERNELS
    assert make_sampler(rule).kernels is NO_KERNELS


@pytest.mark.parametrize("name, knobs", FAST_RULES, ids=FAST_IDS)
def test_emitted_law_without_kernels(monkeypatch, name, knobs):
    """The registry emptied: one position, un-normalized float32 rows, the eager sampler's
    emitted token follows h_alg of the float64 analysis (chi-square, n = 20,000, ALPHA), as
    with the kernels (test_fast_paths.test_emitted_law_fast_paths)."""
    monkeypatch.setattr(_kernels._registry, "KERNELS", {})
    q, p = _pair(9)
    N = 20_000
    rule = get_rule(name, **knobs)
    s = make_sampler(rule)
    assert s.kernels is NO_KERNELS
    h = emitted_distribution(rule, q, p)
    counts = _emitted_counts(s, q, p, N)
    assert _chisquare_ok(counts, h, N), f"{name}: {counts} vs {N * h}"


@pytest.mark.parametrize("name, knobs", FAST_RULES, ids=FAST_IDS)
def test_accept_and_recovery_without_kernels_equal_the_kernels(monkeypatch, name, knobs):
    """With and without the registry, the eager sampler's acceptance at the drafted tokens
    and its recovery law at one position per row agree: 0/1 decisions equal (random rows: no
    entry within rounding of a threshold), other acceptances within V eps32 (1 + q_n/p_n)
    (the same formulas on rows normalized in another order; the ratio amplifies an error in
    h_n by q_n / p_n), normalized recovery weights within 1e-6 (float32 sums of 60 terms in
    another order)."""
    rule = get_rule(name, **knobs)
    x, y, ids = _rows(seed=3)
    sq, sp = x.sum(-1), y.sum(-1)
    pos = torch.arange(x.shape[0]) % x.shape[1]
    results = []
    for registry in (_kernels.KERNELS, {}):
        monkeypatch.setattr(_kernels._registry, "KERNELS", registry)
        s = make_sampler(rule)
        a, state = s.accept_probs_at_drafts(x, y, ids, sq, sp)
        w = s.recovery_weights(x, y, ids, pos, state, sq, sp)[0]
        results.append((a, w / w.sum(-1, keepdim=True)))
    (a_k, w_k), (a_d, w_d) = results
    if RULES[name].deterministic:
        assert torch.equal(a_k, a_d)
    else:
        q, p = x / sq[..., None], y / sp[..., None]
        ratio = torch.gather(q, -1, ids[..., None])[..., 0] / torch.gather(p, -1, ids[..., None])[..., 0]
        bound = x.shape[-1] * torch.finfo(torch.float32).eps * (1.0 + ratio)
        assert bool(((a_k - a_d).abs() <= bound).all())
    torch.testing.assert_close(w_k, w_d, rtol=0, atol=1e-6)

"""The batched torch samplers' laws: the emitted law against the exact analysis for every rule,
the accepted-prefix law, the declared accept paths against the plan, edge cases, and the CUDA
sync check. The sampler module's layout, counters, shapes, seeding and dtypes are in
test_base.py; the vLLM V1 ragged adapter in test_v1.py.

Semantics tested are those engines.md documents (vLLM itself cannot be installed here).
Symbols: q verifier (target_probs), p drafter (draft_probs), n drafted token.
"""

import numpy as np
import pytest
import torch
from rule_configs import CONFIGS  # every rule at its defaults and halfway to SpS
from sampler_batches import random_batch
from scipy import stats

from cactus_theory.analysis.one_step import emitted_distribution
from cactus_theory.rules import RULES, get_rule
from cactus_theory.samplers import (
    exponential_race,
    make_sampler,
)

ALL_RULES = list(RULES.all_names())  # every rule, and every alias


#: False-alarm rate of each chi-square test below under a correct sampler (seeds are fixed, so
#: the outcome is deterministic; this is the rate at which a correct sampler with an arbitrary
#: seed would fail). Over the ~45 configurations x 2 cases the family-wise rate is <= 0.09.
ALPHA = 1e-3


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------------------------------
# The sampler's law matches the exact analysis (every rule)
# ---------------------------------------------------------------------------------------------
def _law_case(case):
    rng = np.random.default_rng(7)
    V = 6
    raw_q = rng.dirichlet(np.full(V, 0.8))
    raw_p = rng.dirichlet(np.full(V, 0.8))
    if case == "full":
        return raw_q, raw_p, raw_q, raw_p
    # truncated: q keeps its top 3 (zeros elsewhere), p its top 4, raw kept for raw-reading rules
    q = np.where(raw_q >= np.sort(raw_q)[-3], raw_q, 0.0)
    p = np.where(raw_p >= np.sort(raw_p)[-4], raw_p, 0.0)
    return q / q.sum(), p / p.sum(), raw_q, raw_p


@pytest.mark.parametrize("case", ["full", "truncated"])
@pytest.mark.parametrize("name, knobs", [c[1:] for c in CONFIGS], ids=[c[0] for c in CONFIGS])
def test_emitted_law_matches_exact_analysis(name, knobs, case):
    """Chi-square test of the emitted token at one position against h_alg (Theorem 3).

    n = 20,000 draws; false-alarm rate ALPHA = 1e-3 per test. Cells with h_alg = 0 must never
    be hit; cells with expected count < 5 are pooled (the chi-square approximation's rule).
    float32 sampling vs float64 analysis differ by ~1e-7 relative, far below the ~3e-3
    sampling noise.
    """
    q, p, raw_q, raw_p = _law_case(case)
    rule = get_rule(name, **knobs)
    h = emitted_distribution(rule, q, p, raw_target_probs=raw_q, raw_draft_probs=raw_p)
    n, V = 20_000, len(q)
    g = torch.Generator().manual_seed(11)
    qt = torch.tensor(q, dtype=torch.float32).expand(n, 2, V)
    pt = torch.tensor(p, dtype=torch.float32).expand(n, 1, V)
    rq = torch.tensor(raw_q, dtype=torch.float32).expand(n, 2, V)
    rp = torch.tensor(raw_p, dtype=torch.float32).expand(n, 1, V)
    ids = torch.multinomial(pt[:, 0], 1, replacement=True, generator=g)
    bonus = torch.zeros(n, 1, dtype=torch.int64)
    torch.manual_seed(12)
    out = make_sampler(rule)(qt, bonus, pt, ids, raw_target_probs=rq, raw_draft_probs=rp)
    counts = np.bincount(out[:, 0].numpy(), minlength=V).astype(float)
    assert counts[h == 0].sum() == 0, f"emitted a token with h_alg = 0: {counts}, {h}"
    exp = n * h
    big = exp >= 5
    obs_c = np.append(counts[big], counts[~big].sum())
    exp_c = np.append(exp[big], exp[~big].sum())
    keep = exp_c > 0
    if keep.sum() < 2:  # a point mass: every draw must land on it (no chi-square possible)
        assert obs_c[keep].sum() == n, f"{name}/{case}: {counts} vs a point mass {exp}"
        return
    pval = stats.chisquare(obs_c[keep], exp_c[keep] * obs_c[keep].sum() / exp_c[keep].sum()).pvalue
    assert pval > ALPHA, f"{name}/{case}: p = {pval:.2e}, counts {counts}, expected {exp}"


def test_exponential_race_law():
    """The exponential race samples probs / sum(probs); zero weights never win (ALPHA)."""
    w = torch.tensor([0.0, 1.0, 3.0, 0.5, 0.0, 2.5])
    torch.manual_seed(3)
    idx = exponential_race(w.expand(30_000, 6))
    counts = np.bincount(idx.numpy(), minlength=6)
    assert counts[0] == counts[4] == 0
    exp = (w / w.sum()).numpy()[[1, 2, 3, 5]] * 30_000
    assert stats.chisquare(counts[[1, 2, 3, 5]], exp).pvalue > ALPHA


# ---------------------------------------------------------------------------------------------
# Edge cases (conventions of cactus_theory.conventions): no NaN, no out-of-range id
# ---------------------------------------------------------------------------------------------
def _edge_inputs():
    V = 5
    e = lambda i: torch.nn.functional.one_hot(torch.tensor(i), V).float()  # noqa: E731
    u = torch.full((V,), 1.0 / V)
    half = torch.tensor([0.5, 0.5, 0.0, 0.0, 0.0])
    cases = {
        # p_n = 0 at the drafted token (draft not from p, e.g. top-k mismatch)
        "p_n=0": (torch.stack([half, half, u]), torch.stack([e(0), e(0)]), [1, 1]),
        # q == p exactly: empty residual
        "empty residual": (torch.stack([u, u, u]), torch.stack([u, u]), [3, 4]),
        # q_n = 1
        "q_n=1": (torch.stack([e(2), e(2), u]), torch.stack([u, u]), [2, 2]),
        # q_n = 0 at the draft, q one-hot elsewhere
        "q_n=0": (torch.stack([e(4), e(4), u]), torch.stack([u, u]), [1, 0]),
    }
    return cases


@pytest.mark.parametrize("name", ALL_RULES)
def test_edge_cases_never_nan_or_out_of_range(name):
    s = make_sampler(name)
    for label, (q, p, ids) in _edge_inputs().items():
        V = q.shape[-1]
        B = 64
        qb, pb = q.expand(B, *q.shape), p.expand(B, *p.shape)
        idb = torch.tensor(ids).expand(B, 2)
        torch.manual_seed(0)
        out = s(qb, torch.zeros(B, 1, dtype=torch.int64), pb, idb)
        assert torch.all((out >= -1) & (out < V)), label
        assert torch.all(out[:, 0] >= 0), label
        plan = get_rule(name).plan(qb[:, :2], pb)
        assert not torch.isnan(plan.accept_probs_at(idb)).any(), label
        assert not torch.isnan(plan.recovery_at(idb)).any(), label
    # V = 1: the only token is drafted, accepted and emitted
    one = torch.ones(4, 3, 1)
    out = s(one, torch.zeros(4, 1, dtype=torch.int64), one[:, :2], torch.zeros(4, 2, dtype=torch.int64))
    assert out.tolist() == [[0, 0, 0]] * 4


def test_p_n_zero_convention_sps():
    """Convention 2: p_n = 0 and q_n > 0 -> accepted (vLLM V0: q/0 = inf -> accept)."""
    q, p, ids = _edge_inputs()["p_n=0"]
    out = make_sampler("sps")(q[None], torch.tensor([[4]]), p[None], torch.tensor([ids]))
    assert out.tolist() == [[1, 1, 4]]


def test_q_n_zero_is_rejected_and_recovered_in_support():
    """q_n = 0 under SpS: always rejected, the recovery lies in supp(q) (never token 0 by default)."""
    q, p, ids = _edge_inputs()["q_n=0"]
    B = 200
    out = make_sampler("sps")(
        q.expand(B, 3, 5),
        torch.zeros(B, 1, dtype=torch.int64),
        p.expand(B, 2, 5),
        torch.tensor(ids).expand(B, 2),
    )
    assert torch.all(out[:, 0] == 4) and torch.all(out[:, 1:] == -1)


# ---------------------------------------------------------------------------------------------
# The declared accept paths against the plan; the accepted-prefix law
# ---------------------------------------------------------------------------------------------


def _plan_only(rule):
    """The same configured rule as a plain ``Rule`` (the decision form: its plan alone), so
    that its sampler takes the plan path on row-normalized copies."""
    from cactus_theory.rules.registry import Rule

    class PlanOnly(Rule):
        def plan(self, *args, **kwargs):
            return rule.plan(*args, **kwargs)

    out = PlanOnly()
    out.spec, out.knobs = rule.spec, dict(rule.knobs)
    return out


@pytest.mark.parametrize("name", ["cactus-taylor", "sps"])
def test_declared_accept_paths_agree_with_plan_path(name):
    """A spike rule's path (gamma once, at the [B, k] drafted tokens) and an elementwise
    target's (h at the drafted tokens' values) give the plan path's acceptances bit for bit
    and the same outputs from the same seeds; for the spike rule a counter proves gamma was
    evaluated once per call on the drafted tokens only, and a spike scaled by 0.5 is seen in
    the output."""
    from cactus_theory.rules._cactus import CactusTaylor

    calls = []

    class Counting(CactusTaylor):
        scale = 1.0

        def spike(self, q_n):
            calls.append(tuple(q_n.shape))
            return self.scale * super().spike(q_n)

    base = get_rule(name, **({"delta": 0.3} if name == "cactus-taylor" else {}))
    q, bonus, p, ids = random_batch(32, 5, 40, seed=8)
    sq, sp = q[:, :5].sum(-1), p.sum(-1)
    gens = lambda: {i: torch.Generator().manual_seed(i) for i in range(32)}  # noqa: E731
    plan = make_sampler(_plan_only(base))
    plan_path = plan(q, bonus, p, ids, seeded_seqs=gens())
    declared = make_sampler(base)
    assert torch.equal(
        plan.accept_probs_at_drafts(q[:, :5], p, ids, sq, sp)[0],
        declared.accept_probs_at_drafts(q[:, :5], p, ids, sq, sp)[0],
    )
    assert torch.equal(declared(q, bonus, p, ids, seeded_seqs=gens()), plan_path)
    if name != "cactus-taylor":
        return
    hooked = Counting(0.3)
    hooked.spec, hooked.knobs = base.spec, dict(base.knobs)
    assert torch.equal(make_sampler(hooked)(q, bonus, p, ids, seeded_seqs=gens()), plan_path)
    assert calls == [(32, 5)]  # once per call, on the drafted tokens only
    hooked.scale = 0.5  # a wrong spike is seen in the output
    assert not torch.equal(plan_path, make_sampler(hooked)(q, bonus, p, ids, seeded_seqs=gens()))


@pytest.mark.parametrize("name, knobs", [c[1:] for c in CONFIGS], ids=[c[0] for c in CONFIGS])
def test_accepted_prefix_length_law(name, knobs):
    """k = 4 different positions per row: the accepted prefix N follows
    P(N = j) = prod_{i<j} alpha_i (1 - alpha_j), P(N = k) = prod alpha_i, with alpha_i the exact
    acceptance rate at position i (acceptance events of different positions independent).
    Chi-square, n = 6,000 rows (kept small: the Mentored solvers cost ~1 ms per row on one
    CPU thread), false alarm ALPHA; cells with expected count < 5 pooled."""
    from cactus_theory.analysis.one_step import acceptance_rate

    rule = get_rule(name, **knobs)
    rng = np.random.default_rng(21)
    k, V, n = 4, 6, 6_000
    q = rng.dirichlet(np.full(V, 0.8), size=k + 1)
    p = rng.dirichlet(np.full(V, 0.8), size=k)
    alpha = acceptance_rate(rule, q[:k], p)
    surv = np.concatenate([[1.0], np.cumprod(alpha)])
    law = np.append(surv[:-1] * (1 - alpha), surv[-1])
    g = torch.Generator().manual_seed(22)
    qt = torch.tensor(q, dtype=torch.float32).expand(n, k + 1, V)
    pt = torch.tensor(p, dtype=torch.float32).expand(n, k, V)
    ids = torch.stack(
        [torch.multinomial(pt[:, i], 1, replacement=True, generator=g)[:, 0] for i in range(k)], dim=1
    )
    torch.manual_seed(23)
    out = make_sampler(rule)(qt, torch.zeros(n, 1, dtype=torch.int64), pt, ids)
    N = ((out != -1).sum(1) - 1).numpy()
    counts = np.bincount(N, minlength=k + 1).astype(float)
    exp = n * law
    assert counts[exp == 0].sum() == 0
    big = exp >= 5
    obs_c = np.append(counts[big], counts[~big].sum())
    exp_c = np.append(exp[big], exp[~big].sum())
    keep = exp_c > 0
    if keep.sum() < 2:  # a point mass: every draw must land on it (no chi-square possible)
        assert obs_c[keep].sum() == n, f"{name}: {counts} vs a point mass {exp}"
        return
    pval = stats.chisquare(obs_c[keep], exp_c[keep] * obs_c[keep].sum() / exp_c[keep].sum()).pvalue
    assert pval > ALPHA, f"{name}: p = {pval:.2e}, counts {counts}, expected {exp}"


#: The rules of the CUDA sync test (scripts/gpu_check.py's sync step checks every registered rule).
CUDA_SYNC_RULES = (
    "sps",
    "cactus-taylor",
    "cactus-exact-kl",
    "cactus-exact",
    "tas",
    "topk",
    "interpolation",
    "cascade-opt",
    "fuzzy",
)


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA; scripts/gpu_check.py runs this check on a GPU (its sync step, every rule)",
)
# torch warns that its sync debug mode is a prototype; the mode itself is what this test uses
@pytest.mark.filterwarnings("ignore:Synchronization debug mode is a prototype:UserWarning")
def test_no_host_sync_on_cuda():
    """forward without seeded rows runs under torch.cuda.set_sync_debug_mode('error')."""
    dev = torch.device("cuda")
    q, bonus, p, ids = (t.to(dev) for t in random_batch(8, 4, 1000, seed=9))
    for name in CUDA_SYNC_RULES:
        s = make_sampler(name)
        s(q, bonus, p, ids)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            s(q, bonus, p, ids)
        finally:
            torch.cuda.set_sync_debug_mode("default")

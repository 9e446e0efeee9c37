"""The samplers' fast paths: the recovery draw's law, drafted-token accept paths, row sums.

Every fast path is checked against the slow reference on the same inputs: the float64 numpy
analysis (chi-square laws) or the rule's full plan on row-normalized copies.
Symbols: q verifier (target_probs), p drafter (draft_probs), n drafted token.
"""

import numpy as np
import pytest
import torch
from rule_configs import FAST_IDS, FAST_RULES, FUSED_SHAPE, fused_params
from test_kernels import _chisquare_ok, _emitted_counts, _pair  # chi-square at test_kernels.ALPHA

from cactus_theory.analysis.one_step import emitted_distribution
from cactus_theory.rules import RULES, get_rule
from cactus_theory.rules._tas import tas_threshold
from cactus_theory.rules.plans import _spike_residual_weights
from cactus_theory.samplers import inverse_cdf_sample, make_sampler
from cactus_theory.samplers._kernels import kernels_for
from cactus_theory.solvers._spike import exact_spike

#: Every fast path both eager and through the compiled kernels of samplers/_fused.py.
FUSED = pytest.mark.parametrize("fused", [False, True], ids=["eager", "fused"])


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- the recovery draw of the sampler against the exact analysis ------------------------------


@FUSED
@pytest.mark.parametrize("name, knobs", FAST_RULES, ids=FAST_IDS)
def test_recovery_draw_law_matches_exact_analysis(name, knobs, fused):
    """The sampler's recovery path (the one forward takes: un-normalized rows, row sums,
    Rule hooks, inverse CDF) draws from the float64 analysis' r^(n) (chi-square, n = 20,000
    draws per drafted token, ALPHA per test)."""
    q, p = _pair(5)
    V, N = len(q), 20_000
    rule = get_rule(name, **knobs)
    s = make_sampler(rule, fused=fused)
    plan = rule.plan(q, p)
    rng = np.random.default_rng(1)
    scale_q, scale_p = 1.7, 0.6  # un-normalized rows: the sums are folded in
    for n_tok in (int(np.argmax(p)), int(rng.integers(V))):
        r = np.asarray(plan.recovery_at(np.array(n_tok)), dtype=np.float64)
        tq = torch.tensor(q * scale_q, dtype=torch.float32).expand(N, 1, V)
        tp = torch.tensor(p * scale_p, dtype=torch.float32).expand(N, 1, V)
        ids = torch.full((N, 1), n_tok, dtype=torch.int64)
        sq, sp = tq.sum(-1), tp.sum(-1)
        _, state = s.accept_probs_at_drafts(tq, tp, ids, sq, sp)
        w = s.recovery_weights(tq, tp, ids, torch.zeros(N, dtype=torch.int64), state, sq, sp)[0]
        torch.manual_seed(17)
        counts = np.bincount(inverse_cdf_sample(w).numpy(), minlength=V).astype(float)
        assert _chisquare_ok(counts, r / r.sum(), N), f"{name}, n = {n_tok}: {counts} vs {r}"


@pytest.mark.parametrize("name, knobs", FAST_RULES, ids=FAST_IDS)
def test_emitted_law_fast_paths(name, knobs):
    """One position, no raw distributions given (the fast accept paths run), un-normalized
    float32 rows: the emitted token follows h_alg of the float64 analysis (chi-square,
    n = 20,000, ALPHA). The eager sampler; the compiled one in test_fused_emitted_law."""
    q, p = _pair(9)
    N = 20_000
    rule = get_rule(name, **knobs)
    h = emitted_distribution(rule, q, p)
    counts = _emitted_counts(make_sampler(rule), q, p, N)
    assert _chisquare_ok(counts, h, N), f"{name}: {counts} vs {N * h}"


def _law_pairs(V, seed=9):
    """Two (q, p) pairs over V tokens, every entry positive: 97% of each row's mass on six
    tokens spread over the blocks (the first, middle ones, the short last block), 3% over the
    rest (the recovery draws there too). Pair 0: q and p on the same six tokens in opposite
    order (Cactus and SpS reject often); pair 1: q's mass on three of them, p's on the other
    three (the divergence-gated rules, fuzzy SD and the token cascades, take their other
    branch)."""
    rng = np.random.default_rng(seed)
    heavy = np.array([3, 300, 777, 1024, 1800, V - 1])
    pairs = []
    for spots in ((heavy, heavy[::-1]), (heavy[:3], heavy[3:])):
        pair = []
        for where in spots:
            x = 0.03 * rng.dirichlet(np.full(V, 0.5))
            x[where] += 0.97 * np.sort(rng.dirichlet(np.full(len(where), 1.5)))[::-1]
            pair.append(x / x.sum())
        pairs.append(pair)
    return pairs


@pytest.mark.parametrize("name, knobs", fused_params())
def test_fused_emitted_law(name, knobs):
    """The compiled core (``fused=True``) at FUSED_SHAPE, un-normalized float32 rows (q x 2.5,
    p x 0.4): the token emitted at the first position follows h_alg of the float64 analysis,
    for two (q, p) pairs in the same calls (rows 0-7 and 8-15; chi-square per pair, n =
    10,000 draws each, cells of expected count < 5 pooled (the 3% tail), ALPHA each). The
    batch size stays FUSED_SHAPE's (the configuration's one kernel): 1,250 calls."""
    B, k, V = FUSED_SHAPE
    rule = get_rule(name, **knobs)
    pairs = _law_pairs(V)
    half = B // 2
    qt = torch.cat(
        [torch.tensor(q * 2.5, dtype=torch.float32).expand(half, k + 1, V) for q, _ in pairs]
    ).contiguous()
    pt = torch.cat(
        [torch.tensor(p * 0.4, dtype=torch.float32).expand(half, k, V) for _, p in pairs]
    ).contiguous()
    calls = 10_000 // half
    g = torch.Generator().manual_seed(11)
    ids = torch.cat(
        [
            torch.multinomial(torch.tensor(p), calls * half * k, replacement=True, generator=g).reshape(
                calls, half, k
            )
            for _, p in pairs
        ],
        1,
    )
    bonus = torch.zeros(B, 1, dtype=torch.int64)
    s = make_sampler(rule, fused=True)
    torch.manual_seed(12)
    first = torch.stack([s(qt, bonus, pt, ids[c])[:, 0] for c in range(calls)])
    for i, (q, p) in enumerate(pairs):
        h = emitted_distribution(rule, q, p)
        tokens = first[:, i * half : (i + 1) * half].reshape(-1)
        counts = np.bincount(tokens.numpy(), minlength=V).astype(float)
        assert _chisquare_ok(counts, h, calls * half), f"{name}, pair {i}"


# --- accept paths and hooks against the full plan ---------------------------------------------


def _rows(B=12, k=3, V=60, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.softmax(2.0 * torch.randn(B, k, V, generator=g), -1) * (0.5 + torch.rand(B, k, 1, generator=g))
    y = torch.softmax(2.0 * torch.randn(B, k, V, generator=g), -1) * (0.5 + torch.rand(B, k, 1, generator=g))
    ids = torch.randint(0, V, (B, k), generator=g)
    return x, y, ids


@FUSED
@pytest.mark.parametrize("name, knobs", FAST_RULES, ids=FAST_IDS)
def test_accept_path_equals_the_plan(name, knobs, fused):
    """The sampler's accept path on un-normalized rows == the full plan on the normalized rows.

    Deterministic rules: the same 0/1 decisions (random rows: no entry within rounding of a
    threshold). Others: float32, the same formulas on values that differ by the rounding of
    the normalization and by summation order; a masked sum over V entries (cascades' p(A))
    is off by at most V eps32 (recursive summation bound), and the ratio h_n / p_n amplifies
    an absolute error in h_n by q_n / p_n: |diff| <= V eps32 (1 + q_n/p_n).
    """
    rule = get_rule(name, **knobs)
    s = make_sampler(rule, fused=fused)
    eps = torch.finfo(torch.float32).eps
    decisions = set()
    for seed in range(4):
        x, y, ids = _rows(seed=seed)
        if seed == 3:  # zeros: KL infinite off the support, 0 log 0 = 0, top-k ties at 0
            x = torch.where(
                torch.rand(x.shape, generator=torch.Generator().manual_seed(5)) < 0.3, torch.zeros_like(x), x
            )
        sq, sp = x.sum(-1), y.sum(-1)
        fast, _ = s.accept_probs_at_drafts(x, y, ids, sq, sp)
        q, p = x / sq[..., None], y / sp[..., None]
        ref = rule.plan(q, p).accept_probs_at(ids).to(fast.dtype)
        if RULES[name].deterministic:
            assert torch.equal(fast, ref), name
            decisions.update(fast.unique().tolist())
        else:
            ratio = torch.gather(q, -1, ids[..., None])[..., 0] / torch.gather(p, -1, ids[..., None])[..., 0]
            bound = x.shape[-1] * eps * (1.0 + ratio)
            assert bool(((fast - ref).abs() <= bound).all()), ((fast - ref).abs() / bound).max()
    if RULES[name].deterministic:  # the rows exercise both decisions
        assert decisions == {0.0, 1.0}, (name, decisions)


@pytest.mark.parametrize("name, knobs", FAST_RULES, ids=FAST_IDS)
def test_recovery_hooks_equal_the_plan(name, knobs):
    """normalize(Rule.recovery_weights_at) and normalize of the rule's registered torch kernel
    (where it has one) == plan.recovery_at at the drafted tokens (float32; same formulas,
    reduction orders differ: 1e-6)."""
    rule = get_rule(name, **knobs)
    x, y, ids = _rows(k=1, seed=4)
    q, p, n = x[:, 0] / x[:, 0].sum(-1, keepdim=True), y[:, 0] / y[:, 0].sum(-1, keepdim=True), ids[:, 0]
    ref = rule.plan(q, p).recovery_at(n)
    hook = kernels_for(rule).recovery_weights
    for w in (
        rule.recovery_weights_at(q, p, n),
        None if hook is None else hook(rule, q.clone(), p.clone(), n),
    ):
        if w is not None:
            torch.testing.assert_close(w / w.sum(-1, keepdim=True), ref, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["cactus-taylor", "cactus-exact-kl", "cactus-exact-tv"])
def test_cactus_recovery_from_spike_with_row_sums(name):
    """The folded form (un-normalized rows, sums in c_n and p's factor; the torch kernel, in
    place, and the derived plans._spike_residual_weights) equals recovery_at on the
    normalized rows (float32: 1e-6)."""
    rule = get_rule(name, delta=0.2)
    x, y, ids = _rows(k=1, seed=6)
    x, y, n = x[:, 0], y[:, 0], ids[:, 0]
    sq, sp = x.sum(-1), y.sum(-1)
    q, p = x / sq[:, None], y / sp[:, None]
    gamma = rule.spike_at_tokens(torch.gather(q, -1, n[:, None])[:, 0])
    kernel = kernels_for(rule).spike_recovery_weights
    w = kernel(rule, x.clone(), y.clone(), n, gamma, sq, sp)  # (it overwrites its rows)
    ref = rule.recovery_at(q, p, n)
    torch.testing.assert_close(w / w.sum(-1, keepdim=True), ref, rtol=0, atol=1e-6)
    derived = _spike_residual_weights(x, y, n, gamma, sq, sp)
    torch.testing.assert_close(derived / derived.sum(-1, keepdim=True), ref, rtol=0, atol=1e-6)


def test_exact_spike_at_tokens_rounds_the_float64_root_down():
    """CPU float32 (exact_spike on the CPU): gamma is the float64 root rounded toward q_n: q_n <= gamma <= root64,
    within one float32 ulp of it, so the budget holds (two-point KL <= delta in float64)."""
    from cactus_theory.divergences import get_divergence

    rule = get_rule("cactus-exact-kl", delta=0.3)
    q_n = torch.tensor([0.0, 1e-30, 1e-6, 0.01, 0.2, 0.5, 0.77, 0.999, 1.0], dtype=torch.float32)
    g = rule.spike_at_tokens(q_n)
    assert g.dtype == torch.float32
    root = exact_spike(q_n.double().numpy(), 0.3)
    g64 = g.double().numpy()
    assert np.all(g64 >= q_n.double().numpy()) and np.all(g64 <= root)
    ulp = np.spacing(root.astype(np.float32)).astype(np.float64)
    assert np.all(root - g64 <= ulp)
    assert np.all(get_divergence("kl").two_point(g64, q_n.double().numpy()) <= 0.3)
    # NaN (an invalid row, masked by the sampler) is solved as 0, not raised
    assert rule.spike_at_tokens(torch.tensor([float("nan")]))[0] == 0.0


def test_row_sums_are_the_validation_sums():
    """forward reads q and p once for the sums: validate_sampler_entry's sums are what the
    accept path divides by (one read pass plus the minimum), and a negative entry anywhere
    still flags its row."""
    from cactus_theory.samplers.base import validate_sampler_entry

    g = torch.Generator().manual_seed(2)
    q = torch.rand(4, 3, 30, generator=g)
    p = torch.rand(4, 2, 30, generator=g)
    ids = torch.randint(0, 30, (4, 2), generator=g)
    bonus = torch.zeros(4, 1, dtype=torch.int64)
    *_, invalid, _, sums = validate_sampler_entry(q, bonus, p, ids, return_sums=True)
    torch.testing.assert_close(sums[0], q[:, :2].sum(-1), rtol=0, atol=0)
    torch.testing.assert_close(sums[1], p.sum(-1), rtol=0, atol=0)
    assert not invalid.any()
    q2 = q.clone()
    q2[1, 0, 7] = -1e-9
    s = make_sampler("cactus-taylor")
    out = s(q2, bonus, p, ids)
    assert out[1].tolist() == [-1, -1, -1] and bool(s.last_invalid_rows[1])
    assert (out[[0, 2, 3]] != -1).any(-1).all()


@pytest.mark.parametrize("name", ["sps", "cactus-taylor", "cactus-exact-kl", "interpolation"])
def test_empty_residual_falls_back_to_h_on_the_fast_paths(name):
    """p = q (delta = 0 for Cactus): the residual max(0, h - p) is empty, and the recovery
    weights are h itself (convention 3), on the torch fast paths (folded sums included);
    a row with a non-empty residual in the same batch keeps its residual."""
    rule = get_rule(name, **({"delta": 0.0} if name.startswith("cactus") else {}))
    g = torch.Generator().manual_seed(3)
    q = torch.softmax(torch.randn(2, 50, generator=g), -1)
    p = q.clone()
    p[1] = torch.softmax(torch.randn(50, generator=g), -1)  # row 1: a real residual
    n = torch.tensor([7, 7])
    ref = rule.plan(q, p).recovery_at(n)
    kernels = kernels_for(rule)
    hook = kernels.recovery_weights
    for w in (
        rule.recovery_weights_at(q, p, n),
        None if hook is None else hook(rule, q.clone(), p.clone(), n),
    ):
        if w is not None:
            torch.testing.assert_close(w[0] / w[0].sum(), q[0], rtol=0, atol=1e-7)
            torch.testing.assert_close(w[1] / w[1].sum(), ref[1], rtol=0, atol=1e-6)
    if name.startswith("cactus"):
        s = torch.tensor([2.0, 0.5])
        gamma = rule.spike_at_tokens(q[:, 7])
        wf = kernels.spike_recovery_weights(rule, q * s[:, None], p * s[:, None], n, gamma, s, s)
        torch.testing.assert_close(wf[0] / wf[0].sum(), q[0], rtol=0, atol=1e-7)


@pytest.mark.parametrize("V", [151_936, 5_000, 1_281, 1_000])
@pytest.mark.parametrize("k", [1, 2, 5, 7])
def test_kth_largest_equals_topk(V, k):
    """top-k's two-level k-th largest entry (block maxima, then the k best blocks) equals
    torch.topk's, exactly: rows with many ties (integers 0..49), continuous rows, and a
    vocabulary that is not a multiple of the 256-entry block (the tail block)."""
    from cactus_theory.samplers._kernels.topk import kth_largest

    g = torch.Generator().manual_seed(V + k)
    for x in (
        (torch.rand(3, V, generator=g) * 50).floor(),
        torch.rand(3, V, generator=g),
        torch.softmax(3.0 * torch.randn(3, V, generator=g), -1),
    ):
        x[1, -1] = 2.0 * x.max()  # the largest entry in the tail block
        ref = x.topk(k, dim=-1).values.amin(-1, keepdim=True)
        assert torch.equal(kth_largest(x, k), ref)


@pytest.mark.parametrize("V", [151_936, 5_000, 1_281, 1_025, 1_024, 7])
@pytest.mark.parametrize("compiled", [False, True])
def test_first_argmax_equals_torch_argmax(V, compiled):
    """TAS's recovered token, the two-level argmax (block maxima, the first block reaching
    the row maximum, the first entry of it equal to it), is torch.argmax's index exactly,
    eager and compiled: many ties (integers 0..4, the lowest index wins), continuous rows,
    the maximum in the tail block, a maximum tied across two blocks, leading batch axes."""
    from cactus_theory.samplers._fused import INDUCTOR_OPTIONS
    from cactus_theory.samplers._kernels.blocks import first_argmax

    fn = torch.compile(first_argmax, dynamic=False, options=INDUCTOR_OPTIONS) if compiled else first_argmax
    g = torch.Generator().manual_seed(V)
    for x in (
        (torch.rand(2, 3, V, generator=g) * 5).floor(),
        torch.rand(2, 3, V, generator=g),
        torch.softmax(3.0 * torch.randn(2, 3, V, generator=g), -1),
    ):
        x[0, 1, -1] = 2.0 * x.max()  # the largest entry in the tail block
        x[1, 2, V // 2] = x[1, 2, -1] = 3.0 * x.max()  # tied: the lower index wins
        assert torch.equal(fn(x), torch.argmax(x, dim=-1))


@pytest.mark.parametrize("V", [151_936, 5_000, 256, 255, 7])
def test_two_level_sum_equals_the_float64_sum(V):
    """two_level_sum: the two-level float32 sum of fn(x) (blocks of 256, a shorter tail)
    is the float64 sum of fn(x) to within (256 + V/256) float32 eps of the sum of |fn(x)|
    (recursive-summation bound of each level); fn applies to every entry once."""
    from cactus_theory.samplers._kernels.blocks import two_level_sum

    g = torch.Generator().manual_seed(V)
    x = torch.softmax(3.0 * torch.randn(2, 3, V, generator=g), -1)
    fn = lambda z: torch.log(z + 1e-5) * z  # noqa: E731 - TAS's vLLM entropy terms
    ref = (torch.log(x.double() + 1e-5) * x.double()).sum(-1)
    bound = (
        (256 + V / 256)
        * torch.finfo(torch.float32).eps
        * (torch.log(x.double() + 1e-5) * x.double()).abs().sum(-1)
    )
    got = two_level_sum(x, fn)
    assert got.shape == (2, 3) and bool(((got.double() - ref).abs() <= bound).all())
    assert torch.equal(two_level_sum(x, None), two_level_sum(x, lambda z: z))


@pytest.mark.parametrize("V", [151_936, 5_000, 512, 256, 255, 1])
def test_split_blocks_and_block_reduce(V):
    """split_blocks: views (no copies) of the whole 256-entry blocks and the tail that
    together are the row, in order, None where a part is empty; block_reduce: the sum and the
    maximum of each block (the tail its own, shorter block), equal to a reduction of each
    slice of the row taken one at a time (max exactly; sums of the same entries in
    torch's order within a block, so equal up to float32 rounding of 256 terms)."""
    from cactus_theory.samplers._fused import block_sums
    from cactus_theory.samplers._kernels.blocks import block_reduce, split_blocks

    g = torch.Generator().manual_seed(V)
    x = torch.rand(2, 3, V, generator=g)
    whole, tail = split_blocks(x)
    nb, rest = divmod(V, 256)
    assert (whole is None) == (nb == 0) and (tail is None) == (rest == 0)
    parts = ([] if whole is None else [whole.flatten(-2)]) + ([] if tail is None else [tail])
    assert torch.equal(torch.cat(parts, -1), x)
    for part in parts:  # views of x's storage
        assert part.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    slices = [x[..., i : i + 256] for i in range(0, V, 256)]
    assert torch.equal(block_reduce(x, "amax"), torch.stack([s.amax(-1) for s in slices], -1))
    sums = torch.stack([s.sum(-1) for s in slices], -1)
    # 256 terms in [0, 1) summed in another order: at most 255 float32 eps of their sum
    torch.testing.assert_close(block_reduce(x, "sum"), sums, rtol=255 * 2.0**-23, atol=0)
    assert torch.equal(block_sums(x), block_reduce(x, "sum"))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("s", [1.0 + 5e-4, 2.0])
def test_tas_vllm_entropy_on_unnormalized_rows(s, compiled):
    """TAS's fast path sums x log(x + 1e-5) and x / (x + 1e-5) in one pass (vLLM's constant
    on the rows' scale) and corrects to first order in s - 1; rows with |s - 1| > 1e-3 take
    the exact second pass. Drafts at 101 tokens whose q are spaced by a relative 1e-5 across
    the plan's threshold are decided as the plan decides them (float64 rows: the decisions
    are the formulas', not float32 rounding's). Without the correction H shifts by about
    1e-5 (s - 1) sum q / (q + eps) (a relative 2e-4 at s = 1.0005 here), and the first-order
    form alone errs by far more at s = 2: either flips drafts."""
    rule = get_rule("tas")
    V, n = 20_000, 101
    g = torch.Generator().manual_seed(11)
    q = torch.softmax(3.0 * torch.randn(V, generator=g, dtype=torch.float64), -1)
    # half-integer steps: no draft exactly at the threshold (a tie that rounding decides)
    band = 1.0 + 1e-5 * (torch.arange(-(n // 2), n // 2 + 1, dtype=torch.float64) + 0.5)
    for _ in range(10):  # the drafts' q straddle the threshold they move (fixed point)
        tau = float(tas_threshold(q, 0.09, 0.3)[0])
        q[1 : n + 1] = tau * band
        q = q / q.sum()
    ids = torch.arange(1, n + 1)[None]
    rows = q.expand(1, n, V)
    ref = rule.plan(rows, rows).accept_probs_at(ids)
    assert set(ref.unique().tolist()) == {0.0, 1.0}
    from cactus_theory.samplers._kernels import tas as tas_kernels

    def from_rows(*rows):
        return tas_kernels.accept_from_rows(rule, *rows)

    fn = torch.compile(from_rows, dynamic=False) if compiled else from_rows
    x = s * rows
    got = fn(x, x, ids, x.sum(-1), x.sum(-1))
    assert torch.equal(got.to(ref.dtype), ref)


@pytest.mark.parametrize("V", [151_936, 32_000, 16_384, 5_000])
@pytest.mark.parametrize("compiled", [False, True])
def test_masked_sum_by_blocks_equals_the_full_masked_sum(V, compiled):
    """The token cascades' p(A): the masked sum over the 16 blocks with the largest maxima
    (when they hold every block reaching the threshold), else the full sum, equals the full
    masked sum within float32 summation rounding (V eps32 of the row's mass: recursive
    bound). Thresholds: (1 - alpha) max for alpha = 0.5 (few blocks: the gathered path), 0.999
    (most blocks reach it: the full sum), a negative one (every entry), and a row whose set
    spans more than 16 blocks beside rows that need few; the tail block holds a set entry."""
    from cactus_theory.samplers._fused import INDUCTOR_OPTIONS
    from cactus_theory.samplers._kernels.blocks import block_maxima
    from cactus_theory.samplers._kernels.cascades import masked_sum_by_blocks

    g = torch.Generator().manual_seed(V)
    z = torch.softmax(3.0 * torch.randn(4, 3, V, generator=g), -1)
    w = torch.softmax(3.0 * torch.randn(4, 3, V, generator=g), -1)
    z[0, 0, -1] = z[0, 0].max()  # a maximum in the short last block
    w[0, 0, -1] = 0.3  # with weight there
    spread = z.clone()
    spread[1, 2, ::1000] = spread[1, 2].max()  # a set spread over many blocks
    w[1, 2, ::1000] = 0.01  # with weight on each of its entries
    fn = (
        torch.compile(masked_sum_by_blocks, dynamic=False, options=INDUCTOR_OPTIONS)
        if compiled
        else masked_sum_by_blocks
    )
    eps = torch.finfo(torch.float32).eps
    paths = set()
    for zz in (z, spread):
        for alpha in (0.5, 0.999, 2.0):
            thr = (1.0 - alpha) * zz.amax(-1, keepdim=True)
            bm = block_maxima(zz)
            nb = V // 256
            paths.add(nb >= 64 and bool((bm[..., :nb].topk(17, dim=-1).values[..., 16:] < thr).all()))
            ref = torch.where(zz.double() >= thr.double(), w.double(), 0.0).sum(-1, keepdim=True)
            got = fn(zz, w, thr, bm)
            assert got.shape == ref.shape
            bound = V * eps * w.double().sum(-1, keepdim=True)
            assert bool(((got.double() - ref).abs() <= bound).all()), (alpha, zz is spread)
    assert paths == ({True, False} if V >= 16_384 else {False})  # both paths where they apply

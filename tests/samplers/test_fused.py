"""The samplers' fused kernels (``fused=True``, samplers/_fused.py, compiled by torch.compile).

Checked against the eager paths on the same inputs: the row sums against float64 sums, the
bad-row flags against the eager validation, the recovery weights and block sums against the
eager hooks, and whole calls against the eager sampler with the same random stream. The
laws of every fast path under ``fused=True`` are tested in samplers/test_fast_paths.py
(parametrized over ``fused``).
Symbols: q verifier (target_probs), p drafter (draft_probs), n drafted token.
"""

import pytest
import torch
from rule_configs import FUSED_SHAPE, QUICK_GROUP, fused_params

from cactus_theory.rules.registry import ElementwiseTargetRule, SpikeRule
from cactus_theory.samplers import _fused as fused_kernels
from cactus_theory.samplers import make_sampler
from cactus_theory.samplers._blocked import BlockWeights
from cactus_theory.samplers._entry import eager_row_stats
from cactus_theory.samplers._fused import block_sums as _block_sums

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _batch(B=6, k=3, V=1000, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    logits = 3.0 * torch.randn(B, k + 1, V, generator=g)
    q = torch.softmax(logits, -1) * (0.5 + torch.rand(B, k + 1, 1, generator=g))
    p = torch.softmax(0.8 * logits[:, :k] + 2.0 * torch.randn(B, k, V, generator=g), -1)
    ids = torch.multinomial(p.reshape(-1, V), 1, generator=g).reshape(B, k)
    return q.to(dtype), p.to(dtype), ids, torch.zeros(B, 1, dtype=torch.int64)


# Each (dtype, V) pair is a kernel of its own (20-60 s of a cold test run for all nine): each
# dtype once and each vocabulary case once (a Latin square), and float32 at V = 151,936 below.
@pytest.mark.parametrize("dtype, V", [(torch.float32, 1000), (torch.bfloat16, 100), (torch.float16, 256)])
def test_row_stats_sums_and_the_eager_flags(dtype, V):
    """Sums: within the error bound of the two-level sum (float32 sums of blocks of
    SUM_BLOCK = 256 non-negative terms, in any order: relative error at most 255 u,
    u = 2^-24; the float64 sum of the block sums adds < 1e-13; the final rounding u), for a
    vocabulary shorter than a block, exactly one block, and whole blocks plus a tail (one
    input dtype each: float32, bfloat16, float16). A
    skipped or doubled block or tail errs by a share of the row's mass, far more. Flags: the
    eager validation's, on rows with a NaN, an inf, a negative entry, all zeros, and valid
    rows (a subnormal row too)."""
    q, p, _, _ = _batch(V=V, dtype=dtype)
    x = q[:, :3].clone()
    x[0, 0, 5] = float("nan")
    x[1, 1, 0] = float("inf")
    x[2, 2, V - 1] = -1e-3
    x[3, 0] = 0.0
    x[4, 1] = 0.0
    x[4, 1, 7] = 1e-40 if dtype == torch.float32 else 1e-7
    (s_x, bad_x), (s_p, bad_p) = fused_kernels.row_stats(x, p)
    assert s_x.dtype == torch.float32 and bad_x.dtype == torch.bool
    ok = ~bad_x
    u = 2.0**-24
    for s, ref in ((s_x[ok], x.double().sum(-1)[ok]), (s_p, p.double().sum(-1))):
        assert torch.all((s.double() - ref).abs() <= 256 * u * ref + 1e-300)
    assert torch.equal(bad_x, eager_row_stats(x)[1])
    assert torch.equal(bad_p, eager_row_stats(p)[1]) and not bad_p.any()
    assert bad_x[0, 0] and bad_x[1, 1] and bad_x[2, 2] and bad_x[3, 0] and not bad_x[4, 1]
    assert int(bad_x.sum()) == 4


def test_row_stats_sums_at_a_real_vocabulary_size():
    """At V = 151,936 (593 whole blocks and a tail of 128) the two-level sums stay within 2
    float32 eps of the float64 sums relative to the row sum, as torch's own float32 sum
    (pairwise) does (measured 0.34 eps here, torch 0.51); a one-level float32 accumulation
    along the row errs by tens of eps at this length, so this bound is what the two levels
    buy."""
    g = torch.Generator().manual_seed(5)
    x = torch.softmax(3.0 * torch.randn(4, 2, 151936, generator=g), -1) * (
        0.5 + torch.rand(4, 2, 1, generator=g)
    )
    ((s, bad),) = fused_kernels.row_stats(x)
    ref = x.double().sum(-1)
    assert not bad.any()
    assert float(((s.double() - ref).abs() / ref).max()) <= 2 * torch.finfo(torch.float32).eps


@pytest.mark.parametrize(
    "name, knobs",
    [
        ("sps", {}),
        ("cactus-taylor", {"delta": 0.3}),
        ("cactus-exact-kl", {"delta": 0.3}),
        ("topk", {}),
        ("tas", {}),
        ("cascade-token-v3", {}),
        ("fuzzy", {}),
        ("interpolation", {}),
        ("cascade-opt", {}),
        # alpha 0.1: a set A short of the whole
        # vocabulary (at 0.5 some rows have pi = p up
        # to rounding, where the residual is rounding
        # noise in either form: an empty residual only
        # in exact arithmetic)
        ("cascade-token-v1", {"alpha": 0.1}),
    ],
)
def test_fused_recovery_weights_and_block_sums_equal_eager(name, knobs):
    """The fused recovery kernel returns the eager hooks' weights up to a factor per row
    (float32, same formulas, different operation order: 1e-6 of a row's mass) and their block sums (the float32 block
    sums of those weights to 1e-6), at one position per row. For the rules with a row target
    (``BlockWeights``), the weights are its formula at every column. The compiled core's
    formulas (``traced``), called eagerly here; whole blocks and a short last one."""
    q, p, ids, _ = _batch(B=8, k=3, V=1500, seed=4)
    k = ids.shape[1]
    sq, sp = q[:, :k].sum(-1), p.sum(-1)
    pos = torch.tensor([0, 1, 2, 0, 1, 2, 2, 1])
    eager, fused = make_sampler(name, **knobs), make_sampler(name, fused=True, **knobs)
    _, state = eager.accept_probs_at_drafts(q[:, :k], p, ids, sq, sp)
    w_e = eager.recovery_weights(q, p, ids, pos, state, sq, sp)[0]
    _, state = fused.accept_probs_at_drafts(q[:, :k], p, ids, sq, sp)
    w_f, fb, w_sums, fb_sums = fused.recovery_weights(q, p, ids, pos, state, sq, sp)
    lazy = isinstance(w_f, BlockWeights)
    # a row target: a spike, an elementwise target, or the rule's kernel (a point mass too)
    kernels = fused.kernels
    declined = kernels.declines(fused.rule)
    assert lazy == (
        any(
            getattr(kernels, hook) is not None and hook not in declined
            for hook in ("recovery_target_from_rows", "recovery_token_from_rows")
        )
        or isinstance(fused.rule, (ElementwiseTargetRule, SpikeRule))
    )
    if lazy:
        w_f, w_sums = w_f.dense(), w_f.block_sums
    # un-normalized weights: the law is the weights over their sum (interpolation's row
    # target scales the eager residual by 1 - alpha)
    mass, mass_f = w_e.sum(-1, keepdim=True), w_f.sum(-1, keepdim=True)
    torch.testing.assert_close(w_f / mass_f, w_e / mass, rtol=0, atol=1e-6)
    torch.testing.assert_close(w_sums / mass_f, _block_sums(w_f, 256) / mass_f, rtol=0, atol=1e-6)
    assert w_sums.shape == (8, 6)  # 1500 = 5 blocks of 256 and one of 220
    if fb is not None:  # q's normalized rows, the fallback
        torch.testing.assert_close(fb_sums, _block_sums(fb, 256), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name, knobs", fused_params())
def test_fused_call_equals_eager_call_with_the_same_stream(name, knobs):
    """Whole calls, fused and eager, from the same seeds: the same uniforms are drawn in the
    same order, so the outputs agree token for token (a decision could only flip where a
    uniform lies within float32 rounding of its threshold, which these seeds do not hit).
    FUSED_SHAPE (several blocks and a short last one). The fused call really runs a compiled
    kernel: dynamo holds a compiled entry for the core's code, and nothing fell back to
    eager."""
    B, k, V = FUSED_SHAPE
    q, p, ids, bonus = _batch(B=B, k=k, V=V, seed=5)
    out = {}
    for fused in (False, True):
        s = make_sampler(name, fused=fused, **knobs)
        torch.manual_seed(9)
        gens = {3: torch.Generator().manual_seed(4), 11: torch.Generator().manual_seed(8)}
        out[fused] = s(q, bonus, p, ids, gens)
        out[fused, "acc"] = s.num_accepted_prefix_tokens.clone()
    assert torch.equal(out[False], out[True])
    assert torch.equal(out[False, "acc"], out[True, "acc"])
    assert (out[True][:, 0] != -1).all()
    assert fused_kernels.compile_failure() is None
    kernel = s.compiled_core(V, k)
    # (torch's debugging accessor of dynamo's per-code cache: empty unless a frame compiled)
    assert torch._dynamo.eval_frame._debug_get_cache_entry_list(kernel.eager.__code__)


def _cond_sin_cos(x):
    return torch.cond(x.sum() > 0, lambda: x.sin() + 1.0, lambda: x.cos() + 1.0)


def _cond_sin_exp(x):
    return torch.cond(x.sum() > 0, lambda: x.sin() + 1.0, lambda: x.exp() + 1.0)


def test_cond_graphs_are_stored_in_the_fx_graph_cache():
    """With CACHE_OPTIONS, a graph holding torch.cond is stored in inductor's FX graph cache
    (inductor bypasses it for unmarked higher-order operators): a second kernel of the
    same function (a new code object, traced again) loads it instead of compiling. A graph
    that differs only in a branch gets its own entry: its result is its own branch's (the
    false branch here), not the cached graph's."""
    from torch._dynamo.utils import counters

    x = -torch.linspace(0.1, 1.0, 16)  # sum < 0: the false branch
    c = counters["inductor"]
    bypass = c["fxgraph_cache_bypass"]
    first = fused_kernels.CompiledKernel(_cond_sin_cos, copy=True, options=fused_kernels.CACHE_OPTIONS)
    torch.testing.assert_close(first(x), x.cos() + 1.0)
    a = counters["aot_autograd"]
    hits, aot_hits, misses = c["fxgraph_cache_hit"], a["autograd_cache_hit"], c["fxgraph_cache_miss"]
    again = fused_kernels.CompiledKernel(_cond_sin_cos, copy=True, options=fused_kernels.CACHE_OPTIONS)
    torch.testing.assert_close(again(x), x.cos() + 1.0)
    # loaded, not compiled: no FX-graph miss, and a hit of the FX graph cache or of AOTAutograd's
    # cache in front of it (which serves the stored graph without a second FX lookup when it
    # holds the entry already)
    seen = (
        c["fxgraph_cache_hit"] - hits,
        a["autograd_cache_hit"] - aot_hits,
        c["fxgraph_cache_miss"] - misses,
    )
    assert seen[2] == 0 and (seen[0] == 1 or seen[1] == 1), f"(fx hits, aot hits, fx misses) added: {seen}"
    other = fused_kernels.CompiledKernel(_cond_sin_exp, copy=True, options=fused_kernels.CACHE_OPTIONS)
    torch.testing.assert_close(other(x), x.exp() + 1.0)
    assert c["fxgraph_cache_bypass"] == bypass
    assert fused_kernels.compile_failure() is None


def test_each_kernel_copy_keeps_its_own_shape_memory():
    """Dynamo's automatic dynamic shapes remember the sizes seen per (file, first line, name)
    of a frame, in the process and in the cache directory (local profile-guided state). The
    copies of one function (one per configured rule and shape key) have their own names, so
    a copy's first call compiles static in its sizes even after another copy ran at other
    sizes: row stats at V = 3 and then V = 5 (two copies) both record only concrete sizes.
    Under one shared name the second copy marked V (and the batch) dynamic from its first
    call: at FUSED_SHAPE a core whose C++ took g++ 30 s instead of 3."""
    from torch._dynamo import pgo

    seen = {}
    for V in (3, 5):
        x = torch.full((2, V), 1.0 / V)
        ((s, bad),) = fused_kernels.row_stats(x)
        torch.testing.assert_close(s, torch.ones(2))
        code = fused_kernels.compiled_for(None, fused_kernels.row_stats_core, V).eager.__code__
        seen[V] = pgo.get_code_state()[pgo.CodeId.make(code)].automatic_dynamic
    assert fused_kernels.compile_failure() is None
    for V, state in seen.items():
        sizes = [e.size for e in state.values() if isinstance(e.size, tuple)]
        shown = (V, {n: e.render() for n, e in state.items()})
        assert (2, V) in sizes, shown
        assert all(isinstance(d, int) for size in sizes for d in size), shown
    names = {fused_kernels.compiled_for(None, fused_kernels.row_stats_core, V).eager.__name__ for V in seen}
    assert len(names) == 2


def test_kernel_options_by_vocabulary_size():
    """Inductor's defaults up to SMALL_VOCAB (8 blocks of 256: the block reductions are
    unrolled there), INDUCTOR_OPTIONS above (per configured rule and shape key); the cache
    options for every kernel."""
    sampler = make_sampler("interpolation", alpha=0.25)
    small = sampler.compiled_core(fused_kernels.SMALL_VOCAB, 2)
    large = sampler.compiled_core(fused_kernels.SMALL_VOCAB + 1, 2)
    assert small.options == fused_kernels.CACHE_OPTIONS
    assert large.options == {**fused_kernels.CACHE_OPTIONS, **fused_kernels.INDUCTOR_OPTIONS}
    assert fused_kernels.INDUCTOR_OPTIONS["realize_reads_threshold"] > 1000


@pytest.mark.xdist_group(QUICK_GROUP)
def test_fused_invalid_rows_are_flagged_as_eager():
    """NaN, negative and all-zero rows, and an out-of-range id: the same rows emit only -1 and
    are flagged, fused and eager; the other rows emit."""
    B, k, V = FUSED_SHAPE  # the kernel of the whole-call test
    q, p, ids, bonus = _batch(B=B, k=k, V=V, seed=6)
    q[0, 1, 3] = float("nan")
    p[1, 2, 9] = -1e-6
    q[2, 0] = 0.0
    ids = ids.clone()
    ids[3, 1] = V
    for fused in (False, True):
        s = make_sampler("cactus-taylor", fused=fused)
        out = s(q, bonus, p, ids)
        assert (out[:4] == -1).all(), fused
        assert (out[4:, 0] != -1).all(), fused
        assert s.last_invalid_rows.tolist() == [True] * 4 + [False] * (B - 4), fused


def test_compile_failure_falls_back_to_eager_once(monkeypatch):
    """A kernel whose compile fails warns once (RuntimeWarning naming the error), records
    the reason and runs the eager function; a real error of the function itself raises."""
    monkeypatch.setattr(fused_kernels, "_failure", None)

    def broken_compile(fn, **kw):
        def run(*args):
            raise RuntimeError("no C++ compiler")

        return run

    monkeypatch.setattr(torch, "compile", broken_compile)
    kernel = fused_kernels.CompiledKernel(lambda x: x * 2, copy=True)
    with pytest.warns(RuntimeWarning, match="no C\\+\\+ compiler"):
        assert kernel(torch.tensor(3.0)).item() == 6.0
    assert "no C++ compiler" in fused_kernels.compile_failure()
    assert kernel(torch.tensor(4.0)).item() == 8.0  # eager from now on, no warning

    def bad(x):
        raise ValueError("x: bad")

    monkeypatch.setattr(fused_kernels, "_failure", None)
    with pytest.raises(ValueError, match="x: bad"):
        fused_kernels.CompiledKernel(bad)(torch.tensor(1.0))
    assert fused_kernels.compile_failure() is None


def test_fused_argument_is_checked():
    with pytest.raises(ValueError, match="fused"):
        make_sampler("sps", fused="yes")
    assert "fused=True" in repr(make_sampler("sps", fused=True))


def test_fused_ragged_layout_equals_eager():
    """vLLM V1's ragged layout (flat tokens, per-request draft counts, a request with none)
    through the compiled core: the same tokens as the eager sampler from the same seed.
    V = 2,500 > SMALL_VOCAB: a whole call through a kernel compiled with INDUCTOR_OPTIONS
    (the other fused tests run at FUSED_SHAPE, within SMALL_VOCAB)."""
    from cactus_theory.samplers.v1 import ragged_forward

    g = torch.Generator().manual_seed(7)
    counts, V = [3, 1, 0, 2], 2500
    T = sum(counts)
    target = torch.softmax(3.0 * torch.randn(T, V, generator=g), -1)
    draft = torch.softmax(3.0 * torch.randn(T, V, generator=g), -1)
    ids = torch.multinomial(draft, 1, generator=g)[:, 0]
    bonus = torch.randint(0, V, (len(counts), 1), generator=g)
    out = {}
    for fused in (False, True):
        torch.manual_seed(3)
        out[fused] = ragged_forward(
            make_sampler("cactus-taylor", delta=0.5, fused=fused), ids, counts, draft, target, bonus
        )
    assert torch.equal(out[False], out[True])
    assert (out[True][:, 0] != -1).all()


@pytest.mark.xdist_group(QUICK_GROUP)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_half_precision_inputs_equal_eager(dtype):
    """bf16 / fp16 inputs (cast to float32 before the compiled core, as the eager sampler
    casts them): the fused call gives the eager call's tokens from the same seed, and runs
    the float32 inputs' kernel (the shape and rule of the whole-call test above: no kernel
    of its own, no compile when that test ran first in this process)."""
    from torch._dynamo.utils import counters

    B, k, V = FUSED_SHAPE
    q, p, ids, bonus = _batch(B=B, k=k, V=V, seed=8, dtype=dtype)
    out = {}
    for fused in (False, True):
        torch.manual_seed(4)
        out[fused] = make_sampler("cactus-taylor", fused=fused)(q, bonus, p, ids)
    assert torch.equal(out[False], out[True])
    assert (out[True][:, 0] != -1).all()
    # a float32 call after it adds no graph: the kernel took float32 tensors
    before = counters["stats"]["unique_graphs"]
    make_sampler("cactus-taylor", fused=True)(q.float(), bonus, p.float(), ids)
    assert counters["stats"]["unique_graphs"] == before
    assert make_sampler("cactus-taylor", fused=True).compiled_core(V, k).compiled is not None


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ["cascade-token-v3", "cascade-opt", "topk", "cactus-taylor", "tas"])
def test_fused_recovery_on_half_precision_rows_is_the_float32_one(name, dtype):
    """bf16 / fp16 inputs: the fused recovery (row targets, point masses) reads the rows cast
    to float32, as the eager recovery does (no half-precision sums inside the rule hooks):
    the same weights up to a factor per row, to 1e-6 of the mass."""
    q, p, ids, _ = _batch(B=8, k=3, V=1000, seed=6, dtype=dtype)
    k = ids.shape[1]
    sq, sp = q[:, :k].float().sum(-1), p.float().sum(-1)
    pos = torch.tensor([0, 1, 2, 0, 1, 2, 2, 1])
    eager, fused = make_sampler(name), make_sampler(name, fused=True)
    _, state = eager.accept_probs_at_drafts(q[:, :k], p, ids, sq, sp)
    w_e = eager.recovery_weights(q, p, ids, pos, state, sq, sp)[0]
    _, state = fused.accept_probs_at_drafts(q[:, :k], p, ids, sq, sp)
    w_f = fused.recovery_weights(q, p, ids, pos, state, sq, sp)[0]
    w_f = w_f.dense() if isinstance(w_f, BlockWeights) else w_f
    assert w_f.dtype == torch.float32
    torch.testing.assert_close(
        w_f / w_f.sum(-1, keepdim=True), w_e / w_e.sum(-1, keepdim=True), rtol=0, atol=1e-6
    )


@pytest.mark.xdist_group(QUICK_GROUP)
def test_fused_tests_share_a_worker_under_loadgroup(request):
    """Under ``--dist loadgroup`` (./dev test) xdist sends the tests of one group to one worker
    by the group suffix it appends to their node ids; on pytest 9.2 that suffix silently stops
    taking effect (pytest-xdist issue 1386: every fused kernel then compiled in both
    workers), hence the pin in pyproject.toml. Outside loadgroup there is nothing to check."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not a --dist loadgroup worker")
    assert request.node.nodeid.endswith("@" + QUICK_GROUP), request.node.nodeid

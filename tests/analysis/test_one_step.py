"""Exact one-step analysis: fast vs dense vs sampling; SpS and Cactus properties; conventions."""

import os
import time

import numpy as np
import pytest
from conftest import profile_examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import deltas, pairs

import cactus_theory as ct
from cactus_theory.analysis.one_step import make_plan
from cactus_theory.divergences import DIVERGENCES, get_divergence
from cactus_theory.rules import TargetPlan

CACTUS = ["cactus-taylor"] + [f"cactus-exact-{d.replace('_', '-')}" for d in DIVERGENCES]


def _rule(name, delta):
    return ct.get_rule(name, delta=delta)


@pytest.mark.parametrize("name", CACTUS)
@given(pair=pairs(1, 64), delta=deltas)
def test_fast_emitted_equals_dense_enumeration(name, pair, delta):
    q, p = pair
    rule = _rule(name, delta)
    fast = ct.emitted_distribution(rule, q, p)
    dense = ct.emitted_distribution(rule, q, p, method="dense")
    # Both are sums of <= 2V non-negative terms of size <= 1 in float64: the prefix-sum
    # cancellation of the fast path costs at most ~V ulps.
    np.testing.assert_allclose(fast, dense, rtol=0, atol=1e-12)
    assert np.all(fast >= 0)
    assert abs(fast.sum() - 1) <= 1e-12


@pytest.mark.parametrize("name", CACTUS)
@given(pair=pairs(1, 64))
def test_delta_zero_is_sps_exactly(name, pair):
    q, p = pair
    a_sps = ct.acceptance_probabilities("sps", q, p)
    rule = _rule(name, 0.0)
    assert np.array_equal(ct.acceptance_probabilities(rule, q, p), a_sps)
    np.testing.assert_allclose(ct.emitted_distribution(rule, q, p), q / q.sum(), rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", CACTUS)
@given(pair=pairs(1, 64), d1=deltas, d2=deltas)
def test_acceptance_at_least_sps_and_monotone_in_delta(name, pair, d1, d2):
    q, p = pair
    lo, hi = sorted([d1, d2])
    a_sps = ct.acceptance_probabilities("sps", q, p)
    a_lo = ct.acceptance_probabilities(_rule(name, lo), q, p)
    a_hi = ct.acceptance_probabilities(_rule(name, hi), q, p)
    assert np.all(a_lo >= a_sps) and np.all(a_hi >= a_lo)  # per draft
    assert ct.acceptance_rate(_rule(name, hi), q, p) >= ct.acceptance_rate("sps", q, p)


@given(pair=pairs(1, 64), w=st.floats(0, 1))
def test_theorem1_fixed_target_is_emitted_exactly(pair, w):
    """Theorem 1: SpS against any fixed h emits h, accepting with sum min(p, h)."""
    q, p = pair
    h = w * p + (1 - w) * q
    plan = TargetPlan(q, p, h)
    np.testing.assert_allclose(ct.emitted_distribution(plan), h, rtol=0, atol=1e-14)
    np.testing.assert_allclose(ct.acceptance_rate(plan), np.minimum(p, h).sum(), rtol=0, atol=1e-14)


@pytest.mark.parametrize("name", CACTUS)
@pytest.mark.parametrize("div", sorted(DIVERGENCES))
@settings(max_examples=profile_examples(5 / 12, "56 cases (rule x divergence), each its own run"))
@given(pair=pairs(1, 32), delta=deltas)
def test_theorem3_emitted_no_farther_than_drafter(name, div, pair, delta):
    """Theorem 3's bound D(h_alg || q) <= D(p || q), for every divergence and Cactus variant."""
    q, p = pair
    d = get_divergence(div)
    emitted = ct.emitted_distribution(_rule(name, delta), q, p)
    lhs, rhs = float(d.unchecked(emitted, q)), float(d.unchecked(p, q))
    assert lhs <= rhs * (1 + 1e-9) + 1e-12  # rounding of two V-term sums


def _sample_one_step(plan, n_samples, rng):
    """Monte Carlo of one verification step, straight from the definition (numpy)."""
    p = plan.draft_probs
    V = p.shape[-1]
    drafts = rng.choice(V, size=n_samples, p=p)
    a = plan.accept_probs()[drafts]
    accepted = rng.random(n_samples) < a
    out = np.where(accepted, drafts, -1)
    for n in np.unique(drafts[~accepted]):
        idx = np.flatnonzero((drafts == n) & ~accepted)
        r = plan.recovery_at(np.array(n))
        out[idx] = rng.choice(V, size=idx.size, p=r / r.sum())
    return out


@pytest.mark.parametrize("name", ["sps", "cactus-taylor", "cactus-exact-kl", "cactus-exact-tv"])
def test_emitted_distribution_matches_sampling(name):
    """Chi-square goodness of fit of 200,000 simulated steps; false-alarm rate 1e-4 per test."""
    from scipy.stats import chisquare

    rng = np.random.default_rng(12345)
    q, p = ct.distributions.synthetic_pairs("noisy_copy", 1, 12, rng, noise=1.5)
    rule = ct.get_rule(name) if name == "sps" else _rule(name, 0.3)
    plan = make_plan(rule, q[0], p[0])
    expected = ct.emitted_distribution(plan)
    counts = np.bincount(_sample_one_step(plan, 200_000, rng), minlength=12)
    keep = expected > 0
    assert counts[~keep].sum() == 0
    stat = chisquare(counts[keep], expected[keep] / expected[keep].sum() * counts.sum())
    assert stat.pvalue > 1e-4


def test_full_vocabulary_runs_and_is_a_distribution():
    """V = 151,936 (Qwen's vocabulary) through the O(V log V) path; speed is in the benchmark."""
    rng = np.random.default_rng(0)
    q = rng.dirichlet(np.full(151_936, 0.05))
    p = rng.dirichlet(np.full(151_936, 0.05))
    e = ct.emitted_distribution(_rule("cactus-taylor", 1.0), q, p)
    assert e.shape == q.shape and np.all(e >= 0) and abs(e.sum() - 1) < 1e-9


# --- the conventions of cactus_theory.conventions, one test each --------------------------


def test_convention_p_zero_at_drafted_token():
    q = np.array([0.5, 0.5, 0.0])
    p = np.array([0.0, 1.0, 0.0])
    a = ct.acceptance_probabilities("sps", q, p)
    assert a[0] == 1.0 and a[2] == 0.0  # limit p -> 0+: 1 if h_n > 0 else 0
    assert not np.any(np.isnan(a))


def test_convention_empty_residual_falls_back_to_target():
    from cactus_theory.rules.plans import _residual_distribution

    p = np.array([0.2, 0.8])
    np.testing.assert_array_equal(_residual_distribution(p.copy(), p), p)


def test_convention_q_n_one():
    q = np.array([1.0, 0.0, 0.0])
    p = np.array([0.2, 0.5, 0.3])
    for name in CACTUS:
        plan = make_plan(_rule(name, 0.5), q, p)
        assert plan.accept_probs()[0] == 1.0
        h = plan.target_at(np.array(0))
        np.testing.assert_array_equal(h, [1.0, 0.0, 0.0])
        if name in ("cactus-taylor", "cactus-exact-kl", "cactus-exact-chi2"):
            # infinite cost off supp(q): tokens 1, 2 get gamma = 0 and are never emitted
            np.testing.assert_allclose(ct.emitted_distribution(plan), q, atol=1e-15)


def test_convention_single_token_vocabulary():
    for name in ["sps"] + CACTUS:
        rule = ct.get_rule(name) if name == "sps" else _rule(name, 1.0)
        assert ct.acceptance_rate(rule, [1.0], [1.0]) == 1.0
        np.testing.assert_array_equal(ct.emitted_distribution(rule, [1.0], [1.0]), [1.0])


def test_convention_normalization_tolerance_and_renormalization():
    q = np.array([0.5, 0.5 + 5e-7])  # within 1e-6: accepted and renormalized
    e = ct.emitted_distribution("sps", q, [0.5, 0.5])
    assert e.sum() == pytest.approx(1.0, abs=1e-15)
    with pytest.raises(ValueError, match="target_probs"):
        ct.emitted_distribution("sps", [0.5, 0.5 + 2e-6], [0.5, 0.5])
    q32 = np.array([0.5, 0.5004], dtype=np.float32)  # float32 rows: tolerance 1e-3
    assert ct.acceptance_rate("sps", q32, [0.5, 0.5]) > 0


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(target_probs=[0.5, np.nan]), "target_probs.*NaN"),
        (dict(target_probs=[0.5, np.inf]), "target_probs.*NaN or infinite"),
        (dict(draft_probs=[1.2, -0.2]), "draft_probs.*negative"),
        (dict(draft_probs=[0.3, 0.3]), "draft_probs.*sum to 1"),
        (dict(draft_probs=[0.2, 0.3, 0.5]), "draft_probs.*vocabulary"),
        (dict(target_probs=[]), "target_probs.*empty"),
    ],
)
def test_bad_probabilities_raise_valueerror_naming_the_argument(bad, match):
    args = dict(target_probs=[0.5, 0.5], draft_probs=[0.5, 0.5])
    args.update(bad)
    with pytest.raises(ValueError, match=match):
        ct.emitted_distribution("sps", **args)


def test_bad_rule_knob_method_raise_valueerror():
    with pytest.raises(ValueError, match="rule"):
        ct.get_rule("no-such-rule")
    with pytest.raises(ValueError, match="delta"):
        ct.get_rule("cactus-taylor", delta=-0.1)
    with pytest.raises(ValueError, match="delta"):
        ct.get_rule("cactus-taylor", delta=float("nan"))
    with pytest.raises(ValueError, match="gamma"):
        ct.get_rule("cactus-taylor", gamma=0.1)
    with pytest.raises(ValueError, match="method"):
        ct.emitted_distribution("sps", [1.0], [1.0], method="magic")
    with pytest.raises(ValueError, match="divergence"):
        ct.get_rule("cactus-taylor", divergence="tv")


def test_bad_token_ids_raise():
    from cactus_theory._validation import as_token_ids

    with pytest.raises(ValueError, match="draft_token_ids.*out of range"):
        as_token_ids(np.array([3]), 3, (1,))
    with pytest.raises(ValueError, match="draft_token_ids.*out of range"):
        as_token_ids(np.array([-1]), 3, (1,))


@pytest.mark.parametrize("name", CACTUS)
@given(pair=pairs(1, 64), delta=deltas, seed=st.integers(0, 2**31 - 1))
def test_accept_probs_at_drafted_tokens_equals_plan_path(name, pair, delta, seed):
    """The samplers' shortcut (gamma at q_n only) is the plan's acceptance, bit for bit."""
    q, p = pair
    rule = _rule(name, delta)
    ids = np.random.default_rng(seed).integers(0, q.shape[-1], size=())
    plan = make_plan(rule, q, p)  # validated, renormalized rows: the same inputs for both paths
    assert rule.accept_probs_at(plan.target_probs, plan.draft_probs, ids) == plan.accept_probs_at(ids)


@pytest.mark.parametrize("threads", [2, 3])
def test_sorted_search_in_chunks_on_threads_is_the_same(monkeypatch, threads):
    """The emitted distribution's per-row sorted search runs a long row's values in
    contiguous chunks on threads: the same indices as one ``np.searchsorted`` per row (rows
    with ties, values outside the sorted range, two rows), and the same emitted
    distribution as one thread at V = 100,000."""
    from cactus_theory import _threads
    from cactus_theory.analysis._emitted import _searchsorted_rows
    from cactus_theory.analysis.one_step import emitted_distribution

    rng = np.random.default_rng(3)
    rows = np.sort(np.floor(rng.uniform(0, 500, (2, 60_000))), axis=-1)
    values = rng.uniform(-10, 510, (2, 50_000))
    values[:, :100] = rows[:, :100]  # exact ties: side="left"
    want = np.stack([np.searchsorted(r, v, side="left") for r, v in zip(rows, values)])
    monkeypatch.setattr(_threads, "thread_count", lambda: threads)
    assert np.array_equal(_searchsorted_rows(np, rows, values), want)
    q = rng.dirichlet(np.full(100_000, 0.1))
    p = rng.dirichlet(np.full(100_000, 0.1))
    many = emitted_distribution("cactus-exact", q, p)
    monkeypatch.setattr(_threads, "thread_count", lambda: 1)
    assert np.array_equal(emitted_distribution("cactus-exact", q, p), many)


@pytest.mark.parametrize("V", [1, 2, 6, 32, 33, 200])
def test_sorted_search_of_short_rows_is_the_same(monkeypatch, V):
    """Short rows (at most ``_COMPARE_MAX_V`` entries) are searched by counting the entries
    below each value, all rows at once, longer ones by one call a row: the same indices as
    one ``np.searchsorted(side="left")`` per row, on both sides of the threshold, with exact
    ties, values outside the row's range, values per row fewer or more than V, leading batch
    axes, and chunks of rows smaller than the batch (the boolean temporary's bound)."""
    from cactus_theory.analysis import _emitted

    rng = np.random.default_rng(V)
    rows = np.sort(np.floor(rng.uniform(0, 20, (3, 5, V))), axis=-1)
    for m in (1, V, 2 * V + 3):
        values = rng.uniform(-1, 21, (3, 5, m))
        values[..., : min(m, V)] = rows[..., : min(m, V)]  # exact ties: side="left"
        want = np.stack(
            [np.searchsorted(r, v, side="left") for r, v in zip(rows.reshape(-1, V), values.reshape(-1, m))]
        )
        got = _emitted._searchsorted_rows(np, rows, values)
        assert got.shape == values.shape and np.array_equal(got.reshape(-1, m), want)
        monkeypatch.setattr(_emitted, "_COMPARE_ELEMENTS", 2 * V * m)  # two rows a chunk
        assert np.array_equal(_emitted._searchsorted_rows(np, rows, values), got)
        monkeypatch.undo()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_thread_chunks_work_in_a_forked_child(monkeypatch):
    """A process forked after the shared pool ran (a user's multiprocessing workers) still
    runs chunks and finishes: the child inherits the pool object but none of its threads, so
    ``_threads`` makes a pool per process. (On CPython 3.11 the inherited pool also starts
    new threads; the per-process pool does not rely on that.)"""
    from cactus_theory import _threads

    monkeypatch.setattr(_threads, "thread_count", lambda: 2)
    assert _threads.in_chunks(lambda lo, hi: hi - lo, 40_000, 10_000) == [20_000, 20_000]
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only on success
        ok = False
        try:
            ok = _threads.in_chunks(lambda lo, hi: hi - lo, 40_000, 10_000) == [20_000, 20_000]
        finally:
            os._exit(0 if ok else 1)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's chunks never finished")
        time.sleep(0.05)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


# --- long numpy rows: the rejected drafts' c sorted instead of the V ratios t ---------------


def _row_paths():
    """The long-row path and the array-agnostic path, both called under the public
    functions' error state (p_j/q_j overflowing to inf for subnormal q_j is intended)."""
    from cactus_theory.analysis import _emitted

    def quiet(fn):
        def call(*args):
            with np.errstate(over="ignore"):
                return fn(*args)

        return call

    return quiet(_emitted._emitted_spike_rows), quiet(_emitted._emitted_spike_fast)


# The two paths sum the same terms in other orders (prefix sums over t-ranks against bin sums
# over c-ranks, V <= 64 terms of size <= 1 here): they agree to a few ulps of 1 per entry.
PATH_ATOL = 64 * 2.3e-16


@pytest.mark.parametrize("name", ["cactus-taylor", "cactus-exact-kl", "cactus-exact-hellinger"])
@pytest.mark.parametrize("threads", [1, 2])
@given(pair=pairs(1, 64), delta=deltas, chunk=st.integers(1, 17))
def test_long_row_path_is_the_sorted_path(name, threads, pair, delta, chunk):
    """``emitted_distribution``'s path for long numpy rows (called here on short ones)
    gives the array-agnostic sorted path's law to the rounding of its sums, for search
    chunks of 1 to 17 keys (many chunks, uneven last one) on one and two threads, rows
    with zeros (t = inf), one-hot rows and rows with no rejected draft; the chunking does
    not change a float."""
    from cactus_theory import _threads
    from cactus_theory.analysis import _rejected_mixture as rejected_mixture

    rows, plain = _row_paths()
    q, p = pair
    plan = make_plan(_rule(name, delta), q, p)
    args = (plan.target_probs, plan.draft_probs, plan.spike)
    whole = rows(*args)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rejected_mixture, "_SEARCH_CHUNK", chunk)
        mp.setattr(_threads, "thread_count", lambda: threads)
        got = rows(*args)
    assert np.array_equal(got, whole)
    np.testing.assert_allclose(got, plain(*args), rtol=0, atol=PATH_ATOL)


@pytest.mark.parametrize("name", ["cactus-taylor", "cactus-exact-kl"])
def test_long_row_path_matches_the_dense_oracle(name):
    """At V = 1,100 (over :data:`LONG_ROW_VOCAB`, so ``emitted_distribution`` takes the
    long-row path), rows with truncated supports and many rejected drafts against the
    O(V^2) enumeration of every recovery (Theorem 3 by definition): 1e-15 per entry, the
    rounding of 1,100-term sums of terms below 1."""
    from cactus_theory.analysis._emitted import LONG_ROW_VOCAB

    rng = np.random.default_rng(8)
    V = 1100
    assert V >= LONG_ROW_VOCAB
    q, p = np.exp(2.5 * rng.standard_normal((2, V))), np.exp(2.5 * rng.standard_normal((2, V)))
    q[0, rng.random(V) < 0.3] = 0.0
    p[1, rng.random(V) < 0.3] = 0.0
    q, p = q / q.sum(-1, keepdims=True), p / p.sum(-1, keepdims=True)
    plan = make_plan(_rule(name, 0.05), q, p)
    rejected = int(np.sum(plan.draft_probs > np.asarray(plan.spike)))
    assert rejected > 200  # the mixture is exercised, not a corner of it
    fast = ct.emitted_distribution(plan)
    np.testing.assert_allclose(fast, ct.emitted_distribution(plan, method="dense"), rtol=0, atol=1e-15)


def test_long_row_path_batches_and_takes_the_empty_residual_path():
    """Batch rows (each its own), and the empty-residual fallback (Convention 3; reached here
    by an unnormalized q, which only the internal function accepts): the sorted path's law."""
    rows, plain = _row_paths()
    rng = np.random.default_rng(5)
    rule = _rule("cactus-exact-kl", 0.2)
    q, p = rng.dirichlet(np.full(300, 0.3), size=(2, 3)), rng.dirichlet(np.full(300, 0.3), size=(2, 3))
    plan = make_plan(rule, q, p)
    args = (plan.target_probs, plan.draft_probs, plan.spike)
    got = rows(*args)
    # 300-term sums of terms below 1: 300 ulps of 1
    np.testing.assert_allclose(got, plain(*args), rtol=0, atol=300 * 2.3e-16)
    for i in np.ndindex(2, 3):
        assert np.array_equal(rows(*(x[i] for x in args)), got[i])
    q, p = np.array([0.1, 0.1, 0.0]), np.array([0.5, 0.3, 0.2])  # h^(n) <= p: Z_n = 0
    gamma = q.copy()
    want = plain(q, p, gamma)
    np.testing.assert_allclose(rows(q, p, gamma), want, rtol=0, atol=1e-16)
    # p a = (0.1, 0.1, 0) plus (0.4 + 0.2 + 0.2) normalize(h^(n)) = 0.8 (1/2, 1/2, 0) for every n
    np.testing.assert_allclose(want, [0.5, 0.5, 0.0], rtol=0, atol=1e-15)


def test_long_row_path_is_thread_safe():
    """Two user threads computing different emitted distributions at once get what each
    gets alone, at a vocabulary long enough for several search chunks."""
    import threading

    rng = np.random.default_rng(11)
    V = 3 * 32768 + 5
    inputs = [(rng.dirichlet(np.full(V, 0.2)), rng.dirichlet(np.full(V, 0.2))) for _ in range(2)]
    rule = _rule("cactus-exact-kl", 0.1)
    alone = [ct.emitted_distribution(rule, q, p) for q, p in inputs]
    got, start = [None, None], threading.Barrier(2)

    def work(i):
        start.wait()
        for _ in range(3):
            got[i] = ct.emitted_distribution(rule, *inputs[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert all(np.array_equal(g, a) for g, a in zip(got, alone))


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_thread_chunks_with_a_largest_chunk_cover_the_range_in_order(monkeypatch, threads):
    """``in_chunks(..., max_chunk)``: contiguous chunks, in order, none longer than max_chunk,
    covering the range exactly (more chunks than threads; one thread runs them in turn)."""
    from cactus_theory import _threads

    monkeypatch.setattr(_threads, "thread_count", lambda: threads)
    for size, lo_min, hi_max in ((100, 10, 30), (40_000, 10_000, 7_000), (5, 10, 3), (30, 1, 30)):
        got = _threads.in_chunks(lambda lo, hi: (lo, hi), size, lo_min, hi_max)
        assert got[0][0] == 0 and got[-1][1] == size
        assert all(a[1] == b[0] for a, b in zip(got, got[1:]))
        assert all(0 < hi - lo <= hi_max for lo, hi in got)
    assert _threads.in_chunks(lambda lo, hi: (lo, hi), 30, 1, 30) == (
        [(0, 30)] if threads == 1 else [(30 * i // threads, 30 * (i + 1) // threads) for i in range(threads)]
    )


# --- short numpy rows: the batch in blocks of rows ------------------------------------------


@pytest.mark.parametrize("name", ["cactus-taylor", "cactus-exact-kl", "cactus-exact-hellinger"])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_short_rows_in_blocks_are_one_call(monkeypatch, name, threads):
    """``emitted_distribution`` runs a batch of short numpy rows (under
    :data:`LONG_ROW_VOCAB`) in blocks of rows on threads: the floats of one call of the
    batched mixture over the whole batch, with leading batch axes, blocks of 1 to 7 rows (an
    uneven last one), rows with zeros in q (t = inf; a subnormal q_j overflows p_j / q_j to
    inf, silently as in one call) and one-hot rows."""
    import warnings

    from cactus_theory import _threads
    from cactus_theory.analysis import _emitted

    rng = np.random.default_rng(21)
    V = 40
    q, p = rng.dirichlet(np.full(V, 0.3), size=(3, 7)), rng.dirichlet(np.full(V, 0.3), size=(3, 7))
    q[0, 1, rng.random(V) < 0.4] = 0.0
    q[1, 2, 5] = 1e-310  # subnormal: p_j / q_j overflows
    q[2, 3] = np.eye(V)[7]
    q = q / q.sum(-1, keepdims=True)
    plan = make_plan(_rule(name, 0.3), q, p)
    with np.errstate(over="ignore"):
        whole = _emitted._emitted_spike_fast(
            plan.target_probs, plan.draft_probs, np.asarray(plan.spike_for_emission(), dtype=np.float64)
        )
    monkeypatch.setattr(_threads, "thread_count", lambda: threads)
    for rows in (1, 2, 7, 21):
        monkeypatch.setattr(_emitted, "ROW_BLOCK_ELEMENTS", rows * V)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = ct.emitted_distribution(plan)
        assert got.shape == (3, 7, V) and np.array_equal(got, whole), rows


@pytest.mark.parametrize("threads", [1, 2])
def test_row_blocks_keep_the_callers_error_state(monkeypatch, threads):
    """Each block runs under the numpy error state of the caller (threads start with the
    default state): an overflow raises where the caller raises and is silent where it
    ignores, as in one call; the output is the blocks' rows in order, with the input's shape."""
    from cactus_theory import _threads

    monkeypatch.setattr(_threads, "thread_count", lambda: threads)
    x = np.arange(24.0).reshape(2, 3, 4)

    got = _threads.in_row_blocks(lambda a: 2.0 * a, (x,), 4)  # one row a block
    assert got.shape == x.shape and np.array_equal(got, 2.0 * x)

    def overflow(a):
        return a * np.float64(1e308) * 10.0

    with np.errstate(over="raise"), pytest.raises(FloatingPointError):
        _threads.in_row_blocks(overflow, (x,), 4)
    with np.errstate(over="ignore"):
        assert np.isinf(_threads.in_row_blocks(overflow, (x + 1.0,), 4)).all()

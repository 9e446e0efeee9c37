"""Where the work runs: chunks of rows and a Dask cluster give the numbers of one call over all
rows bit for bit, memory bounded by ``max_memory``, bad chunk sizes, memory strings and runners
rejected naming the argument (the row sources themselves: ``tests/test_rows.py``)."""

import tracemalloc

import numpy as np
import pytest

import cactus_theory as ct
from cactus_theory import rows
from cactus_theory.analysis import _runners as chunked
from cactus_theory.analysis import global_delta
from cactus_theory.analysis.one_step import _analyze_block as analyze_block


def pairs(n, V, seed=0, conc=0.3):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.full(V, conc), n), rng.dirichlet(np.full(V, conc), n)


def same_result(a, b):
    """Every field of two OneStepResults equal bit for bit (None where not kept)."""
    assert a.rule == b.rule
    for x, y in ((a.acceptance, b.acceptance), (a.accept_probs, b.accept_probs), (a.emitted, b.emitted)):
        if x is None or y is None:
            assert x is None or y is None
            continue
        assert x.shape == y.shape and np.array_equal(np.asarray(x), np.asarray(y))
    assert a.divergences.keys() == b.divergences.keys()
    for k in a.divergences:
        assert np.array_equal(np.asarray(a.divergences[k]), np.asarray(b.divergences[k])), k


# --------------------------------------------------------------------------- chunk rule, bad input


def test_parse_memory_units():
    assert chunked.parse_memory("256MB") == 256 * 10**6
    assert chunked.parse_memory("1.5 GiB") == int(1.5 * 2**30)
    assert chunked.parse_memory("512k") == 512_000
    assert chunked.parse_memory(4096) == 4096


@pytest.mark.parametrize("bad", ["12 parsecs", "MB", "", "-5MB", 0, -1, True, "1e400GB", None])
def test_bad_memory_string_names_max_memory(bad):
    q, p = pairs(3, 4)
    with pytest.raises(ValueError, match="^max_memory"):
        if bad is None:
            chunked.parse_memory(bad)
        ct.analyze("sps", q, p, max_memory=bad)


@pytest.mark.parametrize("bad", [0, -3, 2.5, "10", True])
def test_bad_chunk_rows_names_chunk_rows(bad):
    q, p = pairs(3, 4)
    for call in (
        lambda: ct.analyze("sps", q, p, chunk_rows=bad),
        lambda: ct.analyze_rules(q, p, ["sps"], chunk_rows=bad),
        lambda: ct.optimal_frontier(q, p, eps=0.1, chunk_rows=bad),
        lambda: ct.calibrate_delta(q, p, 0.1, chunk_rows=bad),
    ):
        with pytest.raises(ValueError, match="^chunk_rows"):
            call()


def test_bad_runner_names_runner():
    q, p = pairs(3, 4)
    for call in (
        lambda: ct.analyze("sps", q, p, runner="gpu"),
        lambda: ct.emitted_distribution("sps", q, p, runner="threads"),
        lambda: ct.optimal_frontier(q, p, eps=0.1, runner=3),
        lambda: global_delta(q, p, 0.1, runner="cluster"),
    ):
        with pytest.raises(ValueError, match="^runner"):
            call()


def test_local_runner_equals_one_block():
    # runner="local" takes the chunk loop even for rows that fit one chunk: the same numbers
    q, p = pairs(20, 12, seed=5)
    same_result(analyze_block("cactus-exact", q, p), ct.analyze("cactus-exact", q, p, runner="local"))


def test_chunk_rows_and_max_memory_together_rejected():
    q, p = pairs(3, 4)
    with pytest.raises(ValueError, match="^max_memory"):
        ct.analyze("sps", q, p, chunk_rows=2, max_memory="1MB")


def test_default_chunk_fits_the_default_bound():
    rule = chunked.rows_per_chunk("analyze")
    # V = 1,000: the default 256 MiB over 34 float64 arrays of V per row
    assert rule(1000) == chunked.DEFAULT_MAX_MEMORY // (8 * chunked.WORK_ARRAYS["analyze"] * 1000)
    assert rule(10**9) == 1  # one row at least, whatever V
    assert chunked.rows_per_chunk("analyze", chunk_rows=7)(10**6) == 7


# --------------------------------------------------------------------------- analyze, bit for bit


@pytest.mark.parametrize(
    "rule", ["cactus-exact", "cactus-taylor", "sps", "interpolation", "topk", "cascade-token-v3"]
)
def test_analyze_in_chunks_equals_one_block(rule):
    q, p = pairs(90, 24, seed=1)
    rq, rp = pairs(90, 24, seed=2)
    whole = analyze_block(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp)
    got = ct.analyze(rule, q, p, raw_target_probs=rq, raw_draft_probs=rp, chunk_rows=13)
    same_result(whole, got)


def test_analyze_keeps_batch_shape_and_long_rows():
    # V >= LONG_ROW_VOCAB takes the one-row-at-a-time mixture; batch axes (3, 4) are kept
    q, p = pairs(12, 1100, seed=3)
    q, p = q.reshape(3, 4, 1100), p.reshape(3, 4, 1100)
    whole = analyze_block("cactus-exact", q, p)
    got = ct.analyze("cactus-exact", q, p, chunk_rows=5)
    assert got.emitted.shape == (3, 4, 1100) and got.acceptance.shape == (3, 4)
    same_result(whole, got)


def test_analyze_equals_thousand_row_chunks_one_by_one():
    # what the 100,000-row measurement claims, at a size a test affords: the default memory
    # bound's chunks give the numbers of fixed 1,000-row blocks analysed one at a time
    q, p = pairs(2600, 40, seed=4)
    got = ct.analyze("cactus-exact", q, p, per_token=False, max_memory="2MB")
    assert chunked.rows_per_chunk("analyze", max_memory="2MB")(40) < 1000  # several chunks
    blocks = [analyze_block("cactus-exact", q[a : a + 1000], p[a : a + 1000]) for a in (0, 1000, 2000)]
    assert got.emitted is None and got.accept_probs is None
    assert np.array_equal(got.acceptance, np.concatenate([b.acceptance for b in blocks]))
    for k in got.divergences:
        assert np.array_equal(got.divergences[k], np.concatenate([b.divergences[k] for b in blocks]))


def test_analyze_torch_in_chunks_equals_one_block():
    torch = pytest.importorskip("torch")
    q, p = pairs(40, 30, seed=5)
    qt, pt = torch.tensor(q), torch.tensor(p)
    whole = analyze_block("cactus-exact", qt, pt)
    got = ct.analyze("cactus-exact", qt, pt, chunk_rows=9)
    assert isinstance(got.emitted, torch.Tensor) and got.emitted.dtype == torch.float64
    same_result(whole, got)


def test_emitted_distribution_in_chunks():
    q, p = pairs(50, 20, seed=6)
    h = ct.emitted_distribution("cactus-exact", q, p, chunk_rows=8)
    assert np.array_equal(h, ct.emitted_distribution("cactus-exact", q, p))


def test_working_memory_stays_under_the_bound():
    # tracemalloc counts numpy's allocations: the working memory beyond the input of a chunked
    # analyze stays under max_memory plus its per-row results, where one block holds ~30
    # input-sized arrays
    q, p = pairs(2000, 200, seed=7)
    results = 2000 * 8 * 4  # acceptance and three divergences per row

    def peak(fn):
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            fn()
            return tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()

    bound = 2 * 2**20
    ct.analyze("cactus-exact", q[:100], p[:100], per_token=False, max_memory=bound)  # imports
    chunk_peak = peak(lambda: ct.analyze("cactus-exact", q, p, per_token=False, max_memory=bound))
    block_peak = peak(lambda: analyze_block("cactus-exact", q, p))
    assert chunk_peak <= bound + results
    # keeping accept_probs and emitted: their N x V outputs, written chunk by chunk, on top
    tok_peak = peak(lambda: ct.analyze("cactus-exact", q, p, max_memory=bound))
    assert tok_peak <= q.nbytes + p.nbytes + bound + results
    # what chunking avoids: about 9 input-sized arrays at once (the plan and the divergences
    # over the whole batch; the emitted mixture itself runs in blocks of rows)
    assert block_peak > 8 * (q.nbytes + p.nbytes)


# --------------------------------------------------------------------------- the other analyses


def test_analyze_rules_in_chunks_equals_in_memory():
    q, p = pairs(60, 16, seed=8)
    names = ["sps", "cactus-exact", "interpolation", "cascade-token-v3"]
    ref = ct.analyze_rules(q, p, names, delta=0.3)
    got = ct.analyze_rules(q, p, names, delta=0.3, chunk_rows=11)
    assert got.table == ref.table and got.n_positions == 60


def test_optimal_frontier_in_chunks_equals_in_memory():
    q, p = pairs(45, 16, seed=9)
    for eps in (None, [0.0, 0.02, 0.3]):
        ref = ct.optimal_frontier(q, p, eps=eps)
        got = ct.optimal_frontier(q, p, eps=eps, chunk_rows=7)
        for f in ("eps", "acceptance", "emitted_divergence", "per_position_acceptance"):
            assert np.array_equal(getattr(got, f), getattr(ref, f)), f
        assert (got.sps_acceptance, got.saturation_eps, got.n_positions) == (
            ref.sps_acceptance,
            ref.saturation_eps,
            ref.n_positions,
        )


@pytest.mark.parametrize("rule", ["cactus-taylor", "cactus-exact"])
def test_calibrate_delta_in_chunks_equals_in_memory(rule):
    q, p = pairs(40, 16, seed=10)
    ref = ct.calibrate_delta(q, p, 0.02, rule=rule)
    got = ct.calibrate_delta(q, p, 0.02, rule=rule, chunk_rows=6)
    for f in ("delta", "emitted_divergence", "acceptance", "saturated"):
        assert np.array_equal(getattr(got, f), getattr(ref, f)), f


@pytest.mark.parametrize("statistic", ["mean", 0.5, 0.9, 1.0])
def test_global_delta_in_chunks_equals_in_memory(statistic):
    # the mean and the quantiles are taken over all rows' values (exact, not sampled)
    q, p = pairs(30, 12, seed=11)
    ref = global_delta(q, p, 0.03, statistic=statistic)
    got = global_delta(q, p, 0.03, statistic=statistic, chunk_rows=7)
    assert got.delta == ref.delta and got.value == ref.value
    assert np.array_equal(got.divergences, ref.divergences)
    assert np.array_equal(got.acceptance, ref.acceptance)


# --------------------------------------------------------------------------- shards


def _shard_folder(tmp_path, n_shards=5, n=300, V=100):
    parts = []
    for i in range(n_shards):
        q, p = pairs(n, V, seed=20 + i)
        np.savez(tmp_path / f"shard-{i:02d}.npz", target_probs=q, draft_probs=p)
        parts.append((q, p))
    (tmp_path / "notes.txt").write_text("not a shard")
    return parts


# --------------------------------------------------------------------------- Dask


def test_dask_local_cluster_matches_in_memory(tmp_path):
    da = pytest.importorskip("dask.array")
    distributed = pytest.importorskip("distributed")
    q, p = pairs(120, 16, seed=30)
    parts = _shard_folder(tmp_path, n_shards=3, n=40, V=16)
    sq = np.concatenate([a for a, _ in parts])
    sp = np.concatenate([b for _, b in parts])
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster),
    ):
        dq, dp = da.from_array(q, chunks=(45, 16)), da.from_array(p, chunks=(60, 8))
        ref = analyze_block("cactus-exact", q, p)
        got = ct.analyze("cactus-exact", dq, dp)
        assert got.emitted is None  # Dask rows: the per-row values only, by default
        assert np.array_equal(got.acceptance, ref.acceptance)
        for k in ref.divergences:
            assert np.array_equal(got.divergences[k], ref.divergences[k])
        h = ct.emitted_distribution("cactus-exact", dq, dp)  # a lazy Dask array
        assert np.array_equal(h.compute(), ref.emitted)
        names = ["sps", "cactus-exact"]
        assert ct.analyze_rules(dq, dp, names).table == ct.analyze_rules(q, p, names).table
        f_ref, f_got = ct.optimal_frontier(q, p), ct.optimal_frontier(dq, dp)
        assert np.array_equal(f_got.acceptance, f_ref.acceptance)
        c_ref, c_got = ct.calibrate_delta(q, p, 0.02), ct.calibrate_delta(dq, dp, 0.02)
        assert np.array_equal(c_got.delta, c_ref.delta)
        # one Dask computation per pass over the rows: two blocks of rows
        g_ref = global_delta(q, p, 0.02, statistic=0.9)
        g_got = global_delta(
            da.from_array(q, chunks=(60, 16)), da.from_array(p, chunks=(60, 16)), 0.02, statistic=0.9
        )
        assert g_got.delta == g_ref.delta and g_got.value == g_ref.value
        # shards as a bag: each worker reads its own shards
        shards = ct.analyze_rules(rows.as_row_source(tmp_path), None, names, chunk_rows=16, runner="dask")
        assert shards.table == ct.analyze_rules(sq, sp, names).table


def test_benchmark_scale_rows():
    # each measurement in a fresh process; the chunked rows' check is the equality with
    # 1,000-row blocks analysed one by one
    from benchmarks._scale import bench_scale

    goals = bench_scale(((200, 20), (1_500, 20)), quick=True)
    names = [g.goal for g in goals]
    assert names[0].startswith("scale: in-memory analyze, V = 20, n = 200")
    chunk_rows = [g for g in goals if g.goal.startswith("scale: chunked analyze")]
    assert len(chunk_rows) == 2 and all(g.check.startswith("ok") and g.passed for g in chunk_rows)
    assert "first 1,500 rows" in chunk_rows[1].check
    assert names[-1].startswith("scale: chunked memory flat in n")


def test_docs_page_states_the_default_bound():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "scale.md").read_text()
    assert f"default {chunked.DEFAULT_MAX_MEMORY // 2**20} MiB" in text

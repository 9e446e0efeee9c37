"""``cactus_theory.rows``: row sources (a .npy file, a compact dump, the full-vocabulary sample, a
folder of shards) give the numbers of the same rows in memory bit for bit, read lazily (memory
flat in the number of shards), and bad sources are refused naming the file or the argument.
"""

import json
import shutil
import tracemalloc

import numpy as np
import pytest
from test_runners import _shard_folder, pairs, same_result  # the runners' helpers (tests/analysis/)

import cactus_theory as ct
from cactus_theory import rows
from cactus_theory.analysis import _runners as chunked
from cactus_theory.analysis.one_step import _analyze_block as analyze_block
from cactus_theory.cli import main
from cactus_theory.logits._loader import FULL_VOCAB_PATH, load_dump, load_full_vocab, shipped_dumps


def test_npy_file_is_memory_mapped_and_equal(tmp_path):
    q, p = pairs(70, 20, seed=12)
    np.save(tmp_path / "rows.npy", np.stack([q, p]))
    src = rows.as_row_source(tmp_path / "rows.npy")
    assert src.n_rows == 70 and src.widths() == [(70, 20)]
    got = ct.analyze("cactus-exact", src, chunk_rows=9)
    assert got.emitted is None  # a source keeps per-row values only by default
    same_result(
        analyze_block("cactus-exact", q, p), ct.analyze("cactus-exact", src, chunk_rows=9, per_token=True)
    )


def test_compact_dump_source_equals_its_pairs():
    path = shipped_dumps()[0]
    q, p, rq, rp = load_dump(path).pairs()
    ref = analyze_block("cascade-token-v3", q, p, raw_target_probs=rq, raw_draft_probs=rp)
    got = ct.analyze("cascade-token-v3", rows.as_row_source(path), chunk_rows=400, per_token=True)
    same_result(ref, got)


def test_full_vocab_source_equals_the_loader():
    q, p, _ = load_full_vocab(FULL_VOCAB_PATH)
    ref = analyze_block("cactus-exact", q, p, raw_target_probs=q, raw_draft_probs=p)
    got = ct.analyze("cactus-exact", rows.as_row_source(FULL_VOCAB_PATH), chunk_rows=5)
    same_result(type(ref)(ref.rule, None, ref.acceptance, None, ref.divergences), got)


def test_folder_of_shards_is_read_lazily(tmp_path):
    parts = _shard_folder(tmp_path, n_shards=4, n=400)
    q = np.concatenate([a for a, _ in parts])
    p = np.concatenate([b for _, b in parts])
    src = rows.as_row_source(tmp_path)
    assert isinstance(src, rows._ShardRows) and src.n_rows == 1600 and len(src.parts()) == 4
    bound = 600_000
    ct.analyze("cactus-exact", src.parts()[0], max_memory=bound)  # first call's imports/caches

    def peak(source):
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            res = ct.analyze("cactus-exact", source, max_memory=bound)
            return res, tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()

    _, one = peak(src.parts()[0])
    got, every = peak(src)
    # flat in the number of shards: four shards take one shard's memory plus the per-row
    # results of the other 1,200 rows (4 float64 each, held in per-chunk pieces and then
    # joined: 2x) and each extra chunk's result object (a dataclass and a dict: 2 kB allowed),
    # far below the 2.56 MB of all the shards' rows
    extra_chunks = 3 * -(-400 // chunked.rows_per_chunk("analyze", max_memory=bound)(100))
    assert every <= one + 2 * 1200 * 8 * 4 + 2048 * extra_chunks
    assert every < sum(a.nbytes + b.nbytes for a, b in parts) / 1.5
    ref = analyze_block("cactus-exact", q, p)
    assert np.array_equal(got.acceptance, ref.acceptance)
    for k in ref.divergences:
        assert np.array_equal(got.divergences[k], ref.divergences[k])
    table = ct.analyze_rules(str(tmp_path), None, ["sps", "cactus-exact"], chunk_rows=64)
    assert table.table == ct.analyze_rules(q, p, ["sps", "cactus-exact"]).table


def test_folder_of_dump_shards(tmp_path):
    # shards are pieces of one recording (here one shipped dump, twice); a folder of two
    # different recordings (dump's one file per drafter) is refused, not pooled
    for f in shipped_dumps()[:2]:
        shutil.copy(f, tmp_path / f.name)
    with pytest.raises(ValueError, match="^source: .* holds 2 different recordings"):
        rows.as_row_source(tmp_path)
    first, second = shipped_dumps()[:2]
    (tmp_path / second.name).unlink()
    shutil.copy(first, tmp_path / f"part2_{first.name}")
    src = rows.as_row_source(tmp_path)
    got = ct.analyze("cactus-exact", src, chunk_rows=700)
    refs = [analyze_block("cactus-exact", *load_dump(f).pairs()[:2]) for f in sorted(tmp_path.iterdir())]
    assert np.array_equal(got.acceptance, np.concatenate([r.acceptance for r in refs]))


def test_bad_sources(tmp_path):
    with pytest.raises(ValueError, match="no .npy or .npz shards"):
        rows.as_row_source(tmp_path)
    with pytest.raises(ValueError, match="neither an existing file nor a folder"):
        rows.as_row_source(tmp_path / "missing.npy")
    (tmp_path / "bad.npy").write_bytes(b"not numpy")
    with pytest.raises(ValueError, match="bad.npy"):
        rows.as_row_source(tmp_path / "bad.npy")
    np.save(tmp_path / "neg.npy", np.stack([np.full((3, 4), 0.25), np.full((3, 4), -0.25)]))
    with pytest.raises(ValueError, match="neg.npy: draft_probs: contains negative"):
        ct.analyze("sps", rows.as_row_source(tmp_path / "neg.npy"))
    with pytest.raises(ValueError, match="^draft_probs"):
        rows.as_row_source(tmp_path / "neg.npy", np.ones(4))
    with pytest.raises(ValueError, match="^target_probs: a path"):
        ct.analyze("sps", str(tmp_path / "neg.npy"))


# --------------------------------------------------------------------------- command line


def test_cli_analyze_folder_of_shards(tmp_path, capsys):
    parts = _shard_folder(tmp_path, n_shards=3, n=40, V=12)
    q = np.concatenate([a for a, _ in parts])
    p = np.concatenate([b for _, b in parts])
    status = main(
        ["analyze", "--input", str(tmp_path), "--rules", "sps,cactus-exact", "--max-memory", "64kB", "--json"]
    )
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "chunk" in err  # the progress bar over chunks
    data = json.loads(out)
    ref = ct.analyze_rules(q, p, ["sps", "cactus-exact"]).to_dict()
    assert data == json.loads(json.dumps(ref))
    status = main(["analyze", "--input", str(tmp_path), "--rules", "sps", "--max-memory", "lots"])
    _, err = capsys.readouterr()
    assert status == 2 and len(err.strip().splitlines()) == 1 and "error: max_memory" in err

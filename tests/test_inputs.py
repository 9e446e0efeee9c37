"""``cactus_theory.inputs``: (q, p) rows from a file or a shipped recording (:func:`_load_pairs`).

Each layout of the module docstring (``.npy`` (2, V) or (2, N, V), ``.npz`` with either key pair,
``.json`` object or list of rows, a compact dump, a shipped name with or without its prefix)
gives the same float64 (N, V) rows; each bad source raises one ValueError naming the file (or
``source``) and what is wrong.
"""

import json

import numpy as np
import pytest

from cactus_theory.inputs import _load_pairs, _parse_probs, _shipped_pair_names
from cactus_theory.logits import shipped_dumps

Q = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
P = np.array([[0.2, 0.3, 0.5], [0.3, 0.3, 0.4]])


@pytest.mark.parametrize(
    "bad,what",
    [
        ("shape.npy", "shape"),
        ("keys.npz", "target_probs"),
        ("bad.json", "JSON"),
        ("norm.json", "sum to 1"),
        ("x.txt", "file type"),
    ],
)
def test_bad_files_name_the_file(tmp_path, bad, what):
    path = tmp_path / bad
    if bad == "shape.npy":
        np.save(path, np.ones((3, 4)) / 4)
    elif bad == "keys.npz":
        np.savez(path, a=np.ones(3) / 3)
    elif bad == "bad.json":
        path.write_text("{not json")
    elif bad == "norm.json":
        path.write_text(json.dumps({"target_probs": [0.5, 0.6], "draft_probs": [0.5, 0.5]}))
    else:
        path.write_text("0.5 0.5")
    with pytest.raises(ValueError, match=what) as exc:
        _load_pairs(path)
    assert str(path) in str(exc.value)


def test_load_pairs_layouts_agree(tmp_path):
    q, p = Q, P
    np.save(tmp_path / "a.npy", np.stack([q, p]))
    np.savez(tmp_path / "b.npz", target_probs=q, draft_probs=p)
    (tmp_path / "c.json").write_text(json.dumps([{"q": a.tolist(), "p": b.tolist()} for a, b in zip(q, p)]))
    for name in ("a.npy", "b.npz", "c.json"):
        lq, lp = _load_pairs(tmp_path / name)
        np.testing.assert_array_equal(lq, q)  # these rows sum to 1 exactly: renormalizing is exact
        np.testing.assert_array_equal(lp, p)
    sq, sp = _load_pairs("smollm2-135m_distilled")
    assert sq.shape == sp.shape and sq.shape[0] > 100


def test_one_row_comes_back_as_n_equals_one(tmp_path):
    np.save(tmp_path / "one.npy", np.stack([Q[0], P[0]]))
    (tmp_path / "one.json").write_text(
        json.dumps({"target_probs": Q[0].tolist(), "draft_probs": P[0].tolist()})
    )
    np.savez(tmp_path / "one.npz", q=Q[0], p=P[0])
    for name in ("one.npy", "one.json", "one.npz"):
        q, p = _load_pairs(tmp_path / name)
        assert q.shape == p.shape == (1, 3) and q.dtype == np.float64
        np.testing.assert_array_equal(q[0], Q[0])  # sums to 1 exactly: renormalizing is exact
        np.testing.assert_array_equal(p[0], P[0])


def test_rows_within_the_tolerance_are_renormalized(tmp_path):
    # float64 rows 1e-7 off (inside normalization_tolerance, 1e-6) come back on the simplex
    np.save(tmp_path / "off.npy", np.stack([Q * (1 + 1e-7), P]))
    q, _ = _load_pairs(tmp_path / "off.npy")
    np.testing.assert_allclose(q.sum(-1), 1.0, rtol=0, atol=4 * np.finfo(np.float64).eps)
    np.testing.assert_allclose(q, Q, rtol=2e-7, atol=0)  # the 1e-7 scale divided out


def test_a_shipped_recording_by_name_with_or_without_its_prefix_or_by_path():
    names = _shipped_pair_names()
    assert "distilled" in names
    path = next(f for f in shipped_dumps() if f.stem.endswith("_distilled"))
    by_name, by_prefix, by_path = (_load_pairs(s) for s in ("distilled", path.stem, path))
    for q, p in (by_prefix, by_path):
        np.testing.assert_array_equal(q, by_name[0])
        np.testing.assert_array_equal(p, by_name[1])
    assert by_name[0].flags.c_contiguous and by_name[1].flags.c_contiguous


def test_an_unknown_source_names_the_shipped_recordings(tmp_path):
    with pytest.raises(ValueError, match=r"^source: 'nowhere' is neither") as exc:
        _load_pairs("nowhere")
    assert "distilled" in str(exc.value)
    with pytest.raises(ValueError, match="is a folder") as exc:
        _load_pairs(tmp_path)
    assert str(tmp_path) in str(exc.value)


def test_a_json_list_names_its_bad_row(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([{"q": [1.0], "p": [1.0]}, {"target": [1.0]}]))
    with pytest.raises(ValueError, match=r"row 1: expected arrays 'target_probs' and 'draft_probs'"):
        _load_pairs(path)


def test_parse_probs_reads_a_comma_separated_row_and_names_its_argument():
    np.testing.assert_array_equal(_parse_probs(" 0.5, 0.3,0.2,", "--q"), [0.5, 0.3, 0.2])
    for bad, what in (("0.5,x", "expected comma-separated numbers"), (",", "empty probability row")):
        with pytest.raises(ValueError, match=rf"^--q: {what}"):
            _parse_probs(bad, "--q")

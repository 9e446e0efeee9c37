"""``cactus_theory.logits.tree_dump``: token trees recorded from a model pair, end to end on a tiny
random Llama, the shipped SmolLM2 trees, and the ``python -m`` command with the shipped recipe.
"""

from __future__ import annotations

import pytest

from cactus_theory.analysis.multidraft import expected_accepted_length


def _tiny_pair():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tiny_models import CharTokenizer, tiny_llama

    from cactus_theory.logits._models import LoadedModel

    def model(seed):
        return tiny_llama(40, seed=seed, max_positions=512, init=0.3)

    return LoadedModel(model(0), CharTokenizer(40), "tiny", "random"), model(1)


def test_tree_dump_end_to_end_on_a_tiny_model(tmp_path):
    from cactus_theory.logits import DumpFormatError, Prompt
    from cactus_theory.logits._runner import SamplingParams
    from cactus_theory.logits.tree_dump import TreeDumpConfig, dump_trees, load_tree_dump

    lm, drafter = _tiny_pair()
    cfg = TreeDumpConfig(widths=(2, 1), roots=(0, 2), sampling=SamplingParams(1.0, 1.0, 0), top_k_raw=4)
    prompts = [Prompt("u/0", "user", "a", "hello"), Prompt("u/1", "user", "b", "tree")]
    path = dump_trees(lm, drafter, prompts, tmp_path / "t.npz", cfg)
    dump = load_tree_dump(path)
    assert len(dump.trees) == 4 and dump.meta["widths_by_depth"] == [2, 1]
    for tree in dump.trees:
        assert tree.drafting == "top_k" and tree.num_nodes == 1 + 2 + 2
        assert expected_accepted_length("traversal", tree, "enumerate") >= 0
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "bad.npz").write_bytes(bytes(raw))
    with pytest.raises(DumpFormatError):
        load_tree_dump(tmp_path / "bad.npz")


def test_shipped_smollm2_trees():
    from cactus_theory.logits.tree_dump import _SHIPPED_TREE_PATH, load_tree_dump

    assert _SHIPPED_TREE_PATH.stat().st_size < 400_000  # small enough to ship
    dump = load_tree_dump()
    assert dump.meta["verifier"].lower().startswith("smollm2") and dump.meta["command"]
    assert len(dump.trees) >= 4 and max(int(t.depths.max()) for t in dump.trees) == 3
    for tree in dump.trees[:3]:
        for name in ("rrs-without-replacement", "optimal", "traversal"):
            dp_or_enum = expected_accepted_length(name, tree, "enumerate")
            if name != "traversal":
                assert expected_accepted_length(name, tree) == pytest.approx(dp_or_enum, abs=1e-12)
            assert 0.0 <= dp_or_enum <= 3.0


def test_tree_dump_command_end_to_end(tmp_path, monkeypatch):
    """``python -m cactus_theory.logits.tree_dump --shipped --out FILE`` with the shipped recipe
    (tiny random models stand in for SmolLM2); bad arguments exit 2."""
    from cactus_theory.logits import _drafters as drafters
    from cactus_theory.logits import _models as models
    from cactus_theory.logits import tree_dump

    lm, drafter = _tiny_pair()
    monkeypatch.setattr(models, "load_smollm2", lambda device="cpu": lm)
    monkeypatch.setattr(
        drafters, "make_drafter", lambda spec, verifier_lm, device="cpu": (drafter, "tiny-drafter")
    )
    out = tmp_path / "trees.npz"
    assert tree_dump._main(["--shipped", "--out", str(out), "--threads", "1"]) == 0
    dump = tree_dump.load_tree_dump(out)
    assert len(dump.trees) == 4 * 3 and dump.meta["command"] == tree_dump._SHIPPED_COMMAND
    assert max(int(t.depths.max()) for t in dump.trees) == 3
    with pytest.raises(SystemExit) as exc:
        tree_dump._main(["--shipped"])
    assert exc.value.code == 2

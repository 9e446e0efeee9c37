"""The dump tool on a tiny random Llama (no real model): resume after an interruption gives the
same file as an uninterrupted run, and every recorded row is a normalized distribution."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from cactus_theory.logits import dump as dump_mod  # noqa: E402
from cactus_theory.logits import load_dump  # noqa: E402
from cactus_theory.logits.dump import DumpConfig, dump_pairs  # noqa: E402
from cactus_theory.logits.models import LoadedModel  # noqa: E402
from cactus_theory.logits.prompts import Prompt  # noqa: E402
from cactus_theory.logits.runner import SamplingParams  # noqa: E402

V = 50


class StubTokenizer:
    """Characters -> ids mod V; no chat template; no EOS (so every row runs to new_tokens)."""

    chat_template = None
    pad_token_id = 0
    eos_token_id = None

    def __call__(self, text, add_special_tokens=True):
        class R:
            pass

        r = R()
        r.input_ids = [1 + (ord(c) % (V - 1)) for c in text]
        return r


def tiny_lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=V,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=128,
        initializer_range=0.3,
        tie_word_embeddings=False,
    )
    return LoadedModel(LlamaForCausalLM(cfg).eval(), StubTokenizer(), "tiny", "random")


PROMPTS = [Prompt(f"user/{i}", "user", "cat" + str(i % 2), f"prompt number {i}" + "x" * i) for i in range(5)]
CFG = DumpConfig(sampling=SamplingParams(0.6, 0.95, 20), new_tokens=6, batch_size=2, top_k_raw=8)


def test_resume_after_interruption_gives_identical_file(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    lm = tiny_lm()
    (ref,) = dump_pairs(lm, ["early-exit:1"], PROMPTS, tmp_path / "a", CFG, progress=False)

    real = dump_mod._run_batch
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt("simulated interruption")
        return real(*args, **kwargs)

    monkeypatch.setattr(dump_mod, "_run_batch", flaky)
    with pytest.raises(KeyboardInterrupt):
        dump_pairs(lm, ["early-exit:1"], PROMPTS, tmp_path / "b", CFG, progress=False)
    assert not list((tmp_path / "b").glob("*.npz"))  # nothing final written
    assert len(list((tmp_path / "b" / ".partial").rglob("batch_*.npz"))) == 1  # batch 0 kept
    (out,) = dump_pairs(lm, ["early-exit:1"], PROMPTS, tmp_path / "b", CFG, progress=False)
    assert calls["n"] == 2 + 2  # the resumed run computed only batches 1 and 2
    a, b = load_dump(ref), load_dump(out)
    assert not (tmp_path / "b" / ".partial").exists()
    for x, y in zip(a.pairs(), b.pairs()):
        assert np.array_equal(x, y)  # same seeds per batch: bit-identical
    assert np.array_equal(a.columns(), b.columns())


def test_rows_are_distributions_and_supports_fit(tmp_path):
    lm = tiny_lm()
    (path,) = dump_pairs(lm, ["early-exit:1"], PROMPTS, tmp_path, CFG, progress=False)
    d = load_dump(path)
    assert d.n_positions == 5 * 6 and d.n_trajectories == 5
    q, p, rq, rp = d.pairs()
    for arr in (q, p, rq, rp):
        np.testing.assert_allclose(arr.sum(-1), 1, atol=1e-9)  # the interface's promise
    assert (q > 0).sum(-1).max() <= 20 and (p > 0).sum(-1).max() <= 20  # top-k = 20
    # the tail holds what the top-8 columns miss: with V = 50 it is positive
    assert np.all(rq[d.columns() == -2] > 0)
    assert d.meta["drafter_spec"] == "early-exit:1" and d.meta["transforms"]["top_k"] == 20
    assert [t.prompt_id for t in d.trajectories()] == [p.id for p in PROMPTS]

"""The dump tool on a tiny random Llama (no real model): resume after an interruption gives the
same file as an uninterrupted run, and every recorded row is a normalized distribution."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tiny_models import CharTokenizer, tiny_llama  # noqa: E402

from cactus_theory.logits import (  # noqa: E402
    Prompt,
    load_dump,  # noqa: E402
)
from cactus_theory.logits import _dump as dump_mod  # noqa: E402
from cactus_theory.logits._models import LoadedModel  # noqa: E402
from cactus_theory.logits._runner import SamplingParams  # noqa: E402
from cactus_theory.logits.dump import DumpConfig, dump_pairs  # noqa: E402

V = 50


def tiny_lm():
    return LoadedModel(
        tiny_llama(V, seed=0, layers=2, max_positions=128, init=0.3), CharTokenizer(V), "tiny", "random"
    )


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


def test_the_progress_bar_counts_the_recorded_positions(tmp_path, capsys):
    # 5 prompts in batches of 2: the last batch holds one prompt; 6 tokens each, no EOS -> 30
    # positions (a bar over batch_size x new_tokens per batch would count 36)
    lm = tiny_lm()
    (path,) = dump_pairs(lm, ["early-exit:1"], PROMPTS, tmp_path, CFG, progress=True)
    assert load_dump(path).n_positions == 30
    err = capsys.readouterr().err
    assert "30/30" in err.split("\r")[-1] and "/36" not in err


def test_an_early_exit_at_the_verifier_depth_is_refused(tmp_path):
    from cactus_theory.logits._drafters import early_exit_logits, early_exit_model, make_drafter

    lm = tiny_lm()  # 2 layers: early-exit:2 would be the verifier itself
    for spec in ("early-exit:2", "early-exit:3"):
        with pytest.raises(ValueError, match=f"^drafter: '{spec}' keeps 2 of the verifier's 2 layers"):
            dump_pairs(lm, ["early-exit:1", spec], PROMPTS, tmp_path, CFG, progress=False)
        with pytest.raises(ValueError, match="^drafter: "):
            make_drafter(spec, lm)
    assert not list(tmp_path.rglob("*.npz"))  # refused before any batch ran
    with pytest.raises(ValueError, match="^drafter: 'early-exit:2'"):
        early_exit_model(lm.model, 2)
    ids = torch.tensor([[1, 2, 3]])
    hs = lm.model(ids, output_hidden_states=True).hidden_states
    with pytest.raises(ValueError, match="^drafter: 'early-exit:2'"):
        early_exit_logits(lm.model, hs, 2)
    early_exit_logits(lm.model, hs, 1)  # below the depth: fine


def test_a_model_cache_that_cannot_be_written_is_one_line_not_an_error(tmp_path, capsys):
    from cactus_theory.logits._models import _save_cache

    lm = tiny_lm()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    target = blocker / "models" / "tiny"  # beneath a file: no folder can be made there
    assert _save_cache(lm.model, lm.tokenizer, target) is False
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(target) in err[0] and "CACTUS_THEORY_CACHE" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_figures_input_draws_a_users_own_recordings(tmp_path, capsys):
    # the user's path: dump writes one file per drafter into a folder; figures --input draws it
    from cactus_theory.cli import main
    from cactus_theory.figures import _DUMP_FIGURES, load_dumps
    from cactus_theory.figures._layout import layout_problems

    lm = tiny_lm()
    cfg = DumpConfig(sampling=SamplingParams(0.6, 0.95, 20), new_tokens=6, batch_size=5, top_k_raw=8)
    dump_pairs(lm, ["early-exit:1"], PROMPTS, tmp_path / "dumps", cfg, progress=False)
    out = tmp_path / "figs"
    names = ["per_draft_vs_emitted", "acceptance_by_category", "al_by_m"]  # the quick ones
    argv = [
        "figures",
        "--input",
        str(tmp_path / "dumps"),
        "-o",
        str(out),
        "--format",
        "png",
        "--names",
        *names,
    ]
    assert main(argv) == 0
    written = ["per_draft_vs_emitted_tiny_early-exit-1.png", "acceptance_by_category.png", "al_by_m.png"]
    assert sorted(p.name for p in out.iterdir()) == sorted(written)
    assert capsys.readouterr().out.split() == [str(out / n) for n in written]
    dumps = load_dumps(tmp_path / "dumps")
    for name, make in _DUMP_FIGURES.items():  # every figure --input draws, laid out readably
        for _, fig in make(dumps):
            assert layout_problems(fig) == [], name
    assert main(["figures", "--input", str(tmp_path / "nothing-here"), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "input: " in err[0] and "nothing-here" in err[0]
    assert main(["figures", "--input", str(tmp_path / "dumps"), "--names", "gamma", "-o", str(out)]) == 2
    assert "names: 'gamma' is not drawn from a dump" in capsys.readouterr().err


def test_the_audits_frontier_is_above_every_rule_on_a_fresh_dump(tmp_path):
    """A freshly recorded dump (the tiny model, 30 positions) through ct.audit with every default
    rule at eps = 0.1: the printed and drawn line (the corpus-mean frontier at eps) is on or
    above every rule whose mean KL is within eps, and every row's gaps are >= 0. Slack 1e-9:
    the calibrations stop within float rounding of eps."""
    import math

    import cactus_theory as ct

    (path,) = dump_pairs(tiny_lm(), ["early-exit:1"], PROMPTS, tmp_path, CFG, progress=False)
    res = ct.audit(load_dump(path), eps=0.1, draft_lengths=(2,))
    within = [r for r in res.table if r.get("emitted_kl", math.inf) <= 0.1]
    assert len(within) >= 5 and res.frontier_at_eps is not None
    assert max(r["acceptance"] for r in within) <= res.frontier_at_eps + 1e-9
    for r in res.table:
        if "acceptance" in r:
            assert r["corpus_gap"] >= -1e-9 and r["frontier_gap"] >= -1e-9, r["rule"]

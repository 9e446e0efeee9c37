"""The main job and the command line: the report builds; bad input exits 2 with one line."""

import subprocess
import sys

import pytest

from cactus_theory.cli import main, write_atomic
from cactus_theory.report import build_report


def test_report_sections_build():
    text = build_report(["taylor", "families"], seed=0)
    assert "Taylor point (Corollary 5) vs exact root" in text
    assert "kl(h_alg||q)" in text


def test_report_unknown_section_is_valueerror():
    with pytest.raises(ValueError, match="sections"):
        build_report(["nope"])


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
    res = subprocess.run([sys.executable, "-m", "cactus_theory.cli", "report", "--sections", "taylor"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "Corollary 6 holds" in res.stdout

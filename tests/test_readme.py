"""README.md's result tables agree with a fresh report (scripts/update_readme.py generates them).

One test checks the blocks of the cheap sections (taylor, families, rules, frontier,
calibration, chain, claims, sequence, and the blocks computed from shipped data: about 40 s),
another the real-data blocks (the ``real`` section, about 45 s); ``scripts/update_readme.py
--check`` checks every block too.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHEAP = ("taylor", "families", "rules", "frontier", "calibration", "chain", "claims", "sequence")


def _script():
    spec = importlib.util.spec_from_file_location("update_readme", ROOT / "scripts" / "update_readme.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


upd = _script()


def _check(names):
    current = upd.readme_blocks((ROOT / "README.md").read_text())
    fresh = upd.generate(names)
    stale = [n for n in names if current.get(n) != fresh[n]]
    assert not stale, f"README.md disagrees with a fresh report in {stale}; run python scripts/update_readme.py"


def test_every_block_has_markers_in_readme():
    assert set(upd.readme_blocks((ROOT / "README.md").read_text())) == set(upd.BLOCKS)


def test_readme_tables_match_a_fresh_report():
    names = upd.blocks_for(CHEAP)
    assert len(names) >= 6
    _check(names)


def test_readme_real_data_tables_match_a_fresh_report():
    # the real section: about 45 s on the shared 2-core machine
    _check([n for n in upd.BLOCKS if n not in upd.blocks_for(CHEAP)])


def test_no_stale_hand_written_claims():
    text = (ROOT / "README.md").read_text()
    assert "10-30x" not in text  # the calibration table gives 4-16x (now generated)
    assert "bounds both" not in text  # the global-delta column beats Mentored on truncated rows


def test_replace_blocks_names_a_missing_marker():
    with pytest.raises(ValueError, match="nope"):
        upd.replace_blocks("no markers here", {"nope": "x"})
    one = "a\n" + upd.BEGIN.format(name="b") + "\nold\n" + upd.END.format(name="b") + "\nc"
    assert upd.readme_blocks(upd.replace_blocks(one, {"b": "new"})) == {"b": "new"}


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = text.find("\n## ", start + len(heading))
    return text[start:nxt if nxt >= 0 else None]


def test_every_python_example_of_the_readme_runs():
    # Each fenced python block runs top to bottom in a fresh namespace (the quickstart's printed
    # output is also checked against the README by test_readme_tables_match_a_fresh_report).
    text = (ROOT / "README.md").read_text()
    blocks = upd._PYTHON_BLOCK.findall(text)
    assert len(blocks) >= 3
    for code in blocks:
        upd.run_example(code)


def test_command_line_examples_of_the_readme_run(capsys):
    # The command-line section's examples, through cactus_theory.cli.main (exit status 0, output).
    import shlex

    from cactus_theory.cli import main

    section = _section((ROOT / "README.md").read_text(), "## The command line")
    bash = section.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line) for line in bash.splitlines() if line.startswith("cactus-theory ")]
    assert len(commands) >= 4
    for argv in commands:
        assert main(argv[1:]) == 0, argv
        assert capsys.readouterr().out.strip(), argv

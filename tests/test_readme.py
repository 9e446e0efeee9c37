"""README.md's and docs/*.md's result tables agree with a fresh report (scripts/update_readme.py
generates them), their examples run, and their relative links resolve.

One test checks the blocks of the cheap sections (taylor, families, rules, frontier,
calibration, chain, claims, sequence, and the blocks computed from shipped data), another the
real-data blocks (the ``real`` section); ``scripts/update_readme.py
--check`` checks every block too. Those two and the examples' run recompute whole reports:
they carry the marker ``full`` (``./dev test``'s stage 'full', beside the others).
"""

import importlib.util
import re
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
PAGES = upd.read_pages()


def _check(names):
    current = upd.current_blocks(PAGES)
    fresh = upd.generate(names, pages=PAGES)
    stale = [n for n in names if current.get(n) != fresh[n]]
    assert not stale, (
        f"the pages disagree with a fresh report in {stale}; run python scripts/update_readme.py"
    )


def test_the_pages_are_the_readme_and_docs():
    names = sorted(p.relative_to(ROOT).as_posix() for p in PAGES)
    assert "README.md" in names and len(names) >= 8, names
    assert all(n == "README.md" or re.fullmatch(r"docs/[\w-]+\.md", n) for n in names), names


def test_every_block_has_markers_in_exactly_one_page():
    where = upd.locate_blocks(PAGES)
    assert set(where) == set(upd.BLOCKS)
    assert set(upd.current_blocks(PAGES)) == set(upd.BLOCKS)
    # the speed narrative sits beside its generated tables, off the README
    assert where["benchmark"] == where["gpu-check"] == ROOT / "docs" / "speed.md"
    assert where["quickstart-output"] == ROOT / "README.md"


def test_locate_blocks_rejects_missing_duplicated_and_unpaired_markers():
    def block(name, body="x"):
        return f"{upd.BEGIN.format(name=name)}\n{body}\n{upd.END.format(name=name)}\n"

    every = "".join(block(n) for n in upd.BLOCKS)
    assert set(upd.locate_blocks({"a.md": every})) == set(upd.BLOCKS)
    name = next(iter(upd.BLOCKS))
    with pytest.raises(ValueError, match=f"{name!r}: no markers"):
        upd.locate_blocks({"a.md": every.replace(block(name), "")})
    with pytest.raises(ValueError, match=f"{name!r}: markers found 2 times"):
        upd.locate_blocks({"a.md": every, "b.md": block(name)})
    with pytest.raises(ValueError, match=f"{name!r}: markers found 2 times"):
        upd.locate_blocks({"a.md": every + block(name)})
    with pytest.raises(ValueError, match="do not pair up"):
        upd.locate_blocks({"a.md": every + upd.BEGIN.format(name=name) + "\n"})
    with pytest.raises(ValueError, match="unknown block 'nope'"):
        upd.locate_blocks({"a.md": every + block("nope")})


def test_check_and_rewrite_cover_every_page(tmp_path, capsys):
    # A checkout whose blocks are all current except one in a docs page: --check names it and
    # exits 1; a rewrite fixes only that page and --check then passes. Blocks of shipped data only.
    names = [n for n, b in upd.BLOCKS.items() if not b.needs_report]
    assert names
    for path, text in PAGES.items():
        dest = tmp_path / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    where = upd.locate_blocks(PAGES)
    victim = next(n for n in names if where[n] != ROOT / "README.md")
    page = tmp_path / where[victim].relative_to(ROOT)
    page.write_text(upd.replace_blocks(page.read_text(), {victim: "stale"}))
    assert upd.main(["--check", "--root", str(tmp_path), "--sections"]) == 1
    assert victim in capsys.readouterr().err
    untouched = {p: p.read_text() for p in tmp_path.rglob("*.md") if p != page}
    assert upd.main(["--root", str(tmp_path), "--sections"]) == 0
    assert upd.main(["--check", "--root", str(tmp_path), "--sections"]) == 0
    assert {p: p.read_text() for p in untouched} == untouched
    assert page.read_text() == where[victim].read_text()


def test_a_page_with_a_duplicated_block_is_a_command_line_error(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    for path, text in PAGES.items():
        (tmp_path / path.relative_to(ROOT)).write_text(text)
    one = upd.BEGIN.format(name="decode") + "\nx\n" + upd.END.format(name="decode") + "\n"
    (tmp_path / "docs" / "zz-copy.md").write_text(one)
    assert upd.main(["--check", "--root", str(tmp_path), "--sections"]) == 2
    assert "'decode'" in capsys.readouterr().err


@pytest.mark.full  # a whole report (or every example) recomputed: the stage 'full'
def test_readme_tables_match_a_fresh_report():
    names = upd.blocks_for(CHEAP)
    assert len(names) >= 6
    _check(names)


@pytest.mark.full  # a whole report (or every example) recomputed: the stage 'full'
def test_readme_real_data_tables_match_a_fresh_report():
    # the real section (the costliest to recompute)
    _check([n for n in upd.BLOCKS if n not in upd.blocks_for(CHEAP)])


def test_no_stale_hand_written_claims():
    for path, text in PAGES.items():
        assert "10-30x" not in text, path  # the calibration table gives 4-16x (now generated)
        assert "bounds both" not in text, path  # the global-delta column beats Mentored on truncated rows


#: A generated block: scripts/update_readme.py's, or a script's own ("BEGIN name (scripts/x.py)").
_GENERATED = re.compile(
    r"<!-- BEGIN generated:([\w.-]+) \(scripts/update_readme\.py\) -->.*?"
    r"<!-- END generated:\1 -->"
    r"|<!-- BEGIN ([\w.-]+) \(scripts/\w+\.py\) -->.*?<!-- END \2 -->",
    re.S,
)
#: A duration or a speed ratio: "15.8 ms", "2-3 s", "10 CPU minutes" is caught by "minutes", "1.7x".
_TIMING = re.compile(
    r"(?<![:{\w.])\d[\d.,]*(?:-\d[\d.,]*)?\s*(?:ms|µs|us|ns|s|seconds?|min|minutes?|hours?|x)\b", re.I
)


def test_timings_appear_only_inside_generated_blocks():
    found = {}
    for path, text in PAGES.items():
        hits = _TIMING.findall(_GENERATED.sub("", text))
        if hits:
            found[path.name] = hits
    assert not found, found
    # a script's own generated block is stripped, and only up to its own END marker
    block = "<!-- BEGIN b (scripts/x.py) -->\n1.7x\n<!-- END b -->\ntook 2 s"
    assert _TIMING.findall(_GENERATED.sub("", block)) == ["2 s"]
    # the pattern does catch the prose timings it is meant for
    assert _TIMING.findall("took 15.8 ms, 2-3 s, 8.1 minutes, a 1.7x speedup") == [
        "15.8 ms",
        "2-3 s",
        "8.1 minutes",
        "1.7x",
    ]


def test_pages_speak_of_the_project_only():
    for path, text in PAGES.items():
        for phrase in ("this machine", "session", "shared 2-core", "was available"):
            assert phrase not in text.lower(), (path, phrase)


def test_replace_blocks_names_a_missing_marker():
    with pytest.raises(ValueError, match="nope"):
        upd.replace_blocks("no markers here", {"nope": "x"})
    one = "a\n" + upd.BEGIN.format(name="b") + "\nold\n" + upd.END.format(name="b") + "\nc"
    assert upd.readme_blocks(upd.replace_blocks(one, {"b": "new"})) == {"b": "new"}


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    nxt = text.find("\n## ", start + len(heading))
    return text[start : nxt if nxt >= 0 else None]


@pytest.mark.full  # a whole report (or every example) recomputed: the stage 'full'
def test_every_python_example_of_the_pages_runs():
    # Each fenced python block of every page runs top to bottom in a fresh namespace (the
    # quickstart's printed output is also checked against the README by
    # test_readme_tables_match_a_fresh_report).
    blocks = {path: upd._PYTHON_BLOCK.findall(text) for path, text in PAGES.items()}
    assert len(blocks[ROOT / "README.md"]) >= 1
    assert sum(map(len, blocks.values())) >= 3
    for codes in blocks.values():
        for code in codes:
            if not upd.needs_vllm(code):  # those run in the vLLM environment
                upd.run_example(code)  # (tests/testing/test_vllm_testing_module.py)


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


def test_the_readme_command_table_lists_every_subcommand():
    # the library's subcommands and those the checkout's lab declares as entry points (benchmark)
    from cactus_theory.cli import _subcommands

    section = _section((ROOT / "README.md").read_text(), "## The command line")
    listed = set()
    for row in section.splitlines():
        if row.startswith("| `"):
            listed |= set(re.findall(r"`([\w-]+)`", row.split("|")[1]))
    assert listed == set(_subcommands())


_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _relative_links(text: str) -> list:
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # links inside code blocks are code
    return [t for t in _LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


def test_every_relative_link_of_the_pages_exists():
    missing = []
    for path, text in PAGES.items():
        links = _relative_links(text)
        for target in links:
            resolved = (path.parent / target.split("#")[0]).resolve()
            if resolved.is_relative_to(ROOT / "docs" / "notebooks"):
                # docs/notebooks is the build's mirror of notebooks/ (docs/conf.py, ignored by git):
                # a fresh clone has only the source
                resolved = ROOT / "notebooks" / resolved.relative_to(ROOT / "docs" / "notebooks")
            if not resolved.exists():
                missing.append(f"{path.relative_to(ROOT)} -> {target}")
    assert not missing, missing
    # the parser finds relative links and images, not web addresses or anchors
    assert _relative_links("[a](x.md) ![b](../f.png#p) [c](https://e.org) [d](#top) [e](mailto:a@b)") == [
        "x.md",
        "../f.png#p",
    ]


def test_the_readme_links_every_docs_page():
    links = {Path(t.split("#")[0]) for t in _relative_links((ROOT / "README.md").read_text())}
    pages = {p.relative_to(ROOT) for p in PAGES if p.parent.name == "docs"}
    assert pages and pages <= links, pages - links

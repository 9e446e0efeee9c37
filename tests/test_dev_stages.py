"""``./dev test``'s stages: each marked stage collects only its own files, so a test given a stage's
marker in another file would run in no stage (the main stage deselects every stage marker).
This test reads the stage lines of ``dev`` and the test sources and checks that they agree."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STAGE_MARKERS = ("wheel", "notebooks", "site", "jupyterlab", "engines")


def _stage_lines() -> dict:
    """Stage name -> its pytest command line in ``dev`` (stages run in turn or beside them)."""
    lines = {}
    for line in (ROOT / "dev").read_text().splitlines():
        m = re.match(r"\s*stage(?:_beside)? (\w+) (.*)$", line)
        if m:
            lines[m.group(1)] = m.group(2)
    return lines


def _files_marked(marker: str, sources: dict) -> set:
    pattern = re.compile(rf"\bmark\.{marker}\b")
    return {name for name, text in sources.items() if pattern.search(text)}


def test_every_marked_test_lies_in_its_stage_files():
    stages = _stage_lines()
    here = Path(__file__).name  # its own samples below are strings, not marks
    sources = {
        p.relative_to(ROOT).as_posix(): p.read_text()
        for p in sorted((ROOT / "tests").rglob("*.py"))
        if p.name != here
    }
    main = stages["main"]
    for marker in STAGE_MARKERS:
        line = stages[marker]
        assert f"-m {marker} " in line, line
        named = set(re.findall(r"tests/[\w/]+\.py", line))
        marked = _files_marked(marker, sources)
        assert marked, f"no test file uses the {marker!r} marker"
        assert marked == named, (marker, sorted(marked), sorted(named))
        assert f"not {marker}" in main, main  # ... and the main stage leaves them out


def test_the_scan_finds_markers_in_every_form():
    sources = {
        "a.py": "pytestmark = [pytest.mark.site]",
        "b.py": "@pytest.mark.site\ndef test(): pass",
        "c.py": "pytest.param(1, marks=pytest.mark.site)",
        "d.py": "pytest.mark.sites  # another name",
    }
    assert _files_marked("site", sources) == {"a.py", "b.py", "c.py"}


def test_the_model_cache_set_up_checks_the_path_the_package_writes():
    """``./dev setup`` skips ``models --prepare`` when the model's copy exists: the folder it looks
    for is the one :func:`cactus_theory.logits._models.load_smollm2` writes."""
    from cactus_theory.logits._models import SMOLLM2_NAME

    dev = (ROOT / "dev").read_text()
    (checked,) = re.findall(
        r'\[ -f "\$\{CACTUS_THEORY_CACHE:-\.cache\}/models/([^/"]+)/config\.json" \]', dev
    )
    assert checked == SMOLLM2_NAME
    assert "models --prepare" in dev

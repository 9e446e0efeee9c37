"""``./dev test``'s stages: each marked stage collects only its own files, so a test given a stage's
marker in another file would run in no stage (the main stage deselects every stage marker).
This test reads the stage lines of ``dev`` and the test sources and checks that they agree."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAGE_MARKERS = ("wheel", "notebooks", "site", "jupyterlab", "engines", "full", "compile")


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


def _test_sources() -> dict:
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in sorted((ROOT / "tests").rglob("*.py"))}


def test_every_environment_gate_is_opened_by_a_stage():
    """A test skipped unless ``CACTUS_THEORY_<X>=1`` runs in the stage of ``dev`` that sets it,
    and the gate's skip reason names that stage."""
    stages = _stage_lines()
    gate = re.compile(r'environ\.get\("(CACTUS_THEORY_\w+)"\)\s*[!=]=\s*"1"')
    gates = {(name, var) for name, text in _test_sources().items() for var in gate.findall(text)}
    assert {var for _, var in gates} >= {"CACTUS_THEORY_COMPILE_ROOT"}
    dev, ci = (ROOT / "dev").read_text(), (ROOT / ".ci" / "run").read_text()
    for name, var in sorted(gates):
        # a stage line that sets the variable, or a stage that dev runs where it is set and .ci/run sets it
        opening = [
            s
            for s, line in stages.items()
            if name in line
            and (
                f"{var}=1 " in line
                or (f'"${{{var}:-0}}" = 1 ]; then\n          stage_beside {s} ' in dev and f"{var}=1 " in ci)
            )
        ]
        assert opening, f"{name}: no stage of ./dev test sets {var}=1 and collects it"
        text = _test_sources()[name]
        assert any(f"stage '{s}'" in text for s in opening), f"{name}: the gate's reason names no stage"


def test_the_cuda_test_is_the_gpu_checks_sync_step():
    """The one test that needs CUDA (marked ``gpu``; skipped on CPU machines) says that
    ``scripts/gpu_check.py`` runs it, and the script's sync step does run the same check: every
    registered rule's ``forward`` without seeded rows, at the test's shape, under
    ``torch.cuda.set_sync_debug_mode("error")``."""
    import importlib.util
    import inspect

    from test_samplers import CUDA_SYNC_RULES

    from cactus_theory.rules import get_rule

    marked = [
        n for n, text in _test_sources().items() if "mark.gpu" in text and n != "tests/test_dev_stages.py"
    ]
    assert marked == ["tests/samplers/test_samplers.py"], marked
    assert 'reason="needs CUDA; scripts/gpu_check.py' in _test_sources()[marked[0]]
    spec = importlib.util.spec_from_file_location("gpu_check_script", ROOT / "scripts" / "gpu_check.py")
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    # its default: every registered rule (names without aliases; cactus-exact-kl is cactus-exact)
    assert {get_rule(n).name for n in CUDA_SYNC_RULES} <= set(gpu_check.RULES)
    assert "sync_check" in gpu_check.main.__code__.co_names  # ... run by the script's main
    assert inspect.signature(gpu_check.sync_check).parameters["shape"].default == (8, 4, 1000)
    assert 'torch.cuda.set_sync_debug_mode("error")' in inspect.getsource(gpu_check.sync_free)


def test_ci_fails_a_browser_stage_that_cannot_run(monkeypatch):
    """``.ci/run`` sets ``CACTUS_THEORY_REQUIRE_BROWSER=1``: the browser and notebook stages'
    missing Chromium, Playwright, MathJax or notebook package is then a failure, not a skip
    (tests/chromium.py); by hand, without the variable, a skip with the reason."""
    import chromium

    assert re.search(
        r"\nCACTUS_THEORY_REQUIRE_BROWSER=1 [^\n]*\./dev test\n", (ROOT / ".ci" / "run").read_text()
    )
    assert chromium.REQUIRE_ENV == "CACTUS_THEORY_REQUIRE_BROWSER"
    monkeypatch.delenv(chromium.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no browser here"):
        chromium.skip_or_fail("no browser here")
    with pytest.raises(pytest.skip.Exception, match="not_a_module_anywhere"):
        chromium.require_module("not_a_module_anywhere")
    monkeypatch.setenv(chromium.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="no browser here"):
        chromium.skip_or_fail("no browser here")
    with pytest.raises(pytest.fail.Exception, match="not_a_module_anywhere"):
        chromium.require_module("not_a_module_anywhere")
    # the stages' own skips go through it (no bare skip left in their files)
    sources = _test_sources()
    for name in ("tests/test_docs_site.py", "tests/test_notebooks_browser.py"):
        assert "skip_or_fail(" in sources[name] and "pytest.skip(" not in sources[name], name
        assert "importorskip(" not in sources[name], name
    notebooks = sources["tests/test_notebooks.py"]
    stage_test = notebooks[notebooks.index("def test_notebook_runs_in_a_kernel") :]
    assert "require_module(" in stage_test and "importorskip(" not in stage_test.split("\ndef ")[0]


def test_property_tests_take_their_counts_from_the_profile():
    """No property test fixes its own example count: each takes the loaded Hypothesis profile's
    (tests/conftest.py: ``ci``, ``thorough``) or a share of it with its reason
    (``profile_examples(share, why)``), so ``HYPOTHESIS_PROFILE=thorough`` changes every one."""
    from conftest import profile_examples

    fixed = [
        f"{name}:{i + 1}"
        for name, text in _test_sources().items()
        if name != "tests/conftest.py"
        for i, line in enumerate(text.splitlines())
        if re.search(r"max_examples\s*=\s*\d", line)
    ]
    assert not fixed, fixed
    shares = re.findall(
        r'profile_examples\(([^,]+), "([^"]*)"\)',
        "".join(t for n, t in _test_sources().items() if n != "tests/test_dev_stages.py"),
    )
    assert shares and all(why.strip() for _, why in shares)
    with pytest.raises(ValueError, match="share"):
        profile_examples(0.5, "")
    from hypothesis import settings

    assert profile_examples(1 / 30, "why") == max(2, round(settings.default.max_examples / 30))

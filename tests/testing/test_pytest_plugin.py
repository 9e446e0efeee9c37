"""The pytest plugin (``testing/pytest_plugin.py``): its entry point, the docs' defaults and
failure report, and its fixtures and marker in another project. The runs at the
default (full-power) size carry the marker ``full``: ``./dev test`` runs them in their own stage.
"""

from __future__ import annotations

import importlib.metadata
import inspect
import pathlib
import re
import subprocess
import sys

import pytest
import tomllib

from cactus_theory.testing import (
    check_sampler_law,
    reference_sampler,
)

ROOT = pathlib.Path(__file__).resolve().parents[2]


PLUGIN_TEST = """
import pytest
import cactus_theory as ct
from cactus_theory.testing import reference_sampler


@pytest.mark.sampler_law("cactus-taylor", delta=0.05, num_samples=3000)
def test_toolkit_cactus(sampler_law):
    res = sampler_law(ct.make_sampler("cactus-taylor", delta=0.05))
    assert res.passed and res.num_samples == 3000 and res.seed == 7


@pytest.mark.sampler_law(rule="sps")
def test_broken_recovery(sampler_law):
    sampler_law(reference_sampler("sps", defect="recovery-from-q"))


def test_exact_law_fixture(exact_law):
    assert exact_law("sps", [[0.5, 0.5], [1.0, 0.0]], [[1.0, 0.0]]).acceptance.tolist() == [0.5]
"""


def _plugin_flags():
    """Load the plugin by its entry point when installed, else by its module name."""
    eps = importlib.metadata.entry_points(group="pytest11")
    if any(ep.name == "cactus_theory" for ep in eps):
        return []
    return ["-p", "no:cactus_theory", "-p", "cactus_theory.testing.pytest_plugin"]


def test_the_entry_point_is_declared():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert meta["project"]["entry-points"]["pytest11"] == {
        "cactus_theory": "cactus_theory.testing.pytest_plugin"
    }
    for ep in importlib.metadata.entry_points(group="pytest11"):
        if ep.name == "cactus_theory":
            assert ep.value == "cactus_theory.testing.pytest_plugin"


DOCS = ROOT / "docs" / "testing.md"


def _docs_block(label):
    """The code block after ``<!-- example: label -->`` in docs/testing.md."""
    text = DOCS.read_text()
    after = text.split(f"<!-- example: {label} -->", 1)[1]
    return after.split("```", 2)[1].split("\n", 1)[1]


@pytest.mark.full
def test_the_docs_state_the_defaults_and_a_real_failure_report():
    text = DOCS.read_text()
    defaults = inspect.signature(check_sampler_law).parameters
    for name in ("alpha", "power", "tv_goal"):
        stated = re.search(rf"default `{name}=([0-9.e-]+)`", text).group(1)
        assert float(stated) == defaults[name].default, name
    assert "cells of expected count < 5 pooled" in text
    assert inspect.signature(check_sampler_law).parameters["min_expected"].default == 5.0
    shown = [line for line in _docs_block("failure").splitlines() if line.strip()]
    report = check_sampler_law(reference_sampler("sps", defect="recovery-from-q"), "sps").report()
    lines = report.splitlines()
    assert all(line in lines for line in shown), (shown, report)
    assert lines.index(shown[0]) < lines.index(shown[-1])


@pytest.mark.full
def test_the_plugin_in_another_project(tmp_path):
    """The plugin's fixtures and marker in a temporary project, with the docs page's example."""
    (tmp_path / "test_other.py").write_text(PLUGIN_TEST)
    (tmp_path / "test_docs_example.py").write_text(_docs_block("plugin"))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            *_plugin_flags(),
            "--sampler-law-seed",
            "7",
            "--strict-markers",
            "--junitxml",
            str(tmp_path / "junit.xml"),
            "test_other.py",
            "test_docs_example.py",
        ],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "5 passed" in out and "1 failed" in out, out
    assert "test_broken_recovery" in out and "law (chi-square)" in out, out
    # pytest shows the report (diagnosis first), not the toolkit's source
    assert "diagnosis:" in out and "the recovery distribution" in out, out
    assert "result = check_sampler_law(" not in out and "result = assert_sampler_law(" not in out, out
    junit = (tmp_path / "junit.xml").read_text()
    assert 'name="sampler_law"' in junit and "passed (" in junit

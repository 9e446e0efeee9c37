"""The built wheel plus ``[test]`` in a fresh environment: another project's test file checks
vLLM's rejection sampler and the planted defects with ``assert_sampler_law``.

Runs in the vLLM stage of ``./dev test`` (``.venv-vllm``) and is skipped where vLLM is not
installed. The environment: installing vLLM afresh costs minutes and 3.4 GB, so the new virtual
environment is made from .venv-vllm's interpreter and reads .venv-vllm's site-packages through
a plain path entry (a ``.pth`` line). A path entry does not run that folder's own ``.pth``
files, so the checkout's editable install of cactus_theory is not active; the wheel is then
installed into the new environment (``--force-reinstall --no-deps``: pip sees the editable
copy's metadata and would otherwise call it satisfied, and it never uninstalls outside the new
environment), and ``pip install --no-index 'WHEEL[test]'`` resolves the ``[test]`` extra
(torch, pytest, hypothesis, ...) against what is there. The temporary project's test file runs
with that interpreter from its own folder and asserts that cactus_theory comes from the wheel.

False failures: every check_sampler_law call runs at its default alpha = 1e-6 (family-wise per
call); the two calls expected to pass fail a correct sampler with probability below 2e-6 in
all (seeded: a run is reproducible). The defects are asserted caught at seed 0 and the default
sample size; their detection rates over seeds are measured by scripts/sampler_law_power.py.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import sysconfig
import textwrap

import pytest
import wheel_helpers as wh

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed here (./dev test runs this file in .venv-vllm)",
)

PROJECT_TEST = """
import inspect
from pathlib import Path

import pytest

import cactus_theory
from cactus_theory.rules import get_rule
from cactus_theory.testing import DEFECTS, assert_sampler_law, check_sampler_law, reference_sampler, v1_adapter

WHEEL_ENV = {venv!r}


@pytest.fixture(scope="module")
def rejection_sample():
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()
    import vllm.v1.sample.rejection_sampler as r1

    return inspect.unwrap(r1.rejection_sample)


def test_installed_from_the_wheel():
    assert Path(cactus_theory.__file__).resolve().is_relative_to(Path(WHEEL_ENV).resolve())


def test_vllm_passes_sps(rejection_sample):
    assert assert_sampler_law(v1_adapter(rejection_sample), "sps", seed=0).passed


def test_the_toolkit_sampler_passes_cactus():
    import cactus_theory as ct

    rule = get_rule("cactus-taylor", delta=0.05)
    assert assert_sampler_law(ct.make_sampler(rule), rule, seed=0).passed


@pytest.mark.parametrize("defect", DEFECTS)
def test_each_defect_is_caught(defect):
    if defect == "cactus-no-rescale":
        rule, sampler = get_rule("cactus-taylor", delta=0.05), reference_sampler("cactus-taylor", delta=0.05, defect=defect)
    else:
        rule, sampler = "sps", reference_sampler("sps", defect=defect)
    res = check_sampler_law(sampler, rule, seed=0, invariants=False)
    assert not res.passed
    with pytest.raises(AssertionError):
        assert_sampler_law(sampler, rule, seed=0, invariants=False)
"""


def test_the_wheel_with_test_extra_checks_vllm_and_the_defects_in_another_project(tmp_path):
    dist = wh.build(tmp_path, sdist=False)
    (wheel,) = dist.glob("*.whl")
    env = tmp_path / "venv"
    python = wh.venv(env)
    base = sysconfig.get_paths()["purelib"]
    (wh.site_packages(python) / "vllm_base.pth").write_text(base + "\n")

    def pip(*args):
        return subprocess.run(
            [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-index", *args],
            check=True,
            capture_output=True,
            text=True,
        )

    pip("--force-reinstall", "--no-deps", str(wheel))
    pip(f"{wheel}[test]")
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_my_sampler.py").write_text(textwrap.dedent(PROJECT_TEST.format(venv=str(env))))
    res = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0", "test_my_sampler.py"],
        capture_output=True,
        text=True,
        cwd=project,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert "7 passed" in res.stdout, res.stdout[-2000:]

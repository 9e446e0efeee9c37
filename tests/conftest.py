"""Shared test configuration: hypothesis profiles and the tolerance helper.

Profiles: "ci" (default under ./dev test: derandomized, no database, modest example counts so
the main stage stays under 5 minutes on 2 cores) and "thorough" (random, many more examples).
Choose one with HYPOTHESIS_PROFILE. Every property test takes its count from the profile, or a
stated share of it (:func:`profile_examples`).
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from cactus_theory.conventions import tolerance

# The tests mirror the package (tests/<subpackage>/test_<module>.py, names unique across folders);
# the few that share helpers import each other by module name, so every folder is importable
# whichever file pytest collects first.
for _folder in sorted(
    p for p in Path(__file__).parent.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
):
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def profile_examples(share: float, why: str) -> int:
    """``max_examples`` for a property test that runs a stated share of the loaded profile's count.

    Property tests take their example count from the profile; one whose examples cost more than
    most (a parametrization over every rule, a solver per example) or less (a scalar identity)
    states ``why`` and a ``share``: ``max(2, round(share * max_examples))`` of the profile, so
    ``thorough`` scales it too (``ci``: 60 examples, ``thorough``: 1000).
    """
    if share <= 0 or not why.strip():
        raise ValueError(f"share: a positive share with its reason (why), got {share!r}, {why!r}")
    return max(2, round(share * settings.default.max_examples))


# The model tests, notebooks and subprocesses find this checkout's prepared model copy in its
# ignored .cache/ (./dev setup writes it there; ./dev exports the same variable).
os.environ.setdefault(
    "CACTUS_THEORY_CACHE", os.path.join(os.path.dirname(os.path.dirname(__file__)), ".cache")
)

try:  # one intra-op thread per test worker: xdist already runs one worker per core, and
    import torch  # thread-pool contention on 2 shared cores made torch tests ~8x slower

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover - torch is a dependency; stay importable without it
    pass


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config, items):
    """The tests that need SmolLM2 (marked ``model``) share one xdist worker (``./dev test``
    runs ``--dist loadgroup``): each process loads the model once (about as long as a test that
    uses it), so in one worker it is loaded once, not in every worker."""
    for item in items:
        if item.get_closest_marker("model") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("smollm2"))


def assert_close(actual, expected, *, rtol=None, atol=0.0, err_msg=""):
    """``np.testing.assert_allclose`` with the package's dtype-aware default rtol.

    ``rtol`` defaults to :func:`cactus_theory.conventions.tolerance` of ``actual``'s dtype
    (4 sqrt(eps)); torch tensors are compared in their own precision.
    """
    dtype = getattr(actual, "dtype", None)
    if hasattr(actual, "detach"):
        actual = actual.detach().cpu().float().numpy()
    actual = np.asarray(actual)
    if rtol is None:
        rtol = tolerance(dtype if dtype is not None else actual.dtype)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=err_msg)


@pytest.fixture(scope="module")
def one_torch_thread():
    """One intra-op torch thread for a module, restored after it: on 2 shared cores torch's
    thread pool contends (10x slower), and a test that times with 2 threads must not leak."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def smollm2():
    """The offline SmolLM2-135M-Instruct (``cactus_theory.logits.load_smollm2``) with two torch
    threads, or a skip naming why it cannot load (``./dev setup`` prepares it)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from cactus_theory.logits import ModelNotAvailable, load_smollm2

    torch.set_num_threads(2)
    try:
        return load_smollm2()
    except ModelNotAvailable as exc:  # pragma: no cover - ./dev setup installs it
        pytest.skip(str(exc))

r"""pytest plugin ``cactus_theory`` (entry point ``pytest11``): sampler-law fixtures and a marker.

Installed with the package, it is loaded by every pytest run of the environment (or name it
with ``-p cactus_theory.testing.pytest_plugin``). It imports nothing heavy until a fixture is
used.

Fixtures
--------
``sampler_law``
    ``sampler_law(sampler, rule=None, target_probs=None, draft_probs=None, **kwargs)`` runs
    :func:`cactus_theory.testing.assert_sampler_law` with the session's seed
    (``--sampler-law-seed``, default 0), and ``num_samples`` / ``alpha`` from the command line
    (``--sampler-law-samples``, ``--sampler-law-alpha``) or the test's marker; it returns the
    :class:`~cactus_theory.testing.SamplerLawResult` and records it in the test's
    ``user_properties`` (so in JUnit XML) as ``sampler_law``.
``exact_law``
    :func:`cactus_theory.testing.exact_law` (the exact per-position law of a rule).

Marker
------
``@pytest.mark.sampler_law(rule, **knobs_and_options)``
    The rule for ``sampler_law`` (a registry name, configured with the rule's knobs, e.g.
    ``delta=0.05``) and the check's options (``num_samples``, ``alpha``, ``min_expected``,
    ``invariants``, ``target_probs``, ``draft_probs``, ``seed``, ``bonus``, ``mixed``,
    ``power``, ``tv_goal``, ``strict``).

Example
-------
.. code-block:: python

    import pytest
    from my_engine import MyRejectionSampler

    @pytest.mark.sampler_law("cactus-taylor", delta=0.05)
    def test_my_sampler_emits_cactus(sampler_law):
        sampler_law(MyRejectionSampler())
"""

from __future__ import annotations

import pytest

#: pytest finds the hooks and fixtures below by name; nothing here is imported by users.
__all__ = []

_MARKER = "sampler_law"
#: Marker keywords that configure the check (the others are the rule's knobs).
_CHECK_OPTIONS = (
    "num_samples",
    "alpha",
    "min_expected",
    "invariants",
    "target_probs",
    "draft_probs",
    "seed",
    "device",
    "raw_target_probs",
    "raw_draft_probs",
    "bonus",
    "mixed",
    "case_names",
    "power",
    "tv_goal",
    "strict",
)


def pytest_addoption(parser):
    group = parser.getgroup("cactus_theory", "sampler-law checks (cactus_theory.testing)")
    group.addoption(
        "--sampler-law-seed",
        type=int,
        default=None,
        metavar="SEED",
        help="seed of every sampler_law check (default 0)",
    )
    group.addoption(
        "--sampler-law-samples",
        type=int,
        default=None,
        metavar="N",
        help="draws per case of every sampler_law check (default: the marker's, "
        "else check_sampler_law's default)",
    )
    group.addoption(
        "--sampler-law-alpha",
        type=float,
        default=None,
        metavar="ALPHA",
        help="false-failure probability of each sampler_law check (default: the "
        "marker's, else check_sampler_law's default)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(rule, **knobs): the rule (with its knobs) and options "
        "(num_samples, alpha, min_expected, invariants, target_probs, draft_probs, seed) "
        "of the sampler_law fixture",
    )


def _marker_settings(request):
    marker = request.node.get_closest_marker(_MARKER)
    if marker is None:
        return None, {}, {}
    args = list(marker.args)
    kwargs = dict(marker.kwargs)
    rule = kwargs.pop("rule", args.pop(0) if args else None)
    if args:
        raise ValueError(f"{_MARKER}: takes one positional argument (the rule), got {marker.args}")
    options = {k: kwargs.pop(k) for k in _CHECK_OPTIONS if k in kwargs}
    return rule, kwargs, options


@pytest.fixture
def exact_law():
    """:func:`cactus_theory.testing.exact_law`: the exact per-position law of a rule."""
    from cactus_theory.testing import exact_law as law

    return law


@pytest.fixture
def sampler_law(request):
    """Check a sampler's output law against a rule's exact law (AssertionError on failure)."""
    from cactus_theory.rules import get_rule
    from cactus_theory.testing import assert_sampler_law
    from cactus_theory.testing._block import resolve_rule  # a registry rule, or "block"

    marker_rule, knobs, options = _marker_settings(request)
    config = request.config
    seed = config.getoption("--sampler-law-seed")
    samples = config.getoption("--sampler-law-samples")
    alpha = config.getoption("--sampler-law-alpha")

    def check(sampler, rule=None, target_probs=None, draft_probs=None, **kwargs):
        __tracebackhide__ = True  # pytest: show the report, not the plugin's source
        name = rule if rule is not None else marker_rule
        if name is None:
            raise ValueError(
                f"rule: give sampler_law a rule, or mark the test with @pytest.mark.{_MARKER}(rule, ...)"
            )
        configured = get_rule(name, **knobs) if (isinstance(name, str) and knobs) else resolve_rule(name)
        merged = dict(options)
        if target_probs is not None or draft_probs is not None:
            merged.update(target_probs=target_probs, draft_probs=draft_probs)
        for key, value in (("seed", seed), ("num_samples", samples), ("alpha", alpha)):
            if value is not None:
                merged[key] = value
        merged.setdefault("seed", 0)
        merged.update(kwargs)
        q, p = merged.pop("target_probs", None), merged.pop("draft_probs", None)
        try:
            result = assert_sampler_law(sampler, configured, q, p, **merged)
        except AssertionError as err:
            request.node.user_properties.append((_MARKER, str(err)))
            raise
        request.node.user_properties.append((_MARKER, result.report()))
        return result

    return check

"""Rule configurations shared by the sampler and simulator test batteries."""

import math

from cactus_theory.rules import RULES


def _mid_knobs(spec):
    """Halfway between the defaults and the rule's SpS knobs (finite numeric knobs only), so
    rules whose defaults accept everything on small vocabularies are also tested partway."""
    if not spec.sps_knobs:
        return None
    mid = {}
    for k, v in spec.sps_knobs.items():
        d = spec.defaults[k]
        if isinstance(v, (int, float)) and isinstance(d, (int, float)) and math.isfinite(v):
            mid[k] = 0.5 * (v + d)
    return mid or None


#: (test id, rule name, knobs): every rule at its defaults, plus halfway to SpS where defined.
CONFIGS = [(n, n, {}) for n in RULES.all_names()] + [
    (f"{n}[{','.join(f'{k}={v:g}' for k, v in _mid_knobs(s).items())}]", n, _mid_knobs(s))
    for n, s in RULES.items()
    if _mid_knobs(s)
]


#: Rules whose sampler takes a fast path when no raw distributions are given, with knobs that
#: keep their law on a 6-token pair away from a degenerate one (or one knob per variant of a
#: path): the eager fast paths' law and plan tests (samplers/test_fast_paths.py).
FAST_RULES = [
    ("sps", {}),
    ("cactus-taylor", {"delta": 0.3}),
    ("cactus-exact-kl", {"delta": 0.3}),
    ("cactus-exact-hellinger", {"delta": 0.05}),
    ("interpolation", {}),
    ("topk", {"topk": 2}),
    ("tas", {}),
    ("tas", {"entropy": "exact", "recovery": "truncated"}),
    ("cascade-chow", {}),
    ("cascade-diff", {}),
    ("cascade-opt", {"alpha": 0.3}),
    ("cascade-token-v1", {}),
    ("cascade-token-v2", {}),
    ("cascade-token-v3", {}),
    ("fuzzy", {}),
    ("fuzzy", {"fsd_div_type": "kl_div", "fsd_div_threshold": 2.9}),
    ("fuzzy", {"fsd_div_type": "kl_div_reversed", "fsd_div_threshold": 2.9}),
    ("fuzzy", {"fsd_div_type": "tv_div", "fsd_div_threshold": 0.8}),
]
FAST_IDS = [f"{n}{k or ''}" for n, k in FAST_RULES]


#: The compiled core (``fused=True``) is tested once per path it compiles, not once per knob
#: variant (each configuration is a kernel of its own: 15-40 s to compile on 2 shared cores):
#: QUICK_RULES below at their defaults (the quick benchmark's five rules:
#: lab/test_benchmark_command.py checks that benchmarks/ times the same ones, so its test shares
#: their kernels), the benchmark's own kernels (the elementwise-target, spike and decision forms'
#: derived paths, the closed-form and the host-solved spike, top-k's and the token cascades'
#: kernels), and one configuration of every other rule kernel of samplers/_kernels
#: (interpolation's recovery, TAS's entropy accept with either recovery, the sequence-level
#: cascades' maxima, fuzzy SD's bounds) and of the exact root of another divergence. The
#: other variants of FAST_RULES (cascade-chow/diff, token v1/v2, fuzzy's other divergences)
#: go through the same kernel functions with another decision formula or divergence traced
#: in; their laws and plans are tested eagerly (samplers/test_fast_paths.py), not compiled.
#: One rule per kernel form of the registry at its defaults: the exact-root spike (SpS, and
#: Cactus-Taylor's closed form), the host-solved spike (Cactus exact KL), top-k's and the token
#: cascades' kernels; each a name of the rule registry.
QUICK_RULES = ("sps", "cactus-taylor", "cactus-exact-kl", "topk", "cascade-token-v3")
assert set(QUICK_RULES) <= set(RULES.all_names())

FUSED_CONFIGS = [(n, {}) for n in QUICK_RULES] + [
    ("cactus-exact-hellinger", {"delta": 0.05}),
    ("interpolation", {}),
    ("tas", {}),
    ("tas", {"entropy": "exact", "recovery": "truncated"}),
    ("cascade-opt", {"alpha": 0.3}),
    ("fuzzy", {}),
]
assert all((n, k) in FAST_RULES or (n in QUICK_RULES and not k) for n, k in FUSED_CONFIGS)

#: The one call shape (B, k, V) of every test of a compiled core: each configuration's
#: kernel is specialized to its shape (a new batch size compiles once more, with a dynamic
#: batch axis), so the tests of one configuration share one kernel: one compile (~15-40 s
#: each on 2 shared cores) instead of one per test. V = 2,000: 7 whole 256-entry blocks and
#: a short one of 208, within SMALL_VOCAB: inductor's default options, whose kernels compile
#: in about two thirds of the time of the lifted ones above it (measured 24 and 27 s against
#: 32 and 40 s for cascade-opt and Cactus-Taylor at V = 2,048 / 2,500). The formulas are the
#: same (the options only decide which intermediates are stored); a lifted whole call is
#: tested by the ragged-layout test (V = 2,500), the thresholds by
#: test_kernel_options_by_vocabulary_size. The quick benchmark samples at the same shape (its
#: QUICK_SAMPLER_SHAPE, checked in lab/test_benchmark_command.py).
FUSED_SHAPE = (16, 4, 2000)

#: Tests of the quick benchmark's rules go with the benchmark's own test
#: (lab/test_benchmark_command.py).
QUICK_GROUP = "fused-quick"


def fused_config_id(name, knobs):
    return name + "".join(f"[{k}={v}]" for k, v in knobs.items())


def fused_group(name, knobs):
    """The xdist group of a fused configuration's tests (see :func:`fused_params`)."""
    return QUICK_GROUP if name in QUICK_RULES and not knobs else f"fused-{fused_config_id(name, knobs)}"


def fused_params():
    """``pytest.param(name, knobs)`` for each fused configuration, in the xdist group of its
    kernel: run with ``--dist loadgroup`` (./dev test), every test of one configuration runs in
    the same worker process, which compiles its kernel once (in another process it would be
    compiled again, or read back from inductor's disk cache at best)."""
    import pytest

    return [
        pytest.param(
            name,
            knobs,
            id=fused_config_id(name, knobs),
            marks=pytest.mark.xdist_group(fused_group(name, knobs)),
        )
        for name, knobs in FUSED_CONFIGS
    ]

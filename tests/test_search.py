"""The scalar searches of :mod:`cactus_theory._search` return their answer, the final bracket
that holds it and how they ended (a :class:`~cactus_theory.results.Result`)."""

import json
import math

import numpy as np
import pytest

from cactus_theory._search import Search, bisect_interval, bisect_threshold, brent_root, golden_section
from cactus_theory.results import Result


def test_bisection_ends_on_adjacent_floats_around_the_threshold():
    res = bisect_threshold(lambda x: x >= 0.3, 0.0, 1.0)
    lo, hi = res.bracket
    assert isinstance(res, Search) and isinstance(res, Result)
    assert res.status == "converged" and res.value == hi and np.nextafter(lo, 1.0) == hi
    assert lo < 0.3 <= hi and res.evaluations <= 64


def test_bisection_that_runs_out_of_steps_says_so():
    res = bisect_interval(lambda x: x >= 0.3, 0.0, 1.0, 5)
    lo, hi = res.bracket
    assert res.status == "steps" and res.value == lo and res.evaluations == 5
    assert hi - lo == 2.0**-5 and lo < 0.3 <= hi  # exact: halvings of [0, 1] are dyadic


def test_brent_root_brackets_a_sign_change():
    res = brent_root(lambda x: x * x - 2.0, 0.0, 2.0, xtol=1e-14, rtol=4 * np.finfo(float).eps)
    lo, hi = res.bracket
    assert res.status == "converged" and lo <= math.sqrt(2.0) <= hi and lo < res.value < hi
    # the stated width: xtol + rtol * |x| on each side
    assert hi - lo == pytest.approx(2 * (1e-14 + 4 * np.finfo(float).eps * res.value), rel=1e-12)


def test_golden_section_keeps_its_final_bracket_and_value():
    # 60 steps: a bracket of 0.618**60 ~ 3e-13, far above float64 resolution at 0.3 (at 80
    # steps it shrinks below one ulp and its ends are rounding, no longer a bracket)
    res = golden_section(lambda x: (x - 0.3) ** 2, 0.0, 1.0, 60)
    lo, hi = res.bracket
    assert res.status == "steps" and lo <= 0.3 <= hi
    assert hi - lo <= 0.6181**60  # 0.6181 > the golden ratio's 0.61803...: room for rounding
    assert res.fun == (res.value - 0.3) ** 2 and res.evaluations == 60 + 2 + 3
    up = golden_section(lambda x: -((x - 0.3) ** 2), 0.0, 1.0, 60, maximize=True)
    assert (up.value, up.fun) == (res.value, -res.fun)


def test_a_search_is_strict_json():
    d = golden_section(lambda x: math.inf if x > 0.5 else -x, 0.0, 1.0, 20).to_dict()
    assert json.loads(json.dumps(d, allow_nan=False)) == d and set(d) >= {"value", "bracket", "status"}

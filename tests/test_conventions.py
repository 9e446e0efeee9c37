"""``cactus_theory.conventions``: the tolerances every consumer shares.

:func:`tolerance` is ``4 sqrt(eps)`` of the working precision, checked here against the machine
epsilons numpy and torch report themselves (not against the module's own table);
:func:`normalization_tolerance` is 1e-6 for float64 and 1e-3 below, and the analysis's input
check (:func:`cactus_theory._validation.as_probs`) accepts a row exactly up to it. The edge-case
conventions 2-5 of the module docstring are tested where they are computed (the rules'
invariant battery and the samplers' tests).
"""

import math

import numpy as np
import pytest

from cactus_theory._validation import as_probs
from cactus_theory.conventions import EMPTY_RESIDUAL_MASS, normalization_tolerance, tolerance


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_tolerance_is_four_root_eps_of_numpy_dtypes(dtype):
    want = 4 * math.sqrt(np.finfo(dtype).eps)
    assert tolerance(dtype) == pytest.approx(want, rel=1e-15)
    assert tolerance(np.dtype(dtype)) == tolerance(dtype)
    assert tolerance(np.zeros(3, dtype=dtype)) == tolerance(dtype)  # an array gives its dtype


def test_tolerance_of_torch_dtypes_and_tensors():
    torch = pytest.importorskip("torch")
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        want = 4 * math.sqrt(torch.finfo(dtype).eps)
        assert tolerance(dtype) == pytest.approx(want, rel=1e-15), dtype
        assert tolerance(torch.zeros(2, dtype=dtype)) == tolerance(dtype)


def test_integers_and_unknown_dtypes_count_as_float64():
    f64 = tolerance(np.float64)
    assert tolerance(np.int32) == f64
    assert tolerance(int) == f64
    assert tolerance("not a dtype") == f64
    # the documented values (6.0e-8, 1.4e-3; float16's 0.13 is 4 * 2**-5 = 0.125 exactly)
    assert (round(f64, 9), round(tolerance(np.float32), 4)) == (6.0e-8, 1.4e-3)
    assert tolerance(np.float16) == 0.125


def test_normalization_tolerance_by_precision():
    assert normalization_tolerance(np.float64) == 1e-6
    assert normalization_tolerance(np.dtype("float64")) == 1e-6
    for dtype in (np.float32, np.float16):
        assert normalization_tolerance(dtype) == 1e-3
    torch = pytest.importorskip("torch")
    assert normalization_tolerance(torch.float64) == 1e-6
    assert normalization_tolerance(torch.bfloat16) == 1e-3


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-6), (np.float32, 1e-3)])
def test_the_input_check_accepts_a_row_exactly_up_to_the_normalization_tolerance(dtype, tol):
    # the excess sits on one entry: within the tolerance the row is accepted and renormalized,
    # at twice the tolerance it is refused with the argument's name
    inside = np.array([0.5, 0.5 + 0.5 * tol], dtype=dtype)
    out = as_probs(inside, "target_probs")
    assert out.dtype == np.float64
    assert abs(out.sum() - 1.0) <= 2 * np.finfo(np.float64).eps  # renormalized in float64
    outside = np.array([0.5, 0.5 + 2 * tol], dtype=dtype)
    with pytest.raises(ValueError, match="target_probs"):
        as_probs(outside, "target_probs")


def test_an_empty_residual_is_mass_zero():
    # convention 3: only a residual that rounds to no mass at all falls back to normalize(h)
    assert EMPTY_RESIDUAL_MASS == 0.0

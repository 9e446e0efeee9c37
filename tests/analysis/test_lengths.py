"""analysis.geometric_length_ratio: the completion-length ratio under geometric stopping."""

import numpy as np
import pytest

from cactus_theory.analysis._lengths import geometric_length_ratio


def test_ratio_of_the_mean_stop_probabilities():
    # geometric stopping with stop probability s has mean length 1/s: lengths 50 and 100
    assert geometric_length_ratio(np.full(7, 0.02), np.full(7, 0.01)) == pytest.approx(2.0, rel=1e-15)
    # means, not a mean of ratios: (0.01 + 0.03) / (0.02 + 0.02) = 1, while the ratios average 1.25
    assert geometric_length_ratio([0.01, 0.03], [0.02, 0.02]) == pytest.approx(1.0, rel=1e-15)


def test_no_prediction_where_eos_is_never_possible():
    assert geometric_length_ratio([0.0, 0.0], [0.01, 0.0]) is None
    assert geometric_length_ratio([0.01, 0.0], [0.0, 0.0]) is None


@pytest.mark.parametrize(
    "q, h, name",
    [
        ([0.1], [0.1, 0.2], "emitted_eos"),
        ([], [], "emitted_eos"),
        ([-0.1], [0.1], "verifier_eos"),
        ([np.nan], [0.1], "verifier_eos"),
    ],
)
def test_bad_input_names_the_argument(q, h, name):
    with pytest.raises(ValueError, match=name):
        geometric_length_ratio(q, h)

"""Hypothesis strategies: probability rows on vocabularies 1..64, with zeros and edge cases."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp


@st.composite
def simplex(draw, vocab_size, *, zeros: bool = True):
    """A probability row of length ``vocab_size``: random weights, some entries possibly 0.

    Includes one-hot rows, uniform rows and rows with many zeros (truncated supports).
    """
    kind = draw(st.sampled_from(["random", "random", "random", "onehot", "uniform", "truncated"]))
    V = vocab_size
    if kind == "onehot":
        x = np.zeros(V)
        x[draw(st.integers(0, V - 1))] = 1.0
        return x
    if kind == "uniform":
        return np.full(V, 1.0 / V)
    w = draw(hnp.arrays(np.float64, V, elements=st.floats(0.0, 1.0, allow_subnormal=False)))
    w = w**3  # peaked rows, as language models have
    if kind == "truncated" or (zeros and draw(st.booleans())):
        keep = draw(hnp.arrays(np.bool_, V))
        w = np.where(keep, w, 0.0)
    if not w.sum() > 1e-12:
        w = np.zeros(V)
        w[draw(st.integers(0, V - 1))] = 1.0
    w = w / w.sum()
    # w**3 and the division can make entries subnormal (allow_subnormal above keeps the draws
    # normal): such an entry is 0 here, as the frontier solver treats it (its one stated
    # departure from exact arithmetic, solvers._mentored._OVERFLOW_NOTE: q_x below about
    # 4.5e-308 p_x is q_x = 0; pinned in rules/test_rule_invariants.py)
    w = np.where(w < 1e-300, 0.0, w)
    return w / w.sum()


@st.composite
def pairs(draw, min_vocab=1, max_vocab=64, *, zeros: bool = True):
    """A (q, p) pair on a common vocabulary of size in [min_vocab, max_vocab]."""
    V = draw(st.integers(min_vocab, max_vocab))
    return draw(simplex(V, zeros=zeros)), draw(simplex(V, zeros=zeros))


deltas = st.one_of(st.just(0.0), st.floats(1e-6, 5.0), st.sampled_from([0.01, 0.1, 0.5, 1.0]))

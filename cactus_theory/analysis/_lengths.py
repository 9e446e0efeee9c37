r"""Completion length from the end-of-sequence probability, under geometric stopping.

With a per-token stop probability s, a completion's expected length is 1/s. Taking
:math:`s = \mathrm{mean}_t\, q_t(\mathrm{EOS})` for the verifier and
:math:`\mathrm{mean}_t\, h_{alg,t}(\mathrm{EOS})` for what a rule emits (per-position
independence), the rule lengthens completions by

.. math:: \frac{L_{rule}}{L_{verifier}} = \frac{\mathrm{mean}_t\, q_t(\mathrm{EOS})}
          {\mathrm{mean}_t\, h_{alg,t}(\mathrm{EOS})}.

A model, not an identity: it ignores that the rule changes the contexts it writes, the length
cap and the bonus tokens (which emit q). Source: the geometric-stopping reading of the EOS
shift :math:`h_{alg}(\mathrm{EOS}) - q(\mathrm{EOS})` (Hao & Mou, ICLR 2026, arXiv
2604.04987, emit :math:`h_{alg}`, not q).
"""

from __future__ import annotations

import numpy as np

__all__ = ["geometric_length_ratio"]


def geometric_length_ratio(verifier_eos, emitted_eos):
    r"""Predicted completion-length ratio (rule / verifier) under geometric stopping.

    .. math:: \frac{\mathrm{mean}_t\, q_t(\mathrm{EOS})}{\mathrm{mean}_t\, h_t(\mathrm{EOS})}

    Parameters
    ----------
    verifier_eos : array_like, shape (T,)
        :math:`q_t(\mathrm{EOS})` at each position.
    emitted_eos : array_like, shape (T,)
        :math:`h_{alg,t}(\mathrm{EOS})` (the emitted law's EOS probability) at the same positions.

    Returns
    -------
    float or None
        The ratio; None where either mean is 0 (EOS never in the support: no prediction).

    Examples
    --------
    >>> geometric_length_ratio([0.02, 0.04], [0.01, 0.02])
    2.0
    """
    q_e = np.asarray(verifier_eos, dtype=np.float64)
    h_e = np.asarray(emitted_eos, dtype=np.float64)
    if q_e.shape != h_e.shape or q_e.ndim != 1 or q_e.size == 0:
        raise ValueError(
            f"emitted_eos: expected a non-empty 1-D array of the shape of verifier_eos, got "
            f"{h_e.shape} and {q_e.shape}"
        )
    if not (np.all(np.isfinite(q_e)) and np.all(np.isfinite(h_e)) and q_e.min() >= 0 and h_e.min() >= 0):
        raise ValueError("verifier_eos: probabilities must be finite and >= 0 (and so must emitted_eos)")
    sq, sh = float(q_e.mean()), float(h_e.mean())
    return sq / sh if sq > 0 and sh > 0 else None

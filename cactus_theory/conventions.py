"""The edge-case conventions shared by the exact analysis and the torch samplers.

Every consumer (the float64 analysis, the float32 samplers, the simulator) follows these
answers; each has a test.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
h target, a_n acceptance probability of a drafted n, r^(n) recovery distribution.

1. **Normalization tolerance.** A probability row is accepted when it is finite, non-negative
   and ``|sum - 1| <= normalization_tolerance(dtype)``: ``1e-6`` for float64 and
   ``1e-3`` for float32/float16/bfloat16 (one ulp of bfloat16 at 1 is 7.8e-3/2, and
   engines hand over rows that were normalized in float32). The analysis then divides each
   row by its sum (so every result is an exact distribution in float64). The samplers do not
   check the sum (that would be a host-device sync); they cast to float32 and divide each row
   by its sum. A sampler row with a NaN/inf, a negative entry or zero total mass, or a token id
   outside ``[0, V)``, is flagged on the device and emits nothing (``-1``)
   (:func:`cactus_theory.samplers.base.validate_sampler_entry`).
2. **p_n = 0 at a drafted token.** ``a_n = min(1, h_n / p_n)`` is taken as its limit
   ``p_n -> 0+``: 1 if ``h_n > 0`` and 0 if ``h_n = 0`` (vLLM computes 0/0 = NaN and
   rejects; we return the same decision without a NaN).
3. **Empty recovery residual.** When ``sum_x max(0, h_x - p_x) = 0`` (or rounds to at most
   :data:`EMPTY_RESIDUAL_MASS`), the recovery distribution is ``normalize(h)``. In exact
   arithmetic an empty residual forces ``h = p`` and hence acceptance 1, so this branch only
   matters under rounding; vLLM instead samples uniformly over the vocabulary and the official
   Cactus code returns token 0, both of which can emit tokens outside ``supp(h)``.
4. **q_n = 1.** Cactus's rescale factor ``(1 - gamma_n) / (1 - q_n)`` is 0/0; we use 0, i.e.
   ``h^(n) = e_n`` (``gamma_n = 1``), which is its limit. The acceptance is then 1, so the
   recovery is never used (the official code's NaN replacement differs only there).
5. **V = 1.** The only token is drafted, accepted with probability 1 and emitted.
"""

from __future__ import annotations

#: Residual mass at or below which the recovery residual counts as empty (convention 3).
EMPTY_RESIDUAL_MASS = 0.0


def normalization_tolerance(dtype) -> float:
    """Absolute tolerance on ``|sum(row) - 1|`` for a probability row of ``dtype``.

    Parameters
    ----------
    dtype : numpy or torch dtype
        Dtype of the input row.

    Returns
    -------
    float
        ``1e-6`` for float64 input, ``1e-3`` for anything of lower precision.
    """
    name = str(dtype)
    if "float64" in name or "double" in name:
        return 1e-6
    return 1e-3


def tolerance(dtype) -> float:
    r"""Relative tolerance for comparing a result computed in ``dtype``: :math:`4\sqrt{\epsilon}`.

    One rule for every comparison of a computed value with its reference (tests, checks):
    a computation that loses about half the digits of its working precision (a subtraction
    of nearly equal terms, a square root near 0, a bisection stopped at the working
    precision) still passes, one that is wrong in the leading half of the digits does not.

    Parameters
    ----------
    dtype : numpy or torch dtype, or an array / tensor (its dtype is used)
        Working precision; integers and unknown dtypes count as float64.

    Returns
    -------
    float
        ``4 sqrt(eps)``: 6.0e-8 (float64), 1.4e-3 (float32), 0.13 (float16), 0.35 (bfloat16).
    """
    import numpy as np

    if not isinstance(dtype, type) and hasattr(dtype, "dtype"):  # an array or a tensor
        dtype = dtype.dtype
    name = str(dtype).replace("torch.", "")
    eps = {
        "bfloat16": 2.0**-7,
        "float16": 2.0**-10,
        "half": 2.0**-10,
        "float32": 2.0**-23,
        "float": 2.0**-23,
    }.get(name)
    if eps is None:
        try:
            np_dtype = np.dtype(dtype)
            eps = float(np.finfo(np_dtype).eps) if np_dtype.kind == "f" else 2.0**-52
        except TypeError:
            eps = 2.0**-52
    return 4.0 * eps**0.5


__all__ = [
    "tolerance",
    "normalization_tolerance",
    "EMPTY_RESIDUAL_MASS",
]

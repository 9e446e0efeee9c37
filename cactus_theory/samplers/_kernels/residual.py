r"""The residual recovery weights in torch, in place (convention 3).

:math:`w = \max(0, h - p)`, or h on the rows where that residual is empty: one new buffer
(``h - p``), clamped in place, h added on the empty rows only (``addcmul_`` with the rows'
0/1 flag). The same values as :func:`~cactus_theory.rules.plans._residual_weights` for
finite rows; its array-API form allocates a buffer per step, which on a CPU costs page
faults over [B, V] rows.
"""

from __future__ import annotations

from ...conventions import EMPTY_RESIDUAL_MASS

__all__ = ["residual_weights_"]


def residual_weights_(h, p):
    """``max(0, h - p)``, or ``h`` where that residual is empty (torch rows [..., V]; ``h`` and
    ``p`` are not modified)."""
    res = (h - p).clamp_min_(0.0)
    empty = res.sum(-1, keepdim=True) <= EMPTY_RESIDUAL_MASS
    # an empty residual row is all zeros: 0 + h = h there, res + 0 h = res elsewhere
    return res.addcmul_(h, empty.to(res.dtype))

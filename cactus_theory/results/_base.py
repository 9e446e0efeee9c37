"""The one base of the package's result types: ``status``, ``message``, ``to_dict``; summary numbers."""

from __future__ import annotations

import math
from dataclasses import field, fields
from typing import Any

import numpy as np

from .._tables import json_ready

__all__ = ["Result"]

#: What a result without a ``status`` (or ``message``) field reports: it has one outcome.
_DEFAULTS = {"status": "ok", "message": ""}


def _to_plain(x) -> Any:
    """``x`` as JSON-ready data: the package's one encoder, :func:`cactus_theory._tables.json_ready`."""
    return json_ready(x)


def _row_values(x) -> Any:
    """``x`` as Python values for a table row (``rows()``, for ``pandas.DataFrame``): numpy
    unwrapped, NaN as None (a missing value; pandas reads it back as NaN), infinities kept as
    floats. Not JSON: ``to_dict()`` and ``--json`` encode through :func:`_to_plain`."""
    if isinstance(x, dict):
        return {str(k): _row_values(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_row_values(v) for v in x]
    if isinstance(x, np.ndarray):
        return _row_values(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


def _g(x, spec: str = ".4g") -> str:
    """A number for a summary line (None for a missing value)."""
    if x is None:
        return "n/a"
    return format(float(x), spec)


class Result:
    """The base of every result dataclass of the package.

    Every result has

    ``status`` : str
        How the computation ended. A result whose computation can end in more than one way
        declares ``status`` as a field (a calibration: ``"calibrated"``, ``"saturated"``, ...;
        an oracle: the solver's status; a search: ``"converged"``, ...); any other result
        reports ``"ok"``.
    ``message`` : str
        A sentence on that outcome where there is one to say (a field where declared, else
        ``""``).
    ``to_dict()``
        Every exported field as plain data (fields marked ``export=False`` skipped), encoded by
        the package's one JSON encoder: numpy unwrapped, and a non-finite float written as the
        string ``"nan"``, ``"inf"`` or ``"-inf"``, so ``json.dumps(result.to_dict(),
        allow_nan=False)`` is strict JSON and ``float(value)`` reads every number back.
    """

    def __getattr__(self, name: str):
        # Only reached when normal lookup fails: a result without a status/message field.
        try:
            return _DEFAULTS[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}") from None

    def to_dict(self) -> dict:
        """Every exported field as plain data (``json.dumps(..., allow_nan=False)`` accepts it)."""
        return {
            f.name: _to_plain(getattr(self, f.name)) for f in fields(self) if f.metadata.get("export", True)
        }


def _internal(**kw):
    """A field kept on the object but not exported by ``to_dict`` nor shown in ``repr``."""
    return field(repr=False, compare=False, metadata={"export": False}, **kw)

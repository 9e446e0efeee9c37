"""The shared machinery of the result types: ``to_dict``, summary numbers."""

from __future__ import annotations

import math
from dataclasses import field, fields
from typing import Any

import numpy as np


def _to_plain(x) -> Any:
    """``x`` as plain Python data for :func:`json.dumps` (NaN -> None; arrays -> lists)."""
    if isinstance(x, dict):
        return {str(k): _to_plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_to_plain(v) for v in x]
    if isinstance(x, np.ndarray):
        return _to_plain(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        v = float(x)
        return None if math.isnan(v) else v
    if x is None or isinstance(x, str):
        return x
    raise TypeError(f"_to_plain: cannot convert {type(x).__name__}")


def _g(x, spec: str = ".4g") -> str:
    """A number for a summary line (None for a missing value)."""
    if x is None:
        return "n/a"
    return format(float(x), spec)


class _Result:
    """Shared ``to_dict`` of the result dataclasses (fields marked ``export=False`` skipped)."""

    def to_dict(self) -> dict:
        """Every exported field as plain data (json.dumps accepts it)."""
        return {
            f.name: _to_plain(getattr(self, f.name)) for f in fields(self) if f.metadata.get("export", True)
        }


def _internal(**kw):
    """A field kept on the object but not exported by ``to_dict`` nor shown in ``repr``."""
    return field(repr=False, compare=False, metadata={"export": False}, **kw)

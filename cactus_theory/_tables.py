"""Plain tables: :class:`Table` of :class:`Column` s, printed by :func:`format_table`.

One formatter for every table the package prints (the report, the subcommands): aligned text,
Markdown or CSV; :func:`json_ready` turns a table's values into JSON-ready data.

The package's one JSON encoding (every ``to_dict``, every ``--json`` output and the JSON
result files go through :func:`json_ready` or :func:`to_json`): numpy scalars and arrays become Python numbers and lists, tuples become lists, dict keys become
strings. A non-finite float becomes a **string**: ``"nan"``, ``"inf"`` or ``"-inf"``, so the
text is strict JSON (RFC 8259 has no NaN nor Infinity: ``json.loads(s, parse_constant=...)``
with a raising hook accepts it) and ``float(value)`` reads every number back, the non-finite
ones included. ``None`` stays ``null`` (a value that was not computed).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Column", "Table", "format_table", "json_ready", "to_json"]


@dataclass(frozen=True)
class Column:
    """One column of a :class:`Table`: the row key, its printed header and its number format.

    ``fmt`` is a format spec for numbers (``".4f"``, ``"g"``, ``".1f"``), ``"s"`` for text or
    ``"knobs"`` for a dict of rule knobs printed as ``name=value``.
    """

    key: str
    header: str
    fmt: str = ".4f"


@dataclass(frozen=True)
class Table:
    """A table of plain values: ``rows`` are dicts keyed by the columns' ``key``.

    ``name`` is a stable identifier (``"<section>/<what>"``) used by the README generator;
    ``layout`` is ``"grid"`` (aligned columns) or ``"records"`` (one block per row, for long text).
    """

    name: str
    title: str
    columns: tuple
    rows: tuple
    layout: str = "grid"

    def to_dict(self) -> dict:
        """The table as JSON-ready data (non-finite floats become ``"inf"``, ``"-inf"``, ``"nan"``)."""
        return {
            "name": self.name,
            "title": self.title,
            "columns": [{"key": c.key, "header": c.header} for c in self.columns],
            "rows": [json_ready(dict(r)) for r in self.rows],
        }


def json_ready(x):
    """``x`` as plain JSON data: numpy unwrapped, non-finite floats as ``"nan"``, ``"inf"``, ``"-inf"``.

    Dicts (keys as strings), lists and tuples are converted item by item; ``None``, bools,
    ints, strings and finite floats are kept. Any other object raises TypeError (naming its
    type), as :func:`json.dumps` would.
    """
    if isinstance(x, dict):
        return {str(k): json_ready(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_ready(v) for v in x]
    if isinstance(x, np.ndarray):
        return json_ready(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float):
        if math.isfinite(x):
            return x
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if x is None or isinstance(x, (bool, int, str)):
        return x
    raise TypeError(f"json_ready: cannot encode a {type(x).__name__} as JSON")


def to_json(x, indent: int | None = 2) -> str:
    """``x`` as strict JSON text through :func:`json_ready` (``allow_nan=False``: no NaN nor Infinity)."""
    return json.dumps(json_ready(x), indent=indent, allow_nan=False)


def _cell(value, fmt: str) -> str:
    if value is None:
        return "-"
    if fmt == "s":
        return str(value)
    if fmt == "knobs":
        return (
            ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in dict(value).items())
            or "-"
        )
    if isinstance(value, str):
        return value
    if fmt == "d":
        return str(int(value))
    v = float(value)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if fmt.endswith("f") and v < 0 and float(format(v, fmt)) == 0.0:
        v = 0.0  # print the rounding residue of a zero as 0.0000, not -0.0000
    return format(v, fmt)


def format_table(table: Table, style: str = "text") -> str:
    """Print a :class:`Table` as ``"text"`` (aligned), ``"markdown"`` or ``"csv"``.

    CSV carries the raw values (full float precision, knobs as ``name=value``); text and Markdown
    use each column's format. Text columns are left-aligned, numbers right-aligned.
    """
    if style not in ("text", "markdown", "csv"):
        raise ValueError(f"style: expected text, markdown or csv, got {style!r}")
    cols = table.columns
    if style == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow([c.key for c in cols])
        for r in table.rows:
            w.writerow(
                [
                    _cell(r.get(c.key), "knobs")
                    if c.fmt == "knobs"
                    else (
                        repr(float(r[c.key]))
                        if isinstance(r.get(c.key), (float, np.floating))
                        else r.get(c.key)
                    )
                    for c in cols
                ]
            )
        return buf.getvalue().rstrip("\n")
    body = [[_cell(r.get(c.key), c.fmt) for c in cols] for r in table.rows]
    if table.layout == "records":
        out = [table.title] if table.title and style == "text" else []
        for cells in body:
            first, rest = cells[0], cells[1:]
            out.append(f"{first}. {rest[0]}" if rest else first)
            out += [f"    {c.header}: {v}" for c, v in zip(cols[2:], rest[1:])]
        return "\n".join(out)
    heads = [c.header for c in cols]
    if style == "markdown":
        esc = lambda s: s.replace("|", "\\|")  # noqa: E731
        out = [f"*{table.title}*", ""] if table.title else []
        out.append("| " + " | ".join(esc(h) for h in heads) + " |")
        out.append("|" + "|".join("---" if c.fmt in ("s", "knobs") else "---:" for c in cols) + "|")
        out += ["| " + " | ".join(esc(x) for x in cells) + " |" for cells in body]
        return "\n".join(out)
    widths = [max(len(x) for x in col) for col in zip(heads, *body)]
    left = [c.fmt in ("s", "knobs") for c in cols]

    def line(cells):
        return "  ".join(x.ljust(w) if lf else x.rjust(w) for x, w, lf in zip(cells, widths, left)).rstrip()

    out = [table.title] if table.title else []
    out += [line(heads), line(["-" * w for w in widths])] + [line(b) for b in body]
    return "\n".join(out)

r"""Read a rendered figure's layout: overlapping text, text or legends over data, hidden series.

:func:`layout_problems` draws the figure once and reads the renderer's bounding boxes (display
pixels), so it sees what a reader sees: tick labels, axis labels, legend entries and notes
that overlap one another; a note or a legend inside an axes drawn over a data series (a line's
path, a marker, a bar); and a line drawn entirely under another line of the same axes (two
series equal to within the upper line's width, so the lower one cannot be seen). Guides are
not data: lines in axes coordinates (``axhline``/``axvline``), filled bands and empty legend
proxies are left out of the data checks.
"""

from __future__ import annotations

import numpy as np

__all__ = ["layout_problems"]

#: Pixels two boxes may share before they count as overlapping (anti-aliasing, glyph padding).
OVERLAP_PX = 1.0


def _drawn(fig, canvas):
    """Draw the figure; return the texts, lines and patches the renderer drew (in draw order)."""
    from unittest import mock

    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.text import Text

    drawn = []

    def recorder(cls):
        original = cls.draw

        def draw(self, renderer, *args, **kwargs):
            if self.get_visible():
                drawn.append(self)
            return original(self, renderer, *args, **kwargs)

        return mock.patch.object(cls, "draw", draw)

    with recorder(Text), recorder(Line2D), recorder(Patch):
        canvas.draw()
    texts = [t for t in drawn if isinstance(t, Text) and t.get_text().strip()]
    return texts, {id(a) for a in drawn}


def _label(t) -> str:
    s = " ".join(t.get_text().split())
    return repr(s if len(s) <= 40 else s[:37] + "...")


def _overlap(a, b, pad=OVERLAP_PX) -> bool:
    return min(a.x1, b.x1) - max(a.x0, b.x0) > pad and min(a.y1, b.y1) - max(a.y0, b.y0) > pad


def _text_polygon(t, box):
    """The corners of a text's own (rotated) rectangle, from its axis-aligned box: a box W x H
    around a w x h rectangle turned by theta has W = w|cos| + h|sin|, H = w|sin| + h|cos|."""
    theta = np.deg2rad(t.get_rotation())
    c, s = abs(np.cos(theta)), abs(np.sin(theta))
    W, H = box.width, box.height
    det = c * c - s * s
    if abs(det) < 0.2 or s < 1e-6:  # upright (or too near 45 degrees to invert): the box itself
        return np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]])
    w, h = (W * c - H * s) / det, (H * c - W * s) / det
    u = np.array([np.cos(theta), np.sin(theta)]) * w / 2
    v = np.array([-np.sin(theta), np.cos(theta)]) * h / 2
    m = np.array([(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2])
    return np.array([m - u - v, m + u - v, m + u + v, m - u + v])


def _polygons_overlap(a, b, pad=OVERLAP_PX) -> bool:
    """Separating-axis test of two convex polygons, sharing more than ``pad`` pixels."""
    for poly in (a, b):
        edges = np.roll(poly, -1, axis=0) - poly
        for e in edges:
            n = np.array([-e[1], e[0]])
            n = n / (np.hypot(*n) or 1.0)
            pa, pb = a @ n, b @ n
            if min(pa.max(), pb.max()) - max(pa.min(), pb.min()) <= pad:
                return False
    return True


def _texts_overlap(ta, a, tb, b) -> bool:
    if not _overlap(a, b):
        return False
    return _polygons_overlap(_text_polygon(ta, a), _text_polygon(tb, b))


def _series_lines(ax):
    """The axes' data lines: in data coordinates, visible, with at least one finite point."""
    out = []
    for line in ax.get_lines():
        if not line.get_visible() or line.get_transform() != ax.transData:
            continue
        xy = np.asarray(line.get_xydata(), dtype=float)
        if xy.size == 0 or not np.isfinite(xy).all(axis=1).any():
            continue
        out.append(line)
    return out


def _display_points(line):
    xy = np.asarray(line.get_xydata(), dtype=float)
    xy = xy[np.isfinite(xy).all(axis=1)]
    return line.get_transform().transform(xy)


def _crosses(line, bbox) -> bool:
    """Whether ``line`` (its drawn segments or markers) passes through the display box."""
    pts = _display_points(line)
    inside = (pts[:, 0] > bbox.x0) & (pts[:, 0] < bbox.x1) & (pts[:, 1] > bbox.y0) & (pts[:, 1] < bbox.y1)
    if inside.any():
        return True
    if line.get_linestyle() in ("None", "none", "", " ") or len(pts) < 2:
        return False
    from matplotlib.path import Path

    return Path(pts).intersects_bbox(bbox, filled=False)


def _legend_box(legend, renderer):
    """What a legend hides: its frame when drawn, else the box of its entries (texts, handles)."""
    from matplotlib.transforms import Bbox

    if legend.get_frame_on():
        return legend.get_window_extent(renderer)
    parts = [t.get_window_extent(renderer) for t in legend.get_texts() if t.get_text().strip()]
    parts += [h.get_window_extent(renderer) for h in legend.legend_handles if h is not None]
    return Bbox.union(parts) if parts else legend.get_window_extent(renderer)


def _bars(ax):
    from matplotlib.patches import Rectangle

    return [
        p
        for p in ax.patches
        if isinstance(p, Rectangle) and p.get_visible() and p.get_width() != 0 and p.get_height() != 0
    ]


def _sample(pts, step=1.0):
    """Points every ``step`` pixels along a display polyline."""
    out = [pts[:1]]
    for a, b in zip(pts[:-1], pts[1:]):
        n = max(1, int(np.ceil(np.hypot(*(b - a)) / step)))
        t = np.linspace(0, 1, n + 1)[1:, None]
        out.append(a + t * (b - a))
    return np.concatenate(out)


def _distance_to_polyline(points, pts):
    """Distance from each point to the polyline ``pts`` (display pixels)."""
    if len(pts) == 1:
        return np.hypot(*(points - pts[0]).T)
    a, b = pts[:-1][None], pts[1:][None]
    p = points[:, None]
    ab = b - a
    denom = np.maximum((ab**2).sum(-1), 1e-12)
    t = np.clip(((p - a) * ab).sum(-1) / denom, 0, 1)
    proj = a + t[..., None] * ab
    return np.sqrt(((p - proj) ** 2).sum(-1)).min(1)


def _hidden(lower, upper, px_per_pt) -> bool:
    """Whether every part of ``lower`` is drawn under ``upper``'s solid stroke."""
    if upper.get_linestyle() not in ("-", "solid") or lower.get_linestyle() in ("None", "none", "", " "):
        return False
    half = 0.5 * upper.get_linewidth() * px_per_pt
    if (
        lower.get_marker() not in (None, "None", "none", "", " ")
        and lower.get_markersize() * px_per_pt > 2 * half
    ):
        return False  # its markers show around the upper stroke
    pa, pb = _display_points(lower), _display_points(upper)
    if len(pa) < 2 or len(pb) < 1:
        return False
    d = _distance_to_polyline(_sample(pa), pb)
    # a lower stroke whose centre stays within the upper stroke's half width is covered
    return bool(np.all(d <= max(half - 0.5 * lower.get_linewidth() * px_per_pt, 0.5)))


def layout_problems(fig) -> list[str]:
    """What a reader of ``fig`` cannot read: one line per problem (empty when none).

    Parameters
    ----------
    fig : matplotlib.figure.Figure

    Returns
    -------
    list of str
        ``"text 'a' overlaps text 'b'"``, ``"note 'a' covers line 'label' in axes k"``,
        ``"legend of axes k covers bar ..."``, ``"line 'a' is hidden under line 'b' in axes k"``.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas
    if not hasattr(canvas, "get_renderer"):  # a Figure made without pyplot: render it with Agg
        canvas = FigureCanvasAgg(fig)
    texts, drawn = _drawn(fig, canvas)
    renderer = canvas.get_renderer()
    px_per_pt = fig.dpi / 72.0
    problems = []
    boxes = [t.get_window_extent(renderer) for t in texts]
    edge = fig.bbox
    for t, box in zip(texts, boxes):
        if (
            box.x0 < edge.x0 - OVERLAP_PX
            or box.x1 > edge.x1 + OVERLAP_PX
            or box.y0 < edge.y0 - OVERLAP_PX
            or box.y1 > edge.y1 + OVERLAP_PX
        ):
            problems.append(f"text {_label(t)} is cut at the figure's edge")
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            if _texts_overlap(texts[i], boxes[i], texts[j], boxes[j]):
                problems.append(f"text {_label(texts[i])} overlaps text {_label(texts[j])}")
    for k, ax in enumerate(fig.axes):
        if not ax.get_visible():
            continue
        lines = [x for x in _series_lines(ax) if id(x) in drawn]
        bars = [x for x in _bars(ax) if id(x) in drawn]
        covers = [(f"note {_label(t)}", t.get_window_extent(renderer)) for t in ax.texts if t in texts]
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            frame = _legend_box(legend, renderer)
            if _overlap(frame, ax.get_window_extent(renderer)):  # a legend outside draws over nothing
                covers.append((f"legend of axes {k}", frame))
        for what, box in covers:
            for line in lines:
                if _crosses(line, box):
                    problems.append(f"{what} covers line {line.get_label()!r} in axes {k}")
            for bar in bars:
                if _overlap(bar.get_window_extent(renderer), box):
                    problems.append(f"{what} covers a bar in axes {k}")
                    break
        order = sorted(range(len(lines)), key=lambda i: (lines[i].get_zorder(), i))
        for a_pos, a in enumerate(order):
            for b in order[a_pos + 1 :]:
                if _hidden(lines[a], lines[b], px_per_pt):
                    problems.append(
                        f"line {lines[a].get_label()!r} is hidden under line {lines[b].get_label()!r} in axes {k}"
                    )
    return problems

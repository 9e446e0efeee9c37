"""Every figure renders headless from its function, in one print style, and writes vector PDFs.

Checks: no module of the package selects a matplotlib backend; each figure function (on small
inputs, to stay fast) returns a Figure, leaves the backend and interactive mode as they were,
labels both axes of every axes, bakes in no title, uses fonts of at least 8 pt at a width of
at most the double column, and reads back a clean rendered layout (no overlapping or cut text,
no note or legend over data, no hidden series; also the audit, multidraft and shipped-recording
cases below); :func:`write_figures` writes PDF (TrueType text with text-showing
operators, no Type 3 fonts) and 300 dpi PNG atomically and validates before writing; the
pooled frontier equals a brute-force allocation over the same budget grid.
"""

import pathlib
import re
import zlib

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")

from cactus_theory import figures as F  # noqa: E402
from cactus_theory.figures._data import (  # noqa: E402
    dump_trajectories,
    real_data,
    real_dump,
    synthetic_data,
    synthetic_trajectories,
)
from cactus_theory.figures._sequence_budget import figure_sequence_budget  # noqa: E402
from cactus_theory.figures._style import DOUBLE_COLUMN  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _small_cases():
    syn = synthetic_data(12, 16)
    real = real_data(max_positions=12)
    trajs = synthetic_trajectories(n=1, length=12, vocab_size=16)
    dump = real_dump("requant-4")
    return {
        "gamma": lambda: F.figure_gamma(deltas=(0.1, 1.0), q_values=np.linspace(0, 1, 21)),
        "taylor_overshoot": lambda: F.figure_taylor_overshoot(
            deltas=np.geomspace(1e-2, 5, 6), q_values=np.linspace(0, 1, 51)
        ),
        "taylor_exact_acceptance": lambda: F.figure_taylor_exact_acceptance(
            {"synthetic": syn, "real": real}, deltas=np.geomspace(1e-2, 2, 4)
        ),
        "worked_example": lambda: F.figure_worked_example(),
        "per_draft_vs_emitted": lambda: F.figure_per_draft_vs_emitted(
            syn.target_probs, syn.draft_probs, deltas=np.geomspace(0.01, 2, 4)
        ),
        "acceptance_vs_delta": lambda: F.figure_acceptance_vs_delta(trajs, deltas=[0.1, 1.0], ms=(2, 4)),
        "frontier": lambda: F.figure_frontier(syn),
        "calibration": lambda: F.figure_calibration(syn, eps_values=[0.05, 0.2]),
        "real_per_draft_vs_emitted": lambda: F.figure_per_draft_vs_emitted(real, deltas=[0.1, 1.0]),
        "real_frontier": lambda: F.figure_frontier(real),
        "real_acceptance_by_category": lambda: F.figure_acceptance_by_category({"4-bit": dump}),
        "real_al_by_m": lambda: F.figure_al_by_m({"4-bit": dump_trajectories(dump)[:2]}, ms=(1, 2)),
        "sequence_budget": lambda: figure_sequence_budget(
            synthetic_trajectories(n=3, length=8, vocab_size=12), eps=0.05
        ),
    }


CASES = _small_cases()


def test_no_module_selects_a_backend():
    pattern = re.compile(r"matplotlib\.use\(|mpl\.use\(|switch_backend\(")
    offenders = [str(p) for p in (ROOT / "cactus_theory").rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == []


def test_every_registered_figure_has_a_small_case():
    # the registry's figures draw real data through the same functions as their synthetic twins
    twins = {name.replace("real_", "") for name in F._FIGURES}
    assert twins <= set(CASES) | {name.replace("real_", "") for name in CASES}
    for required in (
        "gamma",
        "taylor_overshoot",
        "per_draft_vs_emitted",
        "acceptance_vs_delta",
        "frontier",
        "calibration",
        "worked_example",
        "real_per_draft_vs_emitted",
        "real_frontier",
        "real_acceptance_vs_delta",
        "real_calibration",
    ):
        assert required in F._FIGURES


def _texts(fig):
    return [t for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text().strip()]


@pytest.mark.parametrize("name", list(CASES))
def test_figure_renders_in_the_style(name):
    import matplotlib.pyplot as plt

    backend, interactive = matplotlib.get_backend(), matplotlib.is_interactive()
    before = dict(matplotlib.rcParams)
    fig = CASES[name]()
    try:
        assert isinstance(fig, matplotlib.figure.Figure)
        assert matplotlib.get_backend() == backend
        assert matplotlib.is_interactive() == interactive
        assert matplotlib.rcParams["pdf.fonttype"] == before["pdf.fonttype"]  # style is not global
        width = fig.get_size_inches()[0]
        assert width <= DOUBLE_COLUMN + 1e-9
        fig.canvas.draw()
        for ax in fig.axes:
            assert ax.get_xlabel().strip() or ax in _shared_x_followers(fig), f"{name}: unlabelled x axis"
            assert ax.get_ylabel().strip() or ax in _shared_y_followers(fig), f"{name}: unlabelled y axis"
            assert ax.get_title() == "", f"{name}: title baked in"
        assert fig._suptitle is None
        small = [(t.get_text(), t.get_fontsize()) for t in _texts(fig) if t.get_fontsize() < 8]
        assert small == [], f"{name}: text below 8 pt"
        # readable as rendered: no overlapping or cut text, no note or legend over a series or a
        # bar, no series hidden under another (figures._layout reads the renderer's boxes)
        from cactus_theory.figures._layout import layout_problems

        assert layout_problems(fig) == [], name
    finally:
        plt.close(fig)


def _expected_frontier_rules():
    # every registered rule but SpS; a rule whose choices are registered under names of their own
    # (cactus-exact-kl, mentored-tv, ...) by those names
    from cactus_theory.rules import RULES

    aliases = dict(getattr(RULES, "aliases", {}))
    based = {spec.alias_of.name for spec in aliases.values()}
    return {n for n in RULES if n != "sps" and n not in based} | set(aliases)


#: The rules each case's figure is given, known from the case's own arguments (not from the figure).
CASE_RULES = {
    "frontier": _expected_frontier_rules(),
    "real_frontier": _expected_frontier_rules(),
    "worked_example": {"cactus-exact-kl"},
    "real_acceptance_by_category": {"sps"},
    "real_al_by_m": {"sps", "cactus-taylor, $\\delta$ = 0.75"},
}
#: Legend entries one legend may hold and still be read at a glance.
MAX_LEGEND_ENTRIES = 8


def _legends(fig):
    return [leg for leg in list(fig.legends) + [ax.get_legend() for ax in fig.axes] if leg is not None]


@pytest.mark.parametrize("name", list(CASES))
def test_figure_legends_are_short_and_no_rule_is_dropped_silently(name):
    import matplotlib.pyplot as plt

    from cactus_theory.figures._notes import NOTE_GID, rule_record

    fig = CASES[name]()
    try:
        fig.canvas.draw()
        for leg in _legends(fig):
            n = len([t for t in leg.get_texts() if t.get_text().strip()])
            assert n <= MAX_LEGEND_ENTRIES, f"{name}: a legend with {n} entries"
        rec = rule_record(fig)
        if name in CASE_RULES:
            assert rec is not None, f"{name}: its rules are not recorded"
            assert set(rec.given) == CASE_RULES[name]
        if rec is None:
            return
        assert set(rec.given) == set(rec.drawn) | set(rec.dropped)
        assert not set(rec.drawn) & set(rec.dropped)
        texts = [t.get_text() for t in _texts(fig)]
        notes = " ".join(t.get_text() for t in _texts(fig) if t.get_gid() == NOTE_GID)
        for rule in rec.dropped:
            named = re.search(rf"(?<![\w-]){re.escape(rule)}(?![\w-])", notes)
            assert named, f"{name}: {rule} dropped unnamed"
        for rule, label in rec.drawn.items():
            assert any(label in t for t in texts), f"{name}: {rule} drawn without its label {label!r}"
    finally:
        plt.close(fig)


def test_record_rules_refuses_a_silent_drop():
    import matplotlib.pyplot as plt

    from cactus_theory.figures._notes import NOTE_GID, record_rules, rule_record

    fig, ax = plt.subplots()
    try:
        with pytest.raises(ValueError, match="dropped"):
            record_rules(ax, ["a", "b"], {"a": "a"})
        with pytest.raises(ValueError, match="dropped"):
            record_rules(ax, ["a"], {"a": "a"}, {"a": "why"})
        with pytest.raises(ValueError, match="drawn"):
            record_rules(ax, ["a"], {"a": "a", "c": "c"})
        assert rule_record(fig) is None  # nothing recorded by a refused call
        note = record_rules(ax, ["a", "b"], {"a": "a"}, {"b": "KL = inf"})
        assert note.get_gid() == NOTE_GID and "b" in note.get_text() and "KL = inf" in note.get_text()
        assert rule_record(fig).dropped == {"b": "KL = inf"}
    finally:
        plt.close(fig)


def test_frontier_shows_gaps_on_a_scale_where_0001_is_visible():
    import matplotlib.pyplot as plt

    fig = CASES["frontier"]()
    try:
        # the rules' lines carry their names; the frontier's zero line is unlabelled ("_child...")
        gaps = np.concatenate(
            [
                np.asarray(ln.get_ydata(), float)
                for ax in fig.axes
                for ln in ax.lines
                if not ln.get_label().startswith("_")
            ]
        )
        # the gap to the per-position frontier is exact: >= 0 up to float64 rounding of sums
        assert gaps.min() >= -1e-12
        for ax in fig.axes:
            assert ax.get_yscale() == "symlog"
            lo, hi = ax.get_ylim()
            assert lo <= 0 and hi <= 1.0 + 1e-12
            # linear below 1e-4: 0.001 and 0.002 are a third of a decade apart
            assert ax.yaxis.get_transform().linthresh <= 1e-4
    finally:
        plt.close(fig)


def _shared_x_followers(fig):
    """Axes of a column whose x axis is shared with (and labelled on) the last panel."""
    last = fig.axes[-1]
    return [ax for ax in fig.axes[:-1] if ax.get_shared_x_axes().joined(last, ax)]


def _shared_y_followers(fig):
    """Axes of a row whose y axis is shared with (and labelled on) the first panel."""
    first = fig.axes[0]
    return [ax for ax in fig.axes[1:] if ax.get_shared_y_axes().joined(first, ax)]


def test_figure_draws_into_given_axes():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    try:
        assert F.figure_gamma(deltas=(0.5,), q_values=np.linspace(0, 1, 11), ax=ax) is fig
        assert len(ax.lines) == 5  # exact, Taylor, SpS, and the two line-style legend proxies
    finally:
        plt.close(fig)


def _pdf_streams(data: bytes):
    for m in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", data, re.S):
        try:
            yield zlib.decompress(m.group(1))
        except zlib.error:
            yield m.group(1)


def test_write_figures_pdf_has_text_and_png_is_300_dpi(tmp_path):
    from PIL import Image

    paths = F.write_figures(tmp_path, ["gamma", "worked_example"], formats=("pdf", "png"))
    assert [p.name for p in paths] == ["gamma.pdf", "gamma.png", "worked_example.pdf", "worked_example.png"]
    for p in paths:
        assert p.stat().st_size > 5_000
    for pdf in (tmp_path / "gamma.pdf", tmp_path / "worked_example.pdf"):
        data = pdf.read_bytes()
        assert data.startswith(b"%PDF")
        assert b"/Type3" not in data and b"/Subtype /Type3" not in data
        assert b"/FontFile2" in data  # embedded TrueType (Type 42): text stays text
        assert any(re.search(rb"\bBT\b.*?(Tj|TJ)", s, re.S) for s in _pdf_streams(data))
    with Image.open(tmp_path / "gamma.png") as im:
        assert [round(x) for x in im.info["dpi"]] == [300, 300]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)  # no temp files


def test_write_figures_validates_before_writing(tmp_path):
    with pytest.raises(ValueError, match="names"):
        F.write_figures(tmp_path / "a", ["gamma", "no_such_figure"])
    with pytest.raises(ValueError, match="formats"):
        F.write_figures(tmp_path / "b", ["gamma"], formats=("pdf", "svgz"))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_register_figure_rejects_taken_names():
    with pytest.raises(ValueError, match="name"):
        F._register_figure("gamma", lambda seed=0: None)
    with pytest.raises(ValueError, match="name"):
        F._register_figure("bad name", lambda seed=0: None)


def test_figure_data_errors_name_the_argument():
    with pytest.raises(ValueError, match="draft_probs"):
        F.figure_per_draft_vs_emitted(np.ones((2, 3)) / 3, np.ones((2, 4)) / 4)
    with pytest.raises(ValueError, match="drafter"):
        real_dump("no-such-drafter")
    with pytest.raises(ValueError, match="rule"):
        F.figure_worked_example(rule="sps")


def test_pooled_frontier_equals_brute_force_allocation():
    """Each point of G equals the best mean F over all allocations on the same budget grid
    with mean budget at most its own (Lagrangian points are on the hull of the grid sum-set)."""
    from cactus_theory.solvers._frontier import frontier, saturation_budget

    d = synthetic_data(2, 8, seed=3, truncated=False)
    q, p = d.target_probs, d.draft_probs
    n_budgets = 25
    eps, G = F.pooled_frontier(q, p, n_budgets=n_budgets, n_multipliers=400)
    top = float(np.max(saturation_budget(q, p)))
    grid = np.concatenate([[0.0], np.geomspace(top * 1e-5, top, n_budgets - 1)])
    Fi = frontier(q, p, grid).acceptance
    mean_eps = (grid[:, None] + grid[None, :]) / 2
    mean_acc = (Fi[0][:, None] + Fi[1][None, :]) / 2
    for e, g in zip(eps, G):
        best = mean_acc[mean_eps <= e + 1e-15].max()
        # rounding of sums of two floats: 1e-12 absolute
        np.testing.assert_allclose(g, best, rtol=0, atol=1e-12)
    sps = np.minimum(q, p).sum(-1).mean()
    np.testing.assert_allclose(G[0], sps, rtol=0, atol=1e-12)  # eps = 0 is SpS everywhere


def test_pooled_frontier_bounds_cactus_and_mentored_means():
    """Cactus's mean operating points lie below the pooled frontier (interpolated between its
    attained points: a lower bound of the true concave G, so this check is conservative up to
    the chord error, taken as 1e-3 with a 160-point budget grid)."""
    from cactus_theory.analysis.frontier import operating_points

    d = synthetic_data(16, 32)
    eps, G = F.pooled_frontier(d.target_probs, d.draft_probs)
    for name in ("cactus-taylor", "cactus-exact-kl"):
        op = operating_points(
            name,
            d.target_probs,
            d.draft_probs,
            knob="delta",
            values=[0.01, 0.1, 0.5, 1.0],
            divergences=("kl",),
        )
        kl, acc = op.divergences["kl"].mean(0), op.acceptance.mean(0)
        bound = np.interp(kl, eps, G)
        assert np.all(acc <= bound + 1e-3), (name, acc - bound)


def test_write_figures_is_byte_reproducible(tmp_path):
    a = F.write_figures(tmp_path / "a", ["worked_example"])
    b = F.write_figures(tmp_path / "b", ["worked_example"])
    assert [x.read_bytes() for x in a] == [y.read_bytes() for y in b]


# --------------------------------------------------------------------------- readable layout


def _layout(fig):
    import matplotlib.pyplot as plt

    from cactus_theory.figures._layout import layout_problems

    try:
        return layout_problems(fig)
    finally:
        plt.close(fig)


def test_layout_problems_sees_what_a_reader_cannot_read():
    from matplotlib.figure import Figure

    def fig_with(draw):
        fig = Figure(figsize=(4, 3), layout="constrained")
        ax = fig.add_subplot()
        ax.set(xlabel="x", ylabel="y")
        draw(fig, ax)
        return fig

    x = np.linspace(0, 1, 50)
    cases = {
        "overlap": lambda f, ax: (ax.text(0.5, 0.5, "one note"), ax.text(0.52, 0.5, "another note")),
        "hidden": lambda f, ax: (
            ax.plot(x, x**2, lw=1, label="below"),
            ax.plot(x, x**2 + 1e-3, lw=2, label="above"),
        ),
        "legend": lambda f, ax: (ax.plot(x, 1 - x, label="falling"), ax.legend(loc="upper left")),
        "note over bar": lambda f, ax: (
            ax.bar([0, 1], [1, 1]),
            ax.text(0.0, 0.5, "a note", transform=ax.transAxes),
        ),
        "cut": lambda f, ax: f.text(0.9, 0.5, "a long note that runs off the page"),
    }
    expected = {
        "overlap": "text 'one note' overlaps text 'another note'",
        "hidden": "line 'below' is hidden under line 'above' in axes 0",
        "legend": "legend of axes 0 covers line 'falling' in axes 0",
        "note over bar": "note 'a note' covers a bar in axes 0",
        "cut": "text 'a long note that runs off the page' is cut at the figure's edge",
    }
    for name, draw in cases.items():
        assert expected[name] in _layout(fig_with(draw)), name
    clean = {  # the same content laid out readably
        "apart": lambda f, ax: (ax.text(0.1, 0.2, "one note"), ax.text(0.1, 0.8, "another note")),
        "distinct": lambda f, ax: (ax.plot(x, x**2, label="a"), ax.plot(x, x**2 + 0.2, label="b")),
        "dashed above": lambda f, ax: (ax.plot(x, x, lw=1), ax.plot(x, x, ls="--", lw=1)),
        "legend outside": lambda f, ax: (
            ax.plot(x, 1 - x, label="falling"),
            ax.legend(loc="lower left", bbox_to_anchor=(0, 1)),
        ),
        "guide under legend": lambda f, ax: (
            ax.plot(x, x, label="rising"),
            ax.axhline(0.9, label="level"),
            ax.legend(loc="upper left"),
        ),
        "rotated ticks": lambda f, ax: ax.set_xticks(
            range(6), [f"category {i}" for i in range(6)], rotation=35, ha="right"
        ),
    }
    for name, draw in clean.items():
        assert _layout(fig_with(draw)) == [], name


def test_acceptance_vs_delta_keeps_coinciding_draft_lengths_visible():
    # on the distilled recording AL_8 and AL_20 coincide within a line's width (drafts are
    # rarely accepted 8 deep): without the per-m markers m = 8 is hidden under m = 20
    from cactus_theory.figures._layout import layout_problems

    trajs = dump_trajectories(real_dump("distilled"))[:8]
    fig = F.figure_acceptance_vs_delta(trajs, deltas=np.geomspace(0.01, 3, 6), ms=(2, 4, 8, 20))
    assert _layout(fig) == []
    fig = F.figure_acceptance_vs_delta(trajs, deltas=np.geomspace(0.01, 3, 6), ms=(2, 4, 8, 20))
    for line in fig.axes[1].get_lines():
        line.set_marker("None")
    assert "line '$m = 8$' is hidden under line '$m = 20$' in axes 1" in layout_problems(fig)


def test_multidraft_figures_layout_is_readable():
    from cactus_theory.logits.tree_dump import load_tree_dump

    rng = np.random.default_rng(0)  # notebook 12's pair
    q = rng.dirichlet(np.full(64, 0.3))
    p = 0.6 * rng.dirichlet(np.full(64, 0.3)) + 0.4 * q
    assert _layout(F.figure_multidraft_frontier(q, p, ks=(1, 2, 4, 8), eps_max=0.2)) == []
    assert _layout(F.figure_tree_budget(load_tree_dump().trees[:4], (0.02, 0.1))) == []

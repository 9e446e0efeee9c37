r"""Figures for papers: one function per figure, one style, and the registry that writes them.

Each figure function takes the user's data (q, p arrays, a loaded dump or trajectories), an
optional matplotlib ``ax``, and returns the Figure; its defaults reproduce the shipped figure
in ``figures/``. No function selects a matplotlib backend (the caller does, e.g.
``MPLBACKEND=Agg``); the style is applied through a ``matplotlib.rc_context``
(:mod:`._style`). :func:`write_figures` writes every registered figure as PDF (TrueType
vector text) and PNG (300 dpi); ``cactus-theory figures`` calls it. :func:`write_dump_figures`
draws the figures of :data:`_DUMP_FIGURES` from the user's own recordings (``cactus-theory
figures --input DUMP``: any file ``cactus-theory dump`` wrote, a folder of them, or a shipped
recording's name).

=================================  ===============================================  ==========
name                               what it shows                                    module
=================================  ===============================================  ==========
gamma                              Taylor point vs exact root over q_n              taylor
taylor_overshoot                   worst per-draft KL / delta, bound, delta*        taylor
taylor_exact_acceptance            exact minus Taylor acceptance, synthetic + real  taylor
worked_example                     q, p, h^(n) for two drafts, h_alg as bars        emitted
per_draft_vs_emitted               per-draft vs emitted KL band over positions      emitted
acceptance_vs_delta                acceptance and AL_m vs delta for several m       tradeoff
frontier                           every rule's operating points, pooled frontier   frontier
calibration                        delta needed for a target emitted KL             calibration
real_*                             the same on the shipped SmolLM2 recordings       (same)
real_acceptance_by_category        acceptance per prompt category and drafter       real
real_al_by_m                       exact AL_m against m for the four drafters       tradeoff
(``figure_audit``)                 rules at one emitted divergence (``ct.audit``)   audit
(``figure_multidraft_frontier``)   F_k against the budget for several k             multidraft
(``figure_tree_budget``)           trees: E[accepted drafts] against the spend      multidraft
=================================  ===============================================  ==========

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token,
:math:`\delta` budget, :math:`h_{alg}` the emitted distribution (Hao & Mou, ICLR 2026, arXiv
2604.04987, Theorem 3).
"""

from __future__ import annotations

from pathlib import Path

from ._calibration import figure_calibration
from ._data import dump_trajectories, real_data, synthetic_data, synthetic_trajectories
from ._emitted import WORKED_EXAMPLE, figure_per_draft_vs_emitted, figure_worked_example
from ._frontier import figure_frontier, pooled_frontier
from ._layout import layout_problems
from ._multidraft import figure_multidraft_frontier, figure_tree_budget
from ._real import figure_acceptance_by_category
from ._style import FORMATS, save_figure
from ._taylor import figure_gamma, figure_taylor_exact_acceptance, figure_taylor_overshoot
from ._tradeoff import figure_acceptance_vs_delta, figure_al_by_m
from ._widgets import slider_panel
from .audit import figure_audit

__all__ = [
    "slider_panel",
    "figure_gamma",
    "figure_taylor_overshoot",
    "figure_taylor_exact_acceptance",
    "figure_worked_example",
    "figure_per_draft_vs_emitted",
    "figure_acceptance_vs_delta",
    "figure_al_by_m",
    "figure_frontier",
    "pooled_frontier",
    "figure_calibration",
    "figure_acceptance_by_category",
    "figure_audit",
    "figure_multidraft_frontier",
    "figure_tree_budget",
    "load_dumps",
    "write_dump_figures",
    "write_figures",
    "synthetic_data",
    "synthetic_trajectories",
    "real_data",
    "dump_trajectories",
    "layout_problems",
    "WORKED_EXAMPLE",
]


def _real(fn, **kwargs):
    def make(seed: int = 0):
        from ._data import real_data

        return fn(real_data(seed=seed), **kwargs)

    return make


def _real_trajectories(seed: int = 0):
    from ._data import real_trajectories

    return figure_acceptance_vs_delta(real_trajectories(), ms=(1, 2, 4, 8))


def _seeded(fn):
    def make(seed: int = 0):
        from ._data import synthetic_data

        return fn(synthetic_data(seed=seed))

    return make


def _seeded_frontier(seed: int = 0):
    from ._data import synthetic_data

    return figure_frontier(synthetic_data(64, 128, seed=seed))


def _seeded_tradeoff(seed: int = 0):
    from ._data import synthetic_trajectories

    return figure_acceptance_vs_delta(synthetic_trajectories(seed=seed))


def _unseeded(fn):
    def make(seed: int = 0):
        return fn()

    return make


#: name -> callable(seed=0) returning the Figure the shipped ``figures/<name>.{pdf,png}`` holds.
_FIGURES = {
    "gamma": _unseeded(figure_gamma),
    "taylor_overshoot": _unseeded(figure_taylor_overshoot),
    "taylor_exact_acceptance": _unseeded(figure_taylor_exact_acceptance),
    "worked_example": _unseeded(figure_worked_example),
    "per_draft_vs_emitted": _seeded(figure_per_draft_vs_emitted),
    "acceptance_vs_delta": _seeded_tradeoff,
    "frontier": _seeded_frontier,
    "calibration": _seeded(figure_calibration),
    "real_per_draft_vs_emitted": _real(figure_per_draft_vs_emitted),
    "real_acceptance_vs_delta": _real_trajectories,
    "real_frontier": _real(figure_frontier),
    "real_calibration": _real(figure_calibration),
    "real_acceptance_by_category": _unseeded(figure_acceptance_by_category),
    "real_al_by_m": _unseeded(figure_al_by_m),
    "sequence_budget": lambda seed=0: _sequence_budget(seed=seed),
}


def _sequence_budget(seed: int = 0):
    from ._sequence_budget import figure_sequence_budget

    return figure_sequence_budget(seed=seed)


def _register_figure(name: str, make) -> None:
    """Add a figure to :data:`_FIGURES`: ``make(seed=0)`` returns a matplotlib Figure.

    Raises ValueError naming ``name`` if it is taken or not a plain identifier.
    """
    if not name.isidentifier():
        raise ValueError(f"name: {name!r} is not a plain identifier (it names the output files)")
    if name in _FIGURES:
        raise ValueError(f"name: figure {name!r} is already registered")
    _FIGURES[name] = make


def write_figures(out_dir, names=None, formats=FORMATS, seed: int = 0) -> list:
    """Render figures and write ``<out_dir>/<name>.<format>`` atomically; return the paths.

    Parameters
    ----------
    out_dir : str or Path
        Output folder (created if needed).
    names : sequence of str, optional
        Keys of :data:`_FIGURES` (default: all, in registry order).
    formats : sequence of {"pdf", "png"}
        PDF with TrueType vector text, PNG at 300 dpi.
    seed : int
        Seed of the synthetic data and of the real-position subsample.

    Returns
    -------
    list of Path
        In the order written (figure by figure, formats in the order given).

    Raises
    ------
    ValueError
        Naming ``names`` (unknown figure) or ``formats`` (unknown format), before anything is
        written.
    """
    import matplotlib.pyplot as plt

    names = list(_FIGURES) if not names else list(names)
    for name in names:
        if name not in _FIGURES:
            raise ValueError(f"names: unknown figure {name!r}; valid: {', '.join(_FIGURES)}")
    formats = tuple(formats) if formats else FORMATS
    for fmt in formats:
        if fmt not in FORMATS:
            raise ValueError(f"formats: unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        fig = _FIGURES[name](seed=seed)
        try:
            paths += save_figure(fig, out / name, formats)
        finally:
            plt.close(fig)
    return paths


# --------------------------------------------------------------------------- the user's recordings

#: Positions of a dump the per-position figures use (a seeded subsample, as the shipped real_*
#: figures do: the frontier's knob sweeps grow with the positions).
_DUMP_MAX_POSITIONS = 256


def _one_dump(fn, positions=True):
    def make(dumps, seed=0):
        from ._data import as_figure_data

        return [
            (label, fn(as_figure_data(d, max_positions=_DUMP_MAX_POSITIONS, seed=seed) if positions else d))
            for label, d in dumps.items()
        ]

    return make


def _all_dumps(fn):
    def make(dumps, seed=0):
        return [(None, fn(dict(dumps)))]

    return make


#: name -> callable(dumps, seed=0) returning ``[(label or None, Figure)]`` for ``dumps``, a dict
#: of label -> loaded :class:`~cactus_theory.logits.Dump`: the per-recording figures give one
#: figure per dump (named ``<name>_<label>``), the comparisons one for all.
_DUMP_FIGURES = {
    "per_draft_vs_emitted": _one_dump(figure_per_draft_vs_emitted),
    "acceptance_vs_delta": _one_dump(
        lambda d: figure_acceptance_vs_delta(d, ms=(1, 2, 4, 8)), positions=False
    ),
    "frontier": _one_dump(figure_frontier),
    "calibration": _one_dump(figure_calibration),
    "acceptance_by_category": _all_dumps(figure_acceptance_by_category),
    "al_by_m": _all_dumps(figure_al_by_m),
}


def load_dumps(inputs) -> dict:
    """Load recordings for :func:`write_dump_figures`: ``{label: Dump}``.

    Parameters
    ----------
    inputs : sequence of str or Path
        Dump files, folders of them (every ``.npz`` dump inside, in name order: ``cactus-theory
        dump`` writes one per drafter) or shipped recordings' names (``distilled``, ...).

    Returns
    -------
    dict
        Label (the file's stem) to :class:`~cactus_theory.logits.Dump`, in the order given.

    Raises
    ------
    ValueError
        Naming ``input``: a path that is neither a dump, a folder holding one, nor a shipped name.
    """
    from ..inputs import _shipped_pair_names
    from ..logits import load_dump
    from ..logits.internal import REAL_DIR

    inputs = [inputs] if isinstance(inputs, (str, Path)) else list(inputs or ())
    if not inputs:
        raise ValueError("input: give at least one dump file, folder of dumps or shipped recording")
    files = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            found = sorted(path.glob("*.npz"))
            if not found:
                raise ValueError(f"input: {path}: no .npz dump in this folder")
            files += found
        elif path.is_file():
            files.append(path)
        elif str(item) in _shipped_pair_names():
            files.append(REAL_DIR / f"smollm2-135m_{item}.npz")
        else:
            raise ValueError(
                f"input: {str(item)!r} is neither a dump file, a folder of dumps nor a shipped "
                f"recording ({', '.join(_shipped_pair_names())})"
            )
    dumps = {}
    for f in files:
        try:
            d = load_dump(f)
        except ValueError as exc:
            raise ValueError(f"input: {exc}") from None
        label = f.stem
        if label in dumps:
            raise ValueError(f"input: two recordings named {label!r}; give files with different names")
        dumps[label] = d
    return dumps


def write_dump_figures(out_dir, inputs, names=None, formats=FORMATS, seed: int = 0) -> list:
    """Draw :data:`_DUMP_FIGURES` from the user's recordings; write them atomically; return the paths.

    Parameters
    ----------
    out_dir : str or Path
        Output folder (created if needed).
    inputs : str, Path or sequence of them
        As :func:`load_dumps`.
    names : sequence of str, optional
        Keys of :data:`_DUMP_FIGURES` (default: all).
    formats : sequence of {"pdf", "png"}
    seed : int
        Seed of the positions' subsample (at most :data:`_DUMP_MAX_POSITIONS` per dump).

    Returns
    -------
    list of Path
        ``<out_dir>/<name>_<label>.<format>`` for a per-recording figure, ``<name>.<format>``
        for a comparison of every recording.

    Raises
    ------
    ValueError
        Naming ``names``, ``formats`` or ``input``, before anything is written.
    """
    import matplotlib.pyplot as plt

    names = list(_DUMP_FIGURES) if not names else list(names)
    for name in names:
        if name not in _DUMP_FIGURES:
            raise ValueError(
                f"names: {name!r} is not drawn from a dump; with --input: {', '.join(_DUMP_FIGURES)}"
            )
    formats = tuple(formats) if formats else FORMATS
    for fmt in formats:
        if fmt not in FORMATS:
            raise ValueError(f"formats: unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    dumps = load_dumps(inputs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        for label, fig in _DUMP_FIGURES[name](dumps, seed=seed):
            try:
                paths += save_figure(fig, out / (name if label is None else f"{name}_{label}"), formats)
            finally:
                plt.close(fig)
    return paths

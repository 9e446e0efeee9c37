"""The main job: the toolkit's exact results on embedded defaults, as data and as text.

Each section is a function ``section_<name>(seed=...)`` that returns a :class:`Section` (notes and
tables holding plain numbers; those on the synthetic families in ``_report_sections``, those on the
shipped data here). Sections defined outside the package plug in through the entry-point group
``cactus_theory.report_sections`` (this repository's lab declares ``claims``, the paper's claims
checked, in ``paper_checks/``: it runs from a checkout, not from an installed wheel), and
subcommands through ``cactus_theory.commands`` (the lab's ``benchmark``); the package imports
neither folder. :func:`compute_report` runs the chosen sections and returns a :class:`Report`; one formatter (:func:`format_table`, :func:`format_report`) prints
every table as aligned text, Markdown or CSV, and :meth:`Report.to_dict` gives the same numbers as
JSON-ready data. Everything is computed from seeded synthetic families (and, when shipped,
recorded real distributions), so the report is reproducible bit for bit.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``), n drafted token, delta the
per-draft budget, eps a target emitted divergence, h_alg the emitted distribution (Theorem 3 of
Hao & Mou, ICLR 2026).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._report_sections import (
    CALIBRATION_COLUMNS,
    CHAIN_COLUMNS,
    OPERATING_COLUMNS,
    Section,
    calibration_rows,
    chain_rows,
    family_table,
    operating_rows,
    rules_table,
    section_calibration,
    section_chain,
    section_families,
    section_frontier,
    section_rules,
    section_sequence_budget,
    section_taylor,
)
from ._tables import Column, Table, format_table
from .analysis.comparison import taylor_vs_exact_pairs

__all__ = [
    "Report",
    "SECTIONS",
    "compute_report",
    "format_report",
]

# --------------------------------------------------------------------------- data objects


@dataclass(frozen=True)
class Report:
    """The sections of one run of the main job, with the seed they used."""

    seed: int
    sections: tuple = field(default_factory=tuple)

    def table(self, name: str) -> Table:
        """The table called ``name`` (ValueError naming ``name`` if absent)."""
        for s in self.sections:
            for t in s.tables:
                if t.name == name:
                    return t
        raise ValueError(f"name: no table {name!r} in this report")

    def to_dict(self) -> dict:
        """The whole report as JSON-ready data (``json.dumps(..., allow_nan=False)`` accepts it)."""
        return {"seed": self.seed, "sections": [s.to_dict() for s in self.sections]}


# --------------------------------------------------------------------------- the formatter


def _format_section(section: Section, style: str = "text", figures_dir: str | None = None) -> str:
    """Print a :class:`Section`: heading, notes and tables in order (tables fenced in Markdown).

    ``figures_dir`` (Markdown only): the folder holding the figures, linked relative to it.
    """
    parts = [f"## {section.heading}"]
    for b in section.blocks:
        if isinstance(b, str):
            parts.append(b)
        elif style == "markdown" and b.layout == "grid":
            parts.append(format_table(b, "markdown"))
        elif style == "markdown":
            parts.append("```\n" + format_table(b, "text") + "\n```")
        else:
            parts.append(format_table(b, style))
    if style == "markdown" and section.figures:
        base = figures_dir or "figures"
        parts.append(
            "Figures: "
            + ", ".join(f"![{f}]({base}/{f}.png)" for f in section.figures)
            + " (written by `cactus-theory figures`)."
        )
    sep = "\n\n" if style == "markdown" else "\n"
    return sep.join(parts)


_REPORT_TITLE = "# cactus_theory report"
_REPORT_INTRO = (
    "Exact one-step analysis (float64). q = verifier, p = drafter, n = drafted token, "
    "delta = per-draft budget, eps = target emitted divergence."
)


def format_report(report: Report, style: str = "text", figures_dir: str | None = None) -> str:
    """Print a :class:`Report` as ``"text"``, ``"markdown"`` or ``"csv"``.

    CSV: one block per table, introduced by a ``# <table name>`` line.
    """
    if style == "csv":
        return (
            "\n\n".join(f"# {t.name}\n{format_table(t, 'csv')}" for s in report.sections for t in s.tables)
            + "\n"
        )
    head = f"{_REPORT_TITLE}\n{_REPORT_INTRO}" + (f" Seed {report.seed}." if style == "markdown" else "")
    return "\n\n".join([head] + [_format_section(s, style, figures_dir) for s in report.sections]) + "\n"


# --------------------------------------------------------------------------- sections


#: Rules of the real-data chain tables.
_REAL_CHAIN_RULES = (
    ("sps", {}),
    ("tas", {}),
    ("cactus-taylor", {"delta": 0.75}),
    ("cactus-taylor", {"delta": 1.0}),
    ("cactus-exact-kl", {"delta": 1.0}),
    ("mentored-kl", {}),
)


def _section_real(seed: int = 0, m: int = 8) -> Section:
    """The same analyses on the shipped real distributions (SmolLM2-135M and its drafters)."""
    from .analysis.rule_table import rule_table
    from .logits import load_dump, load_full_vocab_sample, shipped_dumps

    heading = "Real distributions: SmolLM2-135M-Instruct (verifier) and four drafters sharing its tokenizer"
    files = shipped_dumps()
    if not files:
        return Section("real", heading, ("(no shipped recordings found)",))
    blocks = [
        "Recorded by `cactus-theory dump --shipped`: 45 prompts (Spec-Bench categories, GSM8K, IFEval), "
        "sampling transforms temperature 0.6 / top-p 0.95 / top-k 20; raw = temperature 1. "
        "Per pair: per draft vs emitted KL for Cactus (as in the synthetic section), then exact chain "
        f"expectations at m = {m} (teacher-forced replay of the recorded trajectories)."
    ]
    dumps = {}
    for f in files:
        d = load_dump(f)
        name = f.stem.replace("smollm2-135m_", "")
        dumps[name] = d
        q, p, rq, rp = d.pairs()
        res = taylor_vs_exact_pairs(q, p, (0.1, 0.75, 1.0), "kl")
        blocks.append(
            family_table(
                res, f"real/{name}/per-draft-vs-emitted", f"[drafter {name}: {q.shape[0]} positions]"
            )
        )
        trajs = [t for t in d.trajectories() if t.target_probs.shape[0] >= 2]
        blocks.append(
            Table(
                f"real/{name}/chain",
                f"[drafter {name}: exact chains, m = {m}]",
                CHAIN_COLUMNS,
                tuple(chain_rows(trajs, m, _REAL_CHAIN_RULES)),
            )
        )
    if "distilled" in dumps:
        q, p, rq, rp = dumps["distilled"].pairs()
        blocks.append(
            rules_table(
                rule_table(q, p, raw_target_probs=rq, raw_draft_probs=rp),
                "real/distilled/rules",
                f"[every rule at default knobs, drafter distilled, {q.shape[0]} positions, means]",
                False,
            )
        )
        blocks.append(
            Table(
                "real/distilled/operating-points",
                f"Operating points against the KL frontier, drafter distilled (means over "
                f"{q.shape[0]} positions; raw rows for TAS's entropy and the cascades):",
                OPERATING_COLUMNS,
                tuple(operating_rows(q, p, rq, rp)),
            )
        )
        blocks.append(
            Table(
                "real/distilled/calibration",
                "Calibration on the distilled pair (Cactus-Taylor): acceptance at emitted KL <= eps",
                CALIBRATION_COLUMNS,
                tuple(calibration_rows(q, p, label="distilled")),
            )
        )
    for which, model in (("smollm2", "SmolLM2-135M-Instruct"), ("gemma3", "Gemma-3-270M")):
        Q, P = load_full_vocab_sample(which)
        res = taylor_vs_exact_pairs(Q, P, (0.1, 1.0), "kl")
        blocks.append(
            family_table(
                res,
                f"real/full-vocab-{which}",
                f"[full vocabulary V = {Q.shape[1]}: {model} (raw, T = 1) vs its 4-bit "
                f"re-quantization, {Q.shape[0]} positions]",
            )
        )
    return Section("real", heading, tuple(blocks))


#: Positions per shipped recording in the report's audit (whole trajectories: the first one or
#: two prompts), and its target: mean per-token KL(h_alg||q) in nats.
_AUDIT_POSITIONS = 48
_AUDIT_EPS = 0.1


def _section_audit(seed: int = 0, eps: float = _AUDIT_EPS, positions: int = _AUDIT_POSITIONS) -> Section:
    """Every rule calibrated to one true emitted KL on the shipped recordings (ct.audit)."""
    from .logits import eos_token_id, load_dump, shipped_dumps
    from .simulate.audit import audit
    from .simulate.internal import audit_table, corpus_from_dump

    heading = "The audit: every rule at the same true emitted divergence (shipped recordings)"
    files = shipped_dumps()
    if not files:
        return Section("audit", heading, ("(no shipped recordings found)",))
    blocks = [
        f"Each rule's first numeric knob is bisected within its published range so that the mean "
        f"per-token KL(h_alg||q) of what it emits is eps = {eps:g} nats (`cactus-theory audit`; "
        f"the first {positions}+ positions of each recording: whole prompts). status: calibrated "
        "(within 0.1% below eps), step (the divergence jumps over eps: a 0/1 rule, an integer knob or "
        "an infinite KL), range-end (the range never reaches eps), above (even the least knob exceeds "
        "eps), reference (lossless). a-a_SpS: the relaxed-only acceptance; AL_m exact, teacher-forced; "
        "gap: frontier at the rule's own per-position KL minus its acceptance; h-q(EOS): mean shift of "
        "the end-of-sequence probability; len ratio = mean q(EOS) / mean h(EOS) (geometric stopping). "
        "cactus-calibrated is left out (its knob is already a per-position budget on the emitted KL)."
    ]
    runs = [(f, "processed") for f in files] + [(f, "raw") for f in files if "distilled" in f.name]
    for f, rows in runs:
        name = f.stem.replace("smollm2-135m_", "")
        d = load_dump(f)
        corpus = corpus_from_dump(d, rows=rows, max_positions=positions, eos_token_id=eos_token_id(d.meta))
        res = audit(corpus, eps=eps, rows=rows)
        blocks.append(audit_table(res, f"audit/{name}" + ("/raw" if rows == "raw" else "")))
    return Section("audit", heading, tuple(blocks))


#: The report's trees section: the spend per verification and the budgets of the root frontier.
_TREE_BUDGET = 0.1
_TREE_FRONTIER_EPS = (0.0, 0.01, 0.1)


def _section_trees(seed: int = 0, budget: float = _TREE_BUDGET) -> Section:
    """Many drafts and trees: the k-draft frontier and trees at one sequence KL (shipped real trees)."""
    from .analysis.tree_budget import _top_chain, tree_budget_rows
    from .logits.tree_dump import load_tree_dump
    from .solvers import frontier, multidraft_frontier

    heading = "Many drafts and trees: the k-draft frontier and trees at one sequence KL"
    try:
        trees = load_tree_dump().trees
    except (OSError, ValueError):
        return Section("trees", heading, ("(no shipped tree dump found)",))
    rows = []
    for k in (1, 2, 4, 8):
        acc = np.mean(
            [
                multidraft_frontier(t.target_probs[0], t.draft_probs[0], k, _TREE_FRONTIER_EPS).acceptance
                for t in trees
            ],
            axis=0,
        )
        row = {"k": k, **{f"F_{e:g}": float(a) for e, a in zip(_TREE_FRONTIER_EPS, acc, strict=True)}}
        if k == 1:  # the single-draft frontier, for comparison
            single = np.mean(
                [frontier(t.target_probs[0], t.draft_probs[0], _TREE_FRONTIER_EPS).acceptance for t in trees],
                0,
            )
            row["single_draft_max_gap"] = float(np.max(np.abs(acc - single)))
        rows.append(row)
    cols = (Column("k", "k", "d"),) + tuple(
        Column(f"F_{e:g}", f"F_k(KL {e:g})", ".4f") for e in _TREE_FRONTIER_EPS
    )
    frontier_table = Table(
        "trees/frontier",
        f"the best acceptance of k i.i.d. drafts from the root rows, within KL eps (mean over {len(trees)} roots)",
        cols,
        tuple(rows),
    )
    lossless = ("optimal", "traversal", "rrs-without-replacement")
    brows = tree_budget_rows(trees, budget, "kl", lossless=lossless)
    chains = [_top_chain(t) for t in trees]
    for r in tree_budget_rows(chains, budget, "kl"):  # the single-chain baseline: SpS and Cactus
        label = {"optimal": "top-1 chain: SpS", "optimal-budget": "top-1 chain: Cactus (exact)"}
        if r["verifier"] in label:
            r["verifier"] = label[r["verifier"]]
            r["gain"] = r["expected_accepted"] - brows[0]["expected_accepted"]
            brows.append(r)
    brows = tuple(brows)
    budget_table = Table(
        "trees/budget",
        f"E[accepted drafts] per verification of the {len(trees)} shipped top-k trees at KL {budget:g} per "
        "verification (means over trees)",
        (
            Column("verifier", "verifier", "s"),
            Column("knob", "set by", "s"),
            Column("expected_accepted", "E[L]", ".4f"),
            Column("spend", "KL spent", ".4f"),
            Column("gain", "E[L] - optimal lossless", "+.4f"),
        ),
        brows,
    )
    gap = rows[0]["single_draft_max_gap"]
    notes = (
        "F_k (solvers._multidraft.multidraft_frontier): the largest acceptance of any verifier of k i.i.d. drafts "
        "whose emitted law is within the KL budget of q, exact (one taut-string path for every divergence); at "
        f"k = 1 it equals the single-draft frontier (largest gap here {gap:.1e}).",
        "Trees (analysis.tree_budget): the shipped SmolLM2-135M trees (top-k children, widths 3, 2, 1). "
        "optimal-budget spends one per-node KL delta, optimal-multiplier one multiplier lam for every node (the "
        "tree analogue of sequence-budget-kl), each calibrated per tree so that the exact KL of one "
        "verification's emitted block is the budget or, where a tree cannot spend it, its most; lossless "
        "verifiers spend nothing. The top-1 chain rows verify only each tree's chain of most likely drafts "
        "(one deterministic draft per node): SpS there is the lossless optimum and Cactus (exact, one delta) "
        "the budgeted one.",
    )
    return Section("trees", heading, (notes[0], frontier_table, notes[1], budget_table))


SECTIONS = {
    "taylor": section_taylor,
    "families": section_families,
    "rules": section_rules,
    "frontier": section_frontier,
    "calibration": section_calibration,
    "chain": section_chain,
    "real": _section_real,
    "sequence": section_sequence_budget,
    "audit": _section_audit,
    "trees": _section_trees,
}

#: The entry-point group of sections defined outside the package: ``name = "module:function"``,
#: the function taking ``seed=`` and returning a :class:`Section` (this repository declares its
#: lab's ``claims`` there; its module lives in a checkout, not in the wheel).
_SECTION_GROUP = "cactus_theory.report_sections"

#: The entry-point group of subcommands defined outside the package (``cactus-theory <name>``):
#: ``name = "module"``, a module with ``HELP`` (one line), ``add_arguments(parser)`` and
#: ``run(args)`` returning a value with ``to_text()`` and ``to_dict()``.
_COMMAND_GROUP = "cactus_theory.commands"


def _entry_points(group: str) -> dict:
    """The entry points of ``group``, by name (none where no distribution declares one)."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=group)}


def _load_entry_point(ep, what: str):
    """``ep.load()``; a module it names that is not importable here is one ValueError naming
    ``what``. This distribution's own entry points name the repository's lab (``paper_checks/``,
    ``benchmarks/``), importable from a checkout only: the message says so."""
    try:
        return ep.load()
    except ModuleNotFoundError as exc:
        module = ep.value.split(":")[0].strip()
        if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
            raise  # a module the plugin itself imports is missing: not the plugin's absence
        where = (
            f"a checkout of the repository ({exc.name.split('.')[0]}/ beside cactus_theory/, on the "
            "path of an editable install: ./dev setup)"
            if _declared_here(ep)
            else f"{exc.name}, not importable here"
        )
        raise ValueError(f"{what} needs {where}") from None


def _declared_here(ep) -> bool:
    """True when this package's own distribution declares ``ep`` (its ``pyproject.toml``)."""
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        own = distribution("cactus-theory").entry_points
    except PackageNotFoundError:  # the sources run without being installed
        return False
    return any((e.group, e.name, e.value) == (ep.group, ep.name, ep.value) for e in own)


def _all_sections() -> dict:
    """Name -> section function for :data:`SECTIONS`, then name -> entry point for those of
    ``cactus_theory.report_sections`` (loaded when run)."""
    return {**SECTIONS, **{n: ep for n, ep in _entry_points(_SECTION_GROUP).items() if n not in SECTIONS}}


def _section_summaries() -> dict:
    """One line per section (its function's summary), for ``cactus-theory report --help``."""
    out = {}
    for name, fn in _all_sections().items():
        if not callable(fn):
            try:
                fn = _load_entry_point(fn, f"sections: {name}")
            except ValueError as exc:
                out[name] = f"({exc})"
                continue
        out[name] = (fn.__doc__ or name).strip().splitlines()[0]
    return out


def _loadable(name, fn) -> bool:
    if callable(fn):
        return True
    try:
        _load_entry_point(fn, name)
    except ValueError:
        return False
    return True


def _check_sections(sections) -> list:
    everything = _all_sections()
    if not sections:  # every section this install can run (a lab's only from a checkout)
        return [n for n, fn in everything.items() if _loadable(n, fn)]
    names = list(sections)
    for name in names:
        if name not in everything:
            raise ValueError(f"sections: unknown section {name!r}; valid: {', '.join(everything)}")
    return names


def _section(name: str):
    fn = _all_sections()[name]
    return fn if callable(fn) else _load_entry_point(fn, f"sections: {name}")


def compute_report(sections=None, seed: int = 0, progress: bool = False) -> Report:
    """Run the report's sections (all by default) and return their data.

    Parameters
    ----------
    sections : sequence of str, optional
        Keys of :data:`SECTIONS` or of the entry-point group ``cactus_theory.report_sections`` (this
        repository's lab declares ``claims`` there: importable from a checkout only; asked for
        by name from an installed wheel, it raises ValueError naming ``sections``); unknown keys
        raise ValueError naming ``sections``. Default: every section this install can run.
    seed : int
        Seed of every synthetic family.
    progress : bool
        Show a tqdm progress bar over the sections (on stderr).
    """
    from tqdm.auto import tqdm

    names = _check_sections(sections)
    out = []
    with tqdm(names, desc="report sections", disable=not progress, unit="section") as bar:
        for name in bar:
            bar.set_postfix_str(name)
            out.append(_section(name)(seed=seed))
    return Report(seed=seed, sections=tuple(out))

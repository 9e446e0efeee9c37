"""Regenerate README.md's result tables from a fresh report (no hand-pasted numbers).

Every generated block sits between two markers in README.md::

    <!-- BEGIN generated:NAME (scripts/update_readme.py) -->
    ...
    <!-- END generated:NAME -->

and :data:`BLOCKS` says what each NAME holds: a table of the report (``cactus_theory.report``),
optionally filtered to some rows and columns, or a sentence computed from a table. Usage::

    python scripts/update_readme.py            # rewrite README.md in place (atomically)
    python scripts/update_readme.py --check    # exit 1 and name the blocks that differ
    python scripts/update_readme.py --sections taylor rules   # only blocks of these sections

``tests/test_readme.py`` fails when README.md and a fresh report disagree.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
if str(ROOT) not in sys.path:  # run as a script from anywhere: import this checkout's package
    sys.path.insert(0, str(ROOT))

from cactus_theory.report import Table, compute_report, format_table  # noqa: E402


@dataclass(frozen=True)
class Block:
    """One generated block: report tables (by name), a row filter and dropped columns, or a text
    function of the report."""

    tables: tuple = ()
    where: tuple = ()  # ((column key, allowed values), ...)
    drop: tuple = ()
    text: object = None
    fenced: bool = True

    @property
    def sections(self) -> set:
        names = set(t.split("/")[0] for t in self.tables)
        return names or {"calibration"}


def _calibration_sentence(report) -> str:
    rows = report.table("calibration/noisy-copy").rows

    def ratio(label):
        r = [row["eps"] / row["global_delta"] for row in rows if row["rows"] == label]
        return f"{min(r):.2g}-{max(r):.2g}x"

    below = sum(r["acceptance_per_position"] <= r["acceptance_mentored"] + 1e-9 for r in rows)  # solver rounding
    beats = [r for r in rows if r["acceptance_global"] > r["acceptance_mentored"]]
    where = sorted(set(r["rows"] for r in beats))
    s = (f"eps / delta (the one global delta): {ratio('untruncated')} untruncated, "
         f"{ratio('truncated')} truncated. Mentored decoding (acceptance-optimal with KL <= eps at "
         f"every position) is at or above the per-position calibration on {below} of {len(rows)} rows")
    if beats:
        s += (f"; the one global delta, which meets eps only on average (about half the positions "
              f"exceed it), beats Mentored on {len(beats)} of {len(rows)} rows ({', '.join(where)}).")
    else:
        s += "; the one global delta, which meets eps only on average, stays below Mentored on every row."
    return s


#: What each marker holds.
BLOCKS = {
    "taylor-grid": Block(("taylor/grid",), where=(("q_n", (0.05, 0.35, 0.5, 0.9)),
                                                  ("delta", (0.01, 0.1, 0.5, 1.0)))),
    "families-noisy-copy-truncated": Block(("families/noisy_copy/truncated",), where=(("delta", (0.1, 1.0)),)),
    "rules-noisy-copy-truncated": Block(("rules/noisy-copy-truncated",), drop=("knobs",)),
    "frontier": Block(("frontier/F", "frontier/operating-points")),
    "calibration": Block(("calibration/noisy-copy",)),
    "calibration-sentence": Block(text=_calibration_sentence, fenced=False),
    "chain": Block(("chain/noisy-copy",)),
    "real-early-exit": Block(("real/early-exit-25/per-draft-vs-emitted",)),
    "real-distilled-chain": Block(("real/distilled/chain",)),
    "real-gemma3": Block(("real/full-vocab-gemma3",)),
}

BEGIN = "<!-- BEGIN generated:{name} (scripts/update_readme.py) -->"
END = "<!-- END generated:{name} -->"
_PATTERN = re.compile(r"<!-- BEGIN generated:(?P<name>[\w.-]+) \(scripts/update_readme\.py\) -->\n"
                      r"(?P<body>.*?)\n?<!-- END generated:(?P=name) -->", re.S)


def _filtered(table: Table, block: Block) -> Table:
    def keep(row):
        return all(any(math.isclose(float(row[k]), v, rel_tol=1e-12) for v in allowed)
                   for k, allowed in block.where)

    cols = tuple(c for c in table.columns if c.key not in block.drop)
    return Table(table.name, table.title, cols, tuple(r for r in table.rows if keep(r)), table.layout)


def render_block(report, name: str) -> str:
    """The text of block ``name`` from ``report`` (a :class:`cactus_theory.report.Report`)."""
    block = BLOCKS[name]
    if block.text is not None:
        body = block.text(report)
    else:
        body = "\n\n".join(format_table(_filtered(report.table(t), block), "text") for t in block.tables)
    return f"```\n{body}\n```" if block.fenced else body


def blocks_for(sections=None) -> list:
    """Names of the blocks whose tables come from ``sections`` (all blocks when None)."""
    return [n for n, b in BLOCKS.items() if sections is None or b.sections <= set(sections)]


def generate(names=None, seed: int = 0, progress: bool = False) -> dict:
    """Compute a fresh report (only the sections needed) and render the blocks ``names``."""
    names = list(BLOCKS) if names is None else list(names)
    sections = sorted(set().union(*(BLOCKS[n].sections for n in names))) if names else []
    report = compute_report(sections, seed=seed, progress=progress)
    return {n: render_block(report, n) for n in names}


def readme_blocks(text: str) -> dict:
    """The generated blocks currently in a README text: name -> body."""
    return {m.group("name"): m.group("body") for m in _PATTERN.finditer(text)}


def replace_blocks(text: str, blocks: dict) -> str:
    """``text`` with each block's body replaced (ValueError naming a block whose markers are missing)."""
    present = readme_blocks(text)
    for name in blocks:
        if name not in present:
            raise ValueError(f"README.md: no markers for block {name!r} ({BEGIN.format(name=name)})")

    def sub(m):
        name = m.group("name")
        if name not in blocks:
            return m.group(0)
        return f"{BEGIN.format(name=name)}\n{blocks[name]}\n{END.format(name=name)}"

    return _PATTERN.sub(sub, text)


def main(argv=None) -> int:
    """Command line: rewrite README.md, or ``--check`` it (exit 1 naming the stale blocks)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare only; exit 1 if README.md is stale")
    ap.add_argument("--sections", nargs="*", default=None, help="only the blocks of these report sections")
    ap.add_argument("--readme", default=str(README))
    args = ap.parse_args(argv)
    path = Path(args.readme)
    text = path.read_text()
    fresh = generate(blocks_for(args.sections), progress=True)
    if args.check:
        current = readme_blocks(text)
        stale = [n for n, body in fresh.items() if current.get(n) != body]
        if stale:
            print(f"README.md is stale: {', '.join(stale)} (run python scripts/update_readme.py)", file=sys.stderr)
            return 1
        print(f"README.md matches a fresh report ({len(fresh)} blocks)")
        return 0
    from cactus_theory._io import atomic_write_text

    new = replace_blocks(text, fresh)
    if new != text:
        atomic_write_text(path, new)
    print(f"updated {len(fresh)} blocks in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

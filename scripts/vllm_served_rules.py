#!/usr/bin/env python
r"""The vLLM plugin's served-rules table in ``docs/vllm.md``, generated from the registry.

For each registered single-draft rule (no aliases): how the plugin serves it
(:func:`cactus_theory.integrations.vllm._config.serving_path`: vLLM's own kernels on the
substituted verifier rows, or the toolkit's sampler in their place), the model runners that
serve it, and whether it reads the raw rows (``RuleSpec.needs_raw``; the OPT cascade's processed
gate reads none). The table sits between this script's markers in ``docs/vllm.md``;
``tests/integrations/test_vllm_plugin.py`` checks that it is the table this script writes.

Usage::

    python scripts/vllm_served_rules.py          # rewrite the block in docs/vllm.md
    python scripts/vllm_served_rules.py --check  # exit 1 if the block is out of date
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

import cactus_theory.analysis  # noqa: F401  (registers cactus-calibrated)
from cactus_theory.integrations.vllm._config import serving_path
from cactus_theory.rules import get_rule, rule_names

PAGE = Path(__file__).resolve().parents[1] / "docs" / "vllm.md"
BEGIN = "<!-- BEGIN served-rules (scripts/vllm_served_rules.py) -->"
END = "<!-- END served-rules -->"
_BLOCK = re.compile(re.escape(BEGIN) + r"\n(?P<body>.*?)\n?" + re.escape(END), re.S)

_HOW = {
    "rows": "vLLM's kernels on the rows of h (Theorem 3)",
    "sampler": "the toolkit's sampler, built once from the declaration",
}
_RUNNERS = {"rows": "both", "sampler": "older (MRV1) only"}


def table() -> str:
    """The served-rules table (Markdown), one row per registered single-draft rule."""
    lines = [
        "| rule | served by | model runners | reads raw rows |",
        "|---|---|---|---|",
    ]
    for name in rule_names():
        rule = get_rule(name)
        path = serving_path(rule)
        raw = "yes" if rule.spec.needs_raw and getattr(rule, "reads_raw", True) else "no"
        lines.append(f"| `{name}` | {_HOW[path]} | {_RUNNERS[path]} | {raw} |")
    return "\n".join(lines)


def render(page_text: str) -> str:
    """``page_text`` with the block between the markers replaced by :func:`table`."""
    if not _BLOCK.search(page_text):
        raise ValueError(f"page: no block between {BEGIN!r} and {END!r}")
    return _BLOCK.sub(lambda m: f"{BEGIN}\n{table()}\n{END}", page_text, count=1)


def main(argv=None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--check", action="store_true", help="exit 1 if docs/vllm.md is out of date")
    ns = args.parse_args(argv)
    text = PAGE.read_text()
    new = render(text)
    if ns.check:
        return 0 if new == text else 1
    fd, tmp = tempfile.mkstemp(dir=PAGE.parent, suffix=".md")
    with os.fdopen(fd, "w") as f:
        f.write(new)
    os.replace(tmp, PAGE)
    return 0


if __name__ == "__main__":
    sys.exit(main())

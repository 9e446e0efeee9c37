"""The rule modules hold maths only: no backend or compile-state branches.

A rule (:mod:`cactus_theory.rules`) is written once, array-agnostic (numpy float64 in the
analysis, torch float32 in the samplers, through the array API); torch speed paths live in
:mod:`cactus_theory.samplers._kernels`. This test reads the code of every ``rules/*.py`` (its
tokens: docstrings and comments, which may name torch functions, are left out) and fails on
any import of torch, any ``torch.`` attribute, a ``hasattr(`` backend test, a compile-state
test (``is_compiling``), a ``.device`` read or an ``isinstance`` test for numpy arrays.
"""

import pathlib
import re
import tokenize

import pytest

RULES_DIR = pathlib.Path(__file__).resolve().parents[2] / "cactus_theory" / "rules"

#: (what, pattern on the code with strings and comments removed)
FORBIDDEN = [
    ("import torch", re.compile(r"\bimport\s+torch\b|\bfrom\s+torch\b")),
    ("torch.", re.compile(r"\btorch\s*\.")),
    ("hasattr(", re.compile(r"\bhasattr\s*\(")),
    ("is_compiling", re.compile(r"\bis_compiling\b")),
    (".device", re.compile(r"\.\s*device\b")),
    ("isinstance(..., ndarray)", re.compile(r"\bisinstance\s*\([^)]*\bndarray\b")),
]


def _code_lines(path):
    """{line number: the line's code}, strings and comments dropped (tokenize)."""
    lines = {}
    with open(path, "rb") as f:
        tokens = list(tokenize.tokenize(f.readline))
    for tok in tokens:
        if tok.type in (
            tokenize.STRING,
            tokenize.COMMENT,
            tokenize.ENCODING,
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            continue
        if getattr(tokenize, "FSTRING_START", None) is not None and tok.type in (
            tokenize.FSTRING_START,
            tokenize.FSTRING_MIDDLE,
            tokenize.FSTRING_END,
        ):
            continue
        row = tok.start[0]
        lines[row] = lines.get(row, "") + (" " if lines.get(row) else "") + tok.string
    return lines


def _violations(path):
    found = []
    for row, code in sorted(_code_lines(path).items()):
        # tokens are joined by spaces: "torch . cond" still matches r"torch\s*\."
        for what, pattern in FORBIDDEN:
            if pattern.search(code):
                found.append(f"{path.name}:{row}: {what}: {code.strip()}")
    return found


RULE_FILES = sorted(RULES_DIR.rglob("*.py"))


def test_the_rule_modules_are_found():
    names = {p.name for p in RULE_FILES}
    assert {
        "plans.py",
        "registry.py",
        "_cactus.py",
        "_tas.py",
        "_fuzzy.py",
        "_cascades.py",
        "_topk.py",
        "_interpolation.py",
        "_sps.py",
    } <= names


@pytest.mark.parametrize("path", RULE_FILES, ids=[str(p.relative_to(RULES_DIR)) for p in RULE_FILES])
def test_no_backend_or_compile_state_branch_in_a_rule_module(path):
    assert _violations(path) == []


def test_the_check_sees_what_it_forbids(tmp_path):
    """Each forbidden form in code is reported; the same words in a docstring or a comment
    are not."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        '"""torch.cond and hasattr( in a docstring."""\n'
        "import torch  # torch.compile\n"
        "x = torch.zeros(3)\n"
        "if hasattr(x, 'clamp_min_'):\n"
        "    y = torch.compiler.is_compiling()\n"
        "z = x.device\n"
        "if isinstance(x, np.ndarray):\n"
    )
    found = _violations(bad)
    assert [f.split(":")[1] for f in found] == ["2", "3", "4", "5", "5", "6", "7"]
    assert any("is_compiling" in f for f in found)

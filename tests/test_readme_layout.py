"""The README's layout table matches the package: every file or folder it names exists and is
public (no private module named as if a user could open it), and every public module and
subpackage of ``cactus_theory`` has its row."""

import pkgutil
import re
from pathlib import Path

import cactus_theory

ROOT = Path(__file__).resolve().parents[1]
#: A backticked file or folder: ``name.py``, ``path/to/name.py`` or ``folder/``.
_PATH = re.compile(r"`([\w./-]+\.py|[\w./-]+/)`")


def layout_rows(text: str) -> list[tuple[str, str]]:
    """(first cell, whole row) of each row of the README's ``## Layout`` table."""
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and not ln.startswith("| folder")]
    return [(ln.strip("|").split(" | ")[0].strip(), ln) for ln in rows]


def resolve(token: str, first_cell: str) -> Path | None:
    """The path ``token`` names: from the repository root, the package, or a folder of the row."""
    bases = [ROOT, ROOT / "cactus_theory"]
    for named in _PATH.findall(first_cell):
        folder = named if named.endswith("/") else str(Path(named).parent) + "/"
        bases += [ROOT / folder, ROOT / "cactus_theory" / folder]
    for base in bases:
        if (base / token).exists():
            return (base / token).resolve()
    return None


def layout_problems(text: str) -> list[str]:
    out = []
    for first, row in layout_rows(text):
        for token in _PATH.findall(row):
            path = resolve(token, first)
            if path is None:
                out.append(f"{token}: no such file or folder (row {first})")
            elif any(p.startswith("_") and p != "__init__.py" for p in path.relative_to(ROOT).parts):
                out.append(f"{token}: a private module (row {first})")
    return out


def test_the_check_finds_a_missing_and_a_private_module():
    text = (
        "\n## Layout\n\n| folder | what |\n|---|---|\n"
        "| `cactus_theory/solvers/` | the root (`spike.py`), the frontier (`_frontier.py`) |\n\n## Next\n"
    )
    assert layout_problems(text) == [
        "spike.py: no such file or folder (row `cactus_theory/solvers/`)",
        "_frontier.py: a private module (row `cactus_theory/solvers/`)",
    ]


def test_every_path_the_layout_names_exists_and_is_public():
    assert layout_problems((ROOT / "README.md").read_text()) == []


def test_every_public_module_of_the_package_has_a_row():
    text = (ROOT / "README.md").read_text()
    named = {
        p.relative_to(ROOT / "cactus_theory").parts[0]
        for first, row in layout_rows(text)
        for token in _PATH.findall(row)
        if (p := resolve(token, first)) is not None and (ROOT / "cactus_theory") in p.parents
    }
    public = {
        m.name + ("" if m.ispkg else ".py")
        for m in pkgutil.iter_modules(cactus_theory.__path__)
        if not m.name.startswith("_")
    }
    assert public - named == set()

"""The lab stays outside the package: no module of ``cactus_theory/`` imports ``paper_checks``
or ``benchmarks`` (the checkout's lab folders); they plug in through pyproject.toml's entry
points (``cactus_theory.report_sections``, ``cactus_theory.commands``) instead."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAB = ("paper_checks", "benchmarks")


def lab_imports(package: Path) -> list[str]:
    """``file:line module`` for every import of a lab folder in ``package``'s ``.py`` files:
    ``import x``, ``from x import``, and a string naming one passed to ``import_module``,
    ``__import__`` or ``spec_from_file_location`` (an import by name or by path)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            elif isinstance(node, ast.Call):
                f = node.func
                called = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if called in ("import_module", "__import__", "spec_from_file_location", "lab_module"):
                    names = [
                        a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
                    ]
            for name in names:
                top = name.replace("/", ".").split(".")[0]
                if top in LAB:
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno} {name}")
    return found


def test_the_package_imports_no_lab_folder():
    assert lab_imports(ROOT / "cactus_theory") == []
    assert not (ROOT / "cactus_theory" / "_lab.py").exists()


@pytest.mark.parametrize(
    "source",
    [
        "import benchmarks.run\n",
        "from paper_checks import check_claims\n",
        "def f():\n    from benchmarks.run import QUICK_RULES\n",
        "import importlib\nimportlib.import_module('paper_checks.verdicts')\n",
        "__import__('benchmarks')\n",
    ],
)
def test_a_planted_lab_import_is_found(tmp_path, source):
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("from . import sub\nimport json\n")
    assert lab_imports(package) == []  # json and the package's own imports are not the lab
    (package / "sub" / "mod.py").write_text(source)
    found = lab_imports(package)
    assert len(found) == 1 and found[0].startswith("pkg/sub/mod.py:"), found

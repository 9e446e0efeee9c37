"""Every public function and class (each module's __all__) has a docstring."""

import importlib
import inspect
import pkgutil

import pytest

import cactus_theory

MODULES = sorted(m.name for m in pkgutil.walk_packages(cactus_theory.__path__, "cactus_theory."))


@pytest.mark.parametrize("modname", MODULES)
def test_public_names_are_documented(modname):
    module = importlib.import_module(modname)
    assert module.__doc__ and module.__doc__.strip(), f"{modname} has no module docstring"
    missing = []
    for name in getattr(module, "__all__", []):
        obj = getattr(module, name)
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and not (obj.__doc__ or "").strip():
            missing.append(name)
    assert not missing, f"{modname}: undocumented public names {missing}"


def test_no_invalid_escape_sequences():
    # Python 3.12+ raises SyntaxWarning for them (an error under this suite's filterwarnings);
    # docstrings with TeX must be raw strings.
    import pathlib
    import warnings

    root = pathlib.Path(cactus_theory.__file__).resolve().parent
    bad = []
    for path in sorted(root.rglob("*.py")) + sorted((root.parent / "scripts").glob("*.py")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            compile(path.read_text(), str(path), "exec")
        bad += [f"{path.name}:{w.lineno}: {w.message}" for w in caught]
    assert not bad


def _control_characters(source: str) -> list:
    """(line, character) of every control character but newline and tab in a module's source: a
    valid escape in a non-raw docstring (``\\a`` of ``\\alpha``, ``\\b`` of ``\\beta``, ``\\f`` of
    ``\\frac``, ``\\v`` of ``\\varepsilon``) turns TeX into a bell, a backspace or a form feed."""
    import ast

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [(node.lineno, repr(ch)) for ch in node.value if ord(ch) < 32 and ch not in "\n\t"]
    found += [
        (i, repr(ch))
        for i, line in enumerate(source.splitlines(), 1)
        for ch in line
        if ord(ch) < 32 and ch != "\t"
    ]
    return sorted(set(found))


def test_the_control_character_scan_finds_planted_ones():
    planted = 'def f():\n    """:math:`1 - \\alpha`, :math:`\\frac{a}{b}`."""\n' + "x = '\x07pprox'\n"
    # line 2: the docstring's \a and \f escapes; line 3: a bell written into the file itself
    assert _control_characters(planted) == [(2, "'\\x07'"), (2, "'\\x0c'"), (3, "'\\x07'")]


def test_no_string_in_the_package_holds_a_control_character():
    import pathlib

    root = pathlib.Path(cactus_theory.__file__).resolve().parent
    bad = {
        path.relative_to(root).as_posix(): found
        for path in sorted(root.rglob("*.py"))
        if (found := _control_characters(path.read_text()))
    }
    assert not bad

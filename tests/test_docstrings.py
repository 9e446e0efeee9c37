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

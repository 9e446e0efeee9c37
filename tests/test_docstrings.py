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

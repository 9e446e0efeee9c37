"""The lab beside the library: the repository's ``paper_checks/`` and ``benchmarks/`` folders.

They are not part of the installed package. The report's ``claims`` section and
``cactus-theory benchmark`` load them from the checkout that holds this package (the folder
above ``cactus_theory/``); from an installed wheel there is none, and :func:`lab_module`
raises one ValueError that says so (exit status 2 and one line on the command line).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["checkout_root", "lab_module"]

#: The lab's top-level folders (each a Python package of the checkout).
LAB_PACKAGES = ("paper_checks", "benchmarks")


def checkout_root() -> Path | None:
    """The repository checkout holding this package (its ``pyproject.toml`` beside
    ``cactus_theory/``), or None for an installed copy."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() else None


def _package(name: str, root: Path) -> ModuleType:
    """The lab package ``name`` of ``root``, imported from its folder (``sys.path`` untouched)."""
    folder = root / name
    loaded = sys.modules.get(name)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        if where is not None and Path(where).resolve().parent == folder:
            return loaded
        raise ValueError(f"{name}: another module named {name!r} is imported ({where}), not {folder}")
    spec = importlib.util.spec_from_file_location(
        name, folder / "__init__.py", submodule_search_locations=[str(folder)]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def lab_module(dotted: str, what: str) -> ModuleType:
    """Import ``dotted`` (``"paper_checks"``, ``"benchmarks.run"``) from this package's checkout.

    Parameters
    ----------
    dotted : str
        A module of one of :data:`LAB_PACKAGES`.
    what : str
        What needs it, for the error message (e.g. ``"sections: claims"``).

    Raises
    ------
    ValueError
        Without a checkout of the repository (an installed wheel): one line naming ``what``.
    """
    name = dotted.split(".")[0]
    if name not in LAB_PACKAGES:
        raise ValueError(f"dotted: {dotted!r} is not in the lab ({', '.join(LAB_PACKAGES)})")
    root = checkout_root()
    if root is None or not (root / name / "__init__.py").is_file():
        raise ValueError(
            f"{what} needs a checkout of the repository ({name}/ beside cactus_theory/); "
            f"this cactus_theory is installed at {Path(__file__).resolve().parent}"
        )
    _package(name, root)
    return importlib.import_module(dotted)

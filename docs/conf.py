"""Sphinx configuration of the cactus_theory documentation site (``./dev docs``).

Nothing is fetched from the network, at build time or when a page is viewed: MathJax is served
from the site's own ``_static`` folder (npm's ``mathjax`` package, installed by ``./dev setup``
into ``.cache/mathjax``), the theme's assets are its own, and no intersphinx inventory is read.
The notebooks (``notebooks/*.ipynb``, stored without outputs) are executed by myst-nb at build
time, with a cache under ``docs/_build``, so that their pages show their outputs (in the test
run, the notebook test's executed copies are rendered instead: :func:`_executed_copy`).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import sys

from sphinx.errors import ConfigError

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))

import cactus_theory  # noqa: E402

project = "cactus_theory"
author = "the cactus_theory authors"
copyright = "the cactus_theory authors"
release = version = cactus_theory.__version__

extensions = [
    "myst_nb",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
]


def _executed_copy(source: pathlib.Path) -> bytes | None:
    """The executed copy of ``source`` that the notebook test wrote into
    ``$CACTUS_THEORY_EXECUTED_NOTEBOOKS`` (``./dev test`` sets it), marked for myst-nb not to
    execute it again; None when there is none or it was made from other source bytes."""
    folder = os.environ.get("CACTUS_THEORY_EXECUTED_NOTEBOOKS")
    copy = pathlib.Path(folder) / source.name if folder else None
    if copy is None or not copy.is_file():
        return None
    nb = json.loads(copy.read_text(encoding="utf-8"))
    made_from = nb.get("metadata", {}).get("cactus_theory", {}).get("source_sha256")
    if made_from != hashlib.sha256(source.read_bytes()).hexdigest():
        return None
    nb["metadata"]["mystnb"] = {"execution_mode": "off"}  # its outputs are already there
    return json.dumps(nb, indent=1).encode("utf-8")


def _copy_notebooks() -> None:
    """Mirror ``notebooks/`` (the notebooks and their index) into ``docs/notebooks`` (ignored by git).

    Sphinx reads only what lies under ``docs/``; a file is rewritten only when its bytes changed,
    so that an unchanged notebook is neither re-read nor re-executed. A notebook that the test
    run has executed already is mirrored executed (:func:`_executed_copy`).
    """
    src, dest = ROOT / "notebooks", DOCS / "notebooks"
    dest.mkdir(exist_ok=True)
    wanted = {f.name: f for f in [*src.glob("*.ipynb"), src / "README.md"]}
    for old in dest.iterdir():
        if old.name not in wanted:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    for name, f in wanted.items():
        target = dest / name
        data = (_executed_copy(f) if f.suffix == ".ipynb" else None) or f.read_bytes()
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)


_copy_notebooks()

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "_templates"]
templates_path = ["_templates"]

# MyST: $...$ and $$...$$ maths, ``{math}``-free formulas in Markdown; anchors for "page.md#section"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

# ---- the notebooks: executed at build time, outputs cached; a failing cell fails the build ----
nb_execution_mode = "cache"
nb_execution_cache_path = os.environ.get(
    "CACTUS_THEORY_DOCS_NB_CACHE", str(DOCS / "_build" / ".jupyter_cache")
)
nb_execution_timeout = 300  # seconds per cell: a hang guard (each notebook runs in seconds)
nb_execution_raise_on_error = True
nb_execution_show_tb = True
# widget views need a kernel: the static pages show no widget script from a CDN
nb_ipywidgets_js = {}
nb_merge_streams = True

# ---- the API reference: autosummary pages, numpydoc docstrings ----
# The pages are written anew on every build: a page of a module that has since moved or become
# private would otherwise stay in the ignored generated/ folder and fail the build.
shutil.rmtree(pathlib.Path(__file__).with_name("generated"), ignore_errors=True)
autosummary_generate = True
autosummary_ignore_module_all = False  # each subpackage's __all__ is its public API
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types
autodoc_member_order = "bysource"
# A class that the top-level package re-exports from a documented subpackage is indexed on the
# subpackage's page only (the template marks the top-level copy :no-index:, one object, one target).
SUBPACKAGES = [
    "rules",
    "analysis",
    "solvers",
    "samplers",
    "simulate",
    "drafts",
    "results",
    "divergences",
    "distributions",
    "figures",
    "testing",
]


def _reexported() -> list[str]:
    import importlib

    names = set()
    for sub in SUBPACKAGES:
        mod = importlib.import_module(f"cactus_theory.{sub}")
        names |= {
            n for n in getattr(mod, "__all__", []) if getattr(mod, n) is getattr(cactus_theory, n, None)
        }
    return sorted(names)


autosummary_context = {"also_in_subpackage": _reexported()}
numpydoc_show_class_members = False  # the class template lists the members itself
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# ---- MathJax, served locally ----
MATHJAX = pathlib.Path(
    os.environ.get("CACTUS_THEORY_MATHJAX", ROOT / ".cache" / "mathjax" / "node_modules" / "mathjax")
)
mathjax_path = "mathjax/es5/tex-chtml.js"  # relative to _static: the copy made below

# ---- HTML ----
html_theme = "pydata_sphinx_theme"
html_title = f"cactus_theory {release}"
html_static_path: list[str] = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 3,
    "icon_links": [],
}
html_show_sourcelink = False


def _copy_mathjax(app, exception):
    """Copy MathJax (its es5 build and licence) into the site's ``_static/mathjax``."""
    if exception is not None or app.builder.format != "html":
        return
    dest = pathlib.Path(app.outdir) / "_static" / "mathjax"
    shutil.copytree(MATHJAX / "es5", dest / "es5", dirs_exist_ok=True)
    shutil.copy2(MATHJAX / "LICENSE", dest / "LICENSE")


#: The pages under docs/ are also read on GitHub, where "../README.md" is the project's front page;
#: on the site that page is the index, and other Markdown files of the repository are downloads.
_REPO_LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(\.\./([^)#\s]+\.md)\)")


def _site_links(app, docname, source):
    """Point the pages' links to Markdown files outside ``docs/`` at the site's own pages."""

    def fix(m):
        text, target = m.groups()
        if target == "README.md":
            return f"[{text}](index.md)"
        return f"[{text}](path:../{target})" if (ROOT / target).is_file() else m.group(0)

    if "/" not in docname:  # the pages at the top of docs/, the only ones that link out of it
        source[0] = _REPO_LINK.sub(fix, source[0])


def setup(app):
    if not (MATHJAX / "es5" / "tex-chtml.js").is_file():
        raise ConfigError(
            f"MathJax not found at {MATHJAX} (the site serves it itself): run ./dev setup, or "
            "npm install --prefix .cache/mathjax mathjax@3.2.2, or set CACTUS_THEORY_MATHJAX to an "
            "unpacked mathjax 3 package"
        )
    app.connect("source-read", _site_links)
    app.connect("build-finished", _copy_mathjax)

"""Sphinx configuration of the cactus_theory documentation site (``./dev docs``).

Nothing is fetched from the network, at build time or when a page is viewed: MathJax is served
from the site's own ``_static`` folder (npm's ``mathjax`` package, installed by ``./dev setup``
into ``.cache/mathjax``), the theme's assets are its own, and no intersphinx inventory is read.
The notebooks (``notebooks/*.ipynb``, stored without outputs) are executed once per source (in
the test run, the notebook test's executed copies are rendered instead; elsewhere nbclient runs
them at build time, cached under ``docs/_build``) and shown as a gallery with thumbnails and run
times, linked from the API pages (``docs/_ext/notebook_gallery.py``).
"""

from __future__ import annotations

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
    "sphinx_design",
    "notebook_gallery",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
]


sys.path.insert(0, str(DOCS / "_ext"))
import notebook_gallery  # noqa: E402

# The notebooks' executed copies mirrored into docs/notebooks (ignored by git), their thumbnails
# and the gallery's data: docs/_ext/notebook_gallery.py.
notebook_gallery.prepare(DOCS)

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
root_doc = "index"
exclude_patterns = ["_build", "**/.ipynb_checkpoints", "_templates"]
templates_path = ["_templates"]

# MyST: $...$ and $$...$$ maths, ``{math}``-free formulas in Markdown; anchors for "page.md#section"
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

# ---- the notebooks: executed by notebook_gallery.prepare, so myst-nb only renders them ----
nb_execution_mode = "off"
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
    "planning",
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
html_static_path = ["_static"]
html_css_files = ["cactus_theory.css"]  # wide output tables scroll; the gallery's cards
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    # the top navigation: the user guide, the notebooks' gallery and the API reference
    "header_links_before_dropdown": 4,
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

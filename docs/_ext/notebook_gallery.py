"""The notebooks on the documentation site: executed once, shown as a gallery, linked from the API.

What a reader gets, in the manner of sphinx-gallery's sites (scikit-learn, POT):

- every notebook's page shows its outputs, and a slider's cell shows the output of the sliders'
  default state (the Output widget's content kept in the notebook's widget state, rendered as
  the cell's own output, after a line naming the controls and their values);
- the gallery page (``{notebook-gallery}``): one sphinx-design card per notebook, with a thumbnail
  of its last figure, what it covers (its row of ``notebooks/README.md``) and its run time;
- each notebook page ends with its run time;
- each API page lists, with thumbnails, the notebooks whose code uses the documented object
  (``.. notebook-examples:: <full name>`` in the autosummary templates).

The outputs come from one execution per notebook source: the notebook test's executed copy where
``$CACTUS_THEORY_EXECUTED_NOTEBOOKS`` holds one made from the same bytes (``./dev test``), else a
copy executed here by nbclient and cached under ``$CACTUS_THEORY_DOCS_NB_CACHE`` (default
``docs/_build/.executed``), keyed by the source's SHA-256. myst-nb renders the outputs and
executes nothing itself. A failing cell fails the build (nbclient's CellExecutionError).
"""

from __future__ import annotations

import ast
import concurrent.futures
import datetime
import hashlib
import html
import importlib
import io
import json
import os
import pathlib
import re
import shutil

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList

#: Where the site's mirror of ``notebooks/`` lies (ignored by git) and its thumbnails.
MIRROR = "notebooks"
THUMBS = "_thumbnails"
THUMB_SIZE = (400, 280)  # pixels, the longest side fitted into this box (aspect kept)
CELL_TIMEOUT_S = 300  # a hang guard per cell (each notebook runs in seconds)
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

#: Filled by :func:`prepare`: stem -> {"title", "covers", "run_time_s", "thumbnail", "uses"}.
NOTEBOOKS: dict[str, dict] = {}


def _sha(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _source(cell: dict) -> str:
    src = cell.get("source", "")
    return src if isinstance(src, str) else "".join(src)


def _executed(source: pathlib.Path, cache: pathlib.Path) -> dict:
    """The executed notebook of ``source``: the test run's copy, the cached copy, or a new run."""
    sha = _sha(source)
    folder = os.environ.get("CACTUS_THEORY_EXECUTED_NOTEBOOKS")
    for copy in ([pathlib.Path(folder) / source.name] if folder else []) + [cache / f"{source.stem}.ipynb"]:
        if copy.is_file():
            nb = json.loads(copy.read_text(encoding="utf-8"))
            if nb.get("metadata", {}).get("cactus_theory", {}).get("source_sha256") == sha:
                return nb
    import nbclient
    import nbformat

    nb = nbformat.read(source, as_version=4)
    # the kernel's environment: the checkout's package first, inline figures, one thread
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source.parent.parent), env.get("PYTHONPATH")]))
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    env["OMP_NUM_THREADS"] = "1"
    client = nbclient.NotebookClient(
        nb,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(source.parent)}},
    )
    client.execute(env=env)  # raises CellExecutionError with the failing cell's traceback
    nb.metadata["cactus_theory"] = {"source_sha256": sha}
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f".{source.stem}.ipynb.tmp"
    tmp.write_text(nbformat.writes(nb), encoding="utf-8")
    os.replace(tmp, cache / f"{source.stem}.ipynb")  # never half-written
    return json.loads(nbformat.writes(nb))


def _widget_outputs(state: dict, model_id: str) -> tuple[list[dict], list[str]]:
    """The outputs held by the Output widgets under ``model_id`` and the controls' "name = value"."""
    model = state.get(model_id)
    if model is None:
        return [], []
    s = model.get("state", {})
    if model.get("model_name") == "OutputModel":
        return list(s.get("outputs", [])), []
    controls = []
    if s.get("description") and ("value" in s or "index" in s):
        if "_options_labels" in s and s.get("index") is not None:
            value = s["_options_labels"][s["index"]]
        else:
            value = s.get("value")
        controls.append(f"{s['description']} = {value}")
    outs = []
    for child in s.get("children", []):
        o, c = _widget_outputs(state, str(child).removeprefix("IPY_MODEL_"))
        outs += o
        controls += c
    return outs, controls


def static_widgets(nb: dict) -> int:
    """Replace each widget view of ``nb`` by what its Output widgets show and a line naming its
    controls' values (the default state, as the kernel left it); drop the widget state. Returns
    the number of views replaced."""
    state = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    replaced = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        new = []
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                new.append(out)
                continue
            outs, controls = _widget_outputs(state, view["model_id"])
            if controls:
                line = "; ".join(html.escape(c) for c in controls)
                new.append(
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {
                            "text/html": f'<p class="ct-slider-state">Sliders at their defaults '
                            f"(move them in JupyterLab): {line}</p>",
                            "text/plain": f"Sliders at their defaults: {'; '.join(controls)}",
                        },
                    }
                )
            new += [o for o in outs if o.get("output_type") != "stream" or o.get("name") != "stderr"]
            replaced += 1
        cell["outputs"] = new
    return replaced


def run_time_s(nb: dict) -> float:
    """The notebook's run time: the sum over code cells of execute_input to execute_reply (the
    timestamps nbclient records in each cell's metadata), kernel start-up excluded."""
    total = 0.0
    for cell in nb["cells"]:
        t = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in t and "shell.execute_reply" in t:
            a = datetime.datetime.fromisoformat(t["iopub.execute_input"].replace("Z", "+00:00"))
            b = datetime.datetime.fromisoformat(t["shell.execute_reply"].replace("Z", "+00:00"))
            total += (b - a).total_seconds()
    return total


def _last_png(nb: dict) -> bytes | None:
    import base64

    png = None
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            data = out.get("data", {}).get("image/png")
            if data:
                png = data if isinstance(data, str) else "".join(data)
    return base64.b64decode(png) if png else None


def _thumbnail(png: bytes, target: pathlib.Path) -> None:
    from PIL import Image

    buf = io.BytesIO()
    with Image.open(io.BytesIO(png)) as img:
        img.thumbnail(THUMB_SIZE)
        img.save(buf, format="PNG", optimize=True)
    if not target.is_file() or target.read_bytes() != buf.getvalue():
        target.write_bytes(buf.getvalue())


def _title(nb: dict, stem: str) -> str:
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            m = re.search(r"^#\s+(.+)$", _source(cell), re.M)
            if m:
                return m.group(1).strip()
    return stem


def _covers(readme: pathlib.Path) -> dict[str, str]:
    """Each notebook's "what it covers" cell of the index table of ``notebooks/README.md``."""
    rows = {}
    for line in readme.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\|\s*\[`([^`]+)`\]\([^)]*\.ipynb\)\s*\|([^|]*)\|", line)
        if m:
            rows[m.group(1)] = m.group(2).strip()
    return rows


def used_objects(nb: dict) -> set[str]:
    """The dotted names of package objects the notebook's code refers to (``ct.x.y``, names
    imported from ``cactus_theory``), resolved to where the object is defined."""
    alias: dict[str, str] = {}
    chains: set[str] = set()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "\n".join(
            line for line in _source(cell).splitlines() if not line.lstrip().startswith(("%", "!"))
        )
        try:
            tree = ast.parse(src)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "cactus_theory":
                        alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else "cactus_theory"
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cactus_theory"):
                for a in node.names:
                    alias[a.asname or a.name] = f"{node.module}.{a.name}"
                    chains.add(f"{node.module}.{a.name}")
            elif isinstance(node, ast.Attribute):
                parts = []
                n = node
                while isinstance(n, ast.Attribute):
                    parts.append(n.attr)
                    n = n.value
                if isinstance(n, ast.Name):
                    chains.add(".".join([n.id, *reversed(parts)]))
    found = set()
    for chain in chains:
        head, *rest = chain.split(".")
        if head in alias:
            found.add(".".join([alias[head], *rest]))
        elif head == "cactus_theory":
            found.add(chain)
    return {k for k in (_canonical(name) for name in found) if k}


def resolve(name: str):
    """The object a dotted name of the package refers to, or None."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        try:
            for attr in parts[i:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _canonical(name: str) -> str | None:
    """``module.qualname`` of the function or class ``name`` refers to (None for anything else)."""
    obj = resolve(name)
    if not (callable(obj) and hasattr(obj, "__module__") and hasattr(obj, "__qualname__")):
        return None
    if not str(obj.__module__).startswith("cactus_theory"):
        return None
    return f"{obj.__module__}.{obj.__qualname__}"


def _order(path: pathlib.Path) -> tuple[float, str]:
    """Notebooks by their leading number (0_, 1_, ..., 12_), unnumbered ones last."""
    head = path.stem.split("_")[0]
    return (int(head) if head.isdigit() else float("inf"), path.stem)


def prepare(docs: pathlib.Path) -> None:
    """Mirror ``notebooks/`` into ``docs/notebooks`` executed (only changed bytes are written, so
    an unchanged notebook is not read again), write the thumbnails and fill :data:`NOTEBOOKS`."""
    src, dest = docs.parent / "notebooks", docs / MIRROR
    cache = pathlib.Path(os.environ.get("CACTUS_THEORY_DOCS_NB_CACHE", docs / "_build" / ".executed"))
    (dest / THUMBS).mkdir(parents=True, exist_ok=True)
    sources = sorted(src.glob("*.ipynb"), key=_order)
    wanted = {f.name for f in sources} | {"README.md", THUMBS}
    for old in dest.iterdir():
        if old.name not in wanted:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    for old in (dest / THUMBS).iterdir():
        if old.stem not in {f.stem for f in sources}:
            old.unlink()
    readme = (src / "README.md").read_bytes()
    if not (dest / "README.md").is_file() or (dest / "README.md").read_bytes() != readme:
        (dest / "README.md").write_bytes(readme)
    covers = _covers(src / "README.md")
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        executed = dict(zip(sources, pool.map(lambda f: _executed(f, cache), sources), strict=True))
    NOTEBOOKS.clear()
    for f, nb in executed.items():
        static_widgets(nb)
        seconds = run_time_s(nb)
        nb.setdefault("metadata", {})["mystnb"] = {"execution_mode": "off"}  # outputs are there
        nb["cells"].append(
            {
                "cell_type": "markdown",
                "id": "ct-run-time",
                "metadata": {},
                "source": f"*Run time of this notebook: {seconds:.1f} s (its cells, kernel start-up excluded).*",
            }
        )
        data = json.dumps(nb, indent=1).encode("utf-8")
        target = dest / f.name
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
        png = _last_png(nb)
        thumb = dest / THUMBS / f"{f.stem}.png"
        if png:
            _thumbnail(png, thumb)
        NOTEBOOKS[f.stem] = {
            "title": _title(nb, f.stem),
            "covers": covers.get(f.stem, ""),
            "run_time_s": seconds,
            "thumbnail": f"/{MIRROR}/{THUMBS}/{f.stem}.png" if png else None,
            "uses": used_objects(nb),
        }


def _cards(stems: list[str], markdown: bool, columns: str) -> list[str]:
    """sphinx-design grid cards, one per notebook, in MyST (``markdown``) or reStructuredText."""
    lines = (
        ["::::{grid} " + columns, ":gutter: 3", ""]
        if markdown
        else [f".. grid:: {columns}", "   :gutter: 3", ""]
    )
    for stem in stems:
        info = NOTEBOOKS[stem]
        opts = [f":link: /{MIRROR}/{stem}", ":link-type: doc", ":class-card: ct-gallery-card"]
        opts.append(f":footer: Run time {info['run_time_s']:.1f} s")
        if info["thumbnail"]:
            opts += [f":img-top: {info['thumbnail']}", f":img-alt: the last figure of {stem}"]
        body = [info["covers"]]
        if markdown:
            lines += [f":::{{grid-item-card}} {info['title']}", *opts, "", *body, ":::", ""]
        else:
            lines += [f"   .. grid-item-card:: {info['title']}", *(f"      {o}" for o in opts), ""]
            lines += [f"      {b}" if b else "" for b in body] + [""]
    if markdown:
        lines.append("::::")
    return lines


def _is_markdown(env) -> bool:
    return env.doc2path(env.docname).suffix in (".md", ".ipynb")


class _CardsDirective(Directive):
    def _parse(self, lines: list[str]) -> list[nodes.Node]:
        box = nodes.container(classes=["ct-notebook-gallery"])
        self.state.nested_parse(StringList(lines, source="notebook-gallery"), self.content_offset, box)
        return [box]


class NotebookGallery(_CardsDirective):
    """Every notebook as a card: thumbnail, title, what it covers, run time."""

    def run(self):
        env = self.state.document.settings.env
        for stem in NOTEBOOKS:
            env.note_dependency(str(pathlib.Path(env.srcdir) / MIRROR / f"{stem}.ipynb"))
        return self._parse(_cards(list(NOTEBOOKS), _is_markdown(env), "1 2 3 3"))


class NotebookExamples(_CardsDirective):
    """The notebooks whose code uses the object named by the argument (nothing when none does)."""

    required_arguments = 1

    def run(self):
        name = _canonical(self.arguments[0])
        stems = [s for s, info in NOTEBOOKS.items() if name and name in info["uses"]]
        if not stems:
            return []
        markdown = _is_markdown(self.state.document.settings.env)
        short = self.arguments[0].rsplit(".", 1)[-1]
        if markdown:
            rubric = [f"```{{rubric}} Notebooks using {short}", "```", ""]
        else:
            rubric = [f".. rubric:: Notebooks using {short}", ""]
        return self._parse(rubric + _cards(stems, markdown, "1 2 2 2"))


def setup(app):
    app.add_directive("notebook-gallery", NotebookGallery)
    app.add_directive("notebook-examples", NotebookExamples)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

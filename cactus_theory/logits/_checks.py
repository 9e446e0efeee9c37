"""Checks of the real-model subcommands' arguments, run before any model is loaded.

Each raises ValueError naming the argument: a model or drafter must be built in, an existing
file or folder, or a hub id already in the local cache (no network); prompts must be a shipped
set or an existing file.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["BUILTIN_DRAFTERS", "PROMPT_SETS", "check_model_source", "check_drafter", "check_prompts"]

#: The shipped prompt sets (``mix``: every category).
PROMPT_SETS = ("gsm8k", "spec_bench", "ifeval", "mix")
#: The built-in drafters of the verifier's own weights.
BUILTIN_DRAFTERS = ("early-exit:K", "requant:B", "distilled")


def _int_suffix(spec: str, prefix: str, name: str) -> int:
    tail = spec[len(prefix) :]
    try:
        v = int(tail)
    except ValueError:
        raise ValueError(f"{name}: {spec!r} needs an integer after {prefix!r}") from None
    if v < 1:
        raise ValueError(f"{name}: {spec!r} needs an integer >= 1 after {prefix!r}")
    return v


def _in_local_hub_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return False
    try:
        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # noqa: BLE001 - an invalid repo id is simply not cached
        return False


def check_model_source(spec: str, name: str) -> None:
    """A model given by path must exist; a hub id must already be in the local cache (no network)."""
    if Path(spec).exists():
        return
    if "/" in spec and not spec.startswith((".", "/")) and _in_local_hub_cache(spec):
        return
    raise ValueError(
        f"{name}: unknown model {spec!r}: not a built-in name, an existing folder or "
        ".gguf file, nor a hub id in the local cache (this machine has no network)"
    )


def check_drafter(spec: str, name: str = "drafter", n_layers: int | None = None) -> None:
    """Validate a drafter spec before any model is loaded (or against the loaded verifier).

    Built-in: ``early-exit:K`` (1 <= K < ``n_layers``, the verifier's number of layers, when
    known: K = ``n_layers`` would be the verifier itself), ``requant:B`` (1 <= B <= 8),
    ``distilled`` or ``distilled:PATH`` (an existing file); otherwise an existing folder /
    ``.gguf`` file or a hub id already in the local cache. Raises ValueError naming ``name``.
    """
    spec = str(spec)
    if spec.startswith("early-exit:"):
        k = _int_suffix(spec, "early-exit:", name)
        if n_layers is not None and k >= n_layers:
            raise ValueError(
                f"{name}: {spec!r} keeps {min(k, n_layers)} of the verifier's {n_layers} layers, "
                f"which is the verifier itself; give K in 1..{n_layers - 1}"
            )
    elif spec.startswith("requant:"):
        b = _int_suffix(spec, "requant:", name)
        if b > 8:
            raise ValueError(f"{name}: {spec!r}: re-quantization bits must be in 1..8")
    elif spec == "distilled":
        return
    elif spec.startswith("distilled:"):
        if not Path(spec.split(":", 1)[1]).is_file():
            raise ValueError(f"{name}: {spec!r}: no such weights file")
    else:
        try:
            check_model_source(spec, name)
        except ValueError:
            raise ValueError(
                f"{name}: unknown drafter {spec!r}; built-in: early-exit:K, requant:B, distilled "
                "(or an existing folder / .gguf file)"
            ) from None


def check_prompts(prompts: str, name: str = "prompts") -> None:
    """``prompts`` is one of :data:`PROMPT_SETS` or an existing file (ValueError naming ``name``)."""
    if prompts in PROMPT_SETS:
        return
    if not Path(prompts).is_file():
        raise ValueError(
            f"{name}: {prompts!r} is neither one of {', '.join(PROMPT_SETS)} nor an existing file"
        )

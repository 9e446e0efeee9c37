"""Built-in drafters that share SmolLM2-135M-Instruct's tokenizer.

Symbols: q verifier (``target_probs``), p drafter (``draft_probs``). Per-position acceptance of
speculative sampling is ``beta = sum_x min(p_x, q_x) = 1 - TV(p, q)``.

* ``early-exit:K`` -- the verifier's first K of its 30 layers (1 <= K <= 29), then its final RMSNorm and (tied)
  lm_head: the self-speculative drafter of LayerSkip / Draft & Verify (no training).
* ``requant:B`` -- the verifier with every weight matrix re-quantized to B bits by
  round-to-nearest, asymmetric (min/max) over groups of 32 consecutive input weights. Same cost as
  the verifier.
* ``distilled`` -- :class:`DistilledDrafter`, trained by ``scripts/train_distilled_drafter.py``;
  its trained weights ship as ``cactus_theory/data/drafters/smollm2-distilled.pt`` (int8).

Each built-in drafter is returned as a ``torch.nn.Module`` with a Hugging Face causal-LM call
signature (``input_ids, attention_mask, position_ids, cache/past_key_values, use_cache``)
returning an object with ``.logits`` over the full 49,152-token vocabulary, so the dump tool and
the decoding loop treat it like any Hugging Face model.
"""

from __future__ import annotations

import copy
import io
from pathlib import Path
from types import SimpleNamespace

from .._io import atomic_write_bytes
from ._checks import BUILTIN_DRAFTERS, check_drafter
from ._models import DISTILLED_PATH
from ._torch import torch

nn = torch.nn


def _truncated_config(cfg, n_layers: int):
    cfg = copy.deepcopy(cfg)
    cfg.num_hidden_layers = n_layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = list(cfg.layer_types)[:n_layers]
    return cfg


def early_exit_model(verifier, k: int):
    """A causal LM made of the verifier's embedding, first ``k`` layers, final norm and lm_head.

    The modules are shared with ``verifier`` (no copy); the returned model keeps its own KV cache
    when used. Its distribution equals ``softmax(lm_head(norm(h_k)))`` where ``h_k`` is the
    residual stream after layer ``k``.
    """
    from transformers import AutoModelForCausalLM

    check_drafter(f"early-exit:{k}", n_layers=verifier.config.num_hidden_layers)
    cfg = _truncated_config(verifier.config, k)
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(cfg)
    m.model.embed_tokens = verifier.model.embed_tokens
    m.model.layers = nn.ModuleList(list(verifier.model.layers[:k]))
    m.model.norm = verifier.model.norm
    m.model.rotary_emb = verifier.model.rotary_emb
    m.lm_head = verifier.lm_head
    m.eval()
    return m


def early_exit_logits(verifier, hidden_states, k: int) -> torch.Tensor:
    """Early-exit logits from the verifier's ``output_hidden_states``.

    ``hidden_states[k]`` is the residual stream after layer ``k`` (index 0 is the embedding), for
    ``1 <= k`` below the number of layers (``k = n_layers`` would be the verifier's own logits:
    ValueError naming ``drafter``).
    """
    check_drafter(f"early-exit:{k}", n_layers=verifier.config.num_hidden_layers)
    return verifier.lm_head(verifier.model.norm(hidden_states[k]))


def rtn_quantize_(w: torch.Tensor, bits: int, group: int = 32) -> torch.Tensor:
    """Round-to-nearest asymmetric quantize-dequantize of a 2-D weight, in place.

    Each group of ``group`` consecutive entries along the last (input) axis is mapped to
    ``{0..2^bits-1}`` with ``scale = (max - min) / (2^bits - 1)`` and zero point ``min``;
    ``w <- round((w - min)/scale) * scale + min``.
    """
    out_f, in_f = w.shape
    if in_f % group:
        raise ValueError(f"input dimension {in_f} is not a multiple of the group size {group}")
    g = w.data.reshape(out_f, in_f // group, group)
    lo = g.amin(-1, keepdim=True)
    hi = g.amax(-1, keepdim=True)
    levels = 2**bits - 1
    scale = ((hi - lo) / levels).clamp_min(1e-12)
    q = torch.round((g - lo) / scale).clamp(0, levels)
    w.data.copy_((q * scale + lo).reshape(out_f, in_f))
    return w


def requantized_model(verifier, bits: int, group: int = 32):
    """A deep copy of ``verifier`` with every weight matrix (all linear layers and the tied
    embedding / lm_head) RTN-quantized to ``bits`` bits in groups of ``group``."""
    if not 1 <= bits <= 8:
        raise ValueError(f"bits must be in 1..8, got {bits}")
    m = copy.deepcopy(verifier)
    seen = set()
    with torch.no_grad():
        for mod in m.modules():
            w = getattr(mod, "weight", None)
            if (
                isinstance(mod, (nn.Linear, nn.Embedding))
                and w is not None
                and w.dim() == 2
                and id(w) not in seen
            ):
                seen.add(id(w))
                rtn_quantize_(w, bits, group)
    m.eval()
    return m


class DistilledDrafter(nn.Module):
    """Small drafter distilled from the verifier (see ``scripts/train_distilled_drafter.py``).

    ``p = softmax(E_S norm(f(x)) + b)`` over a sub-vocabulary ``S`` (``p_x = 0`` outside ``S``),
    where ``f`` is the verifier's embedding and first ``n_frozen`` layers (frozen, shared with the
    verifier) followed by ``n_trained`` trained Llama layers, ``norm`` the trained final RMSNorm,
    ``E_S`` the verifier's (tied, frozen) embedding rows of ``S`` and ``b`` a trained bias.

    Calling it with ``full_vocab=False`` returns the ``[B, L, |S|]`` sub-vocabulary logits
    (training); the default returns ``SimpleNamespace(logits=[B, L, V], ...)`` with ``-inf``
    outside ``S`` (a Hugging Face-like output for the dump tool and the decoding loop).
    """

    def __init__(self, verifier, sub_vocab: torch.Tensor, n_frozen: int = 2, n_trained: int = 1):
        super().__init__()
        from transformers import AutoModelForCausalLM

        n = n_frozen + n_trained
        cfg = _truncated_config(verifier.config, n)
        with torch.device("meta"):
            inner = AutoModelForCausalLM.from_config(cfg).model
        inner.embed_tokens = verifier.model.embed_tokens
        inner.rotary_emb = verifier.model.rotary_emb
        frozen = list(verifier.model.layers[:n_frozen])
        trained = [copy.deepcopy(verifier.model.layers[n_frozen + i]) for i in range(n_trained)]
        inner.layers = nn.ModuleList(frozen + trained)
        inner.norm = copy.deepcopy(verifier.model.norm)
        self.inner = inner
        self.config = cfg
        self.n_frozen, self.n_trained = n_frozen, n_trained
        self.vocab_size = int(verifier.lm_head.weight.shape[0])
        self.register_buffer("sub_vocab", torch.as_tensor(sub_vocab, dtype=torch.long).clone())
        self.head_weight = verifier.lm_head.weight  # shared, frozen
        self.head_bias = nn.Parameter(torch.zeros(len(self.sub_vocab)))
        for p in self.parameters():
            p.requires_grad_(False)
        for layer in trained:
            for p in layer.parameters():
                p.requires_grad_(True)
        for p in self.inner.norm.parameters():
            p.requires_grad_(True)
        self.head_bias.requires_grad_(True)
        self._sub_w = None

    @classmethod
    def from_verifier(cls, verifier, sub_vocab, n_frozen=2, n_trained=1):
        return cls(verifier, sub_vocab, n_frozen, n_trained)

    def trained_state(self) -> dict:
        """The trained tensors (what :func:`save_distilled` stores)."""
        sd = {}
        for i in range(self.n_frozen, self.n_frozen + self.n_trained):
            for k, v in self.inner.layers[i].state_dict().items():
                sd[f"layers.{i}.{k}"] = v
        for k, v in self.inner.norm.state_dict().items():
            sd[f"norm.{k}"] = v
        sd["head_bias"] = self.head_bias.data
        return sd

    def load_trained_state(self, sd: dict) -> None:
        with torch.no_grad():
            for i in range(self.n_frozen, self.n_frozen + self.n_trained):
                own = self.inner.layers[i].state_dict()
                for k in own:
                    own[k].copy_(sd[f"layers.{i}.{k}"])
            for k, v in self.inner.norm.state_dict().items():
                v.copy_(sd[f"norm.{k}"])
            self.head_bias.copy_(sd["head_bias"])

    def hidden(self, input_ids, attention_mask=None):
        """Final hidden states ``norm(f(x))`` [B, L, d] (training, without a cache)."""
        return self.inner(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False
        ).last_hidden_state

    def head(self, h):
        """Sub-vocabulary logits ``E_S h + b``."""
        return h @ self.head_weight[self.sub_vocab].T + self.head_bias

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        position_ids=None,
        cache=None,
        use_cache=False,
        output_hidden_states=False,
        full_vocab=True,
        **kwargs,
    ):
        kw = {}
        if cache is not None:
            kw["cache"] = cache
        if "past_key_values" in kwargs and kwargs["past_key_values"] is not None:
            kw["cache"] = kwargs["past_key_values"]
        h = self.inner(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            use_cache=use_cache,
            **kw,
        ).last_hidden_state
        if self.training or self._sub_w is None:
            w = self.head_weight[self.sub_vocab]
            if not self.training:
                self._sub_w = w
        else:
            w = self._sub_w
        sub_logits = h @ w.T + self.head_bias
        if not full_vocab:
            return sub_logits
        full = torch.full(
            (*sub_logits.shape[:-1], self.vocab_size),
            -torch.inf,
            dtype=sub_logits.dtype,
            device=sub_logits.device,
        )
        full[..., self.sub_vocab] = sub_logits
        return SimpleNamespace(logits=full, hidden_states=None)

    def train(self, mode: bool = True):
        self._sub_w = None
        return super().train(mode)


def _int8_pack(t: torch.Tensor, group: int = 32):
    """Symmetric int8 per group of 32 (relative error <= 1/254 of each group's max |w|)."""
    if t.dim() != 2 or t.shape[1] % group:
        return {"fp32": t.detach().float().clone()}
    g = t.detach().float().reshape(t.shape[0], -1, group)
    scale = (g.abs().amax(-1, keepdim=True) / 127).clamp_min(1e-12)
    q = torch.round(g / scale).clamp(-127, 127).to(torch.int8)
    return {"q": q, "scale": scale.to(torch.float16), "shape": list(t.shape)}


def _int8_unpack(d):
    if "fp32" in d:
        return d["fp32"]
    return (d["q"].float() * d["scale"].float()).reshape(d["shape"])


def save_distilled(model: DistilledDrafter, path, meta: dict | None = None) -> Path:
    """Write the trained part of a :class:`DistilledDrafter` (int8 weights) atomically."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    blob = {
        "format": "cactus_theory.distilled_drafter/1",
        "n_frozen": model.n_frozen,
        "n_trained": model.n_trained,
        "sub_vocab": model.sub_vocab.to(torch.int32).clone(),
        "state": {k: _int8_pack(v) for k, v in model.trained_state().items()},
        "meta": dict(meta or {}),
    }
    buf = io.BytesIO()
    torch.save(blob, buf)
    return atomic_write_bytes(path, buf.getvalue())


def load_distilled(verifier, path=None) -> DistilledDrafter:
    """Build the distilled drafter on top of ``verifier`` from its shipped (or given) weights."""
    path = Path(path) if path is not None else DISTILLED_PATH
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: train it with `python scripts/train_distilled_drafter.py teacher` then `... train`"
        )
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"{path}: not a readable distilled-drafter file ({exc})") from exc
    if blob.get("format") != "cactus_theory.distilled_drafter/1":
        raise ValueError(f"{path}: unknown format {blob.get('format')!r}")
    m = DistilledDrafter(verifier, blob["sub_vocab"].long(), blob["n_frozen"], blob["n_trained"])
    m.load_trained_state({k: _int8_unpack(v) for k, v in blob["state"].items()})
    m.meta = blob.get("meta", {})
    m.eval()
    return m


def make_drafter(spec: str, verifier_lm, device: str = "cpu"):
    """Build a drafter from a spec string.

    Parameters
    ----------
    spec : str
        ``"early-exit:K"``, ``"requant:B"``, ``"distilled"`` (or ``"distilled:PATH"``), or anything
        :func:`cactus_theory.logits._models.load_hf` accepts (hub id, folder, ``.gguf`` file).
    verifier_lm : LoadedModel
        The verifier (built-in drafters are derived from it).

    Returns
    -------
    (model, name) : (torch.nn.Module, str)

    Raises
    ------
    ValueError
        Naming ``drafter``, for a spec the verifier cannot give (e.g. ``early-exit:K`` with K at
        or above its number of layers).
    """
    v = verifier_lm.model
    check_drafter(spec, n_layers=getattr(v.config, "num_hidden_layers", None))
    if spec.startswith("early-exit:"):
        k = int(spec.split(":", 1)[1])
        return early_exit_model(v, k), f"{verifier_lm.name}/early-exit-{k}"
    if spec.startswith("requant:"):
        b = int(spec.split(":", 1)[1])
        return requantized_model(v, b), f"{verifier_lm.name}/requant-{b}bit-g32"
    if spec == "distilled" or spec.startswith("distilled:"):
        path = spec.split(":", 1)[1] if ":" in spec else None
        return load_distilled(v, path).to(device), f"{verifier_lm.name}/distilled"
    from ._models import load_hf

    lm = load_hf(spec, device=device)
    return lm.model, lm.name


__all__ = [
    "BUILTIN_DRAFTERS",
    "DISTILLED_PATH",
    "DistilledDrafter",
    "early_exit_logits",
    "early_exit_model",
    "load_distilled",
    "make_drafter",
    "requantized_model",
    "save_distilled",
]

r"""Patching both vLLM model runners' rejection sampling (the ``vllm.general_plugins`` entry).

vLLM has no verifier hook, and two model runners with their own rejection samplers
(../shared notes, vLLM 0.32-0.33): MRV1 ``vllm/v1/sample/rejection_sampler.py`` (class
``RejectionSampler.forward`` calls the module-level ``rejection_sample``) and MRV2
``vllm/v1/worker/gpu/spec_decode/rejection_sampler.py`` (``RejectionSampler._verify`` calls
``rejection_sample`` imported from ``rejection_sampler_utils``). A plugin that patched one of
them would silently change nothing under the other, so :func:`install` patches both:

* each runner's ``RejectionSampler.__init__`` reads the configuration
  (:func:`~.config.config_from_vllm`: ``additional_config["cactus_theory"]`` of the current
  vLLM config, else ``$CACTUS_THEORY_VLLM``), checks it and the speculative settings, and
  keeps the rule on the instance, with the rule's sampler built once for a rule that vLLM's
  kernels cannot realise (:func:`._config.serving_path`; the newer runner refuses such a rule);
  an unsupported rule or setting raises ValueError at start-up;
* each runner's verify method (MRV1 ``forward``, MRV2 ``_verify``) makes the instance's rule
  the active one while it runs;
* the module-level ``rejection_sample`` name in each module is replaced by a wrapper that, when
  a rule is active, replaces the non-greedy, non-bonus target rows by :math:`h^{(n)}`
  (:mod:`._rows`): MRV1's wrapper runs vLLM's own ``rejection_sample`` steps
  (:func:`_mrv1_rejection_sample`) with q replaced by h after the kernel's softmax; MRV2's
  hands its kernel :math:`\log h^{(n)}`; for a rule served by its sampler, MRV1's wrapper runs
  that sampler on the step's rows (:mod:`._served`). Without a configured rule, or with a rule
  at its SpS knobs, nothing changes;
* a rule that reads the raw rows gets them: each verify wrapper keeps a thunk giving the raw
  verifier logits of the call (MRV1 ``logits[metadata.target_logits_indices]``, MRV2 the
  ``logits`` before ``apply_sampling_params``), evaluated only for such a rule.

:func:`install` first checks the vLLM version against :data:`SUPPORTED_VLLM` and the
signatures it wraps against :data:`_EXPECTED_SIGNATURES`; a mismatch raises RuntimeError
naming what differs. The substitution happens inside ``rejection_sample`` (MRV1: on the
kernel's probabilities; MRV2: a new tensor, or for a spike rule one entry per row written in
place and put back when the kernel returns), so the logprobs the engine reports are still
computed from the verifier's q.

Symbols: q verifier, p drafter, n drafted token, h target. Source: Hao & Mou, ICLR 2026
(arXiv 2604.04987), Theorem 3.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import inspect
import logging
import os

from ._config import ENV_VAR, check_speculative_config, config_from_vllm

__all__ = [
    "SUPPORTED_VLLM",
    "check_version",
    "check_signatures",
    "install",
    "uninstall",
    "is_installed",
    "active_rule",
    "register",
]

logger = logging.getLogger("vllm.cactus_theory")  # under "vllm": shown by vLLM's log configuration

SUPPORTED_VLLM = ((0, 32), (0, 33))
"""(major, minor) releases whose rejection samplers this plugin was written against."""

MRV1_MODULE = "vllm.v1.sample.rejection_sampler"
"""The older model runner's rejection sampler."""

MRV2_MODULE = "vllm.v1.worker.gpu.spec_decode.rejection_sampler"
"""The default model runner's (MRV2) rejection sampler."""

_EXPECTED_SIGNATURES = {
    (MRV1_MODULE, "rejection_sample"): (
        "draft_token_ids",
        "num_draft_tokens",
        "max_spec_len",
        "cu_num_draft_tokens",
        "draft_probs",
        "target_logits",
        "bonus_token_ids",
        "sampling_metadata",
    ),
    (MRV1_MODULE, "RejectionSampler.__init__"): ("self", "sampler", "spec_config", "device"),
    (MRV1_MODULE, "RejectionSampler.forward"): (
        "self",
        "metadata",
        "draft_probs",
        "logits",
        "sampling_metadata",
    ),
    (MRV2_MODULE, "rejection_sample"): (
        "target_logits",
        "draft_logits",
        "draft_sampled",
        "cu_num_logits",
        "pos",
        "idx_mapping",
        "expanded_idx_mapping",
        "expanded_local_pos",
        "temperature",
        "seed",
        "num_speculative_steps",
    ),
    (MRV2_MODULE, "RejectionSampler.__init__"): ("self", "sampler", "spec_config", "device"),
    (MRV2_MODULE, "RejectionSampler._verify"): (
        "self",
        "logits",
        "draft_logits",
        "draft_sampled",
        "pos",
        "cu_num_logits",
    ),
}
"""Leading positional parameters of every wrapped callable, as vLLM 0.32/0.33 name them."""

_ACTIVE = contextvars.ContextVar("cactus_theory_vllm_rule", default=None)
_RAW = contextvars.ContextVar("cactus_theory_vllm_raw_logits", default=None)
_RECORDER = contextvars.ContextVar("cactus_theory_vllm_recorder", default=None)
_SAMPLER = contextvars.ContextVar("cactus_theory_vllm_sampler", default=None)
_ORIGINALS: dict = {}


def active_rule():
    """The rule of the rejection sampler now verifying in this context, or None."""
    return _ACTIVE.get()


def check_version(version: str | None = None) -> str:
    """Raise RuntimeError unless ``version`` (default: the installed vLLM's) is supported.

    Returns the version string checked.
    """
    if version is None:
        import vllm

        version = vllm.__version__
    try:
        major, minor = (int(x) for x in version.split(".")[:2])
    except ValueError:
        raise RuntimeError(f"vllm: cannot read version {version!r}") from None
    if (major, minor) not in SUPPORTED_VLLM:
        ok = ", ".join(f"{a}.{b}.*" for a, b in SUPPORTED_VLLM)
        raise RuntimeError(f"vllm: version {version} is not supported by cactus_theory's plugin ({ok})")
    return version


def _resolve(module, dotted: str):
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def check_signatures(modules=None) -> None:
    """Raise RuntimeError if a wrapped callable's leading parameters differ from the expected ones.

    ``modules`` maps module names to module objects (default: import both runners' modules).
    """
    for (mod_name, dotted), expected in _EXPECTED_SIGNATURES.items():
        module = (modules or {}).get(mod_name) or importlib.import_module(mod_name)
        fn = _ORIGINALS.get((mod_name, dotted)) or _resolve(module, dotted)
        params = tuple(inspect.signature(fn).parameters)[: len(expected)]
        if params != expected:
            raise RuntimeError(
                f"vllm: {mod_name}.{dotted} has parameters {params}, "
                f"cactus_theory's plugin expects {expected}"
            )


def _rule_at_init(spec_config, runner="mrv1"):
    """The configured rule, recorder and sampler (or Nones), checked against the speculative
    settings; the sampler is built for a rule vLLM's kernels cannot realise (``runner``
    ``"mrv2"`` refuses such a rule, ValueError)."""
    try:
        from vllm.config import get_current_vllm_config

        vllm_config = get_current_vllm_config()
    except (ImportError, AssertionError):
        vllm_config = None
    cfg = config_from_vllm(vllm_config)
    if cfg is None:
        return None, None, None
    check_speculative_config(spec_config)
    sampler = None
    if cfg.path == "sampler":
        if runner == "mrv2":
            raise ValueError(
                f"rule: {cfg.rule_name!r} has its own acceptance and recovery (or a target that is not "
                "a distribution); the plugin serves it on vLLM's older model runner only "
                "(VLLM_USE_V2_MODEL_RUNNER=0)"
            )
        from ...samplers import make_sampler

        sampler = make_sampler(cfg.rule)
        logger.info("cactus_theory: %r verified by the toolkit's sampler (vLLM's kernels cannot)", cfg.rule)
    logger.info("cactus_theory: verifying with %r (lossy: emits h_alg, not the verifier's q)", cfg.rule)
    recorder = None
    if cfg.record is not None:
        from ._recorder import recorder_from_config

        recorder = recorder_from_config(cfg.record, meta={"rule": cfg.rule_name, "knobs": cfg.knobs})
        logger.info("cactus_theory: recording the verified rows in %s", recorder.folder)
    return cfg.rule, recorder, sampler


def _wrap_init_of(runner):
    """The ``RejectionSampler.__init__`` wrapper of ``runner`` (``"mrv1"`` or ``"mrv2"``)."""

    def wrap(orig):
        @functools.wraps(orig)
        def __init__(self, sampler, spec_config=None, device=None, *args, **kwargs):
            orig(self, sampler, spec_config, device, *args, **kwargs)
            rule, recorder, rule_sampler = _rule_at_init(spec_config, runner)
            if rule_sampler is not None and device is not None:
                rule_sampler.init_tensors(device)
            self.cactus_theory_rule, self.cactus_theory_recorder = rule, recorder
            self.cactus_theory_sampler = rule_sampler

        return __init__

    return wrap


@contextlib.contextmanager
def _verifying(instance, raw_thunk=None):
    """The instance's rule, recorder and sampler active (and ``raw_thunk`` giving the raw
    verifier logits) while the block runs: what each runner's verify method does."""
    tokens = (
        (_ACTIVE, _ACTIVE.set(getattr(instance, "cactus_theory_rule", None))),
        (_RAW, _RAW.set(raw_thunk)),
        (_RECORDER, _RECORDER.set(getattr(instance, "cactus_theory_recorder", None))),
        (_SAMPLER, _SAMPLER.set(getattr(instance, "cactus_theory_sampler", None))),
    )
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def _wrap_verify(raw_of):
    """Wrap a verify method: the instance's rule is active while it runs, and the raw verifier
    logits (``raw_of(args, kwargs)``: a thunk giving them, rows as the kernel's) are kept for
    the rules that read raw rows."""

    def wrap(orig):
        @functools.wraps(orig)
        def verify(self, *args, **kwargs):
            with _verifying(self, raw_of(args, kwargs)):
                return orig(self, *args, **kwargs)

        return verify

    return wrap


def _mrv1_raw(args, kwargs):
    """MRV1 ``forward(metadata, draft_probs, logits, sampling_metadata)``: the raw rows are
    ``logits[metadata.target_logits_indices]`` (``forward`` only indexes ``logits``, a copy)."""
    metadata = args[0] if args else kwargs["metadata"]
    logits = args[2] if len(args) > 2 else kwargs["logits"]
    return lambda: logits[metadata.target_logits_indices]


def _mrv2_raw(args, kwargs):
    """MRV2 ``_verify(logits, ...)``: ``logits`` themselves (``apply_sampling_params`` copies
    them before processing)."""
    logits = args[0] if args else kwargs["logits"]
    return lambda: logits


def _raw_logits(rule):
    """The raw verifier logits of the running verify call, for a rule that reads raw rows."""
    from ._rows import needs_raw

    thunk = _RAW.get()
    return thunk() if thunk is not None and needs_raw(rule) else None


def _record_mrv1(recorder, processed, draft_probs, draft_token_ids, num_draft_tokens, cu, meta, out):
    """Hand the recorder one MRV1 step's verified rows (:mod:`._recorder`)."""
    import torch

    from ._rows import _rows_of_requests, raw_draft_from_tempered

    num_rows, vocab = processed.shape
    device = processed.device
    if draft_probs is None:
        draft_probs = torch.nn.functional.one_hot(draft_token_ids.to(torch.int64).clamp(min=0), vocab).float()
    temps = _rows_of_requests(
        meta.temperature.to(device, torch.float32), num_rows, num_draft_tokens, cu, device
    )
    thunk = _RAW.get()
    raw_logits = thunk() if thunk is not None else processed
    recorder.record(
        torch.softmax(processed.float(), -1),
        draft_probs,
        torch.softmax(raw_logits.float(), -1),
        raw_draft_from_tempered(draft_probs, temps),
        draft_token_ids,
        num_draft_tokens,
        out,
        temps != 0,
    )


def _mrv1_rejection_sample(
    rule,
    raw_logits,
    draft_token_ids,
    num_draft_tokens,
    max_spec_len,
    cu_num_draft_tokens,
    draft_probs,
    target_logits,
    bonus_token_ids,
    sampling_metadata,
    synthetic_mode=False,
    synthetic_conditional_rates=None,
    use_fp64_gumbel=False,
):
    """MRV1's ``rejection_sample`` (vLLM 0.32-0.33, ``vllm/v1/sample/rejection_sampler.py``,
    Apache-2.0: the same calls in the same order) with the verifier's probabilities replaced by
    the rule's h right after its softmax (:func:`.rows.mrv1_substitute_probs`): the kernel's own
    softmax is the only exp pass over the rows, and the processed logits stay untouched."""
    import torch

    from ._rows import mrv1_substitute_probs

    r1 = importlib.import_module(MRV1_MODULE)
    batch_size = len(num_draft_tokens)
    num_tokens = draft_token_ids.shape[0]
    device = target_logits.device
    output_token_ids = torch.full(
        (batch_size, max_spec_len + 1), r1.PLACEHOLDER_TOKEN_ID, dtype=torch.int32, device=device
    )
    is_greedy = (
        None if sampling_metadata.all_greedy else sampling_metadata.temperature == r1.GREEDY_TEMPERATURE
    )
    uniform_probs = None
    if synthetic_mode or not sampling_metadata.all_greedy:
        uniform_probs = r1.generate_uniform_probs(
            num_tokens, num_draft_tokens, sampling_metadata.generators, device
        )
    if not sampling_metadata.all_random:
        target_argmax = target_logits.argmax(dim=-1)
        r1._rejection_greedy_sample(
            output_token_ids, cu_num_draft_tokens, draft_token_ids, target_argmax, bonus_token_ids,
            is_greedy, max_spec_len, uniform_probs, synthetic_conditional_rates,
        )  # fmt: skip
        if sampling_metadata.all_greedy:
            return output_token_ids, draft_probs
    target_probs = target_logits.softmax(dim=-1, dtype=torch.float32)
    draft_probs, target_probs = mrv1_substitute_probs(
        rule, draft_token_ids, num_draft_tokens, draft_probs, target_probs, sampling_metadata,
        cu_num_draft_tokens, raw_logits,
    )  # fmt: skip
    recovered_token_ids = r1.sample_recovered_tokens(
        max_spec_len, num_draft_tokens, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs,
        sampling_metadata, device, use_fp64_gumbel,
    )  # fmt: skip
    r1._rejection_random_sample(
        output_token_ids, cu_num_draft_tokens, draft_token_ids, draft_probs, target_probs, bonus_token_ids,
        recovered_token_ids, uniform_probs, is_greedy, max_spec_len, synthetic_conditional_rates,
    )  # fmt: skip
    return output_token_ids, draft_probs


#: MRV1 module names :func:`_mrv1_rejection_sample` calls (checked by :func:`install`).
_MRV1_BODY_NAMES = (
    "PLACEHOLDER_TOKEN_ID",
    "GREEDY_TEMPERATURE",
    "generate_uniform_probs",
    "_rejection_greedy_sample",
    "sample_recovered_tokens",
    "_rejection_random_sample",
)


def _wrap_mrv1_sample(orig):
    from ._rows import is_sps

    @functools.wraps(orig)
    def rejection_sample(
        draft_token_ids,
        num_draft_tokens,
        max_spec_len,
        cu_num_draft_tokens,
        draft_probs,
        target_logits,
        bonus_token_ids,
        sampling_metadata,
        *args,
        **kwargs,
    ):
        given = (draft_token_ids, num_draft_tokens, max_spec_len, cu_num_draft_tokens, draft_probs,
                 target_logits, bonus_token_ids, sampling_metadata)  # fmt: skip
        rule, rule_sampler = _ACTIVE.get(), _SAMPLER.get()
        if rule is not None and not sampling_metadata.all_greedy and target_logits.shape[0] > 0:
            if rule_sampler is not None:
                from ._served import mrv1_sampler_sample

                r1 = importlib.import_module(MRV1_MODULE)
                out = mrv1_sampler_sample(r1, rule_sampler, rule, _raw_logits(rule), *given, *args, **kwargs)
            elif not is_sps(rule):
                out, draft_probs = _mrv1_rejection_sample(rule, _raw_logits(rule), *given, *args, **kwargs)
            else:
                out = orig(*given, *args, **kwargs)
        else:
            out = orig(*given, *args, **kwargs)
        recorder = _RECORDER.get()
        if recorder is not None and not sampling_metadata.all_greedy and target_logits.shape[0] > 0:
            _record_mrv1(recorder, target_logits, draft_probs, draft_token_ids, num_draft_tokens,
                         cu_num_draft_tokens, sampling_metadata, out)  # fmt: skip
        return out

    return rejection_sample


def _wrap_mrv2_sample(orig):
    from ._rows import is_sps, mrv2_substitute

    @functools.wraps(orig)
    def rejection_sample(
        target_logits,
        draft_logits,
        draft_sampled,
        cu_num_logits,
        pos,
        idx_mapping,
        expanded_idx_mapping,
        expanded_local_pos,
        temperature,
        seed,
        num_speculative_steps,
        *args,
        **kwargs,
    ):
        rule = _ACTIVE.get()
        undo = None
        if rule is not None and not is_sps(rule):
            target_logits, undo = mrv2_substitute(
                rule,
                target_logits,
                draft_logits,
                draft_sampled,
                cu_num_logits,
                expanded_idx_mapping,
                expanded_local_pos,
                temperature,
                _raw_logits(rule),
                in_place=True,
            )
        try:
            return orig(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
                        expanded_idx_mapping, expanded_local_pos, temperature, seed,
                        num_speculative_steps, *args, **kwargs)  # fmt: skip
        finally:
            if undo is not None:
                undo()  # the engine's processed logits (and logprobs) are q again

    return rejection_sample


_PATCHES = (
    (MRV1_MODULE, "rejection_sample", _wrap_mrv1_sample),
    (MRV1_MODULE, "RejectionSampler.__init__", _wrap_init_of("mrv1")),
    (MRV1_MODULE, "RejectionSampler.forward", _wrap_verify(_mrv1_raw)),
    (MRV2_MODULE, "rejection_sample", _wrap_mrv2_sample),
    (MRV2_MODULE, "RejectionSampler.__init__", _wrap_init_of("mrv2")),
    (MRV2_MODULE, "RejectionSampler._verify", _wrap_verify(_mrv2_raw)),
)


def is_installed() -> bool:
    """Whether :func:`install` has patched the runners in this process."""
    return bool(_ORIGINALS)


def install(*, check_vllm_version: bool = True) -> None:
    """Patch both runners (idempotent: a second call does nothing).

    Raises
    ------
    RuntimeError
        Unsupported vLLM version, or a wrapped signature differs from the expected one.
    """
    if _ORIGINALS:
        return
    if check_vllm_version:
        check_version()
    modules = {name: importlib.import_module(name) for name in (MRV1_MODULE, MRV2_MODULE)}
    check_signatures(modules)
    missing = [n for n in _MRV1_BODY_NAMES if not hasattr(modules[MRV1_MODULE], n)]
    if missing:
        raise RuntimeError(f"vllm: {MRV1_MODULE} lacks {missing}, which cactus_theory's plugin calls")
    for mod_name, dotted, wrap in _PATCHES:
        owner_path, _, attr = dotted.rpartition(".")
        owner = _resolve(modules[mod_name], owner_path) if owner_path else modules[mod_name]
        orig = getattr(owner, attr)
        _ORIGINALS[(mod_name, dotted)] = orig
        setattr(owner, attr, wrap(orig))


def uninstall() -> None:
    """Restore every patched callable (for tests)."""
    for (mod_name, dotted), orig in list(_ORIGINALS.items()):
        owner_path, _, attr = dotted.rpartition(".")
        module = importlib.import_module(mod_name)
        owner = _resolve(module, owner_path) if owner_path else module
        setattr(owner, attr, orig)
    _ORIGINALS.clear()


def register() -> None:
    """The ``vllm.general_plugins`` entry point, loaded in every vLLM process (re-entrant).

    Patches both runners. If ``$CACTUS_THEORY_VLLM`` is set it is validated here, so that a bad
    configuration fails at start-up (``additional_config`` is validated when each rejection
    sampler is built). Without any configuration the patched code passes through unchanged.
    """
    if os.environ.get(ENV_VAR):
        config_from_vllm(None)
    install()

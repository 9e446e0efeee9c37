"""The plugin's patches (``integrations/vllm/_patch.py``), without vLLM: the supported releases,
the signature check against stand-in modules (the wrapped callables' leading parameters as vLLM
0.32/0.33 name them, one renamed), and the rule active in a context. With vLLM, the patches
themselves are exercised by test_vllm_plugin.py."""

import contextvars
import inspect
import types

import pytest

from cactus_theory.integrations.vllm import _patch as vpatch
from cactus_theory.rules import get_rule


def test_version_pin():
    assert vpatch.check_version("0.33.1") == "0.33.1"
    assert vpatch.check_version("0.32.0")
    for bad in ("0.31.9", "0.34.0", "1.0.0", "dev"):
        with pytest.raises(RuntimeError, match="vllm"):
            vpatch.check_version(bad)


def _modules(rename=None):
    """Stand-in modules whose wrapped callables take the expected leading parameters (plus one
    more); ``rename`` = (module, dotted) gets its first parameter renamed."""
    mods = {}
    for (mod_name, dotted), params in vpatch._EXPECTED_SIGNATURES.items():
        names = list(params) + ["extra"]
        if (mod_name, dotted) == rename:
            names[0] = "renamed"
        fn = lambda *args, **kwargs: None  # noqa: E731  (inspect.signature reads __signature__)
        fn.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
        )
        mod = mods.setdefault(mod_name, types.SimpleNamespace())
        *owners, last = dotted.split(".")
        obj = mod
        for owner in owners:
            if not hasattr(obj, owner):
                setattr(obj, owner, types.SimpleNamespace())
            obj = getattr(obj, owner)
        setattr(obj, last, fn)
    return mods


def test_the_signature_check_names_the_callable_that_changed():
    assert not vpatch.is_installed()  # no vLLM here: nothing wrapped, the stand-ins are read
    vpatch.check_signatures(_modules())
    key = (vpatch.MRV2_MODULE, "RejectionSampler._verify")
    with pytest.raises(
        RuntimeError,
        match=rf"^vllm: {vpatch.MRV2_MODULE}\.RejectionSampler\._verify has parameters \('renamed',",
    ):
        vpatch.check_signatures(_modules(rename=key))


def test_the_active_rule_is_the_contexts():
    assert vpatch.active_rule() is None
    rule = get_rule("cactus-taylor", delta=0.5)

    def inside():
        vpatch._ACTIVE.set(rule)
        return vpatch.active_rule()

    assert contextvars.copy_context().run(inside) is rule
    assert vpatch.active_rule() is None  # another context's setting does not leak

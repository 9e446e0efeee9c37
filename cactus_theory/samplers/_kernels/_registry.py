"""The registry of the samplers' torch speed paths: :class:`RuleKernels` per rule class.

The rule files of :mod:`cactus_theory.samplers._kernels` register here; the package imports
them (and re-exports these names), so that no rule file imports the package it belongs to.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RuleKernels", "KERNELS", "NO_KERNELS", "register_kernels", "kernels_for"]


def _always() -> bool:
    return True


def _none(rule) -> tuple:
    return ()


@dataclass(frozen=True)
class RuleKernels:
    """The torch speed paths of one rule class (each optional; see the module docstring).

    ``guard()``: True when this torch can run them (checked when a sampler is made; False or
    an exception: the derived path runs instead). ``declines(rule)``: the names of the hooks
    that do not apply to this configured rule (the derived path runs for those), read when a
    sampler is made. ``node_step(verifier, q, p, child_tokens, drafting, generator)``: a
    node-wise multi-draft verifier's step in torch (the tree sampler's; without it the
    verifier's exact node law runs on the host).
    """

    accept_from_rows: Callable | None = None
    accept_decided_from_rows: Callable | None = None
    recovery_target_from_rows: Callable | None = None
    recovery_token_from_rows: Callable | None = None
    recovery_weights: Callable | None = None
    spike_recovery_weights: Callable | None = None
    spike_at_tokens: Callable | None = None
    accept_from_row_target: bool = False
    node_step: Callable | None = None
    guard: Callable[[], bool] = _always
    declines: Callable[..., tuple] = _none


#: Rule class -> its kernels.
KERNELS: dict = {}

#: No kernels: every hook None (what :func:`kernels_for` returns for an unregistered rule).
NO_KERNELS = RuleKernels()


def register_kernels(rule_cls: type, kernels: RuleKernels) -> RuleKernels:
    """Register ``kernels`` for ``rule_cls`` (and its subclasses, unless they register their
    own)."""
    if not isinstance(kernels, RuleKernels):
        raise TypeError(f"kernels: expected RuleKernels, got {type(kernels).__name__}")
    KERNELS[rule_cls] = kernels
    return kernels


def kernels_for(rule) -> RuleKernels:
    """The kernels registered for the first class of ``type(rule).__mro__`` that has some,
    if their guard passes; else :data:`NO_KERNELS` (the derived paths)."""
    for cls in type(rule).__mro__:
        kernels = KERNELS.get(cls)
        if kernels is not None:
            try:
                ok = bool(kernels.guard())
            except Exception:  # noqa: BLE001 - a broken kernel falls back to the derived path
                ok = False
            return kernels if ok else NO_KERNELS
    return NO_KERNELS

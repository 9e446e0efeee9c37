"""What :mod:`cactus_theory.solvers` lends to the rest of the library.

The names that other packages of ``cactus_theory`` use from this one but users do not: the library
imports them from here, never from a private module of this package (the ``private_modules``
contract in ``pyproject.toml``). Nothing here is public: ``__all__`` is empty, and a name may
change with the code that uses it. The package's public names are its ``__all__``.
"""

# ruff: noqa: F401
# (every import here is a re-export)

from . import _spike
from ._certificates import CERTIFICATE_DIVERGENCES, rejection_radius
from ._draft_coupling import SetCoupling, optimal_set_coupling
from ._frontier import LARGEST_FINITE
from ._mentored_device import mentored_target_rows
from ._multidraft import multidraft_multiplier_target, multidraft_target
from ._sequence import budgeted_multiplier_step
from ._spike import (
    device_root,
    effective_exact_spike,
    has_device_root,
    spike_scale,
    spike_scale_unchecked,
)

__all__ = []


def _host_tensor(t) -> bool:
    """Whether the exact root of :mod:`._spike` runs on the host for the tensor ``t``: that
    module's switch, read at each call, so that a test that switches it there switches it for
    the package's users too."""
    return _spike._host_tensor(t)

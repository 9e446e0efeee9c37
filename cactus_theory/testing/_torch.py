"""torch for :mod:`cactus_theory.testing` (installed by the ``[test]`` extra).

``from ._torch import torch`` imports torch or raises one line naming the extra
(:func:`cactus_theory._extras.require`).
"""

from .._extras import require

torch = require("torch", "cactus_theory.testing", extra="test")

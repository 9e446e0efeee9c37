"""torch for the model-backed modules of :mod:`cactus_theory.logits` (the ``[real]`` extra).

``from ._torch import torch`` imports torch or raises one line naming the extra
(:func:`cactus_theory._extras.require`); the recording format and loader do not import it.
"""

from .._extras import require

torch = require("torch", "the model-backed part of cactus_theory.logits", extra="real")

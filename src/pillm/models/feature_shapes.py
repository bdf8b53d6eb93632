"""The PIL feature maps' shapes: fixed random features whose output map is solved in closed form
(``pillm.lm.pil``). Torch-free, so the reports (``pillm.lm.feature_maps``) read the same table
the model (``pillm.models.gpt.attach_pil``) builds from.
"""

from __future__ import annotations

# name -> (projections, width per projection in units of d); Variant.features names one of these
FEATURES: dict[str, tuple[int, int]] = {
    "single": (1, 4),
    "bi": (2, 4),
    "single8d": (1, 8),
    # width sweep (single projection): 1d, 2d and 16d next to single (4d) and single8d
    "single1d": (1, 1),
    "single2d": (1, 2),
    "single16d": (1, 16),
}

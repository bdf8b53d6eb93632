"""Whether a gradient arm trained, and whether its held-out curve had flattened: the declared
rules of ``generative.gradient`` that every AdamW arm's record applies. Torch-free.

- Trained: the training loss fell by at least ``trained_drop`` (relative) from its first step,
  the loss of the zero output map both gradient arms start from. The claim frame carries it per
  seed (metric ``trained``), so a claim against an arm that did not train is not evaluated
  (``opponents:`` in paper/claims/generative.yaml).
- Flattened: over the last ``flat_evals`` held-out evaluations the lowest held-out error so far
  improved by less than ``flat_tol`` (relative). The full-network arm records it at its end;
  the output-layer arm (adamw_out.py) anneals its rate from the first evaluation where it holds.
- Both arms' cosine schedules end at ``MIN_LR_FRAC`` of their peak rate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

MIN_LR_FRAC = 0.1  # where the gradient arms' schedules end, as a fraction of the peak rate


def _best(errors: Sequence[float]) -> float:
    """The lowest finite error (a diverged evaluation counts as +inf)."""
    return min((e for e in errors if math.isfinite(e)), default=math.inf)


def rel_gain(errors: Sequence[float], window: int) -> float | None:
    """(b(n - w) - b(n)) / b(n - w) for ``errors`` e_1..e_n and w = ``window``, b(i) the lowest of
    e_1..e_i: how much the best held-out error improved over the last w evaluations. None with
    at most w evaluations (nothing to compare with); inf when the earlier ones all diverged and a
    later one did not; 0 when none is finite."""
    if window < 1:
        raise ValueError(f"generative.gradient.flat_evals must be >= 1, got {window}")
    if len(errors) <= window:
        return None
    before, now = _best(errors[:-window]), _best(errors)
    if not math.isfinite(before):
        return math.inf if math.isfinite(now) else 0.0
    return (before - now) / before


def flattened(errors: Sequence[float], window: int, tol: float) -> bool:
    """The curve's best improved by less than ``tol`` over its last ``window`` evaluations (False
    while there are too few evaluations to tell)."""
    gain = rel_gain(errors, window)
    return gain is not None and gain < tol


def trained(first_loss: float, loss: float, drop: float) -> bool:
    """The training loss ``loss`` lies at least ``drop`` (relative) below ``first_loss``."""
    return math.isfinite(first_loss) and math.isfinite(loss) and loss <= (1 - drop) * first_loss

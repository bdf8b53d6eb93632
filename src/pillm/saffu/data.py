"""Train-size arms of the SAFFU study: which train tokens a run at fraction ``f`` and seed ``s``
sees, and the arm names its claims use.

A fraction below 1 is one contiguous window of ``round(f * N)`` train tokens (contiguous, so
every context is real text) at an offset drawn from the seed: seeds see different windows,
so the seed-to-seed spread includes the choice of data, and the warm and cold start (and the
n-gram baseline) of one seed see the same window, so their comparison pairs seed by seed. The
full split (``f = 1``) is the same for every seed.
"""

from __future__ import annotations

import random


def train_window(n_train: int, fraction: float, seed: int) -> tuple[int, int]:
    """(offset, length) of the train tokens at ``fraction`` for ``seed``."""
    if not 0 < fraction <= 1:
        raise ValueError(f"saffu train fraction {fraction}: use a number in (0, 1]")
    length = max(2, round(fraction * n_train))
    if length >= n_train:
        return 0, n_train
    offset = random.Random(f"saffu-window-{seed}").randrange(n_train - length + 1)
    return offset, length


def fraction_tag(fraction: float) -> str:
    """The fraction as a path and arm tag: 0.1 -> 'f10', 1.0 -> 'f100', 0.025 -> 'f2.5'."""
    pct = round(100 * fraction, 6)
    return f"f{pct:g}"


def arm(kind: str, fraction: float) -> str:
    """The claim-frame arm of one model at one train fraction: 'warm_f10', 'cold_f100',
    'kn_f30', 'explicit_f10'."""
    return f"{kind}_{fraction_tag(fraction)}"

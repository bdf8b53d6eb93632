"""The ridge solver's defaults that torch-free code states as well (the probe section's text
names the Cholesky threshold its fits use); ``pillm.core.ridge``, which imports torch, takes them
from here, so a report that quotes them need not import torch."""

# Above this condition number of HᵀH + λI, Cholesky gives way to the eigh pseudo-inverse, where a
# caller sets none (the probe's fits; the studies pass their config's kappa_max).
KAPPA_MAX = 1e10

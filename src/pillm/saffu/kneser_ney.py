"""Interpolated Kneser-Ney n-gram language model (Chen & Goodman 1999), our own implementation.

Torch-free. No maintained PyPI library fits: ``kenlm``'s Python package only queries ARPA files
(the ``lmplz`` estimator is a C++ build), and ``nltk.lm.KneserNeyInterpolated`` scores one
n-gram at a time in pure Python over the whole vocabulary (hours at GPT-2's 50,257 types).

The model, for a history ``h`` of length ``k - 1`` and the next token ``w`` (order ``k``):

    P_k(w | h) = max(c_k(h w) - D_k(c_k(h w)), 0) / c_k(h .)  +  gamma_k(h) P_{k-1}(w | h')
    gamma_k(h) = sum over the types v seen after h of D_k(c_k(h v)) / c_k(h .)

where ``h'`` drops the oldest token of ``h``, ``c_k(h .) = sum_v c_k(h v)`` (the history as a
context, not as an n-gram), ``c_n`` is the raw count at the highest order ``n`` and, below it,
the continuation count ``c_k(g) = |{u : c_{k+1}(u g) > 0}|`` (in how many left contexts ``g``
occurs). The recursion ends in the uniform distribution ``P_0(w) = 1 / V`` over the whole
vocabulary, so every type has positive probability. A history never seen as a context falls
through to the next lower order (``P_k = P_{k-1}``). Each order's distribution sums to 1
whenever ``D_k(c) <= c`` (tests/saffu/test_kneser_ney.py checks it).

Discounts: a fixed ``D`` for every count (``discount: 0.75``), or the *modified* discounts
``D_1, D_2, D_3+`` of Chen & Goodman from the counts of counts ``n_r`` of each order
(``Y = n_1 / (n_1 + 2 n_2)``, ``D_r = r - (r + 1) Y n_{r+1} / n_r``), clipped into ``[0, r]``
where a small corpus leaves ``n_r = 0`` or drives an estimate to zero (a floor of ``D_MIN``
keeps every back-off weight positive, so no token gets probability 0).

Prediction: every token of a sequence after the first, with up to ``n - 1`` tokens of history
(position j sees ``min(j, n - 1)`` tokens), the same predicted tokens as the SAFFU model's and
the LM table's perplexity.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

Gram = tuple[int, ...]
D_MIN = 0.01  # floor of a modified discount


def _discounts(counts: Counter, discount: float | str) -> tuple[float, float, float]:
    """(D_1, D_2, D_3+) of one order: fixed, or modified KN from the counts of counts."""
    if discount != "modified":
        d = float(discount)
        if not 0 < d <= 1:
            raise ValueError(f"kneser-ney discount {d}: use a number in (0, 1] or 'modified'")
        return d, d, d
    n = Counter(c for c in counts.values() if c <= 4)  # counts of counts n_1 .. n_4
    n1, n2, n3, n4 = (n.get(r, 0) for r in (1, 2, 3, 4))
    y = n1 / (n1 + 2 * n2) if n1 + 2 * n2 > 0 else 0.5
    out = []
    for r, nr, nr1 in ((1, n1, n2), (2, n2, n3), (3, n3, n4)):
        d = r - (r + 1) * y * nr1 / nr if nr > 0 else y * r
        out.append(min(max(d, D_MIN), float(r)))
    return out[0], out[1], out[2]


@dataclass
class _Order:
    """One order's counts (raw at the top, continuation below) and its context statistics."""

    counts: Counter
    discounts: tuple[float, float, float]
    context_total: dict[Gram, float] = field(default_factory=dict)  # c_k(h .)
    context_mass: dict[Gram, float] = field(default_factory=dict)  # sum_v D_k(c_k(h v))

    def discount(self, c: float) -> float:
        return self.discounts[min(int(c), 3) - 1]

    def finish(self) -> None:
        total: dict[Gram, float] = defaultdict(float)
        mass: dict[Gram, float] = defaultdict(float)
        for g, c in self.counts.items():
            total[g[:-1]] += c
            mass[g[:-1]] += self.discount(c)
        self.context_total, self.context_mass = dict(total), dict(mass)


class KneserNey:
    """Interpolated Kneser-Ney of order ``order`` fitted on one token sequence (``tokens``),
    over a vocabulary of ``vocab`` types (ids 0..vocab-1)."""

    def __init__(
        self, tokens: Sequence[int], order: int, vocab: int, discount: float | str = "modified"
    ):
        if order < 1:
            raise ValueError(f"kneser-ney order {order} must be >= 1")
        if len(tokens) < order:
            raise ValueError(f"kneser-ney: {len(tokens)} train tokens are fewer than order {order}")
        if vocab < 1 or max(tokens) >= vocab or min(tokens) < 0:
            raise ValueError(f"kneser-ney: token ids must lie in [0, {vocab})")
        self.order, self.vocab = order, vocab
        t = [int(x) for x in tokens]
        top = Counter(zip(*(t[i : len(t) - order + 1 + i] for i in range(order)), strict=True))
        grams = {order: top}
        for k in range(order - 1, 0, -1):  # continuation counts: distinct left extensions
            grams[k] = Counter(g[1:] for g in grams[k + 1])
        self.orders = {k: _Order(c, _discounts(c, discount)) for k, c in grams.items()}
        for o in self.orders.values():
            o.finish()

    def prob(self, history: Sequence[int], w: int) -> float:
        """P(w | the last ``order - 1`` tokens of ``history``)."""
        h = tuple(history)[len(history) - (self.order - 1) :] if self.order > 1 else ()
        p = 1.0 / self.vocab
        for k in range(1, len(h) + 2):
            o = self.orders[k]
            ctx = h[len(h) - (k - 1) :] if k > 1 else ()
            total = o.context_total.get(ctx)
            if not total:
                continue  # an unseen context falls through to the lower order
            c = o.counts.get((*ctx, w), 0)
            p = (max(c - o.discount(c), 0.0) if c else 0.0) / total + o.context_mass[
                ctx
            ] / total * p
        return p

    def nll(self, tokens: Sequence[int]) -> tuple[float, int]:
        """Total negative log-likelihood (nats) of tokens[1:], each given up to ``order - 1``
        previous tokens, and the number of predicted tokens."""
        t = [int(x) for x in tokens]
        total = 0.0
        for j in range(1, len(t)):
            total -= math.log(self.prob(t[max(0, j - self.order + 1) : j], t[j]))
        return total, len(t) - 1

"""What a diff finds: one :class:`Change` per listed difference, gathered in a :class:`BuildDiff`.

Every comparison (metrics, claims, tables, macros) returns changes of this one shape, so the
text and HTML pages (``pillm.paper.diff.render``) list them alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Change:
    """One listed difference. ``kind``: noise (beyond seed noise), no_noise (a side with one
    seed: above the relative threshold), only_a / only_b (on one side), flip (a claim's
    verdict), cell (a table cell), macro (a macro value), context (data or tokenizer labels)."""

    section: str
    where: str
    what: str
    a: str
    b: str
    kind: str
    note: str = ""


# Kinds in the order a section lists them, with their text.
KIND_TEXT = {
    "flip": "FLIPPED",
    "context": "changed",
    "noise": "beyond noise",
    "no_noise": "NO SEED NOISE KNOWN",
    "cell": "moved",
    "macro": "moved",
    "only_a": "only in A",
    "only_b": "only in B",
}


@dataclass
class BuildDiff:
    a: str
    b: str
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be compared, and why
    # Per metric compared against its seed noise: the chance an unchanged one is listed.
    chance: list[float] = field(default_factory=list)

    def chance_line(self) -> str:
        """How many listed metrics chance alone would give: the screen is per metric."""
        if not self.chance:
            return "No metric had seed noise on both sides."
        return (
            f"{len(self.chance)} metrics had seed noise on both sides; if none had changed, "
            f"about {sum(self.chance):.1f} would be listed by chance at this rule."
        )

    def section(self, name: str) -> list[Change]:
        """The changes of one section, grouped by kind (``KIND_TEXT``'s order)."""
        order = list(KIND_TEXT)
        return sorted(
            (c for c in self.changes if c.section == name), key=lambda c: order.index(c.kind)
        )


def num(x: float | None) -> str:
    if x is None:
        return "-"
    return "nan" if math.isnan(x) else f"{x:.6g}"


def mean_std(mean: float | None, std: float | None, n: int | None) -> str:
    if n is None:
        return "-"
    s = num(mean) + (f" ± {num(std)}" if std is not None and not math.isnan(std) else "")
    return f"{s} (n={n})"


def one_side(section: str, where: str, kind: str, names: list[str], what: str) -> Change:
    """One line for everything under ``where`` that only one build has."""
    listed = ", ".join(names) if len(names) <= 4 else f"{len(names)} {what}"
    a, b = ("present", "-") if kind == "only_a" else ("-", "present")
    return Change(section, where, listed, a, b, kind)

"""Claims of two builds (``summary/claims.parquet``): every claim whose verdict differs, or which
one build lacks."""

from __future__ import annotations

import polars as pl

from pillm.paper.diff.builds import DiffInputError
from pillm.paper.diff.changes import Change, num
from pillm.paper.diff.keys import require_unique

# claims.parquet as pillm.paper.claims writes it (id, diff, ci_lo, ci_hi) or in the long names.
CLAIM_NAMES = {"id": "claim_id", "diff": "diff_mean", "ci_lo": "ci_low", "ci_hi": "ci_high"}
CLAIM_COLUMNS = ("claim_id", "verdict", "diff_mean", "ci_low", "ci_high", "agree", "n")


def claim_rows(side: str, df: pl.DataFrame) -> pl.DataFrame:
    """One row per claim of build ``side``, in the long column names; a claim id on two rows
    stops with :class:`DiffInputError`."""
    df = df.rename(
        {k: v for k, v in CLAIM_NAMES.items() if k in df.columns and v not in df.columns}
    )
    missing = {"claim_id", "verdict"} - set(df.columns)
    if missing:
        raise DiffInputError(
            f"claims.parquet of build {side} lacks columns {sorted(missing)} "
            "(pillm.paper.claims writes id and verdict; rebuild the claims rule)"
        )
    rows = df.select(
        pl.col("claim_id").cast(pl.String),
        pl.col("verdict").cast(pl.String),
        *(
            pl.col(c).cast(pl.Float64) if c in df.columns else pl.lit(None, pl.Float64).alias(c)
            for c in CLAIM_COLUMNS[2:]
        ),
    )
    require_unique(rows, ["claim_id"], f"summary/claims.parquet of build {side}")
    return rows


def claim_text(r: dict, s: str = "") -> str:
    """'verdict, Δ=..., CI [lo, hi], agree/n' of one side (``s``: '' for A, '_b' for B)."""
    parts = [str(r["verdict" + s])]
    if r["diff_mean" + s] is not None:
        parts.append(f"Δ={num(r['diff_mean' + s])}")
    if r["ci_low" + s] is not None:
        parts.append(f"CI [{num(r['ci_low' + s])}, {num(r['ci_high' + s])}]")
    if r["n" + s] is not None:
        agree = f"{r['agree' + s]:.0f}/" if r["agree" + s] is not None else "n="
        parts.append(f"{agree}{r['n' + s]:.0f} seeds")
    return ", ".join(parts)


def compare_claims(a: pl.DataFrame, b: pl.DataFrame) -> list[Change]:
    """Every claim whose verdict differs between the builds, or which one build lacks."""
    both = claim_rows("A", a).join(
        claim_rows("B", b), on="claim_id", how="full", suffix="_b", coalesce=True
    )
    out = []
    for r in both.sort("claim_id").iter_rows(named=True):
        va, vb = r["verdict"], r["verdict_b"]
        ta = claim_text(r) if va is not None else "-"
        tb = claim_text(r, "_b") if vb is not None else "-"
        if va is None or vb is None:
            out.append(
                Change(
                    "claims",
                    "claims.parquet",
                    r["claim_id"],
                    ta,
                    tb,
                    "only_a" if vb is None else "only_b",
                )
            )
        elif va != vb:
            out.append(Change("claims", "claims.parquet", r["claim_id"], ta, tb, "flip"))
    return out

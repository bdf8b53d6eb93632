"""A claim's verdicts, its evaluated record (``Result``) and the claims-file error: what the
evaluation (``pillm.paper.claims``) and the text (``pillm.paper.claim_text``) both read."""

from __future__ import annotations

from dataclasses import dataclass

BOOTSTRAP = {"min_seeds": 5, "resamples": 10000, "seed": 0}  # a file's bootstrap: overrides these

# Verdicts (the ``verdict`` field); the sentence and the table render from these.
HOLDS = "holds"  # the direction (or equivalence, or non-additivity) the claim declares
REVERSED = "reversed"  # the interval excludes zero on the other side
INDISTINGUISHABLE = "indistinguishable"
NOT_EQUIVALENT = "not equivalent"  # equivalence: the interval leaves the margin
ONE_SEED = "no interval (1 seed)"
NO_SEEDS = "no common seeds"
NOT_RUN = "not run"


class ClaimsError(ValueError):
    """A malformed claims file: the message names the claim and key."""


@dataclass
class Result:
    """One evaluated claim: every field goes to ``claims.parquet``."""

    id: str
    study: str
    metric: str
    test: str
    a: str
    b: str
    better: str
    verdict: str
    n: int = 0
    seeds: str = ""
    diff: float | None = None  # mean over seeds of a - b (share_sum: share_a + share_b - 1)
    ci_lo: float | None = None  # 95 % t interval over seeds
    ci_hi: float | None = None
    boot_lo: float | None = None  # percentile bootstrap (n >= bootstrap.min_seeds), else null
    boot_hi: float | None = None
    ci_method: str = ""  # which intervals decided the verdict: "t", "t+bootstrap" or ""
    agree: int = 0  # seeds whose difference has the mean's sign
    margin: float | None = None
    missing: str = ""  # arms the config does not run
    group: str = ""
    sentence: str = ""

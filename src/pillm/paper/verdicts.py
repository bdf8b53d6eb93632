"""A claim's verdicts, its evaluated record (``Result``) and the claims-file error: what the
evaluation (``pillm.paper.claims``) and the text (``pillm.paper.claim_text``) both read."""

from __future__ import annotations

from dataclasses import dataclass

BOOTSTRAP = {"min_seeds": 5, "resamples": 10000, "seed": 0}  # a file's bootstrap: overrides these
ALPHA = 0.05  # the level of every interval (95 %) and of the multiple-comparison adjustment

# Verdicts (the ``verdict`` field); the sentence and the table render from these.
HOLDS = "holds"  # the direction (or equivalence, or non-additivity) the claim declares
REVERSED = "reversed"  # the interval excludes zero on the other side
INDISTINGUISHABLE = "indistinguishable"
NOT_EQUIVALENT = "not equivalent"  # equivalence: the interval leaves the margin
IDENTICAL = "identical by construction"  # every paired difference is exactly 0
OPPONENT_UNTRAINED = "opponent did not train"  # a gradient opponent's training loss never fell
TOO_FEW = "too few blocks"  # the study's interval rests on too few blocks for a direction
NOT_EVALUATED = "not evaluated"  # the study declines the comparison (its guard row says why)
NO_INTERVAL = "no interval"  # an interval claim whose study computed no interval
ONE_SEED = "no interval (1 seed)"
NO_SEEDS = "no common seeds"
NOT_RUN = "not run"

# The seed-row metric in which a study's frame records, per arm and seed, whether a gradient
# opponent trained (1) or not (0); a claims file lists its gradient arms under ``opponents:``.
TRAINED_METRIC = "trained"

# Guard rows: in place of an interval claim's row under its metric, a study's frame may hold a row
# of the same arms under one of these metrics; its value, lo, hi, n and method are the
# difference's, and the metric names the verdict (pillm.probe.correlations writes them).
TOO_FEW_METRIC = "too_few_blocks"  # fewer blocks per model than the study needs, or no interval
BOTH_NULL_METRIC = "both_indistinguishable_from_zero"  # each arm's value is compatible with 0
GUARDS = {TOO_FEW_METRIC: TOO_FEW, BOTH_NULL_METRIC: NOT_EVALUATED}


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
    agree: int = 0  # seeds whose non-zero difference has the mean's sign
    identical: bool = False  # n >= 2 and every paired difference exactly 0
    p_value: float | None = None  # paired t test of the claim's hypothesis (equivalence: TOST)
    p_holm: float | None = None  # Holm-adjusted over the family (None: not in the family)
    p_bh: float | None = None  # Benjamini-Hochberg-adjusted over the same family
    holds_holm: bool | None = None  # verdict holds and p_holm < ALPHA (None: not in the family)
    holds_bh: bool | None = None
    margin: float | None = None
    missing: str = ""  # arms the config does not run
    guard: str = ""  # the guard metric (``GUARDS``) the study wrote in place of the interval row
    opponents: str = ""  # the claim's arms listed under the file's ``opponents:``
    untrained: str = ""  # '<arm>: seeds 0, 2' where a gradient opponent did not train
    group: str = ""
    sentence: str = ""

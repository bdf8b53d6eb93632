"""Ours against the reference over seeds: paired differences of `trainer_throughput.py` runs.

    python benchmarks/trainer_seeds.py seed0.json seed1.json seed2.json

Each file is one ``trainer_throughput.py --seed S --out FILE`` call (one seed; ``--ours`` once,
any number of ``--batch``). Per batch it prints each seed's losses, their paired differences
(ours - reference) with the pipeline's 95 % interval over seeds (``pillm.paper.claims.interval``,
the one the paper's claims use) and the tokens/s ratio. "Same loss after the same tokens"
holds where the interval of a loss difference contains 0.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from pillm.paper.claims import BOOTSTRAP, interval  # noqa: E402

LOSSES = ("final_train_loss", "heldout_loss")


def pairs(paths: list[Path]) -> dict[int, list[tuple[dict, dict]]]:
    """{batch: [(reference run, ours run) per file]}; SystemExit naming a file that lacks one."""
    out: dict[int, list[tuple[dict, dict]]] = {}
    for path in paths:
        runs = json.loads(path.read_text())["runs"]
        for batch in sorted({r["batch_size"] for r in runs}):
            ref = [r for r in runs if r["batch_size"] == batch and r["role"] == "reference"]
            ours = [r for r in runs if r["batch_size"] == batch and r["role"] == "ours"]
            if len(ref) != 1 or len(ours) != 1:
                raise SystemExit(f"{path}: batch {batch} needs exactly one reference run and one "
                                 "ours run (call trainer_throughput.py with one --ours)")  # fmt: skip
            out.setdefault(batch, []).append((ref[0], ours[0]))
    return out


def summary(paths: list[Path]) -> list[dict]:
    """One row per batch and loss: the per-seed values, the interval, the speed ratios."""
    rows = []
    for batch, runs in pairs(paths).items():
        ratios = [o["tokens_per_s"] / r["tokens_per_s"] for r, o in runs]
        for loss in LOSSES:
            diffs = [o[loss] - r[loss] for r, o in runs]
            rows.append({
                "batch": batch, "loss": loss, "reference": [r[loss] for r, _ in runs],
                "ours": [o[loss] for _, o in runs], "ratios": ratios,
                **interval(diffs, BOOTSTRAP),
            })  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="trainer_throughput.py --out files")
    args = ap.parse_args()
    print("| batch | loss | reference per seed | ours per seed | ours - ref (95 % CI) | "
          "within noise | tokens/s ratio per seed |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in summary(args.runs):
        fmt = lambda xs: ", ".join(f"{x:.4f}" for x in xs)  # noqa: E731
        ci = f"{r['diff']:+.4f}"
        noise = "-"
        if "ci_lo" in r:
            ci += f" [{r['ci_lo']:+.4f}, {r['ci_hi']:+.4f}]"
            noise = "yes" if r["ci_lo"] <= 0 <= r["ci_hi"] else "no"
        ratios = ", ".join(f"{x:.2f}x" for x in r["ratios"])
        print(f"| {r['batch']} | {r['loss']} | {fmt(r['reference'])} | {fmt(r['ours'])} | {ci} | "
              f"{noise} | {ratios} |")  # fmt: skip


if __name__ == "__main__":
    main()

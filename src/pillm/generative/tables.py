"""The generative study's tables and ``gen_numbers.tex`` macros, from its summaries
(aggregate.py; figures: figures.py).

Sample-quality metrics are named for what they are: Fréchet distance, KID and 1-NN accuracy in
the features of the pipeline's own classifier (FD_self, KID_self), not FID. Every arm pair runs
``generative.seeds``: tables give the mean over seeds with its 95 % t interval; the directions
the section states come from ``paper/claims/generative.yaml`` evaluated on the claim frame.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pillm.generative.aggregate import load
from pillm.generative.labels import DATASETS, FAMILY_NAMES, METHOD_NAMES, macro, mean_ci
from pillm.generative.opponents import OUT_TABLE, opponent_macros, out_rows, seeds_with
from pillm.paper.latex import MISSING, fmt_num, fmt_sig, tex_escape
from pillm.paper.report import render_report
from pillm.paper.table import Table

ABLATIONS = {  # ablation -> label; each is compared with the PIL flow's first seed
    "width": "Feature width",
    "projections": "Random projections (Bi-PIL)",
    "time_encoding": "Time encoding",
}


# ------------------------------------------------------------------------------- over seeds


def over_seeds(runs: pl.DataFrame, cols: list[str]) -> pl.DataFrame:
    """Mean, std and n over seeds of ``cols`` per (dataset, setting), with the run's labels."""
    keys = ["dataset", "setting", "model", "method", "ablation", "level", "family"]
    present = [c for c in cols if c in runs.columns]
    aggs = [pl.len().alias("n_seeds")]
    for c in present:
        aggs += [pl.col(c).mean().alias(c), pl.col(c).std().alias(f"{c}_std")]
    return runs.group_by(keys, maintain_order=True).agg(aggs)


def lr_edges(lr: pl.DataFrame) -> str:
    """'k of n': the grids whose pick is the largest or smallest rate (``edge`` != 0 in
    ``lr.json``: a better rate may lie outside the grid)."""
    if not lr.height:
        return MISSING
    picks = lr.filter(pl.col("picked"))
    return f"{(picks['edge'] != 0).sum()} of {picks.height}"


def _lr_of(lr: pl.DataFrame, ds: str, family: str) -> float | None:
    sub = lr.filter((pl.col("dataset") == ds) & (pl.col("family") == family) & pl.col("picked"))
    return sub["lr"][0] if sub.height else None


# ----------------------------------------------------------------------------------- tables


def main_rows(
    mean: pl.DataFrame, classifiers: pl.DataFrame, lr: pl.DataFrame, runs: pl.DataFrame
) -> list:
    rows: list = []
    arms = mean.filter(pl.col("ablation") == "main")
    for ds in [d for d in DATASETS if d in arms["dataset"].unique().to_list()]:
        if rows:
            rows.append("midrule")
        for fam in FAMILY_NAMES:
            for method in METHOD_NAMES:
                sub = arms.filter(
                    (pl.col("dataset") == ds) & (pl.col("family") == fam)
                    & (pl.col("method") == method)
                )  # fmt: skip
                if not sub.height:
                    continue
                r = sub.row(0, named=True)
                how = METHOD_NAMES[method]
                if method == "adamw":
                    how += f", lr {_lr_of(lr, ds, fam) or 0:g}"
                rows.append([
                    DATASETS[ds], FAMILY_NAMES[fam], how, fmt_num(r["trainable_params"], 0),
                    fmt_num(r["fit_seconds"], 1), mean_ci(r, "heldout_mse", 4),
                    mean_ci(r, "fd_self", 2), mean_ci(r, "kid_self"),
                    fmt_num(r["nn1_acc"], 3), str(r["n_seeds"]),
                    seeds_with(runs, ds, r["setting"], "trained"),
                    seeds_with(runs, ds, r["setting"], "flattened"),
                ])  # fmt: skip
        floor = classifiers.filter(pl.col("dataset") == ds)
        if floor.height:
            f = floor.row(0, named=True)
            rows.append([
                DATASETS[ds], "Real train images", "(floor)", MISSING, MISSING, MISSING,
                fmt_num(f["fd_self"], 2), fmt_sig(f["kid_self"]), fmt_num(f["nn1_acc"], 3), MISSING,
                MISSING, MISSING,
            ])  # fmt: skip
    return rows


def in_paper_order(df: pl.DataFrame) -> pl.DataFrame:
    """Rows by dataset (MNIST first) and arm pair in the order of FAMILY_NAMES."""
    order = [pl.col("dataset").replace_strict({d: i for i, d in enumerate(DATASETS)}, default=99),
             pl.col("family").replace_strict({f: i for i, f in enumerate(FAMILY_NAMES)}, default=99)]  # fmt: skip
    return df.sort(order, maintain_order=True)


def speed_summary(speed: pl.DataFrame) -> pl.DataFrame:
    """Per (dataset, family): mean times over seeds, how many seeds reached, AdamW's late gain."""
    if not speed.height:
        return speed
    return (
        in_paper_order(speed)
        .group_by("dataset", "family", maintain_order=True)
        .agg(
            pl.len().alias("n"),
            pl.col("pil_seconds").mean(),
            pl.col("adamw_seconds").mean(),
            pl.col("adamw_to_pil_seconds").mean().alias("adamw_to_pil_mean"),
            pl.col("adamw_reaches_pil").sum().alias("adamw_reached"),
            pl.col("pil_reaches_adamw").sum().alias("pil_reached"),
            pl.col("adamw_late_gain").mean(),
        )
    )


def speed_table_rows(speed: pl.DataFrame) -> list:
    rows: list = []
    for r in speed_summary(speed).iter_rows(named=True):
        rows.append([
            DATASETS[r["dataset"]], FAMILY_NAMES[r["family"]], fmt_num(r["pil_seconds"], 1),
            fmt_num(r["adamw_to_pil_mean"], 1), f"{r['adamw_reached']}/{r['n']}",
            fmt_num(r["adamw_seconds"], 1), f"{r['pil_reached']}/{r['n']}",
            fmt_num(None if r["adamw_late_gain"] is None else 100 * r["adamw_late_gain"], 1),
        ])  # fmt: skip
    return rows


def lr_rows(lr: pl.DataFrame) -> tuple[list[str], list]:
    """The grid table's extra header (one column per rate) and rows (the pick in bold)."""
    rates = sorted(lr["lr"].unique().to_list()) if lr.height else []
    rows: list = []
    for (ds, fam), sub in in_paper_order(lr).group_by("dataset", "family", maintain_order=True):
        cells = []
        for rate in rates:
            hit = sub.filter(pl.col("lr") == rate)
            if not hit.height:
                cells.append(MISSING)
                continue
            text = fmt_num(hit["final_heldout"][0], 4)
            cells.append(f"\\textbf{{{text}}}" if hit["picked"][0] else text)
        steps = sub.row(0, named=True)
        rows.append([DATASETS[ds], FAMILY_NAMES[fam],
                     f"{fmt_num(steps['steps'], 0)} of {fmt_num(steps['of_steps'], 0)}", *cells])  # fmt: skip
    return [f"lr {r:g}" for r in rates], rows


def ablation_rows(runs: pl.DataFrame, g: dict) -> list:
    rows: list = []
    first = runs.filter(pl.col("seed") == g["seeds"][0])
    for ablation, label in ABLATIONS.items():
        sub = first.filter(pl.col("ablation") == ablation)
        for ds in sub["dataset"].unique().sort().to_list():
            ref = first.filter((pl.col("dataset") == ds) & (pl.col("setting") == "flow_pil"))
            both = pl.concat([ref, sub.filter(pl.col("dataset") == ds)], how="diagonal_relaxed")
            if rows:
                rows.append("midrule")
            for r in both.iter_rows(named=True):
                level = r["level"] if r["ablation"] == ablation else _main_level(ablation, g)
                level = fmt_num(int(level), 0) if level.isdigit() else tex_escape(level)
                rows.append([
                    DATASETS[ds], label, level, fmt_num(r["n_features"], 0),
                    fmt_num(r["fit_seconds"], 1), fmt_num(r["heldout_mse"], 4),
                    fmt_num(r["fd_self"], 2), fmt_num(r["nn1_acc"], 3),
                ])  # fmt: skip
    return rows


def _main_level(ablation: str, g: dict) -> str:
    """The PIL flow's level of a factor, from the config it ran with."""
    return {
        "width": str(g["features"]["width"]),
        "projections": "1",
        "time_encoding": str(g["features"]["time_encoding"]),
    }[ablation]


def sampler_rows(samplers: pl.DataFrame, first_seed: int) -> list:
    rows: list = []
    sub = samplers.filter((pl.col("setting") == "flow_pil") & (pl.col("seed") == first_seed))
    for r in sub.sort("dataset", "steps", "sampler").iter_rows(named=True):
        rows.append([
            DATASETS[r["dataset"]], r["sampler"].capitalize(), str(r["steps"]), str(r["nfe"]),
            fmt_num(r["sample_seconds"], 2), fmt_num(r["fd_self"], 2),
            fmt_sig(r["kid_self"]), fmt_num(r["nn1_acc"], 3),
        ])  # fmt: skip
    return rows


def cost_rows(mean: pl.DataFrame) -> list:
    rows: list = []
    for r in mean.sort("dataset", "model", "setting").iter_rows(named=True):
        rows.append([
            DATASETS[r["dataset"]], tex_escape(r["setting"]), str(r["n_seeds"]),
            fmt_num(r["train_pairs"], 0), fmt_num(r.get("pair_visits") or r["train_pairs"], 0),
            fmt_num(r["trainable_params"], 0),
            fmt_num(r["fit_seconds"], 2), fmt_num(r["peak_memory_mb"], 0),
            fmt_num(r["sample_seconds"], 2),
        ])  # fmt: skip
    return rows


# ----------------------------------------------------------------------------------- macros


def dataset_words(datasets: list[str]) -> str:
    """'MNIST and CIFAR-10': config dataset keys in the paper's names, in config order."""
    names = [DATASETS.get(d, tex_escape(d)) for d in datasets]
    if not names:
        return "none"
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def numbers(tabs: dict[str, pl.DataFrame], mean: pl.DataFrame, params: dict) -> dict[str, str]:
    runs, cls, lr = tabs["generative"], tabs["generative_classifiers"], tabs["generative_lr"]
    g = params["generative"]
    gr = g["gradient"]
    m: dict[str, str] = {
        macro("Datasets"): dataset_words(g["datasets"]),
        macro("AblationDatasets"): dataset_words(g.get("ablation_datasets", [])),
        macro("Width"): fmt_num(g["features"]["width"], 0),
        macro("PairsPerImage"): str(g["flow"]["pairs_per_image"]),
        macro("OdeSteps"): str(g["flow"]["ode_steps"]),
        macro("OdeMethod"): g["flow"]["ode_method"].capitalize(),
        macro("Timesteps"): fmt_num(g["diffusion"]["timesteps"], 0),
        macro("Buckets"): str(g["diffusion"]["n_buckets"]),
        macro("NEval"): fmt_num(g["n_eval"], 0),
        macro("NSeeds"): str(len(g["seeds"])),
        macro("AdamBatch"): str(gr["batch_size"]),
        macro("FlowSteps"): fmt_num(gr["flow_steps"], 0),
        macro("DiffSteps"): fmt_num(gr["diffusion_steps"], 0),
        macro("LrGrid"): ", ".join(f"{x:g}" for x in gr["lr_grid"]),
        macro("LrEdges"): lr_edges(lr),
        macro("GridPercent"): fmt_num(100 * gr["grid_fraction"], 0),
        macro("EvalEvery"): fmt_num(gr["eval_every"], 0),
        macro("HeldoutPercent"): fmt_num(100 * g["heldout_fraction"], 0),
        macro("ClassifierEpochs"): str(g["classifier"]["epochs"]),
        macro("Device"): tex_escape(", ".join(sorted(runs["device_name"].unique().to_list()))),
    }
    for r in mean.iter_rows(named=True):  # per setting, mean over its seeds
        key = (r["dataset"], r["setting"])
        m[macro(*key, "Fd")] = fmt_num(r["fd_self"], 2)
        m[macro(*key, "Kid")] = fmt_sig(r["kid_self"])
        m[macro(*key, "Mse")] = fmt_num(r["heldout_mse"], 4)
        m[macro(*key, "Seconds")] = fmt_num(r["fit_seconds"], 1)
        m[macro(*key, "Params")] = fmt_num(r["trainable_params"], 0)
    speed = speed_summary(tabs["generative_speed"])
    for ds in DATASETS:  # defined ('--') for every known dataset, whatever the build ran
        floor = cls.filter(pl.col("dataset") == ds)
        has = floor.height > 0
        m[macro(ds, "Classifier")] = fmt_num(100 * floor["test_accuracy"][0], 1) if has else MISSING
        m[macro(ds, "Floor")] = fmt_num(floor["fd_self"][0], 2) if has else MISSING
        for fam in FAMILY_NAMES:
            rate = _lr_of(lr, ds, fam) if lr.height else None
            m[macro(ds, fam, "Lr")] = MISSING if rate is None else f"{rate:g}"
            s = (
                speed.filter((pl.col("dataset") == ds) & (pl.col("family") == fam))
                if speed.height
                else speed
            )
            row = s.row(0, named=True) if s.height else None
            n = row["n"] if row else 0
            m[macro(ds, fam, "AdamwReached")] = f"{row['adamw_reached']} of {n}" if row else MISSING
            m[macro(ds, fam, "PilReached")] = f"{row['pil_reached']} of {n}" if row else MISSING
            gain = row["adamw_late_gain"] if row else None
            m[macro(ds, fam, "LateGain")] = fmt_num(None if gain is None else 100 * gain, 1)
    return {**m, **opponent_macros(runs, g)}


TABLES = {  # name -> (label, colspec, header, caption)
    "gen_main": (
        "tab:gen-main", "lllrrrrrrrrr",
        ["Data", "Pair", "Fit", "Fitted params", "Fit (s)", "Held-out MSE", "FD$_\\text{self}$",
         "KID$_\\text{self}$", "1-NN acc.", "Seeds", "Trained", "Flat"],
        "Closed-form (PIL) fits against the same networks with every weight trained by AdamW at the "
        "learning rate picked on held-out images (Table~\\ref{tab:gen-lr}) and against AdamW on "
        "the output layer alone over the PIL fit's own frozen features and training pairs, in "
        "passes over those pairs until its held-out MSE flattened and then \\GenOutAnnealEpochs{} "
        "more passes with its rate annealed, its rate picked per seed on "
        "held-out images; mean over seeds $\\pm$ half-width of the 95\\,\\% $t$ interval. Fitted params: the solved or trained "
        "output maps (PIL, AdamW output layer) or every weight (AdamW). Trained: seeds whose "
        "training loss fell by at least \\GenTrainedDropPercent\\,\\% from its first step; "
        "flat: seeds whose held-out MSE had flattened at the end (its best improved by less than "
        "\\GenFlatTolPercent\\,\\% over the last \\GenFlatEvals{} evaluations; the "
        "output-layer arm's before its anneal, which flattening starts). Held-out "
        "MSE: velocity (flow) or noise (diffusion) regression on pairs from held-out training images. FD$_\\text{self}$, KID$_\\text{self}$ "
        "and 1-NN accuracy compare \\GenNEval{} samples with as many test images in the features "
        "of a classifier trained by this pipeline (not Inception features, not FID); 1-NN "
        "accuracy 0.5 means indistinguishable. The floor row compares real training images the "
        "classifier never saw with the test images.",
    ),
    "gen_speed": (
        "tab:gen-speed", "llrrrrrr",
        ["Data", "Pair", "PIL fit (s)", "AdamW to PIL's MSE (s)", "reached", "AdamW total (s)",
         "PIL reaches AdamW's", "AdamW late gain (\\%)"],
        "Time to equal quality, mean over seeds: the PIL fit's time; AdamW's training time until "
        "its held-out MSE first reached the PIL fit's (same seed; evaluated every \\GenEvalEvery{} "
        "steps, clock stopped meanwhile; mean over the seeds that reached it) and in how many "
        "seeds it did; AdamW's whole training time; in how many seeds the PIL fit's held-out MSE "
        "is at or below AdamW's final one. Late gain: the relative drop of AdamW's held-out MSE "
        "over the last quarter of its steps (near zero: the curve has flattened).",
    ),
    "gen_ablations": (
        "tab:gen-ablations", "lllrrrrr",
        ["Data", "Factor", "Level", "Features", "Fit (s)", "Held-out MSE", "FD$_\\text{self}$",
         "1-NN acc."],
        "Ablations of the PIL flow (first seed), each against the PIL flow of the same seed (first "
        "row of each block). Bi-PIL concatenates two random projections of half the width, so "
        "the feature count is equal.",
    ),
    "gen_samplers": (
        "tab:gen-samplers", "llrrrrrr",
        ["Data", "ODE solver", "Steps", "NFE", "Sampling (s)", "FD$_\\text{self}$",
         "KID$_\\text{self}$", "1-NN acc."],
        "Sampling the PIL flow (first seed) with Euler and Heun (second order, two velocity "
        "evaluations per step) at several step counts; NFE: velocity evaluations per sample.",
    ),
    "gen_cost": (
        "tab:gen-cost", "llrrrrrrr",
        ["Data", "Setting", "Seeds", "Train pairs", "Pairs seen", "Fitted params", "Fit (s)",
         "Peak mem. (MiB)", "Sampling (s)"],
        "Cost of every generative fit on \\GenDevice{}, mean over seeds. Train pairs: the "
        "distinct (input, target) pairs a fit trains on; pairs seen: with repeats (AdamW on the "
        "output layer makes several passes over the PIL solve's pairs). Peak memory: CUDA "
        "maximum allocated on a GPU, process maximum resident set on a CPU.",
    ),
    "gen_adamw_out": OUT_TABLE,
}  # fmt: skip
LR_CAPTION = (
    "AdamW's learning-rate grid: final held-out MSE of each rate after the given share of the "
    "arm's steps (first seed, same warm-up and cosine schedule, shortened); the pick in bold "
    "trains every seed of Table~\\ref{tab:gen-main}. Picks on an edge of the grid (its largest "
    "or smallest rate, so a better rate may lie outside it): \\GenLrEdges{} grids."
)


def render_gen_tables(
    summary_dir: str, params: dict, template_dir: str, tables_dir: str, numbers_path: str
) -> None:
    tabs = load(summary_dir)
    g = params["generative"]
    runs = tabs["generative"]
    mean = over_seeds(runs, [
        "fit_seconds", "heldout_mse", "fd_self", "kid_self", "nn1_acc", "trainable_params",
        "train_pairs", "pair_visits", "peak_memory_mb", "sample_seconds",
    ])  # fmt: skip
    rows = {
        "gen_main": main_rows(mean, tabs["generative_classifiers"], tabs["generative_lr"], runs),
        "gen_adamw_out": out_rows(runs),
        "gen_speed": speed_table_rows(tabs["generative_speed"]),
        "gen_ablations": ablation_rows(runs, g),
        "gen_samplers": sampler_rows(tabs["generative_samplers"], g["seeds"][0]),
        "gen_cost": cost_rows(mean),
    }
    tables = {
        Path(tables_dir) / f"{name}.tex": Table(caption, label, colspec, header, rows[name])
        for name, (label, colspec, header, caption) in TABLES.items()
    }
    extra, grid = lr_rows(tabs["generative_lr"])
    tables[Path(tables_dir) / "gen_lr.tex"] = Table(
        LR_CAPTION, "tab:gen-lr", "lll" + "r" * len(extra), ["Data", "Pair", "Steps", *extra], grid
    )
    render_report(tables, numbers(tabs, mean, params), template_dir, numbers_path,
                  "pillm.generative.tables from the generative summaries", prefix="Gen")  # fmt: skip

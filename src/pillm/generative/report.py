"""Aggregation, tables and macros of the generative study (figures: ``generative.figures``).

Sample-quality metrics are named for what they are: Fréchet distance, KID and 1-NN accuracy in
the features of the pipeline's own classifier (FD_self, KID_self), not FID.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from pillm.paper.latex import MISSING, fmt_num, fmt_sig, macro_name, tex_escape
from pillm.paper.report import render_report
from pillm.paper.table import Table
from pillm.paper.tidy import concat_parquet, pivot_records, write_parquet

DATASETS = {"mnist": "MNIST", "cifar10": "CIFAR-10"}
DATASET_MACROS = {"cifar10": "CifarTen"}  # not "CifarOneZero"
MODEL_NAMES = {"flow": "Flow matching", "diffusion": "Diffusion ($\\epsilon$)"}
ABLATIONS = {  # ablation -> (label, settings kept alongside for the comparison)
    "width": ("Feature width", "flow_pil"),
    "projections": ("Random projections (Bi-PIL)", "flow_pil"),
    "time_encoding": ("Time encoding", "flow_pil"),
    "buckets": ("$\\epsilon$ weight sets over $t$", "diff_pil"),
}


def macro(*parts: str) -> str:
    """``Gen`` + parts in CamelCase, digits spelled out: ('mnist', 'flow_adamw8') ->
    'GenMnistFlowAdamwEight'."""
    return macro_name(*(DATASET_MACROS.get(p, p) for p in parts), prefix="Gen")


def load(summary_dir: str | Path) -> dict[str, pl.DataFrame]:
    d = Path(summary_dir)
    names = ("generative", "generative_curves", "generative_samplers", "generative_classifiers")
    return {n: pl.read_parquet(d / f"{n}.parquet") for n in names}


def setting_label(row: dict) -> str:
    if row["method"] == "pil":
        base = "PIL" if row["ablation"] in ("main",) else f"PIL, {row['level']}"
        if row["model"] == "diffusion" and row["ablation"] == "main":
            base = "PIL (bucketed)"
        return base
    return f"AdamW, {row['level']} pairs"


def main_rows(runs: pl.DataFrame, classifiers: pl.DataFrame) -> list:
    rows: list = []
    main = runs.filter(pl.col("ablation").is_in(["main", "budget"]))
    for ds in [d for d in DATASETS if d in main["dataset"].unique().to_list()]:
        if rows:
            rows.append("midrule")
        for model in ("flow", "diffusion"):
            sub = main.filter((pl.col("dataset") == ds) & (pl.col("model") == model))
            sub = sub.sort(pl.col("method") != "pil", "train_pairs")
            for r in sub.iter_rows(named=True):
                rows.append([
                    DATASETS[ds], MODEL_NAMES[model], setting_label(r),
                    fmt_num(r["fit_seconds"], 1), fmt_num(r["heldout_mse"], 3),
                    fmt_num(r["fd_self"], 2), fmt_sig(r["kid_self"]),
                    fmt_num(r["nn1_acc"], 3),
                ])  # fmt: skip
        floor = classifiers.filter(pl.col("dataset") == ds).row(0, named=True)
        rows.append([
            DATASETS[ds], "Real train images", "(floor)", MISSING, MISSING,
            fmt_num(floor["fd_self"], 2), fmt_sig(floor["kid_self"]),
            fmt_num(floor["nn1_acc"], 3),
        ])  # fmt: skip
    return rows


def ablation_rows(runs: pl.DataFrame) -> list:
    rows: list = []
    for ablation, (label, reference) in ABLATIONS.items():
        sub = runs.filter(pl.col("ablation") == ablation)
        for ds in sub["dataset"].unique().sort().to_list():
            ref = runs.filter((pl.col("dataset") == ds) & (pl.col("setting") == reference))
            both = pl.concat([ref, sub.filter(pl.col("dataset") == ds)], how="diagonal_relaxed")
            if rows:
                rows.append("midrule")
            for r in both.iter_rows(named=True):
                level = r["level"] if r["ablation"] == ablation else _main_level(ablation, r)
                level = fmt_num(int(level), 0) if level.isdigit() else tex_escape(level)
                rows.append([
                    DATASETS[ds], label, level, fmt_num(r["n_features"], 0),
                    fmt_num(r["fit_seconds"], 1), fmt_num(r["heldout_mse"], 4),
                    fmt_num(r["fd_self"], 2), fmt_num(r["nn1_acc"], 3),
                ])  # fmt: skip
    return rows


def _main_level(ablation: str, row: dict) -> str:
    """The main fit's level of a factor, read from its record (width, 1, encoding, buckets)."""
    return {
        "width": str(row["feature_width"]),
        "projections": "1",
        "time_encoding": str(row["time_encoding_name"]),
        "buckets": str(row["n_buckets"]),
    }[ablation]


def sampler_rows(samplers: pl.DataFrame) -> list:
    rows: list = []
    sub = samplers.filter(pl.col("setting") == "flow_pil").sort("dataset", "steps", "sampler")
    for r in sub.iter_rows(named=True):
        rows.append([
            DATASETS[r["dataset"]], r["sampler"].capitalize(), str(r["steps"]), str(r["nfe"]),
            fmt_num(r["sample_seconds"], 2), fmt_num(r["fd_self"], 2),
            fmt_sig(r["kid_self"]), fmt_num(r["nn1_acc"], 3),
        ])  # fmt: skip
    return rows


def cost_rows(runs: pl.DataFrame) -> list:
    rows: list = []
    for r in runs.sort("dataset", "model", "setting").iter_rows(named=True):
        rows.append([
            DATASETS[r["dataset"]], tex_escape(r["setting"]), fmt_num(r["train_pairs"], 0),
            fmt_num(r["trainable_params"], 0), fmt_num(r["fit_seconds"], 2),
            fmt_num(r["peak_memory_mb"], 0), fmt_num(r["sample_seconds"], 2),
        ])  # fmt: skip
    return rows


def numbers(tabs: dict[str, pl.DataFrame], params: dict) -> dict[str, str]:
    runs, cls = tabs["generative"], tabs["generative_classifiers"]
    g = params["generative"]
    m: dict[str, str] = {
        macro("Width"): fmt_num(g["features"]["width"], 0),
        macro("PairsPerImage"): str(g["flow"]["pairs_per_image"]),
        macro("OdeSteps"): str(g["flow"]["ode_steps"]),
        macro("OdeMethod"): g["flow"]["ode_method"].capitalize(),
        macro("Timesteps"): fmt_num(g["diffusion"]["timesteps"], 0),
        macro("Buckets"): str(g["diffusion"]["n_buckets"]),
        macro("NEval"): fmt_num(g["n_eval"], 0),
        macro("Budgets"): ", ".join(f"{b:g}" for b in g["gradient"]["budgets"]),
        macro("AdamLr"): f"{g['gradient']['lr']:g}",
        macro("AdamBatch"): str(g["gradient"]["batch_size"]),
        macro("HeldoutPercent"): fmt_num(100 * g["heldout_fraction"], 0),
        macro("ClassifierEpochs"): str(g["classifier"]["epochs"]),
        macro("Device"): tex_escape(_devices(runs)),
    }
    for r in runs.iter_rows(named=True):
        key = (r["dataset"], r["setting"])
        m[macro(*key, "Fd")] = fmt_num(r["fd_self"], 2)
        m[macro(*key, "Kid")] = fmt_sig(r["kid_self"])
        m[macro(*key, "Nn")] = fmt_num(r["nn1_acc"], 3)
        m[macro(*key, "Mse")] = fmt_num(r["heldout_mse"], 3)
        m[macro(*key, "Seconds")] = fmt_num(r["fit_seconds"], 1)
        m[macro(*key, "Memory")] = fmt_num(r["peak_memory_mb"], 0)
        m[macro(*key, "Pairs")] = fmt_num(r["train_pairs"], 0)
        if r.get("n_fit") is not None:
            m[macro(r["dataset"], "NFit")] = fmt_num(r["n_fit"], 0)
    m.update(role_macros(runs, cls, g))
    return m


ROLE_METRICS = {"Fd": ("fd_self", 2), "Mse": ("heldout_mse", 3), "Seconds": ("fit_seconds", 1)}


def role_macros(runs: pl.DataFrame, cls: pl.DataFrame, g: dict) -> dict[str, str]:
    """Macros the prose cites, by role rather than by setting name, defined ('--') for every
    known dataset whatever the build ran: ``Gen<Ds><Flow|Diff><Pil|Matched|Largest|Shared><M>``
    (Matched: AdamW at the smallest budget, Largest: at the largest), the AdamW/PIL fit-time
    ratio, and whether PIL's FD_self lies below or above each AdamW twin's."""
    budgets = sorted(g["gradient"]["budgets"])
    tag = lambda b: f"{b:g}".replace(".", "p")  # noqa: E731
    m = {macro("MatchedBudget"): f"{budgets[0]:g}", macro("LargestBudget"): f"{budgets[-1]:g}"}
    for ds in DATASETS:
        floor = cls.filter(pl.col("dataset") == ds)
        has = floor.height > 0
        m[macro(ds, "Classifier")] = fmt_num(100 * floor["test_accuracy"][0], 1) if has else MISSING
        m[macro(ds, "Floor")] = fmt_num(floor["fd_self"][0], 2) if has else MISSING
        for prefix in ("flow", "diff"):
            roles = {
                "Pil": f"{prefix}_pil",
                "Matched": f"{prefix}_adamw{tag(budgets[0])}",
                "Largest": f"{prefix}_adamw{tag(budgets[-1])}",
                "Shared": f"{prefix}_pil_shared",
            }
            rows = {role: _row(runs, ds, setting) for role, setting in roles.items()}
            for role, row in rows.items():
                for name, (col, digits) in ROLE_METRICS.items():
                    value = None if row is None else row[col]
                    m[macro(ds, prefix, role, name)] = fmt_num(value, digits)
            pil = rows["Pil"]
            for role in ("Matched", "Largest"):
                adam = rows[role]
                ok = pil is not None and adam is not None
                m[macro(ds, prefix, role, "TimeRatio")] = (
                    fmt_num(adam["fit_seconds"] / pil["fit_seconds"], 1) if ok else MISSING
                )
                m[macro(ds, prefix, "PilVs", role)] = (
                    ("below" if pil["fd_self"] < adam["fd_self"] else "above") if ok else MISSING
                )
    return m


def _row(runs: pl.DataFrame, ds: str, setting: str) -> dict | None:
    sub = runs.filter((pl.col("dataset") == ds) & (pl.col("setting") == setting))
    return sub.row(0, named=True) if sub.height else None


def _devices(runs: pl.DataFrame) -> str:
    return ", ".join(sorted(runs["device_name"].unique().to_list()))


TABLES = {  # name -> (label, colspec, header, caption)
    "gen_main": (
        "tab:gen-main", "lllrrrrr",
        ["Data", "Model", "Fit", "Fit (s)", "Held-out MSE", "FD$_\\text{self}$",
         "KID$_\\text{self}$", "1-NN acc."],
        "Closed-form (PIL) fits against the same networks trained by AdamW at budgets counted in "
        "training pairs (a multiple of the pairs the PIL solve streams). Held-out MSE: velocity "
        "(flow) or noise (diffusion) regression on pairs from held-out training images. "
        "FD$_\\text{self}$, KID$_\\text{self}$ and 1-NN accuracy compare \\GenNEval{} samples with "
        "as many test images in the features of a classifier trained by this pipeline (not "
        "Inception features, not FID); 1-NN accuracy 0.5 means indistinguishable. The floor row "
        "compares real training images the classifier never saw with the test images.",
    ),
    "gen_ablations": (
        "tab:gen-ablations", "lllrrrrr",
        ["Data", "Factor", "Level", "Features", "Fit (s)", "Held-out MSE", "FD$_\\text{self}$",
         "1-NN acc."],
        "Ablations of the PIL fits, each against the main fit (first row of each block). Bi-PIL "
        "concatenates two random projections of half the width, so the feature count is equal.",
    ),
    "gen_samplers": (
        "tab:gen-samplers", "llrrrrrr",
        ["Data", "ODE solver", "Steps", "NFE", "Sampling (s)", "FD$_\\text{self}$",
         "KID$_\\text{self}$", "1-NN acc."],
        "Sampling the main PIL flow with Euler and Heun (second order, two velocity evaluations "
        "per step) at several step counts; NFE: velocity evaluations per sample.",
    ),
    "gen_cost": (
        "tab:gen-cost", "llrrrrr",
        ["Data", "Setting", "Train pairs", "Fitted params", "Fit (s)", "Peak mem. (MiB)",
         "Sampling (s)"],
        "Cost of every generative fit on \\GenDevice{}. Peak memory: CUDA maximum allocated on a "
        "GPU, process maximum resident set on a CPU.",
    ),
}  # fmt: skip


def render_gen_tables(
    summary_dir: str, params: dict, template_dir: str, tables_dir: str, numbers_path: str
) -> None:
    tabs = load(summary_dir)
    runs = _with_levels(tabs["generative"], params["generative"])
    rows = {
        "gen_main": main_rows(runs, tabs["generative_classifiers"]),
        "gen_ablations": ablation_rows(runs),
        "gen_samplers": sampler_rows(tabs["generative_samplers"]),
        "gen_cost": cost_rows(runs),
    }
    tables = {
        Path(tables_dir) / f"{name}.tex": Table(caption, label, colspec, header, rows[name])
        for name, (label, colspec, header, caption) in TABLES.items()
    }
    render_report(tables, numbers(tabs, params), template_dir, numbers_path,
                  "pillm.gen_report from the generative summaries", prefix="Gen")  # fmt: skip


def _with_levels(runs: pl.DataFrame, g: dict) -> pl.DataFrame:
    """Main fits' factor levels for the ablation table (from the config they ran with)."""
    return runs.with_columns(
        pl.lit(g["features"]["width"]).alias("feature_width"),
        pl.lit(g["features"]["time_encoding"]).alias("time_encoding_name"),
        pl.lit(g["diffusion"]["n_buckets"]).alias("n_buckets"),
    )


def aggregate_generative(
    metrics_paths: list[str],
    curve_paths: list[str],
    sampler_paths: list[str],
    classifier_paths: list[str],
    out_dir: str,
) -> None:
    """Generative jobs -> ``generative.parquet`` (one row per dataset x setting, metrics as
    columns), ``generative_curves`` (λ and AdamW-loss curves), ``generative_samplers`` (quality
    per ODE solver and step count) and ``generative_classifiers`` (feature CNN accuracy and the
    real-vs-real floor of every metric)."""
    out = Path(out_dir)
    index = ["variant", "corpus", "model", "method", "ablation", "level", "sampler", "data_policy"]
    index += ["device", "device_name", "git_rev"]
    runs = pivot_records(metrics_paths, index)
    runs = runs.rename({"variant": "setting", "corpus": "dataset"})
    write_parquet(runs.sort("dataset", "setting"), out / "generative.parquet")
    curves = concat_parquet(curve_paths)
    write_parquet(curves.filter(pl.col("curve") != "none"), out / "generative_curves.parquet")
    samplers = concat_parquet(sampler_paths)
    write_parquet(samplers.sort("dataset", "setting", "sampler", "steps"),
                  out / "generative_samplers.parquet")  # fmt: skip
    cls = pivot_records(classifier_paths, ["corpus", "device", "device_name"])
    write_parquet(cls.rename({"corpus": "dataset"}).sort("dataset"),
                  out / "generative_classifiers.parquet")  # fmt: skip

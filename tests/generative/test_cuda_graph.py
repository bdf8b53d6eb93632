"""pillm.accel.cuda_graph: the eager path on every machine, capture and replay on a GPU."""

from __future__ import annotations

import pytest
import torch

from pillm.accel.cuda_graph import GraphedStep
from pillm.generative.features import FeatureConfig, RandomFeatureNet
from pillm.generative.train import TrainConfig, train_regression

GPU = pytest.mark.gpu


def _sgd_problem(device: str, capturable: bool):
    """A least-squares fit by AdamW: (step(x, y) -> loss, prepare, weight)."""
    torch.manual_seed(0)
    w = torch.zeros(8, 3, device=device, requires_grad=True)
    lr = torch.tensor(0.05, device=device) if capturable else 0.05
    opt = torch.optim.AdamW([w], lr=lr, fused=capturable, capturable=capturable)

    def step(x, y):
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    return step, lambda: opt.zero_grad(set_to_none=True), w


def _batches(device: str, n: int = 20):
    g = torch.Generator().manual_seed(1)
    truth = torch.randn(8, 3, generator=g)
    for _ in range(n):
        x = torch.randn(32, 8, generator=g)
        yield x.to(device), (x @ truth).to(device)


def test_disabled_step_runs_eagerly_and_prepares_every_call():
    step, prepare, w = _sgd_problem("cpu", capturable=False)
    calls = []
    runner = GraphedStep(step, enabled=False, prepare=lambda: (calls.append(1), prepare()))
    losses = [float(runner(x, y)) for x, y in _batches("cpu")]
    assert len(calls) == 20 and not runner.graphed
    assert losses[-1] < 0.5 * losses[0]  # it trains: gradients were cleared each step


@GPU
def test_replayed_steps_follow_the_eager_ones():
    eager_step, eager_prepare, w_eager = _sgd_problem("cuda", capturable=True)
    eager = GraphedStep(eager_step, enabled=False, prepare=eager_prepare)
    graph_step, graph_prepare, w_graph = _sgd_problem("cuda", capturable=True)
    graphed = GraphedStep(graph_step, enabled=True, prepare=graph_prepare)
    a = [float(eager(x, y)) for x, y in _batches("cuda")]
    b = [float(graphed(x, y)) for x, y in _batches("cuda")]
    assert graphed.graphed
    assert a[0] - a[-1] > 1.0  # the trajectory moves far more than the tolerance
    torch.testing.assert_close(torch.tensor(b), torch.tensor(a), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w_graph, w_eager, rtol=1e-5, atol=1e-6)


@GPU
@pytest.mark.parametrize("strict", [False, True], ids=["default-kernels", "strict-deterministic"])
@pytest.mark.parametrize("where", ["attention", "activations", "compiled"])
def test_replays_draw_new_dropout_masks(where, strict):
    """A graphed step with dropout draws new masks at every replay (PyTorch's graph-safe RNG),
    in attention (cuDNN's kernels by default, flash attention's in strict deterministic mode,
    as LM training runs) and on activations, eager or compiled by Inductor (its own random
    kernels, as in the compiled LM step): the same inputs give another output and gradient
    each replay. (At batch 256 the trainer's held-out loss sat 0.05-0.08 above the ungraphed
    reference's at the same train loss: reused masks would regularise less.)"""
    from pillm.core.runtime import deterministic

    with deterministic(strict, strict=strict):
        g = torch.Generator(device="cuda").manual_seed(0)
        qkv = torch.randn(3, 4, 4, 128, 64, device="cuda", generator=g, dtype=torch.bfloat16)

        def masked(q, k):
            return torch.nn.functional.dropout(q, 0.5) * k

        compiled = torch.compile(masked, dynamic=False)

        def step(qkv):
            q, k, v = qkv.detach().requires_grad_().unbind(0)
            if where == "attention":
                y = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, dropout_p=0.5, is_causal=True
                )
            else:
                y = (compiled if where == "compiled" else masked)(q, k)
            (grad,) = torch.autograd.grad(y.float().square().sum(), q)
            return torch.stack([y.float().sum(), grad.float().sum()])

        runner = GraphedStep(step, enabled=True)
        outs = [tuple(runner(qkv).tolist()) for _ in range(6)]
    assert runner.graphed
    assert len(set(outs)) == len(outs), outs  # eager calls and replays: every draw new


@GPU
def test_a_step_that_syncs_falls_back_to_eager_and_says_so(capsys):
    step, prepare, _ = _sgd_problem("cuda", capturable=True)
    runner = GraphedStep(lambda x, y: step(x, y) + float(x.sum()) * 0, True, prepare, name="probe")
    losses = [float(runner(x, y)) for x, y in _batches("cuda", 6)]
    assert not runner.graphed and len(losses) == 6
    assert "CUDA graph capture failed" in capsys.readouterr().err


@GPU
def test_generative_adamw_graphed_matches_eager():
    """train_regression's graphed CUDA step (TF32 off) follows its eager step."""
    torch.backends.cuda.matmul.allow_tf32 = False
    feats = FeatureConfig(width=64, time_dim=8, direct_link=True)
    cfg = TrainConfig(steps=40, batch_size=32, lr=3e-3, warmup=5, log_every=5)

    def run(cuda_graphs: bool):
        net = RandomFeatureNet(16, 16, feats, seed=0, trainable=True).cuda()
        g = torch.Generator(device="cuda").manual_seed(2)

        def batch(step):
            x = torch.randn(32, 16, generator=g, device="cuda")
            return x, torch.rand(32, generator=g, device="cuda"), x.flip(1)

        report = train_regression(net, batch, cfg, "cuda", cuda_graphs=cuda_graphs)
        return torch.tensor([loss for _, loss in report.curve])

    eager, graphed = run(False), run(True)
    assert eager[0] - eager[-1] > 0.05
    torch.testing.assert_close(graphed, eager, rtol=1e-4, atol=1e-5)


@pytest.mark.bench
def test_gen_step_benchmark_runs_both_paths_and_writes_rows(tmp_path):
    """benchmarks/gen_step.py on CPU (both runs eager there): one row per shape and batch, and
    identical loss curves; ``--blas`` is recorded with them, and ``--compile`` adds the step with
    its forward compiled (Inductor on the CPU here), which follows the same curve."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "gen_step.json"
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "benchmarks/gen_step.py", "--tiny", "--device", "cpu", "--steps", "12",
           "--batch", "4", "--batch", "8", "--blas", "cublas", "--compile", "default",
           "--align", "1", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["meta"]["blas"] == "cublas" and report["meta"]["compile"] == "default"
    assert report["meta"]["align"] == 1
    runs = report["runs"]
    # the compiled forward trains the same net: same losses up to float32 rounding
    assert all(r["compiled_ms"] > 0 and r["compiled_max_loss_diff"] < 1e-4 for r in runs)
    assert [(r["model"], r["batch"]) for r in runs] == [
        ("flow", 4),
        ("flow", 8),
        ("bucketed", 4),
        ("bucketed", 8),
    ]
    assert all(r["max_loss_diff"] == 0.0 and not r["graphed"] for r in runs)


@pytest.mark.bench
def test_gemm_align_benchmark_pads_with_zeros_and_changes_no_value(tmp_path):
    """benchmarks/gemm_align.py on CPU: per shape the output layer as built (odd feature count)
    and padded to 4 and 16, the same outputs and gradients (zero features add exact zeros), and
    the float64 Gram update at each row length giving the same Gram."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "gemm_align.json"
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "benchmarks/gemm_align.py", "--tiny", "--device", "cpu", "--iters", "2",
           "--batch", "40", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(out.read_text())
    runs, grams = report["runs"], report["gram"]
    p = 32 + 13 + 1  # width + D + 1 (--tiny)
    assert [(r["model"], r["padded_to"]) for r in runs] == [
        (m, q) for m in ("flow", "bucketed") for q in (p, 48, 48)
    ]
    assert all(r["features"] == p and r["ms"] > 0 and r["max_diff"] < 1e-4 for r in runs)
    assert [g["row_length"] for g in grams] == [p, 48, 48]
    assert all(g["max_diff"] < 1e-9 for g in grams)

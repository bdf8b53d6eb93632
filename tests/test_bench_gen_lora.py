"""benchmarks/gen_speed.py and benchmarks/lora_speed.py at tiny shapes on the CPU: what they
write agrees with itself (pair counts, the AdamW / LoRA stopping rule against the PIL target,
histories against summaries), and bad inputs fail naming the problem."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Tests of a benchmark script: run in CI (`pytest -m bench`), not in the default selection.
pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "benchmarks" / "gen_speed.py"
LORA = ROOT / "benchmarks" / "lora_speed.py"
N_VAL = 872  # GLUE SST-2 validation sentences: lora_speed's "acc"


def _run(args: list[str], timeout: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    return subprocess.run([sys.executable, *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


# ---------------------------------------------------------------- gen_speed


def _check_adamw(adam: dict, target: float, eval_every: int, max_seconds: float) -> None:
    """AdamW's summary is its history's last point; it stopped at the target or the clock."""
    hist = adam["history"]
    assert hist, "AdamW ran no evaluation"
    assert [h[0] for h in hist] == [eval_every * (i + 1) for i in range(len(hist))]
    clocks = [h[1] for h in hist]
    assert clocks == sorted(clocks) and clocks[0] >= 0
    assert adam["steps"] == hist[-1][0] and adam["mse"] == hist[-1][2]
    assert round(adam["seconds"], 3) == hist[-1][1] and adam["seconds"] > 0
    assert adam["reached"] == (adam["mse"] <= target)
    assert all(h[2] > target for h in hist[:-1])  # it stops at the first evaluation reaching it
    assert adam["reached"] or adam["seconds"] >= max_seconds
    assert adam["peak_mb"] > 0
    assert adam["graphed"] is False  # the CPU step is eager; CUDA replays the pipeline's graph


def test_gen_speed_tiny_mnist_on_cpu(shared_data, tmp_path):
    out = tmp_path / "gen.json"
    n_train, ppi, buckets, eval_every, max_s = 100, 2, 2, 2, 0.2
    proc = _run([GEN, "--dataset", "mnist", "--device", "cpu", "--data", shared_data,
                 "--n-train", n_train, "--width", 16, "--pairs-per-image", ppi,
                 "--buckets", buckets, "--chunk", 256, "--batch-size", 16,
                 "--eval-every", eval_every, "--max-seconds", max_s, "--out", out])  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    n_fit = n_train - round(0.1 * n_train)  # split_heldout's last tenth is held out
    assert {"dataset": "mnist", "device": "cpu", "device_name": "cpu", "n_fit": n_fit,
            "width": 16}.items() <= res.items()  # fmt: skip
    flow, diff = res["flow"], res["diffusion"]
    assert set(flow) == {"pil", "pil_1x", "adamw"} and set(diff) == {"pil", "adamw"}
    for pil in (flow["pil"], flow["pil_1x"], diff["pil"]):
        assert pil["seconds"] > 0 and pil["peak_mb"] > 0 and 0 < pil["mse"] < float("inf")
    # Flow: one pair per image, then --pairs-per-image; diffusion: every image once per bucket.
    assert (flow["pil_1x"]["pairs"], flow["pil"]["pairs"]) == (n_fit, ppi * n_fit)
    assert diff["pil"]["pairs"] == buckets * n_fit
    # AdamW chases each PIL fit's held-out MSE (flow: the --pairs-per-image fit's).
    _check_adamw(flow["adamw"], flow["pil"]["mse"], eval_every, max_s)
    _check_adamw(diff["adamw"], diff["pil"]["mse"], eval_every, max_s)
    assert f"mnist on cpu: {n_fit} images, width 16" in proc.stdout
    assert f"PIL flow streaming: {n_fit} pairs" in proc.stdout
    assert f"{ppi * n_fit} pairs" in proc.stdout
    assert "CPU: MiB figures are the process's peak resident memory so far" in proc.stdout


def test_gen_speed_bad_data_and_dataset_fail_naming_them(tmp_path):
    empty = tmp_path / "no_mirror"
    empty.mkdir()
    proc = _run([GEN, "--device", "cpu", "--data", empty, "--n-train", 10])
    assert proc.returncode != 0 and f"{empty}/SHA256SUMS not found" in proc.stderr
    proc = _run([GEN, "--device", "cpu", "--dataset", "nope", "--data", empty, "--n-train", 10])
    assert proc.returncode != 0 and "unknown image dataset 'nope'" in proc.stderr
    proc = _run([GEN, "--device", "cpu", "--data", empty, "--batch-size", 4, "--buckets", 10])
    assert proc.returncode != 0 and "--batch-size 4 < --buckets 10" in proc.stderr
    assert not list(tmp_path.glob("*.json"))


# ---------------------------------------------------------------- lora_speed


@pytest.fixture(scope="module")
def tiny_pillm(tmp_path_factory) -> tuple[Path, Path]:
    """A 1-layer d=16 GPT checkpoint and a byte-level BPE tokenizer.json for it."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from pillm.models.checkpoint import save_checkpoint
    from pillm.models.gpt import GPT, GPTConfig

    root = tmp_path_factory.mktemp("tiny_pillm")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())  # fmt: skip
    tok.train_from_iterator(["the film was good", "a bad plot and a great cast"] * 10, trainer)
    tok.save(str(root / "tokenizer.json"))
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=tok.get_vocab_size(), context=16, n_layer=1, d_model=16,
                    n_head=2, dropout=0.0)  # fmt: skip
    save_checkpoint(root / "model.pt", GPT(cfg), {})
    return root / "model.pt", root / "tokenizer.json"


def test_lora_speed_tiny_pillm_on_cpu(shared_data, tiny_pillm, tmp_path):
    ckpt, tok = tiny_pillm
    out = tmp_path / "lora.json"
    n_train, n_dev, scale, max_steps, every = 64, 64, 2, 8, 2
    # lr 0.3: LoRA's dev accuracy here goes up and down (its best is not its last evaluation)
    proc = _run([LORA, "--model", "pillm", "--checkpoint", ckpt, "--tokenizer", tok,
                 "--device", "cpu", "--data", shared_data, "--n-train", n_train,
                 "--n-dev", n_dev, "--scale", scale, "--pil-rank", 32, "--max-len", 16,
                 "--batch-size", 64, "--max-steps", max_steps, "--eval-every", every,
                 "--train-batch-size", 8, "--lr", 0.3, "--seed", 0, "--out", out])  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert set(res) == {"args", "provenance", "pil_lora", "ridge", f"pil_lora_x{scale}", "lora"}
    assert res["args"]["n_train"] == n_train and res["args"]["checkpoint"] == str(ckpt)
    assert res["provenance"]["device"] == "cpu"
    rows = {"pil_lora": n_train, "ridge": n_train, f"pil_lora_x{scale}": scale * n_train}
    for name, n in rows.items():
        r = res[name]
        assert r["rows"] == n, name
        assert r["fit_s"] > 0 and r["capture_s"] > 0 and r["solve_s"] > 0, name
        assert r["capture_s"] + r["solve_s"] <= r["fit_s"], name  # both inside the fit's clock
        assert r["peak_mb"] > 0 and r["growth_mb"] >= 0, name
    for name in (*rows, "lora"):  # accuracies are counts over the 872 / the n_dev sentences
        r = res[name]
        assert abs(r["acc"] * N_VAL - round(r["acc"] * N_VAL)) < 1e-6, name
        assert abs(r["dev_acc"] * n_dev - round(r["dev_acc"] * n_dev)) < 1e-6, name
    # LoRA stops at the first evaluation reaching PIL-LoRA's dev accuracy, else at --max-steps.
    lora, target = res["lora"], res["pil_lora"]["dev_acc"]
    curve = lora["curve"]
    assert [c["step"] for c in curve] == [every * (i + 1) for i in range(len(curve))]
    assert lora["steps"] == curve[-1]["step"] and lora["fit_s"] == curve[-1]["fit_seconds"] > 0
    assert lora["reached"] == (curve[-1]["dev_accuracy"] >= target)
    assert all(c["dev_accuracy"] < target for c in curve[:-1])
    assert lora["reached"] or lora["steps"] == max_steps
    # Its acc is that of the best evaluation's weights (fit_lora restores them): so is dev_acc.
    assert lora["dev_acc"] == max(c["dev_accuracy"] for c in curve)
    verdict = "reached PIL-LoRA's" if lora["reached"] else "did NOT reach PIL-LoRA's"
    assert f"LoRA {verdict} {100 * target:.1f}% dev accuracy" in proc.stdout
    assert f"PIL-LoRA at {scale}x rows" in proc.stdout


def test_lora_speed_bad_model_options_fail_naming_them(shared_data, tmp_path):
    out = tmp_path / "lora.json"
    common = ["--device", "cpu", "--data", shared_data, "--out", out]
    proc = _run([LORA, "--model", "nope", *common])
    assert proc.returncode != 0 and "unknown lora model 'nope-s0'" in proc.stderr
    proc = _run([LORA, "--model", "pillm", "--checkpoint", tmp_path / "model.pt", *common])
    assert proc.returncode != 0 and "needs --checkpoint and --tokenizer" in proc.stderr
    proc = _run([LORA, "--model", "pillm", "--n-train", "0", "--scale", "4", *common])
    assert proc.returncode != 0 and "--scale needs --n-train > 0" in proc.stderr
    assert not out.exists()

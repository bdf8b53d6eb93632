import numpy as np
import pytest

from pillm.core.runtime import lr_at
from pillm.lm.train import train

from .conftest import write_toy_tokens

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
    return write_toy_tokens(tmp_path, {"train": 6000, "valid": 800, "test": 800})


def test_lr_schedule_warmup_then_cosine():
    assert lr_at(0, 100, 1.0, 10, 0.1) == pytest.approx(0.1)
    assert lr_at(9, 100, 1.0, 10, 0.1) == pytest.approx(1.0)
    assert lr_at(100, 100, 1.0, 10, 0.1) == pytest.approx(0.1)


def test_training_learns_and_is_deterministic_on_cpu(tokens_dir):
    _, m1, curve = train(MODEL, TRAIN, 0, tokens_dir, "cpu")
    _, m2, _ = train(MODEL, TRAIN, 0, tokens_dir, "cpu")
    assert m1["test_loss"] < 0.5 * np.log(64)  # far below uniform
    assert curve[-1]["train_loss"] < curve[0]["train_loss"]
    assert any("val_loss" in row for row in curve[:-1])
    timing = {"train_time_s", "grad_time_s", "tokens_per_s", "peak_memory_mb"}
    assert {k: v for k, v in m1.items() if k not in timing} == {
        k: v for k, v in m2.items() if k not in timing
    }

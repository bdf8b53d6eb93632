import math

import pytest
import torch

from pillm.models.evaluate import bits_per_byte, evaluate_lm, perplexity, windows


class Uniform(torch.nn.Module):
    """Logits all zero: every token has probability 1/V."""

    def __init__(self, vocab: int):
        super().__init__()
        self.vocab = vocab
        self.p = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return torch.zeros(*x.shape, self.vocab) + 0 * self.p, None


def test_perplexity_and_bpb_math():
    assert math.isclose(perplexity(math.log(5.0)), 5.0)
    # 100 predicted tokens of 8 bits each over 200 bytes (2 bytes/token) = 4 bits per byte.
    assert math.isclose(bits_per_byte(100 * 8 * math.log(2), 100, 100, 200), 4.0)
    # pro rata: 99 of 100 tokens predicted cover 99% of the bytes.
    assert math.isclose(bits_per_byte(99 * math.log(2), 99, 100, 100), 1.0)


def test_windows_cover_every_target_once():
    tokens = torch.arange(23)
    x, y = windows(tokens, 5)
    assert x.shape == (4, 5)
    torch.testing.assert_close(y, x + 1)


def test_uniform_model_has_ppl_equal_to_vocab():
    tokens = torch.randint(0, 50, (1001,))
    out = evaluate_lm(Uniform(50), tokens, context=16, batch_size=8, n_bytes=3000)
    assert out["n_predicted"] == 1000  # every token but the first, the short tail included
    assert math.isclose(out["ppl"], 50.0, rel_tol=1e-6)
    # 1000 of 1001 tokens predicted: they cover 1000/1001 of the 3000 bytes.
    assert math.isclose(out["bpb"], math.log2(50) * 1000 / (3000 * 1000 / 1001), rel_tol=1e-6)


class Bigram(torch.nn.Module):
    """Random logits from the previous token (through a width-``d`` code): scores that depend
    on the input."""

    def __init__(self, vocab: int, d: int = 16):
        super().__init__()
        self.code, self.head = torch.nn.Embedding(vocab, d), torch.nn.Linear(d, vocab)

    def forward(self, x):
        return self.head(self.code(x)), None


def test_compiled_scores_equal_the_eager_ones_over_every_batch_shape():
    # 1,002 tokens in windows of 16, batches of 8: full batches, a short batch of windows, and a
    # tail of one predicted token (which runs eagerly: Dynamo specializes a size of 1).
    torch.manual_seed(0)
    model, tokens = Bigram(40), torch.randint(0, 40, (16 * 61 + 2,))
    eager = evaluate_lm(model, tokens, context=16, batch_size=8, n_bytes=4000, compiled=False)
    fast = evaluate_lm(
        model, tokens, 16, 8, 4000, compiled=True, backend="aot_eager"
    )  # Dynamo's graph, no code generation: fast on CPU
    assert fast["n_predicted"] == eager["n_predicted"] == len(tokens) - 1
    assert fast["acc"] == eager["acc"]
    assert math.isclose(fast["loss"], eager["loss"], rel_tol=1e-6)


def test_a_compile_that_fails_scores_eagerly_and_says_so(capsys):
    from pillm.models import evaluate

    def broken(gm, example_inputs):
        raise RuntimeError("no compiler here")

    torch.manual_seed(0)
    model, tokens = Bigram(40), torch.randint(0, 40, (16 * 20 + 2,))
    eager = evaluate_lm(model, tokens, context=16, batch_size=8, n_bytes=4000, compiled=False)
    try:
        fast = evaluate_lm(model, tokens, 16, 8, 4000, compiled=True, backend=broken)
    finally:
        evaluate._UNCOMPILABLE.discard(broken)
    assert fast == eager
    assert capsys.readouterr().err.count("evaluations in this process run eagerly") == 1


@pytest.mark.gpu
def test_inductor_scores_match_the_eager_ones_on_cuda():
    torch.manual_seed(0)
    model, tokens = Bigram(50304, 256).cuda(), torch.randint(0, 50304, (128 * 70 + 5,))
    args = (128, 64, 10**6, torch.bfloat16)
    eager = evaluate_lm(model, tokens, *args, compiled=False)
    fast = evaluate_lm(model, tokens, *args, compiled=True)
    assert fast["acc"] == eager["acc"]
    assert math.isclose(fast["loss"], eager["loss"], rel_tol=1e-5)


@pytest.mark.bench
def test_eval_speed_benchmark_reports_both_paths_per_width(tmp_path):
    """benchmarks/eval_speed.py --tiny: a row per width with each path's time and their
    differences (zero under aot_eager, which runs the eager operations)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    out = tmp_path / "eval_speed.json"
    root = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "benchmarks/eval_speed.py", "--tiny", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["d_model"] for r in rows] == [32, 64]
    assert all(r["eager_ms"] > 0 and r["compiled_ms"] > 0 for r in rows)
    assert all(r["loss_diff"] < 1e-6 and r["acc_diff"] == 0 for r in rows)

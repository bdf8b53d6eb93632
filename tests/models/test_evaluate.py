import math

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

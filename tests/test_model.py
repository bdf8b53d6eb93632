import math

import pytest
import torch

from pillm.models.gpt import GPT, GPTConfig


def tiny(**kw) -> GPTConfig:
    return GPTConfig(
        **{"vocab_size": 97, "context": 16, "n_layer": 2, "d_model": 32, "n_head": 4, **kw}
    )


def test_shapes_and_loss_at_init_near_ln_vocab():
    torch.manual_seed(0)
    model = GPT(tiny())
    x = torch.randint(0, 97, (4, 16))
    logits, loss = model(x, torch.randint(0, 97, (4, 16)))
    assert logits.shape == (4, 16, 97)
    assert abs(loss.item() - math.log(97)) < 0.1


def test_tied_embeddings_and_param_counts():
    cfg = tiny()
    model = GPT(cfg)
    assert model.lm_head.weight is model.wte.weight
    d, V, L, T = cfg.d_model, cfg.vocab_size, cfg.n_layer, cfg.context
    per_block = (
        2 * 2 * d + (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d)
    )
    assert model.num_params(non_embedding=True) == L * per_block + 2 * d
    assert model.num_params() == L * per_block + 2 * d + V * d + T * d


def test_causal_future_tokens_do_not_change_past_logits():
    torch.manual_seed(0)
    model = GPT(tiny()).eval()
    x = torch.randint(0, 97, (1, 16))
    y = x.clone()
    y[0, 10:] = (y[0, 10:] + 1) % 97
    a, _ = model(x)
    b, _ = model(y)
    torch.testing.assert_close(a[0, :10], b[0, :10])
    assert not torch.allclose(a[0, 10:], b[0, 10:])


@pytest.mark.parametrize("use_attn,use_ffn", [(True, False), (False, True)])
def test_sublayers_can_be_removed(use_attn, use_ffn):
    model = GPT(tiny(use_attn=use_attn, use_ffn=use_ffn))
    for block in model.blocks:
        assert (block.attn is not None) == use_attn
        assert (block.mlp is not None) == use_ffn
    logits, _ = model(torch.zeros(2, 8, dtype=torch.long))
    assert logits.shape == (2, 8, 97)


def test_context_overflow_is_an_error():
    with pytest.raises(AssertionError, match="context"):
        GPT(tiny())(torch.zeros(1, 17, dtype=torch.long))

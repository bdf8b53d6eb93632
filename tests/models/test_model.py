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


@pytest.mark.parametrize("d_model,n_layer", [(32, 2), (64, 2), (256, 4)])
def test_param_matched_attention_only_is_within_one_over_d_of_the_baseline(d_model, n_layer):
    """The attn_only_matched variant's depth is derived in code (models.gpt.matched_depth)."""
    from pillm.lm.config import ModelConfig
    from pillm.lm.run import variant_config
    from pillm.models.gpt import count_params

    model = ModelConfig(n_layer, d_model, 4, 4, 16, 0.0)
    base = variant_config("baseline", model, 97)
    matched = variant_config("attn_only_matched", model, 97)
    assert not matched.use_ffn and matched.d_model == d_model
    assert matched.n_layer == 3 * n_layer  # an attention block is ~1/3 of a baseline block
    # Three attention blocks (4d² + 8d each) stand for one baseline block (12d² + 13d): the gap is
    # 11d per baseline block, so the stated tolerance is 1/d of the baseline's count.
    gap = abs(count_params(matched) - count_params(base)) / count_params(base)
    assert gap < 1 / d_model, gap
    assert count_params(base) == GPT(base).num_params()  # counted on meta = real count


def test_linear_ffn_is_exactly_affine_and_gelu_is_not():
    torch.manual_seed(0)
    x, y = torch.randn(5, 32, dtype=torch.float64), torch.randn(5, 32, dtype=torch.float64)
    a, b = 0.7, -1.9
    for act, affine in (("linear", True), ("gelu", False)):
        f = GPT(tiny(ffn_activation=act)).blocks[0].mlp.double()
        for p in f.parameters():  # non-zero biases, so "up to the bias" is exercised
            torch.nn.init.normal_(p)
        zero = f(torch.zeros(1, 32, dtype=torch.float64))
        lhs = f(a * x + b * y) - zero
        rhs = a * (f(x) - zero) + b * (f(y) - zero)
        assert torch.allclose(lhs, rhs, atol=1e-9) is affine


def test_unknown_ffn_activation_is_refused():
    with pytest.raises(ValueError, match="ffn_activation"):
        GPT(tiny(ffn_activation="relu"))

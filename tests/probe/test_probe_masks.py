"""Row policy, outlier features and bootstrap intervals of the probe (issue #15): synthetic blocks
whose truth is known, and the special-token ids of every supported family."""

import numpy as np
import pytest
import torch
import torch.nn as nn
from transformers import (
    AutoTokenizer,
    BertConfig,
    GPT2Config,
    GPT2TokenizerFast,
    GPTNeoXConfig,
    LlamaConfig,
)

from pillm.core.ridge import GramStats, r2_score_from_stats
from pillm.models.gpt import GPT, GPTConfig
from pillm.models.pretrained import SPECIAL_TOKENS, special_token_ids
from pillm.probe.config import ProbeRowsConfig
from pillm.probe.fit import _with_ones, accumulate_ffn_stats, probe_model
from pillm.probe.intervals import bootstrap_blocks, rank_corr, rank_corr_diff
from pillm.probe.masks import describe, row_mask
from pillm.probe.refit import UnitStats, counts, resampled_r2
from pillm.probe.variance import excluded_share, outlier_stats

D, V, SPECIAL, SINK = 16, 50, 3, 2
POLICY = ProbeRowsConfig(exclude_positions=(0,), exclude_special=True)


class _SpikyFFN(nn.Module):
    """Exactly affine on ordinary rows; on special-token and position-0 rows (and, with
    ``sink``, on rows of token SINK anywhere: a sink away from position 0) a large nonlinear
    output (the attention-sink / [CLS] pattern). The rows' kind comes from the ids the
    embedding saw, as a real block would infer it from its input."""

    def __init__(self, g: torch.Generator, sink: bool = False):
        super().__init__()
        self.a = torch.randn(D, D, generator=g) / D**0.5
        self.b = torch.randn(D, generator=g)
        self.ids: torch.Tensor | None = None
        self.sink = sink

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x @ self.a + self.b
        odd = (self.ids == SPECIAL).clone()
        odd[:, 0] = True
        out = torch.where(odd[..., None], 40.0 * torch.tanh(3 * x) ** 2, y)
        if self.sink:
            out = torch.where((self.ids == SINK)[..., None], 400.0 * torch.tanh(3 * x) ** 2, out)
        return out


def _spiky_model(sink: bool = False) -> tuple[GPT, _SpikyFFN]:
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=V, context=32, n_layer=1, d_model=D, n_head=2, dropout=0.0))
    ffn = _SpikyFFN(torch.Generator().manual_seed(1), sink)
    m.blocks[0].mlp = ffn
    m.wte.register_forward_pre_hook(lambda _mod, args: setattr(ffn, "ids", args[0]))
    return m.eval(), ffn


def _batches(n: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(4, V, (4, 24), generator=g)
        ids[:, 11] = SPECIAL  # one special token in the middle of each window
        out.append(ids)
    return out


def test_masked_r2_recovers_the_linear_truth_that_special_rows_hide():
    model, _ = _spiky_model()
    mask = row_mask(POLICY, {SPECIAL})
    (r,) = probe_model(
        model, _batches(10), holdout_every=5, rank=0, row_mask=mask, outlier_k=2, resamples=300
    )
    assert r["r2_lin"] == pytest.approx(1.0, abs=1e-6)  # the block's typical rows: affine
    assert r["r2_lin_all"] < 0.5  # all rows pooled: the two odd rows per window decide it
    assert r["excluded_share"] > 0.9  # 2 of 24 rows carry most of the held-out variance
    assert r["n_excluded_rows"] == 10 * 4 * 2 and r["n_heldout_rows"] == 2 * 4 * 22
    assert r["r2_lin_lo"] == pytest.approx(1.0, abs=1e-6) == r["r2_lin_hi"]
    assert r["r2_lin_all_lo"] <= r["r2_lin_all"] <= r["r2_lin_all_hi"] < 0.5 + 0.1
    assert r["n_heldout_windows"] == 8
    # the same rows without a policy: one fit, every number equal to the all-rows one
    (plain,) = probe_model(model, _batches(10), holdout_every=5, rank=0)
    assert plain["r2_lin"] == pytest.approx(r["r2_lin_all"], abs=1e-9)
    assert plain["r2_lin_all"] == plain["r2_lin"] and plain["excluded_share"] == 0.0


def test_massive_rows_away_from_position_0_are_left_out_per_block():
    model, _ = _spiky_model(sink=True)
    batches = _batches(10)
    for b in batches:  # a sink token in some windows, at a position no rule names
        b[::2, 17] = SINK
    policy = ProbeRowsConfig((0,), exclude_special=True, exclude_massive=20.0)
    (r,) = probe_model(
        model, batches, holdout_every=5, rank=0, row_mask=row_mask(policy, {SPECIAL})
    )
    assert r["r2_lin"] == pytest.approx(1.0, abs=1e-6)
    assert r["n_excluded_rows"] == 10 * 4 * 2 + 10 * 2
    off = ProbeRowsConfig((0,), exclude_special=True, exclude_massive=0.0)
    (r0,) = probe_model(model, batches, holdout_every=5, rank=0, row_mask=row_mask(off, {SPECIAL}))
    assert r0["r2_lin"] < 0.9 and r0["n_excluded_rows"] == 10 * 4 * 2
    # beside the policy, the same fit without its massive-activation rule: the rule's effect
    assert r["n_massive_rows"] == 10 * 2 and r0["n_massive_rows"] == 0
    assert r["r2_lin_with_massive"] == pytest.approx(r0["r2_lin"], abs=1e-9)
    assert r0["r2_lin_with_massive"] == r0["r2_lin"]


def test_bilinear_probe_and_gradient_rows_follow_the_policy():
    model, _ = _spiky_model()
    mask = row_mask(POLICY, {SPECIAL})
    (r,) = probe_model(model, _batches(10), holdout_every=5, rank=4, row_mask=mask)
    assert r["r2_bilinear"] == pytest.approx(1.0, abs=1e-6)  # kept rows: nothing left to gain
    from pillm.probe.run import sample_rows

    rows = sample_rows(model, _batches(10), [0], 10**6, 5, "cpu", mask)
    x, y = rows[0]
    assert x.shape[0] == 8 * 4 * 22  # kept rows of the 8 fitting batches
    assert float(linear_fit_residual(x, y)) < 1e-8  # no odd row among them


def linear_fit_residual(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    h = _with_ones(x.double())
    w = torch.linalg.lstsq(h, y.double()).solution
    return ((h @ w - y.double()) ** 2).mean()


def test_refit_bootstrap_resamples_fit_and_heldout_windows():
    model, _ = _spiky_model()
    mask = row_mask(POLICY, {SPECIAL})
    batches = _batches(10)
    for b in batches[1::2]:  # not affine everywhere: the kept rows' R² below 1
        b[:, 5] = SPECIAL
    (r,) = probe_model(model, batches, holdout_every=5, rank=0, row_mask=mask, resamples=400)
    assert r["n_fit_windows"] == 32 and r["n_heldout_windows"] == 8
    assert r["r2_lin_lo"] < r["r2_lin_hi"] and r["r2_lin_all_lo"] < r["r2_lin_all_hi"]
    assert r["r2_lin_all_lo"] - 0.2 < r["r2_lin_all"] < r["r2_lin_all_hi"] + 0.2
    (again,) = probe_model(model, batches, holdout_every=5, rank=0, row_mask=mask, resamples=400)
    assert (again["r2_lin_lo"], again["r2_lin_all_hi"]) == (r["r2_lin_lo"], r["r2_lin_all_hi"])
    (one,) = probe_model(model, batches, holdout_every=5, rank=0, row_mask=mask, resamples=400,
                         replay_bytes=0)  # fmt: skip
    assert one["r2_lin_all_lo"] == r["r2_lin_all_lo"]  # rerun passes: the same statistics


def _unit_stats(model, batches, mask):
    """Per-window statistics of the spiky model's kept rows, by hand: (fitting, held-out)."""
    st = accumulate_ffn_stats(model, batches, holdout_every=5, row_mask=mask)[0]
    fit, held = UnitStats.zeros(32, D + 1, D, "cpu"), UnitStats.zeros(8, D + 1, D, "cpu")
    from pillm.probe.passes import _captured

    seen = {False: 0, True: 0}
    for h_out, rows, keep, window in _captured(model, batches, "cpu", 5, None, mask):
        x, y = rows[0]
        k = mask.rows(keep, y)
        h = _with_ones(x.double())[k]
        (held if h_out else fit).add(window[k] + seen[h_out], h, y.double()[k])
        seen[h_out] += 4
    return st, fit, held


def test_refit_with_every_window_once_is_the_point_fit():
    """A resample that takes every window once is the sample: its R² is the point R²_lin; the
    unit statistics sum to the block's Gram statistics."""
    model, _ = _spiky_model()
    mask = row_mask(POLICY, {SPECIAL})
    batches = _batches(10)
    for b in batches[1::2]:
        b[:, 5] = SPECIAL
    st, fit, held = _unit_stats(model, batches, mask)
    assert torch.allclose(fit.hth.sum(0), st.train.hth) and int(held.n.sum()) == st.held.n
    (r,) = probe_model(model, batches, holdout_every=5, rank=0, row_mask=mask)
    got = resampled_r2(fit, held, 0.0, np.ones((1, 32)), np.ones((1, 8)))
    assert got[0] == pytest.approx(r["r2_lin"], abs=1e-9)
    twice = resampled_r2(fit, held, 0.0, 2 * np.ones((1, 32)), 3 * np.ones((1, 8)))
    assert twice[0] == pytest.approx(r["r2_lin"], abs=1e-9)  # weights scale out of R²
    c = counts(np.random.default_rng(0), 32, 50)
    assert c.shape == (50, 32) and (c.sum(1) == 32).all()


def test_outlier_feature_share_and_r2_without_it():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4000, 6, generator=g, dtype=torch.float64)
    y = x @ torch.randn(6, 5, generator=g, dtype=torch.float64)
    y = y + torch.randn(4000, 5, generator=g, dtype=torch.float64)  # R² per coordinate < 1
    y[:, 2] = 100 * x[:, 0]  # an outlier coordinate: huge variance, exactly linear
    tr, va = GramStats.zeros(7, 5), GramStats.zeros(7, 5)
    tr.update(_with_ones(x[:3000]), y[:3000])
    va.update(_with_ones(x[3000:]), y[3000:])
    w = torch.linalg.lstsq(_with_ones(x[:3000]), y[:3000]).solution
    r2, per = r2_score_from_stats(w, va)
    out = outlier_stats(w, tr, va, 1)
    assert out["outlier_features"] == "2" and out["outlier_share"] > 0.99
    assert r2 > 0.99  # the pooled R² is the outlier's
    sse = ((_with_ones(x[3000:]) @ w - y[3000:]) ** 2).sum(0)
    sst = ((y[3000:] - y[3000:].mean(0)) ** 2).sum(0)
    rest = [0, 1, 3, 4]
    assert out["r2_no_outliers"] == pytest.approx(1 - float(sse[rest].sum() / sst[rest].sum()))
    assert out["r2_no_outliers"] < 0.95
    assert outlier_stats(w, tr, va, 5)["r2_no_outliers"] is None  # nothing left


def test_excluded_share_is_the_excluded_rows_part_of_the_variance():
    g = torch.Generator().manual_seed(0)
    y = torch.randn(100, 3, generator=g, dtype=torch.float64)
    y[:5] *= 30
    kept, excl = GramStats.zeros(1, 3), GramStats.zeros(1, 3)
    kept.update(torch.ones(95, 1), y[5:])
    excl.update(torch.ones(5, 1), y[:5])
    mean = y.mean(0)
    expect = float(((y[:5] - mean) ** 2).sum() / ((y - mean) ** 2).sum())
    assert excluded_share(kept, excl) == pytest.approx(expect)
    assert excluded_share(kept, GramStats.zeros(1, 3)) == 0.0


def test_row_mask_positions_special_ids_and_errors():
    ids = torch.tensor([[5, 3, 7, 9], [3, 8, 8, 2]])
    keep = row_mask(POLICY, {3, 2})(ids)
    assert keep.tolist() == [[False, False, True, True], [False, True, True, False]]
    last = row_mask(ProbeRowsConfig((-1,), exclude_special=False), {3})(ids)
    assert last.tolist() == [[True, True, True, False]] * 2
    assert row_mask(ProbeRowsConfig((), exclude_special=False, exclude_massive=0), {3}) is None
    assert row_mask(ProbeRowsConfig((), exclude_special=True, exclude_massive=0), set()) is None
    with pytest.raises(ValueError, match="probe.rows.exclude_positions"):
        row_mask(ProbeRowsConfig((4,)), set())(ids)
    assert describe(POLICY) == "special+pos0+massive20"
    assert describe(ProbeRowsConfig((), exclude_special=False, exclude_massive=0)) == "all rows"


def test_a_policy_that_leaves_no_rows_names_the_key():
    model, _ = _spiky_model()
    everything = ProbeRowsConfig(tuple(range(24)))
    with pytest.raises(ValueError, match="probe.rows"):
        probe_model(model, _batches(5), holdout_every=5, rank=0, row_mask=row_mask(everything, ()))


# ---------------------------------------------------------------- special tokens per family


def test_special_ids_of_tiny_random_configs_per_family():
    assert special_token_ids("gpt2", config=GPT2Config()) == {50256}
    assert special_token_ids("gpt_neox", config=GPTNeoXConfig()) == {0, 2}
    assert special_token_ids("llama", config=LlamaConfig()) == {1, 2}
    assert special_token_ids("bert", config=BertConfig()) == {0}  # pad; [CLS]/[SEP]: tokenizer
    assert set(SPECIAL_TOKENS) == {"pillm", "gpt2", "gpt_neox", "llama", "bert"}
    with pytest.raises(ValueError, match="SPECIAL_TOKENS"):
        special_token_ids("opt")


def test_special_ids_of_local_tokenizers(shared_data):
    gpt2 = GPT2TokenizerFast.from_pretrained(shared_data / "gpt2-tokenizer")
    assert special_token_ids("gpt2", gpt2) == {50256}

    from pillm.models.pretrained import SMOLLM2_GGUF, _package_dir

    minilm = AutoTokenizer.from_pretrained(_package_dir("minilm") / "model")
    got = special_token_ids("bert", minilm)
    assert got == {minilm.cls_token_id, minilm.sep_token_id, minilm.pad_token_id} == {0, 101, 102}
    assert minilm.unk_token_id not in got and minilm.mask_token_id not in got  # text, not structure
    smol = AutoTokenizer.from_pretrained(_package_dir("smollm2"), gguf_file=SMOLLM2_GGUF)
    assert special_token_ids("llama", smol) == {smol.bos_token_id, smol.eos_token_id} == {1, 2}
    assert smol.unk_token_id not in special_token_ids("llama", smol)

    from pillm.data.tokenizer import EOT, train_bpe

    own = train_bpe("some text to learn a few merges from\n" * 50, 300)
    assert special_token_ids("pillm", own) == {own.token_to_id(EOT)}
    ids = torch.tensor([[own.token_to_id(EOT), *own.encode("some text").ids]])
    assert (
        row_mask(ProbeRowsConfig((), True), special_token_ids("pillm", own))(ids)[0, 0].item()
        is False
    )


def test_gpt_neox_tokenizer_special_ids():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    vocab = {"<|endoftext|>": 0, "<|padding|>": 1, "a": 2, "b": 3}
    tok = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="a")),
        bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|padding|>",
    )  # fmt: skip
    assert special_token_ids("gpt_neox", tok, GPTNeoXConfig(bos_token_id=0, eos_token_id=0)) == {
        0,
        1,
    }


# ---------------------------------------------------------------- correlations over blocks


def test_block_bootstrap_of_rank_correlations():
    x = np.arange(12.0)
    cols = {"a": x, "b": x**2, "noise": np.r_[x[::2], x[1::2]][::-1], "y": 3 * x + 1}
    est = bootstrap_blocks(cols, rank_corr("a", "y"), 300, seed=0)
    assert est.value == pytest.approx(1.0) and est.n == 12 and est.lo == pytest.approx(1.0)
    diff = bootstrap_blocks(cols, rank_corr_diff("b", "noise", "y"), 300, seed=0)
    assert diff.value > 0 and diff.lo > 0  # b ranks y perfectly, noise does not: paired
    few = bootstrap_blocks({"a": [1.0, 2.0], "y": [1.0, None]}, rank_corr("a", "y"), 300)
    assert few.value is None and few.n == 1


def test_block_bootstrap_over_seeds_then_blocks():
    """Several seeds: the statistic within each seed, averaged; the interval over seeds and
    blocks. Two seeds of opposite perfect rank orders average to 0, not to a pooled value."""
    x = np.tile(np.arange(6.0), 2)
    y = np.r_[np.arange(6.0), -np.arange(6.0)]
    seeds = [0] * 6 + [1] * 6
    est = bootstrap_blocks({"x": x, "y": y}, rank_corr("x", "y"), 300, seed=0, seeds=seeds)
    assert est.value == pytest.approx(0.0) and est.seeds == 2 and est.per_seed == 6
    assert est.lo < -0.5 and est.hi > 0.5  # drawing seeds: either sign
    same = bootstrap_blocks({"x": x, "y": x}, rank_corr("x", "y"), 300, seed=0, seeds=seeds)
    assert same.value == pytest.approx(1.0) and same.lo == pytest.approx(1.0)
    one = bootstrap_blocks({"x": x, "y": x}, rank_corr("x", "y"), 300, seed=0, seeds=[3] * 12)
    plain = bootstrap_blocks({"x": x, "y": x}, rank_corr("x", "y"), 300, seed=0)
    assert one == plain and one.per_seed == 12  # one seed: the block bootstrap itself


def test_unit_stats_equal_a_plain_sum_per_unit():
    """UnitStats.add: per unit, the Gram sums of its rows (float64), in any row order."""
    g = torch.Generator().manual_seed(3)
    h = torch.randn(50, 4, generator=g, dtype=torch.float64)
    y = torch.randn(50, 2, generator=g, dtype=torch.float64)
    unit = torch.randint(0, 6, (50,), generator=g)
    got = UnitStats.zeros(7, 4, 2, "cpu")
    got.add(unit, h, y)
    for u in range(7):
        rows = unit == u
        assert got.n[u] == rows.sum()
        torch.testing.assert_close(got.hth[u], h[rows].T @ h[rows], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got.hty[u], h[rows].T @ y[rows], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got.y_sum[u], y[rows].sum(0), rtol=1e-12, atol=1e-12)
    assert len(got.used().n) == int((got.n > 0).sum())


@pytest.mark.gpu
def test_unit_stats_rerun_bitwise_on_cuda():
    """The refit bootstrap's per-window sums (and so its bounds) are the same bits on a rerun:
    each unit is one matmul, no atomics."""
    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(32768, 128, generator=g, device="cuda", dtype=torch.float64)
    y = torch.randn(32768, 64, generator=g, device="cuda", dtype=torch.float64)
    unit = torch.arange(64, device="cuda").repeat_interleave(512)
    runs = []
    for _ in range(3):
        st = UnitStats.zeros(64, 128, 64, "cuda")
        st.add(unit, h, y)
        runs.append(st)
    for other in runs[1:]:
        for f in ("hth", "hty", "yty", "y_sum", "n"):
            assert torch.equal(getattr(runs[0], f), getattr(other, f))

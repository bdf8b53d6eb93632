"""FFN linearity probe: locating, capture, probing, replacement — tiny random models only."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn
from transformers import (
    BertConfig,
    BertForMaskedLM,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    GPT2Model,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
)

from pillm.core.ridge import GramStats
from pillm.models.gpt import GPT, GPTConfig
from pillm.probe.capture import SplitFFN, capture_ffn_io, ffn_modules, model_family
from pillm.probe.fit import accumulate_ffn_stats, effective_rank, map_rank, probe_model
from pillm.probe.masks import RowMask
from pillm.probe.passes import Recording
from pillm.probe.swap import (
    default_low_rank,
    linear_replacement,
    low_rank_params,
    low_rank_replacement,
    swap_ffns,
)

D, V = 32, 100
FAMILIES = ["pillm", "gpt2", "gpt_neox", "llama", "bert"]


def _model(family: str, init: float = 0.02, head: bool = True) -> nn.Module:
    """2 layers, hidden 32, FFN 64 (pillm: 128), vocab 100, 64 positions; ``init`` = weight std."""
    torch.manual_seed(0)
    common = dict(vocab_size=V, initializer_range=init, bos_token_id=0, eos_token_id=0)
    hf = dict(hidden_size=D, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)
    hf.update(common, max_position_embeddings=64)
    if family == "pillm":
        m = GPT(GPTConfig(vocab_size=V, context=64, n_layer=2, d_model=D, n_head=4))
        with torch.no_grad():  # GPT has no init knob: scale W1 to get large pre-activations
            for block in m.blocks:
                block.mlp.fc.weight.mul_(init / 0.02)
        return m
    if family == "gpt2":
        cfg = GPT2Config(n_positions=64, n_embd=D, n_layer=2, n_head=4, n_inner=64, **common)
        return (GPT2LMHeadModel if head else GPT2Model)(cfg)
    if family == "gpt_neox":
        return GPTNeoXForCausalLM(GPTNeoXConfig(**hf))
    if family == "llama":
        return LlamaForCausalLM(LlamaConfig(num_key_value_heads=2, **hf))
    return (BertForMaskedLM if head else BertModel)(BertConfig(**hf))


def _batches(n: int, b: int = 4, t: int = 32, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, V, (b, t), generator=g) for _ in range(n)]


def _run(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor | None = None) -> None:
    with torch.no_grad():
        if isinstance(model, GPT):
            model(ids)
        else:
            model(input_ids=ids, attention_mask=mask)


def _n_hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


CASES = [(f, True) for f in FAMILIES] + [("gpt2", False), ("bert", False)]


@pytest.mark.parametrize(("family", "head"), CASES)
def test_ffn_located_and_capture_is_exact(family, head):
    model = _model(family, head=head).eval()
    mods = ffn_modules(model)
    assert len(mods) == 2 and model_family(model) == family
    if family == "bert":
        assert isinstance(mods[0][1], SplitFFN) and "output.dense" in mods[0][0]
    ids = _batches(1, b=3, t=10)[0]
    with capture_ffn_io(model) as cap:
        _run(model, ids)
        rows = cap.pop()
    assert sorted(rows) == [0, 1] and cap.pop() == {}
    for i, (_, ffn) in enumerate(mods):
        x, y = rows[i]
        assert x.shape == (30, D) and y.shape == (30, D)
        with torch.no_grad():
            torch.testing.assert_close(ffn(x), y, rtol=0, atol=0)


@pytest.mark.parametrize("family", FAMILIES)
def test_capture_drops_padding(family):
    model = _model(family).eval()
    ids = _batches(1, b=2, t=8)[0]
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[0, 5:] = 0
    with capture_ffn_io(model, layers=[1], attention_mask=mask) as cap:
        _run(model, ids, None if family == "pillm" else mask)
        x, y = cap.pop()[1]
    assert x.shape == (13, D) and y.shape == (13, D)


def test_probe_accepts_masked_dict_and_tuple_batches():
    model = _model("gpt2")
    ids = _batches(4, b=2, t=8)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    dicts = [{"input_ids": x, "attention_mask": mask} for x in ids]
    res = probe_model(model, dicts, holdout_every=2, rank=0)
    assert res[0]["n_train_rows"] == res[0]["n_heldout_rows"] == 2 * 14
    res2 = probe_model(model, [(x, mask) for x in ids], holdout_every=2, rank=0)
    assert res2[1]["r2_lin"] == res[1]["r2_lin"]


def test_hooks_removed_on_exit_and_on_exception():
    model = _model("bert")
    with capture_ffn_io(model):
        assert _n_hooks(model) == 4
    assert _n_hooks(model) == 0
    with pytest.raises(RuntimeError, match="boom"), capture_ffn_io(model, layers=[0]):
        raise RuntimeError("boom")
    assert _n_hooks(model) == 0


def test_unknown_family_raises():
    opt_like = nn.Module()
    opt_like.config = SimpleNamespace(model_type="opt")
    with pytest.raises(ValueError, match="opt"):
        ffn_modules(opt_like)
    with pytest.raises(ValueError, match="None"):
        model_family(nn.Linear(2, 2))


@pytest.mark.parametrize("family", FAMILIES)
def test_linear_block_scores_one_nonlinear_block_less(family):
    model = _model(family, init=0.3)
    lin = nn.Linear(D, D)
    with swap_ffns(model, {0: lin}):
        res = probe_model(model, _batches(6), holdout_every=3, rank=0)
        with capture_ffn_io(model, layers=[0]) as cap:
            _run(model, _batches(1, seed=9)[0])
            x, y = cap.pop()[0]
    assert [r["layer"] for r in res] == [0, 1]
    assert res[0]["r2_lin"] == pytest.approx(1.0, abs=1e-6)
    assert res[1]["r2_lin"] < 0.95  # GELU / SwiGLU with O(1) pre-activations
    r0 = res[0]
    assert (r0["d_in"], r0["d_out"], r0["n_train_rows"], r0["n_heldout_rows"]) == (D, D, 512, 256)
    # LN-fed blocks: [X, 1] is singular, so the exact fit is ridge.py's min-norm eigh path.
    assert r0["W"].shape == (D + 1, D) and r0["lam"] == 0.0
    assert r0["solver"] == ("cholesky" if family == "llama" else "eigh")
    # LayerNorm rows make [X, 1] collinear, so W is identifiable only as a function on the data.
    torch.testing.assert_close(linear_replacement(r0["W"])(x), y, atol=1e-4, rtol=0)
    assert r0["r2_feature_median"] == pytest.approx(1.0, abs=1e-6)
    assert 1.0 <= r0["effective_rank"] <= D


def test_map_rank_is_the_maps_rank_not_its_inputs_conditioning():
    """Three unit-variance outputs, the third carried by an input direction of tiny variance:
    W = diag(1, 1, 1000) has one dominant singular value (effective rank near 1, the input's
    conditioning), while the map spreads its outputs evenly over three directions."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4000, 3, generator=g, dtype=torch.float64) * torch.tensor([1.0, 1.0, 1e-3])
    w = torch.diag(torch.tensor([1.0, 1.0, 1e3], dtype=torch.float64))
    stats = GramStats.zeros(4, 3)
    stats.update(torch.cat([x, torch.ones(4000, 1, dtype=torch.float64)], 1), x @ w)
    assert effective_rank(w) < 1.05
    assert map_rank(w, stats) == pytest.approx(3.0, abs=0.05)
    x[:, 2] *= 1e3  # a well-conditioned input: the two agree
    stats = GramStats.zeros(4, 3)
    stats.update(torch.cat([x, torch.ones(4000, 1, dtype=torch.float64)], 1), x)
    assert map_rank(torch.eye(3, dtype=torch.float64), stats) == pytest.approx(3.0, abs=0.05)


def test_min_norm_fit_has_no_component_along_layernorm_null_direction():
    # ln_2 has gamma = 1, beta = 0 at init, so every FFN input row sums to 0: the augmented
    # null vector is (1, ..., 1, 0). A tiny ridge would leave noise / lam in W along it.
    model = _model("pillm", init=0.3)
    (r,) = probe_model(model, _batches(6), holdout_every=3, rank=0, layers=[0])
    w = r["W"]
    assert w[:-1].sum(0).abs().max() < 1e-5 * w.abs().max()  # float32 rows: ~1e-7
    assert 0.5 < r["r2_lin"] < 1


def test_stats_size_independent_of_rows():
    model = _model("pillm", init=0.3)
    shapes, r2 = [], []
    for n in (2, 6):
        stats = accumulate_ffn_stats(model, _batches(n), holdout_every=2)
        tr, va = stats[1]
        shapes.append([(t.hth.shape, t.hty.shape, t.yty.shape) for t in (tr, va)])
        assert tr.n == va.n == n // 2 * 128
        r2.append(probe_model(model, _batches(n), holdout_every=2, rank=0)[1]["r2_lin"])
    assert shapes[0] == shapes[1] == [((D + 1, D + 1), (D + 1, D), (D,))] * 2
    assert 0.5 < r2[0] < 1 and 0.5 < r2[1] < 1 and abs(r2[0] - r2[1]) < 0.1


@pytest.mark.parametrize("family", FAMILIES)
def test_swap_restores_even_on_exception(family):
    model = _model(family)
    before = [(n, id(m)) for n, m in model.named_modules()]
    with pytest.raises(KeyError), swap_ffns(model, {0: nn.Linear(D, D), 1: nn.Identity()}):
        assert [n for n, _ in ffn_modules(model)] != [n for n, _ in before]
        raise KeyError("inside")
    assert [(n, id(m)) for n, m in model.named_modules()] == before
    with pytest.raises(IndexError), swap_ffns(model, {5: nn.Identity()}):
        pass
    assert [(n, id(m)) for n, m in model.named_modules()] == before


def test_linear_and_low_rank_replacements():
    g = torch.Generator().manual_seed(1)
    W = torch.randn(D + 1, 48, generator=g, dtype=torch.float64)
    x = torch.randn(5, D, generator=g, dtype=torch.float64)
    lin = linear_replacement(W, dtype=torch.float64)
    torch.testing.assert_close(lin(x), x @ W[:-1] + W[-1])

    k = default_low_rank(D, 48)
    assert k == D * 48 // (8 * (D + 48)) == 2
    low = low_rank_replacement(W)
    assert low.down.out_features == k and low.num_params() == k * (D + 48) + 48
    assert sum(p.numel() for p in low.parameters()) == low.num_params()
    for rank in (1, k, D):  # the count the probe records without factorising
        assert low_rank_params(D, 48, rank) == low_rank_replacement(W, rank).num_params()
    u, s, vh = torch.linalg.svd(W[:-1])
    expect = x @ (u[:, :k] * s[:k] @ vh[:k]) + W[-1]
    torch.testing.assert_close(low(x.float()).double(), expect, atol=1e-4, rtol=1e-4)
    full = low_rank_replacement(W, rank=D, dtype=torch.float64)
    torch.testing.assert_close(full(x), lin(x))
    with pytest.raises(ValueError):
        low_rank_replacement(W, rank=D + 1)
    with pytest.raises(ValueError):
        low_rank_params(D, 48, D + 1)


class _Bilinear(nn.Module):
    """y = (u1·(x-μ)) (u2·(x-μ)) v + x A: exactly bilinear in a 2-d subspace plus linear."""

    def __init__(self, mu, u, g):
        super().__init__()
        self.mu, self.u = mu, u
        self.v = torch.randn(D, generator=g, dtype=torch.float64)
        self.a = 0.1 * torch.randn(D, D, generator=g, dtype=torch.float64)

    def forward(self, x):
        z = (x.double() - self.mu) @ self.u
        return ((z[..., :1] * z[..., 1:]) * self.v + x.double() @ self.a).to(x.dtype)


def test_bilinear_probe_recovers_subspace_product():
    model = _model("pillm")
    batches, hold = _batches(8), 4
    with capture_ffn_io(model, layers=[0]) as cap, torch.no_grad():
        for b, ids in enumerate(batches):
            if (b + 1) % hold:
                model(ids)
        x = cap.pop()[0][0].double()
    mu = x.mean(0)
    _, vec = torch.linalg.eigh(torch.cov(x.T))
    # The top-2 principal directions of the train rows lie in the probe's top-16 subspace.
    bil = _Bilinear(mu, vec[:, -2:], torch.Generator().manual_seed(2))
    with swap_ffns(model, {0: bil}):
        res = probe_model(model, batches, holdout_every=hold, rank=16, layers=[0])
    (r,) = res
    assert r["bilinear_rank"] == 16 and r["bilinear_features"] == D + 1 + 136
    assert r["r2_lin"] < 0.9 and r["bilinear_solver"] == "eigh"  # LN-fed: singular Gram
    assert r["r2_bilinear"] == pytest.approx(1.0, abs=1e-6)
    assert r["bilinear_gain"] == pytest.approx(r["r2_bilinear"] - r["r2_lin"])
    with pytest.raises(TypeError):
        probe_model(model, iter(batches), rank=16)


@pytest.mark.parametrize("family", FAMILIES)
def test_swap_metric_replays_the_blocks_below_a_swap_with_the_same_bits(family):
    """SwapMetric.swapped skips the blocks below the swap (their recorded outputs are replayed):
    the metric equals a whole forward with the block swapped, exactly, for every family; the
    model is left as it was."""
    from pillm.models.pretrained import ProbeModel
    from pillm.probe.run import SwapMetric

    model = _model(family, init=0.3).eval()
    kind = "encoder" if family == "bert" else "causal"
    pm = ProbeModel(family, family, kind, model, encode=lambda text: None)
    if kind == "encoder":  # the proxy reads last_hidden_state: the base model
        pm.model = model.base_model
    metric = SwapMetric(pm, _batches(3), "cpu")
    before = [(n, id(m)) for n, m in pm.model.named_modules()]
    for layer in (0, 1):
        repl = nn.Linear(D, D)
        with swap_ffns(pm.model, {layer: repl}):
            whole = metric()
        replayed = metric.swapped(layer, repl)
        assert replayed == whole and replayed != metric.base
    assert metric() == metric.base
    assert [(n, id(m)) for n, m in pm.model.named_modules()] == before


def test_replay_below_refuses_other_forwards_than_those_recorded():
    from pillm.probe.swap import record_block_outputs, replay_below

    model = _model("pillm").eval()
    batches = _batches(2)
    with record_block_outputs(model) as recorded:
        for x in batches:
            _run(model, x)
    assert [len(r) for r in recorded] == [2, 2]
    with pytest.raises(RuntimeError, match="used"), replay_below(model, 1, recorded[0]):
        _run(model, batches[0])  # one forward of the two recorded
    with pytest.raises(RuntimeError, match="called 3 times"), replay_below(model, 1, recorded[0]):
        for x in [*batches, batches[0]]:
            _run(model, x)
    assert _n_hooks(model) == 0


def _same(a: object, b: object) -> bool:
    """Exact equality of probe records' values (tensors bit for bit, GramStats field by field)."""
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if hasattr(a, "__dict__") and not isinstance(a, (int, float, str)):
        return all(_same(v, getattr(b, k)) for k, v in vars(a).items())
    return a == b or (a != a and b != b)  # NaN == NaN here


def test_the_refit_intervals_say_their_progress(capsys):
    """The bootstrap refits every block's map per resample (minutes on a CPU): the log says
    how far it is, a line per block and row set."""
    mask = RowMask(special=(0,), positions=(0,), massive=20.0)
    probe_model(_model("pillm"), _batches(10, b=2, t=16), holdout_every=5, row_mask=mask,
                resamples=20, seed=1)  # fmt: skip
    lines = [ln for ln in capsys.readouterr().out.splitlines() if "probe: intervals" in ln]
    assert [ln.split("] ", 1)[1] for ln in lines] == [
        f"probe: intervals {n + 1}/4 (block {n // 2}, row set {n % 2})" for n in range(4)
    ]


@pytest.mark.parametrize("family", ["pillm", "gpt2", "bert"])
def test_later_passes_replay_the_first_pass_rows_with_the_same_values(family, monkeypatch):
    """The refit bootstrap and the bilinear fit read the first pass's rows instead of running
    the model twice more: every value is the same, and each batch runs once; past the memory
    budget the passes run the model again, to the same values."""
    import pillm.probe.passes as passes

    model = _model(family)
    calls, forward = [], passes._forward
    monkeypatch.setattr(passes, "_forward", lambda *a: calls.append(1) or forward(*a))
    batches = _batches(10, b=2, t=16)
    mask = RowMask(special=(0,), positions=(0,), massive=20.0)
    kw = dict(holdout_every=5, rank=4, row_mask=mask, outlier_k=2, resamples=20, seed=1)
    replayed = probe_model(model, batches, **kw)
    assert len(calls) == 10
    calls.clear()
    rerun = probe_model(model, batches, **kw, replay_bytes=0)
    assert len(calls) == 3 * 10  # the first pass, the refit bootstrap's, the bilinear pass
    assert len(replayed) == len(rerun) == 2
    for a, b in zip(replayed, rerun, strict=True):
        assert a.keys() == b.keys()
        assert all(_same(a[k], b[k]) for k in a), [k for k in a if not _same(a[k], b[k])]
    assert replayed[0]["r2_bilinear"] is not None and replayed[0]["r2_lin_lo"] is not None


def test_a_recording_past_its_budget_is_dropped():
    x, y, window = torch.zeros(10, 4), torch.zeros(10, 4), torch.zeros(10, dtype=torch.long)
    rec = Recording(budget=2 * 160 + 80 + 10)  # one batch: X and Y float32, window int64
    rec.add((False, {0: (x, y)}, None, window))
    assert rec.items is not None and len(rec.items) == 1 and rec.bytes == 400
    rec.add((True, {0: (x, y)}, None, window))
    rec.complete = True
    assert rec.items is None and not rec.replayable

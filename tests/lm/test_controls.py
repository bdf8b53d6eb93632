"""What the LM study's controls and records say: the random-output control of PIL-then-attention,
solved parameters counted from the solved weights, each layer solve's held-out fit and norm,
whether a gradient-trained run trained, and which LAMBADA targets the train split never holds."""

import math

import numpy as np
import polars as pl
import pytest
import torch
import yaml

from pillm.lm.aggregate import trained_rows
from pillm.lm.pil import randomize_outputs, solve_all_layers, target_propagation, target_residual
from pillm.lm.run import run_variant, unseen_targets
from pillm.lm.train import lm_metrics, loss_fall
from pillm.lm.variants import VARIANTS
from pillm.models.gpt import attach_pil

from ..conftest import REPO
from .test_pil import CFG, tiny, tokens
from .test_train import MODEL, TRAIN, tokens_dir  # noqa: F401 (the fixture)

PIL = {"lambdas": [1e-6, 1e-3, 1.0], "kappa_max": 1e10, "batch_size": 16, "max_tokens": 0,
       "fgrad_steps": [1.0]}  # fmt: skip


def solved_model(target=target_propagation):
    model = tiny()
    attach_pil(model, "bi", seed=0)
    model.eval()
    return model, solve_all_layers(model, target, tokens(), tokens(seed=2), CFG, "cpu")


def test_random_outputs_keep_the_features_and_the_solved_norms_only():
    model, _ = solved_model()
    solved = [b.mlp.w_out.clone() for b in model.blocks]
    features = [b.mlp.w_in.clone() for b in model.blocks]
    norms = randomize_outputs(model, seed=0)
    for block, w, w_in, norm in zip(model.blocks, solved, features, norms, strict=True):
        assert norm == pytest.approx(float(torch.linalg.norm(w)), rel=1e-6)
        assert float(torch.linalg.norm(block.mlp.w_out)) == pytest.approx(norm, rel=1e-5)
        assert torch.equal(block.mlp.w_in, w_in)  # the same random features
        assert abs(float(torch.nn.functional.cosine_similarity(
            block.mlp.w_out.flatten(), w.flatten(), dim=0))) < 0.2  # fmt: skip
    again, _ = solved_model()
    randomize_outputs(again, seed=0)  # seeded: the same random maps
    assert all(
        torch.equal(a.mlp.w_out, b.mlp.w_out)
        for a, b in zip(again.blocks, model.blocks, strict=True)
    )
    other, _ = solved_model()
    randomize_outputs(other, seed=1)
    assert not torch.equal(other.blocks[0].mlp.w_out, model.blocks[0].mlp.w_out)


def test_layer_solves_record_held_out_r2_and_target_scale():
    _, tp = solved_model()
    assert len(tp.r2) == 2 and all(ms > 0 and r2 <= 1 for r2, ms in tp.r2)
    _, residual = solved_model(target_residual)  # Y = 0: nothing to explain
    assert all(math.isnan(r2) and ms == 0 for r2, ms in residual.r2)


def test_solved_parameters_are_the_nonzero_entries_of_the_solved_maps():
    arrays = {"valid": tokens(400, seed=3), "test": tokens(400, seed=4)}
    meta = {"bytes": {"valid": 400, "test": 400}}
    model, _ = solved_model(target_residual)  # its maps are exactly 0
    size = sum(b.mlp.w_out.numel() for b in model.blocks)
    zero = lm_metrics(model, arrays, meta, 16, "cpu")
    assert (zero["params_solved"], zero["params_out_maps"]) == (0, size)
    for b in model.blocks:
        b.mlp.w_out.normal_()
    assert lm_metrics(model, arrays, meta, 16, "cpu")["params_solved"] == size
    random = lm_metrics(model, arrays, meta, 16, "cpu", solved=False)
    assert random["params_solved"] == 0
    assert random["params_fixed_random"] == zero["params_fixed_random"] + size


def test_random_out_control_solves_as_pil_then_attn_then_replaces_the_maps(
    tokens_dir,  # noqa: F811
    tmp_path,
):
    params = {"model": MODEL, "train": {**TRAIN, "epochs": 1, "max_steps": 30},
              "pil": {**PIL, "max_tokens": 2000}}  # fmt: skip
    runs = {v: run_variant(v, 0, params, str(tokens_dir), {}, str(tmp_path / v), "cpu")
            for v in ("pil_then_attn", "pil_random_out_attn")}  # fmt: skip
    solves = {v: pl.read_parquet(tmp_path / v / "solve.parquet") for v in runs}
    same = ["layer", "lambda_rel", "val_mse", "chosen", "heldout_r2", "target_ms"]
    assert solves["pil_then_attn"].select(same).equals(solves["pil_random_out_attn"].select(same))
    a, b = (solves[v]["w_out_fro"][0] for v in runs)
    assert a == pytest.approx(b, rel=1e-5)  # the solved map's norm
    assert solves["pil_random_out_attn"]["random_out"].all()
    solved, control = runs["pil_then_attn"], runs["pil_random_out_attn"]
    assert solved["params_solved"] == solved["params_out_maps"] > 0
    assert control["params_solved"] == 0
    assert (
        control["params_fixed_random"] == solved["params_fixed_random"] + solved["params_out_maps"]
    )
    assert control["params_trainable"] == solved["params_trainable"]
    assert control["test_loss"] != solved["test_loss"]
    for m in runs.values():  # both train attention, and say where their training loss went
        assert m["train_loss_first"] - m["train_loss_final"] > 0.1


def test_loss_fall_is_the_first_step_and_the_mean_of_the_last_tenth():
    losses = [10.0] + [5.0] * 18 + [3.0, 1.0]
    assert loss_fall(losses) == {"train_loss_first": 10.0, "train_loss_final": 2.0}
    assert loss_fall([4.0]) == {"train_loss_first": 4.0, "train_loss_final": 4.0}


def test_trained_rows_apply_the_margin_per_run():
    def row(variant, seed, metric, value):
        return {"experiment": "lm", "variant": variant, "seed": seed, "metric": metric,
                "value": value, "git_rev": "x"}  # fmt: skip

    runs = pl.DataFrame([
        row("baseline", 0, "train_loss_first", 10.0), row("baseline", 0, "train_loss_final", 5.0),
        row("ffn_only", 0, "train_loss_first", 10.0), row("ffn_only", 0, "train_loss_final", 9.95),
        row("attn_only", 0, "train_loss_first", 10.0),
        row("attn_only", 0, "train_loss_final", float("nan")),
        row("pil_pure", 0, "test_loss", 7.0),  # no gradient phase: no record
    ])  # fmt: skip
    out = trained_rows(runs, 0.1)
    assert out.columns == runs.columns
    flags = {r["variant"]: r["value"] for r in out.filter(pl.col("metric") == "trained").to_dicts()}
    assert flags == {"baseline": 1.0, "ffn_only": 0.0, "attn_only": 0.0}
    drop = out.filter((pl.col("metric") == "train_loss_drop") & (pl.col("variant") == "ffn_only"))
    assert drop["value"][0] == pytest.approx(0.05)


def test_unseen_targets_name_passages_whose_target_the_train_split_lacks():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = {w: i for i, w in enumerate(["[UNK]", "the", "cat", "sat", "dog", "ran"])}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = WhitespaceSplit()
    train = np.array([vocab[w] for w in ("the", "cat", "sat", "the", "cat")])
    passages = ["the dog sat", "the cat ran", "a dog saw the cat"]
    assert unseen_targets(tok, passages, train) == [False, True, False]


def test_claim_opponents_are_gradient_trained_variants_of_both_configs():
    spec = yaml.safe_load((REPO / "paper" / "claims" / "lm.yaml").read_text())
    opponents = spec["opponents"]
    arms = {a for c in spec["claims"] for a in c["arms"]}
    assert "pil_random_out_attn" in opponents and set(opponents) <= arms
    for v in opponents:
        assert VARIANTS[v].trains and (not VARIANTS[v].solves or VARIANTS[v].random_out), v
    for name in ("config.yaml", "smoke.yaml"):
        listed = yaml.safe_load((REPO / "config" / name).read_text())["lm"]["variants"]
        assert set(opponents) <= set(listed), name

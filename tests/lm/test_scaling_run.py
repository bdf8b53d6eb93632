"""A scaling point's job (``pillm.lm.scaling_run``): its rate search scores the held-out split
only, the kept run's test split is scored after the pick to the same values a run scores itself,
and the job leaves no checkpoint."""

from __future__ import annotations

import json

import pytest

from pillm.lm import run as lm_run
from pillm.lm.run import run_variant, score_test
from pillm.lm.scaling_run import run_point

from .test_train import MODEL, TRAIN, tokens_dir  # noqa: F401 (the fixture)

PARAMS = {"model": MODEL, "train": {**TRAIN, "epochs": 1, "max_steps": 12}}
TIMES = {"job_time_s", "startup_time_s", "grad_time_s", "train_time_s", "tokens_per_s",
         "warmup_time_s", "solve_time_s", "peak_memory_mb"}  # fmt: skip


def records(folder) -> list[dict]:
    return json.loads((folder / "metrics.json").read_text())


def test_a_test_split_scored_after_the_run_equals_the_runs_own(tokens_dir, tmp_path):  # noqa: F811
    own = tmp_path / "own"
    later = tmp_path / "later"
    run_variant("attn_only", 0, PARAMS, str(tokens_dir), {}, str(own), "cpu")
    m = run_variant("attn_only", 0, PARAMS, str(tokens_dir), {}, str(later), "cpu",
                    test_split=False)  # fmt: skip
    assert not any(k.startswith("test_") for k in m) and (later / "model.pt").exists()
    score_test(str(later), PARAMS, str(tokens_dir), "cpu")
    a, b = records(own), records(later)
    assert [r["metric"] for r in a] == [r["metric"] for r in b]  # the same rows, in order
    for ra, rb in zip(a, b, strict=True):
        if ra["metric"] not in TIMES:
            assert ra["value"] == rb["value"], ra["metric"]
    assert {k: v for k, v in a[0].items() if k not in ("metric", "value", "created")} == {
        k: v for k, v in b[0].items() if k not in ("metric", "value", "created")
    }
    with pytest.raises(ValueError, match="already has test metrics"):
        score_test(str(later), PARAMS, str(tokens_dir), "cpu")


def test_no_checkpoint_when_none_is_asked_for(tokens_dir, tmp_path):  # noqa: F811
    run_variant("baseline", 1, PARAMS, str(tokens_dir), {}, str(tmp_path / "r"), "cpu",
                checkpoint=False)  # fmt: skip
    assert not (tmp_path / "r" / "model.pt").exists()
    assert any(r["metric"] == "test_loss" for r in records(tmp_path / "r"))


def test_a_point_scores_one_test_split_per_kept_search_run_and_keeps_no_checkpoint(
    tokens_dir,  # noqa: F811
    tmp_path,
    monkeypatch,
):
    scored = []
    real = lm_run.split_scores

    def counted(model, arrays, meta, split, *args):
        scored.append(split)
        return real(model, arrays, meta, split, *args)

    monkeypatch.setattr(lm_run, "split_scores", counted)
    monkeypatch.setattr("pillm.lm.train.split_scores", counted)
    params = {
        "corpus": "toy",
        "point": "d32_L1_f100",
        "runs": {"baseline": PARAMS, "attn_only": PARAMS},
        "seeds": [0, 1],
        "lrs": [1e-3, 3e-3],
        "lr_extend": 0,
        "families": {"full": ["baseline"], "attn": ["attn_only"]},
    }
    out = tmp_path / "point"
    out.mkdir()
    run_point(params, [str(tokens_dir / "meta.json")], str(out / "runs.parquet"),
              str(out / "curves.parquet"), str(out / "lr.json"), "cpu")  # fmt: skip
    # 4 search runs (held-out only), the 2 kept runs' test splits, 2 more runs (both splits)
    assert scored.count("valid") == 4 + 2 and scored.count("test") == 2 + 2
    assert not list(out.rglob("model.pt")) and not (out / "lr_search").exists()
    for variant in ("baseline", "attn_only"):
        for seed in (0, 1):
            names = [r["metric"] for r in records(out / variant / f"seed{seed}")]
            assert names[:4] == ["test_loss", "test_ppl", "test_acc", "test_bpb"], variant
    record = json.loads((out / "lr.json").read_text())
    for family in record["families"].values():
        assert [sorted(r) for r in family["runs"]] == [["lr", "val_loss"]] * 2


@pytest.mark.gpu
def test_a_test_split_scored_after_the_run_equals_the_runs_own_on_cuda(
    tokens_dir,  # noqa: F811
    tmp_path,
):
    """The same on CUDA, compiled, graphed and fused as the pipeline runs it: the loaded
    checkpoint's compiled scores equal the trained model's."""
    train = {**PARAMS["train"], "compile": True, "cuda_graphs": True, "output_layer": "fused"}
    params = {**PARAMS, "train": train}
    run_variant("baseline", 0, params, str(tokens_dir), {}, str(tmp_path / "own"), "cuda")
    run_variant("baseline", 0, params, str(tokens_dir), {}, str(tmp_path / "later"), "cuda",
                test_split=False)  # fmt: skip
    score_test(str(tmp_path / "later"), params, str(tokens_dir), "cuda")
    a, b = ({r["metric"]: r["value"] for r in records(tmp_path / f)} for f in ("own", "later"))
    assert list(a) == list(b)
    assert {k: v for k, v in a.items() if k.startswith("test_")} == {
        k: v for k, v in b.items() if k.startswith("test_")
    }

import math

import pytest
import torch

from pillm.core.selection import edge_side, search_grid
from pillm.lm.config import PILConfig
from pillm.lm.pil import (
    frozen_copy,
    make_distill_target,
    solve_all_layers,
    step_grid,
    stream_to_ffn,
    target_functional_gradient,
    target_residual,
)
from pillm.models.checkpoint import load_checkpoint, save_checkpoint
from pillm.models.gpt import FEATURES, GPT, PILFFN, GPTConfig, attach_pil

CFG = PILConfig(
    (1e-10, 1e-6, 1e-2), kappa_max=1e10, batch_size=16, max_tokens=0, fgrad_steps=(1.0,)
)


def tiny(use_ffn=False) -> GPT:
    torch.manual_seed(0)
    return GPT(
        GPTConfig(vocab_size=50, context=16, n_layer=2, d_model=16, n_head=2, use_ffn=use_ffn)
    )


def tokens(n=3000, seed=1):
    return torch.randint(0, 50, (n,), generator=torch.Generator().manual_seed(seed))


def test_feature_widths_and_seeded_determinism():
    for n_proj, mult in FEATURES.values():
        ffn = PILFFN(16, n_proj, mult * 16, seed=3)
        assert ffn.features(torch.randn(5, 16)).shape == (5, n_proj * mult * 16 + 1)
    a, b = PILFFN(16, 2, 64, seed=3), PILFFN(16, 2, 64, seed=3)
    torch.testing.assert_close(a.w_in, b.w_in)
    assert not torch.equal(a.w_in, PILFFN(16, 2, 64, seed=4).w_in)
    assert sum(p.numel() for p in a.parameters()) == 0  # nothing a gradient step could touch


def test_distilling_an_identical_pil_teacher_recovers_it_exactly():
    teacher = tiny()
    attach_pil(teacher, "single", seed=0)
    for block in teacher.blocks:
        block.mlp.w_out.normal_(0, 0.3)
    teacher = frozen_copy(teacher)
    student = tiny()
    attach_pil(student, "single", seed=0)  # same random features as the teacher
    solves = solve_all_layers(
        student, make_distill_target(teacher), tokens(), tokens(seed=2), CFG, "cpu"
    )
    assert [f.solver for f in solves.fits] == ["cholesky", "cholesky"]
    assert solves.steps == [None, None]  # no step search: the solved maps as they are
    assert len(solves.selections()) == 2  # one λ per layer
    x = tokens(16, seed=3)[None]
    torch.testing.assert_close(student(x)[0], teacher(x)[0], atol=1e-4, rtol=1e-4)


def test_residual_target_leaves_the_attention_only_model_unchanged():
    base = tiny()
    model = frozen_copy(base)
    attach_pil(model, "bi", seed=0)
    solve_all_layers(model, target_residual, tokens(), tokens(seed=2), CFG, "cpu")
    x = tokens(16, seed=3)[None]
    torch.testing.assert_close(model(x)[0], base(x)[0])


def test_functional_gradient_in_chunks_equals_one_pass(monkeypatch):
    """A batch larger than the logits bound is cut into sequences; the target is unchanged."""
    import pillm.lm.pil as pil

    model = tiny(use_ffn=True)
    model.eval()
    idx, nxt = tokens(16 * 6, seed=4).view(6, 16), tokens(16 * 6, seed=5).view(6, 16)
    x, u = stream_to_ffn(model, idx, 1)
    whole = target_functional_gradient(model, 1, x, u, nxt)  # 6 x 16 x 50 logits: one chunk
    monkeypatch.setattr(pil, "FGRAD_CHUNK_LOGITS", 2 * 16 * 50)  # two sequences a chunk
    chunked = target_functional_gradient(model, 1, x, u, nxt)
    assert whole.shape == x.shape and whole.abs().amax() > 0
    torch.testing.assert_close(chunked, whole, atol=1e-7, rtol=1e-6)


@pytest.mark.gpu
def test_functional_gradient_reruns_bitwise_on_cuda():
    """The target's backward through attention is deterministic on CUDA (strict mode: flash
    attention's deterministic backward, not cuDNN's), so two builds fit the same FFN."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50304, context=128, n_layer=4, d_model=256, n_head=4, use_ffn=True)
    model = GPT(cfg).cuda().eval()
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 50257, (32, 128), generator=gen).cuda()
    nxt = torch.randint(0, 50257, (32, 128), generator=gen).cuda()
    with torch.no_grad():
        x, u = stream_to_ffn(model, idx, 1)
    runs = [target_functional_gradient(model, 1, x, u, nxt) for _ in range(3)]
    assert runs[0].abs().amax() > 0
    for again in runs[1:]:
        assert torch.equal(again, runs[0])
    assert not torch.are_deterministic_algorithms_enabled()  # restored after the target


def test_checkpoint_round_trip_rebuilds_a_solved_model(tmp_path):
    model = tiny()
    attach_pil(model, "bi", seed=5)
    for block in model.blocks:
        block.mlp.w_out.normal_()
    save_checkpoint(tmp_path / "m.pt", model, {"pil_features": "bi", "pil_seed": 5})
    loaded = load_checkpoint(tmp_path / "m.pt")
    x = tokens(16)[None]
    torch.testing.assert_close(loaded(x)[0], model.eval()(x)[0])


def quadratic_pick(optimum: float):
    """A pick on log scale with its minimum at ``optimum``; records every grid it saw."""
    seen = []

    def score(x):
        return math.log(x / optimum) ** 2 if x > 0 else 99.0

    def pick(grid):
        seen.append(list(grid))
        return None, min(grid, key=lambda x: (score(x), x)), {x: score(x) for x in grid}

    return pick, seen


def test_interior_pick_leaves_the_grid_alone():
    pick, seen = quadratic_pick(1e-3)
    _, g = search_grid([1e-5, 1e-4, 1e-3, 1e-2, 1e-1], 3, pick)
    assert (g.value, g.edge_hit, g.extensions, g.on_edge) == (1e-3, False, 0, False)
    assert seen == [[1e-5, 1e-4, 1e-3, 1e-2, 1e-1]]


def test_edge_pick_extends_by_the_grid_ratio_until_interior():
    pick, _ = quadratic_pick(1e1)
    _, g = search_grid([1e-3, 1e-2, 1e-1, 1.0], 3, pick)
    assert g.value == pytest.approx(10.0) and g.edge_hit and not g.on_edge
    assert g.extensions == 2 and g.grid[-1] == pytest.approx(100.0)  # 10 picked, 100 checks it
    pick, _ = quadratic_pick(1e-5)
    _, g = search_grid([1e-3, 1e-2, 1e-1, 1.0], 3, pick)
    assert g.value == pytest.approx(1e-5) and (g.extensions, g.on_edge) == (3, False)


def test_extension_is_bounded_and_the_final_edge_is_recorded():
    pick, seen = quadratic_pick(1e9)
    _, g = search_grid([1e-2, 1e-1, 1.0], 2, pick)
    assert len(seen) == 3 and g.extensions == 2 and g.edge_hit and g.on_edge
    assert g.value == pytest.approx(100.0)
    pick, seen = quadratic_pick(1e9)
    _, g = search_grid([1e-2, 1e-1, 1.0], 0, pick)  # grid_extend 0: record only
    assert len(seen) == 1 and (g.edge_hit, g.extensions, g.on_edge) == (True, 0, True)


def test_step_grid_has_zero_and_a_zero_pick_tries_smaller_steps():
    assert step_grid((0.1, 1.0)) == [0.0, 0.1, 1.0] == step_grid((1.0, 0.0, 0.1))
    assert edge_side([0.0, 0.1, 1.0], 0.1) == -1 and edge_side([0.0, 0.1, 1.0], 0.0) == -1

    def never_step(grid):  # 0 always wins: a resolved bound, not a grid edge
        return None, min(grid), {x: x for x in grid}

    _, g = search_grid(step_grid((0.1, 1.0)), 2, never_step)
    assert g.value == 0.0 and g.edge_hit and g.extensions == 2 and not g.on_edge
    assert g.grid[:3] == pytest.approx([0.0, 0.001, 0.01])


def test_a_flat_curve_is_not_an_edge():
    """A zero target scores every λ alike: the first λ wins the tie, but nothing is extended."""
    seen = []

    def flat(grid):
        seen.append(list(grid))
        return None, grid[0], dict.fromkeys(grid, 0.0)

    _, g = search_grid([1e-6, 1e-3, 1.0], 3, flat)
    assert (g.value, g.edge_hit, g.extensions, g.on_edge) == (1e-6, False, 0, False)
    assert len(seen) == 1
    assert edge_side([1e-6, 1e-3, 1.0], 1e-6, {1e-6: 0.0, 1e-3: 0.1, 1.0: 0.2}) == -1


@pytest.mark.bench
def test_solve_benchmark_runs(tmp_path):
    """benchmarks/pil_solve.py --quick end to end: it calls the pipeline's solve_all_layers, whose
    return type once changed under it unnoticed."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "pil_solve.py"
    out = tmp_path / "pil.json"
    subprocess.run([sys.executable, str(script), "--quick", "--out", str(out)], check=True,
                   capture_output=True, text=True)  # fmt: skip
    report = json.loads(out.read_text())
    assert report["fits"] and all(f["fit_seconds"] > 0 for f in report["fits"])

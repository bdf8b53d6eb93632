"""The fused output layer's tiles per width and device (pillm.lm.kernels.tiles.choose_tiles), on
CPU: the paper width keeps the default tiles, wider widths get tiles that fit the device's
shared memory or none (with the reason), and the trainer's step follows the choice."""

import pytest

from pillm.accel.kernels import block_width
from pillm.lm import train_step
from pillm.lm.kernels import fused_ce
from pillm.lm.kernels.tiles import (
    ACC_ENTRIES,
    LAUNCHES,
    MIN_ACC_ROWS,
    Blocks,
    choose_tiles,
    shared_bytes,
)
from pillm.lm.train_step import output_layer_at

KIB = 1024
H100, A100, SMALL = 227 * KIB, 163 * KIB, 99 * KIB  # a block's opt-in shared memory
VOCAB = 50257  # GPT-2's, as the pipeline's model has it


def tiles(b: Blocks, launch: str) -> tuple[int, int, int]:
    """(resident rows, streamed rows, stages) of one launch."""
    return tuple(getattr(b, f) for f in LAUNCHES[launch][:3])


def test_shared_memory_estimate_of_the_defaults():
    """bf16 at d = 256: 2 bytes x 256 x (128 + 3 x 64) rows of tiles, plus the scratch and (dw)
    the streamed rows' int64 targets; twice the tiles at float32; the padded width counts."""
    b = Blocks()
    assert shared_bytes(b, "dx", 256, 2) == shared_bytes(b, "lse", 256, 2) == 160 * KIB + KIB
    assert shared_bytes(b, "dw", 256, 2) == 160 * KIB + 3 * 64 * 8 + KIB
    assert shared_bytes(b, "dx", 200, 2) == shared_bytes(b, "dx", 256, 2)
    assert shared_bytes(b, "dx", 768, 2) == 640 * KIB + KIB  # one tile of the width 1024
    assert shared_bytes(b, "dx", 256, 4) == 320 * KIB + KIB


@pytest.mark.parametrize("limit", [H100, A100])
@pytest.mark.parametrize("d", [16, 64, 200, 256])
def test_the_paper_width_keeps_the_default_tiles(d, limit):
    """Up to d = 256 on an H100/H200 (and an A100) the choice is the defaults themselves: the
    tiles the paper configuration's runs have always used."""
    choice = choose_tiles(d, VOCAB, 2, limit, Blocks())
    assert choice.blocks == Blocks() and choice.reason == ""


@pytest.mark.parametrize("d", [384, 512])
def test_wider_widths_get_tiles_that_fit(d):
    """At d = 384 and 512 (padded to 512) the accumulator tiles halve to 64 rows and the
    streamed tiles to 32, which fits 227 KiB; the reason names every change."""
    choice = choose_tiles(d, VOCAB, 2, H100, Blocks())
    b = choice.blocks
    assert tiles(b, "lse") == (128, 32, 3)
    assert tiles(b, "dx") == (64, 32, 3)
    assert tiles(b, "dw") == (64, 32, 3)  # dw_n vocabulary rows resident, dw_m rows streamed
    assert (b.dw_n, b.dw_m) == (64, 32)
    assert (b.lse_warps, b.dx_warps, b.dw_warps, b.waves) == (8, 8, 8, 1)
    for launch in LAUNCHES:
        assert shared_bytes(b, launch, d, 2) <= H100
    assert choice.reason.startswith(f"width {d}: tiles") and "dx (128, 64, 3) -> (64, 32, 3)" in (
        choice.reason
    )


@pytest.mark.parametrize("d", [768, 1024, 4096])
def test_no_tiles_past_the_accumulator_limit(d):
    """Padded to 1024 or more, a 64-row float32 accumulator of the width exceeds the
    registers (fewer rows leave Hopper's warpgroup tiles): no tiles on any device."""
    for limit in (H100, A100, 10**9):
        choice = choose_tiles(d, VOCAB, 2, limit, Blocks())
        assert choice.blocks is None
        assert f"at width {d} (padded to {block_width(d)})" in choice.reason
        assert "accumulator" in choice.reason


def test_a_smaller_device_gets_smaller_tiles_or_none():
    """99 KiB of shared memory (a consumer GPU): the streamed tiles shrink, then the stages,
    until every launch fits; 16 KiB fits no tiles, and the reason says how much was needed."""
    for d in (256, 512):
        choice = choose_tiles(d, VOCAB, 2, SMALL, Blocks())
        assert choice.fused and choice.reason
        assert all(shared_bytes(choice.blocks, k, d, 2) <= SMALL for k in LAUNCHES)
    assert tiles(choose_tiles(256, VOCAB, 2, SMALL, Blocks()).blocks, "dx") == (128, 16, 3)
    assert tiles(choose_tiles(512, VOCAB, 2, SMALL, Blocks()).blocks, "dx") == (64, 16, 2)
    none = choose_tiles(256, VOCAB, 2, 16 * KIB, Blocks())
    assert none.blocks is None
    assert none.reason == ("at width 256 the lse launch needs 25 KiB of shared memory at its "
                           "smallest tiles, the device allows 16 KiB")  # fmt: skip


@pytest.mark.parametrize("limit", [H100, A100, SMALL, 48 * KIB])
def test_every_choice_fits_its_device(limit):
    """Over widths 1..1024: tiles that are chosen fit the limit, stay powers of two of at least
    16 rows, and keep each accumulator within ACC_ENTRIES."""
    for d in range(1, 1025, 7):
        choice = choose_tiles(d, VOCAB, 2, limit, Blocks())
        if choice.blocks is None:
            assert block_width(d) * MIN_ACC_ROWS > ACC_ENTRIES or "shared memory" in choice.reason
            continue
        for launch, (resident, streamed, _, accumulates, _) in LAUNCHES.items():
            assert shared_bytes(choice.blocks, launch, d, 2) <= limit
            for rows in (getattr(choice.blocks, resident), getattr(choice.blocks, streamed)):
                assert rows >= 16 and rows & (rows - 1) == 0
            if accumulates:
                assert getattr(choice.blocks, resident) * block_width(d) <= ACC_ENTRIES


def test_offsets_interpreter_and_float32():
    """Vocabulary x width past 2^31 has no tiles; without a limit (the Triton interpreter) the
    tiles are the ones given, float32 operands capped at 64 rows and then fitted."""
    big = choose_tiles(4096, 2**20, 2, H100, Blocks())
    assert big.blocks is None and "32-bit offsets" in big.reason
    small = Blocks.parse("lse_m=16,lse_n=32,dx_m=16,dx_n=32,dw_m=16,dw_n=32")
    assert choose_tiles(384, 300, 2, None, small).blocks == small
    assert choose_tiles(4096, 300, 2, None, Blocks()).blocks == Blocks()
    f32 = choose_tiles(256, VOCAB, 4, None, Blocks()).blocks
    assert (f32.lse_m, f32.dx_m, f32.dw_n) == (64, 64, 64)
    fitted = choose_tiles(256, VOCAB, 4, H100, Blocks()).blocks
    assert all(shared_bytes(fitted, k, 256, 4) <= H100 for k in LAUNCHES)


def test_the_step_computes_the_logits_densely_where_no_tiles_fit(monkeypatch, capsys):
    """``output_layer_at``, as a CUDA step with Triton sees it: fused stays fused where tiles
    fit (d = 512) and becomes dense where none do (d = 768), said once on stderr; other
    output layers and a CPU step are left as they are."""
    train_step._say_dense.cache_clear()  # "once" is per process
    monkeypatch.setattr(train_step, "uses_kernels", lambda device: True)
    monkeypatch.setattr(fused_ce, "shared_limit", lambda device: H100)
    assert output_layer_at("fused", 512, VOCAB, "cuda") == "fused"
    assert output_layer_at("fused", 768, VOCAB, "cuda") == "dense"
    assert output_layer_at("fused", 768, VOCAB, "cuda:0") == "dense"
    assert output_layer_at("chunked", 768, VOCAB, "cuda") == "chunked"
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("train.output_layer: fused: at width 768")
    assert err[0].endswith("the logits are computed densely (train.output_layer: dense)")
    monkeypatch.undo()
    assert output_layer_at("fused", 768, VOCAB, "cpu") == "fused"  # the op's torch path

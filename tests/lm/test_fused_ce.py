"""The fused output layer (pillm.lm.kernels.fused_ce) against F.cross_entropy(h @ w.T): values
and the gradients of h and w, in float32 and bf16.

Three paths: the op's torch path (CPU without the interpreter; always runs), the Triton kernels
under the Triton interpreter (CPU tensors, a subprocess with TRITON_INTERPRET=1; skipped with a
reason where Triton is not installed) and the compiled kernels on a GPU (skipped with a reason
without CUDA). The train step with ``output_layer: fused`` follows the eager step on the CPU,
compiled or not.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

try:
    import triton
except ImportError:  # the tests that need it say so
    triton = None

from pillm.accel.kernels import block_width, interpreting, triton_available, uses_kernels
from pillm.core.config import ConfigError
from pillm.lm.config import TrainConfig
from pillm.lm.kernels import fused_ce
from pillm.lm.kernels.fused_ce import Blocks, fused_linear_cross_entropy
from pillm.lm.kernels.tiles import choose_tiles, shared_bytes
from pillm.lm.train_step import StepOptions, TrainStep, output_layer_at
from pillm.models.gpt import GPT, GPTConfig
from tests.triton_interpreter import run_interpreter_check

ROOT = Path(__file__).resolve().parents[2]
# small tiles so a few rows and columns give several blocks, slices to merge and masked edges
INTERPRETER_BLOCKS = "lse_m=16,lse_n=32,dx_m=16,dx_n=32,dw_m=16,dw_n=32"
H100_SHARED = 227 * 1024  # shared memory a block may use on an H100 or H200
# largest gradient error over the largest gradient entry (entries are ~1/N: a fixed atol would
# pass anything at the paper's N)
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2}


def _case(n: int, v: int, d: int, seed: int, device: str = "cpu", growing: bool = False,
          loose: bool = False):  # fmt: skip
    """Rows, output layer, targets; ``growing``: logits grow with the class id, so a row's
    largest logit lies in its last tiles. ``loose``: one class row far longer than the others
    and orthogonal to every h, so each row's logit bound |h| max|w_v| lies far above its
    logits (softmax_pass redoes the block from the rows' largest logits) while the logits stay
    as usual."""
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, d, generator=g)
    w = 0.3 * torch.randn(v, d, generator=g)
    if growing:
        w *= torch.linspace(0.1, 6.0, v)[:, None]
    if loose:
        h[:, -1] = 0.0
        w[1] = 0.0
        w[1, -1] = 500.0
    y = torch.randint(0, v, (n,), generator=g)
    y[0], y[-1] = 0, v - 1  # the first and the last class (a masked tile's edge)
    return h.to(device), w.to(device), y.to(device)


def _check(h, w, y, dtype, upstream: float = 2.5, logits: str = "dense") -> None:
    """Loss and both gradients of the fused op vs a reference with the operands rounded to the
    matmul dtype. ``logits="dense"``: the dense head, whose bf16 logits are rounded before the
    softmax (the torch path computes the same). ``"exact"``: float64 logits, what the kernels'
    float32 logits approximate; at d = 512 the dense head's rounding alone moves dL/dh by about
    3 % of its largest entry (logits grow as sqrt(d)), so the kernels are judged against this."""
    h1, w1 = h.clone().requires_grad_(), w.clone().requires_grad_()
    loss = fused_linear_cross_entropy(h1, w1, y, compute_dtype=dtype)
    (upstream * loss).backward()
    h2, w2 = h.clone().requires_grad_(), w.clone().requires_grad_()
    if logits == "exact":
        ref = F.cross_entropy(h2.to(dtype).double() @ w2.to(dtype).double().T, y).float()
    else:
        ref = F.cross_entropy((h2.to(dtype) @ w2.to(dtype).T).float(), y)
    (upstream * ref).backward()
    assert loss.dtype == torch.float32 and h1.grad.dtype == h.dtype and w1.grad.dtype == w.dtype
    # the dense head rounds bf16 logits before the softmax; the kernels keep them in float32
    rtol = 1e-6 if dtype == torch.float32 else 1e-3
    assert loss.item() == pytest.approx(ref.item(), rel=rtol)
    with torch.no_grad():  # the loss-only kernel
        assert fused_linear_cross_entropy(h, w, y, dtype).item() == pytest.approx(loss.item(),
                                                                                  rel=1e-6)  # fmt: skip
    for ours, ref in ((h1.grad, h2.grad), (w1.grad, w2.grad)):
        err = ((ours - ref).abs().max() / ref.abs().max()).item()
        assert err <= TOL[dtype], (dtype, tuple(ref.shape), err)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_torch_path_matches_cross_entropy(dtype):
    assert not uses_kernels(torch.device("cpu")) or interpreting()
    _check(*_case(70, 300, 40, seed=0), dtype)


def test_batched_shapes_frozen_head_and_no_grad():
    h, w, y = _case(15, 50, 8, seed=1)
    hb = h.view(3, 5, 8).requires_grad_()  # (B, T, d) as the model gives it
    loss = fused_linear_cross_entropy(hb, w, y.view(3, 5))  # w frozen: only dL/dh
    (grad,) = torch.autograd.grad(loss, hb)
    ref = F.cross_entropy(h @ w.T, y)
    torch.testing.assert_close(loss, ref, rtol=1e-6, atol=1e-6)
    hg = h.clone().requires_grad_()
    (ref_grad,) = torch.autograd.grad(F.cross_entropy(hg @ w.T, y), hg)
    torch.testing.assert_close(grad.view(15, 8), ref_grad, rtol=1e-5, atol=1e-7)
    with torch.no_grad():
        assert fused_linear_cross_entropy(h, w, y).item() == pytest.approx(ref.item(), rel=1e-6)


def test_bad_input_is_named():
    h, w, y = _case(4, 5, 3, seed=2)
    with pytest.raises(ValueError, match="targets"):
        fused_linear_cross_entropy(h, w, y[:3])
    with pytest.raises(ValueError, match="output layer"):
        fused_linear_cross_entropy(h, w[:, :2], y)
    with pytest.raises(ValueError, match="dx_m"):
        Blocks.parse("dx_m=big")
    assert Blocks.parse("dx_m=32,dx_warps=4") == Blocks(dx_m=32, dx_warps=4)


def _interpreter_check() -> None:
    """Run by the subprocess below (TRITON_INTERPRET=1): the Triton kernels on CPU tensors."""
    assert uses_kernels(torch.device("cpu")), "the interpreter did not engage"
    # ragged tiles and a width not a power of 2; rows finished in the kernel (several row
    # blocks: one slice) and slices of the vocabulary merged after it (one row block); whole
    # tiles only (the unmasked loads)
    cases = ((45, 300, 40), (70, 60, 24), (64, 128, 32), (13, 300, 40), (16, 128, 32))
    b = fused_ce.BLOCKS
    one_slice = {fused_ce._slices(-(-n // b.dx_m), v, b.dx_n, 2, b.waves)[0] == 1
                 for n, v, _ in cases}  # fmt: skip
    assert one_slice == {True, False}, "both the finishing and the merging path are covered"
    for n, v, d in cases:
        for dtype in (torch.float32, torch.bfloat16):
            _check(*_case(n, v, d, seed=n), dtype)
    _check(*_case(48, 256, 16, seed=3, growing=True), torch.float32)
    # Loose bounds (logits far below |h| max|w_v|): the blocks are redone from the rows' largest
    # logits, finishing (45 rows) and merging (13 rows) alike.
    loose = [_case(45, 300, 40, seed=5, loose=True), _case(13, 300, 40, seed=6, loose=True)]
    for case in loose:
        for dtype in (torch.float32, torch.bfloat16):
            _check(*case, dtype)
    # The tiles chosen past the defaults' width (d = 384 on an H100: 64-row gradient tiles,
    # 32-row streamed ones), on a width the tiles pad (the interpreter takes them as given)
    fused_ce.BLOCKS = choose_tiles(384, 300, 2, H100_SHARED, Blocks()).blocks
    for dtype in (torch.float32, torch.bfloat16):
        _check(*_case(70, 300, 384, seed=7), dtype)
    fused_ce.BLOCKS = Blocks.parse(INTERPRETER_BLOCKS)
    # Without that fallback the bounded pass alone is exact on the usual rows but not on these:
    # so the cases above ran both paths.
    from pillm.lm.kernels import fused_ce_kernels

    fused_ce_kernels.FLOOR = 0.0
    for n, v, d in cases[:2]:
        _check(*_case(n, v, d, seed=n), torch.float32)
    for h, w, y in loose:
        loss = fused_linear_cross_entropy(h, w, y)
        assert not torch.isclose(loss, F.cross_entropy(h @ w.T, y), rtol=1e-3), loss
    print("interpreter ok")


def test_triton_kernels_match_cross_entropy_in_the_interpreter():
    run_interpreter_check("tests.lm.test_fused_ce", PILLM_FUSED_CE_BLOCKS=INTERPRETER_BLOCKS)


def _compile_for_hopper(kernel, dtype: str, constexprs: dict, warps: int, stages: int):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(kernel.arg_names)
    ptr = {"x_ptr": f"*{dtype}", "w_ptr": f"*{dtype}", "t_ptr": "*i64"}
    sig = {n: "constexpr" if n in constexprs else ptr.get(n, "*fp32") if n.endswith("_ptr")
           else "fp32" if n in ("scale", "log_n") else "i32" for n in names}  # fmt: skip
    # as at run time: pointers and sizes divisible by 16 (Triton specializes them so, and then
    # pipelines the tiles deeper: 128 x 128 no-gradient tiles took 128 KiB unspecialized but
    # 256 KiB specialized, over the H100's limit, and failed only on the GPU)
    divisible = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
                 if n not in constexprs and sig[n] != "fp32"}  # fmt: skip
    src = ASTSource(kernel, sig, {(names.index(k),): v for k, v in constexprs.items()}, divisible)
    options = {"num_warps": warps, "num_stages": stages}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def _builds(b: Blocks, d: int, masked: bool):
    """(launch, kernel, constexprs, warps, stages) of every kernel build at width ``d``, bf16."""
    from pillm.lm.kernels import fused_ce_kernels

    base = {"D": d, "BD": block_width(d), "MASK_N": masked, "MASK_V": masked,
            "MASK_D": d != block_width(d), "PRECISION": None, "UPCAST": False}  # fmt: skip
    return [
        *(("dx", fused_ce_kernels.softmax_pass,
           {**base, "BM": b.dx_m, "BN": b.dx_n, "GRAD": True, "FINISH": f}, b.dx_warps,
           b.dx_stages) for f in (False, True)),
        ("lse", fused_ce_kernels.softmax_pass,
         {**base, "BM": b.lse_m, "BN": b.lse_n, "GRAD": False, "FINISH": True}, b.lse_warps,
         b.lse_stages),
        ("dw", fused_ce_kernels.grad_w_kernel, {**base, "BM": b.dw_m, "BN": b.dw_n}, b.dw_warps,
         b.dw_stages),
    ]  # fmt: skip


def test_kernels_compile_for_an_h100(tmp_path):
    """Ahead of time, no GPU needed: the default bf16 tiles of both kernels (and their masked
    forms) build for sm_90 with Hopper's tensor-core instructions, within its 227 KiB of shared
    memory per block and the choice's estimate (``tiles.shared_bytes``), and spill no registers
    (the first version of the rows' finish in softmax_pass spilled 664 bytes a thread).
    (float32 operands, the tests' exact mode, build for minutes: not here.)"""
    if not triton_available():
        pytest.skip("Triton is not installed: the kernels cannot be compiled here")
    choice = choose_tiles(256, 50257, 2, H100_SHARED, fused_ce.BLOCKS)
    assert choice.blocks == fused_ce.BLOCKS.for_itemsize(2) and choice.reason == ""
    for masked, d in ((False, 256), (True, 200)):
        for launch, kernel, constexprs, warps, stages in _builds(choice.blocks, d, masked):
            compiled = _compile_for_hopper(kernel, "bf16", constexprs, warps, stages)
            shared = compiled.metadata.shared
            assert 0 < shared <= shared_bytes(choice.blocks, launch, d, 2) <= H100_SHARED
            assert "wgmma" in compiled.asm["ptx"]  # Hopper's tensor cores
            assert _stack_bytes(compiled.asm["cubin"], tmp_path) == 0, (kernel, constexprs)


def test_wider_tiles_compile_for_an_h100(tmp_path):
    """The tiles ``choose_tiles`` picks at d = 384 (padded to 512; every mask on, as at the
    GPT-2 vocabulary) build for sm_90 within the shared memory it estimated, where the
    defaults would need 320 KiB. The dx launch (64 rows, a 64 x 512 float32 accumulator over
    two warpgroups) spills a few dozen bytes a thread; the others none."""
    if not triton_available():
        pytest.skip("Triton is not installed: the kernels cannot be compiled here")
    assert shared_bytes(fused_ce.BLOCKS, "dx", 384, 2) > H100_SHARED
    choice = choose_tiles(384, 50257, 2, H100_SHARED, fused_ce.BLOCKS)
    assert choice.fused, choice.reason
    for launch, kernel, constexprs, warps, stages in _builds(choice.blocks, 384, True):
        compiled = _compile_for_hopper(kernel, "bf16", constexprs, warps, stages)
        assert 0 < compiled.metadata.shared <= shared_bytes(choice.blocks, launch, 384, 2)
        assert "wgmma" in compiled.asm["ptx"]
        spill = _stack_bytes(compiled.asm["cubin"], tmp_path)
        assert spill <= (128 if launch == "dx" else 0), (launch, constexprs, spill)


def _stack_bytes(cubin: bytes, tmp_path) -> int:
    """Local memory a kernel takes per thread: registers spilled (Triton's cuobjdump reads it)."""
    import triton

    tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    (tmp_path / "k.cubin").write_bytes(cubin)
    usage = subprocess.run([str(tool), "-res-usage", str(tmp_path / "k.cubin")],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    return int(re.search(r"STACK:(\d+)", usage)[1])


@pytest.mark.gpu
@pytest.mark.parametrize("d", [512, 768])
def test_fused_output_layer_on_gpu_past_the_paper_width(d):
    """bf16 at d = 512 and 768 against the dense head's loss and gradients: at 512 the kernels
    run with the tiles ``choose_tiles`` picks for this GPU; at 768 (padded to 1024) no tiles
    hold the accumulator, so the op computes with torch operations and the trainer's step
    computes the logits densely."""
    choice = fused_ce.kernel_tiles(d, 50304, torch.bfloat16, torch.device("cuda"))
    assert choice.fused == (d == 512), choice.reason
    assert output_layer_at("fused", d, 50304, "cuda") == ("fused" if d == 512 else "dense")
    for n in (4096, 1000):
        _check(*_case(n, 50304, d, seed=n + d, device="cuda"), torch.bfloat16,
               logits="exact" if d == 512 else "dense")  # fmt: skip


@pytest.mark.gpu
def test_triton_kernels_on_gpu_at_the_paper_width():
    """bf16 (the trainer's dtype), d = 256, vocabulary 50,304, a batch of 32 x 128 tokens and a
    ragged one; float32 exactness is the interpreter test's."""
    assert uses_kernels(torch.device("cuda"))
    for n in (4096, 1000):
        _check(*_case(n, 50304, 256, seed=n, device="cuda"), torch.bfloat16)
    _check(*_case(4096, 50304, 256, seed=1, device="cuda", loose=True), torch.bfloat16)


# ----------------------------------------------------------------------------- the train step
from .test_trainer_speed import MODEL as _MODEL  # noqa: E402
from .test_trainer_speed import TRAIN  # noqa: E402

MODEL = {**_MODEL, "dropout": 0.0}


def _steps(options: StepOptions, n: int = 4):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, **MODEL))
    step = TrainStep(model, TrainConfig.from_dict(TRAIN), "cpu", options)
    chunk = torch.randint(0, 64, (8, 17), generator=torch.Generator().manual_seed(1))
    losses = [step(chunk, 1e-3 * (i + 1)).item() for i in range(n)]
    return losses, step.path(), model.state_dict()


@pytest.mark.parametrize("compile", [False, True])
def test_fused_step_follows_the_eager_step(compile):
    """The op in the step (tied head: the gradient reaches the embedding too), traced by Dynamo
    as one opaque custom op when compiled."""
    eager, _, state0 = _steps(StepOptions())
    opts = StepOptions(compile=compile, output_layer="fused", backend="aot_eager")
    fused, path, state1 = _steps(opts)
    assert path == {"compiled": float(compile), "cuda_graphs": 0.0}  # no fallback happened
    assert eager[-1] < eager[0]
    np.testing.assert_allclose(fused, eager, rtol=1e-5)
    for k, v in state0.items():
        torch.testing.assert_close(state1[k], v, rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
def test_fused_step_compiled_and_graphed_on_gpu():
    """The op inside the compiled step, captured in a CUDA graph and replayed, follows the
    eager bf16 step (the trainer's own path on a GPU) within bf16 noise."""

    def run(options: StepOptions) -> tuple[list[float], dict]:
        torch.manual_seed(0)
        model = GPT(GPTConfig(vocab_size=1000, **{**MODEL, "d_model": 64})).cuda()
        step = TrainStep(model, TrainConfig.from_dict(TRAIN), "cuda", options)
        chunk = torch.randint(0, 1000, (8, 17), generator=torch.Generator().manual_seed(1))
        losses = [step(chunk.cuda(), 1e-2) for _ in range(12)]  # one batch, learnt fast
        return torch.stack(losses).float().cpu().tolist(), step.path()

    eager, _ = run(StepOptions())
    fused, path = run(StepOptions(compile=True, cuda_graphs=True, output_layer="fused"))
    assert path == {"compiled": 1.0, "cuda_graphs": 1.0}
    assert eager[0] - eager[-1] > 1.0  # the trajectory moves far more than the tolerance
    np.testing.assert_allclose(fused, eager, rtol=1e-2, atol=5e-2)  # bf16 differences


def test_output_layer_keys_are_checked():
    with pytest.raises(ConfigError, match="train.output_layer"):
        TrainConfig.from_dict({**TRAIN, "output_layer": "sparse"}, "train")
    with pytest.raises(ConfigError, match="train.ce_chunk"):
        TrainConfig.from_dict({**TRAIN, "output_layer": "chunked"}, "train")  # no rows
    with pytest.raises(ConfigError, match="train.ce_chunk"):
        TrainConfig.from_dict({**TRAIN, "ce_chunk": 512}, "train")  # rows, but dense
    cfg = TrainConfig.from_dict({**TRAIN, "output_layer": "fused"}, "train")
    assert StepOptions.from_config(cfg, "cuda:0").output_layer == "fused"
    assert StepOptions.from_config(cfg, "cpu") == StepOptions()  # CPU: the eager step


@pytest.mark.bench
def test_throughput_benchmark_takes_batches_and_output_layers(tmp_path):
    """trainer_throughput.py: every trainer at each --batch; --ours output_layer=...; a bad
    combination stops before training, naming the keys."""
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "benchmarks/trainer_throughput.py", "--tiny", "--device", "cpu",
           "--batch", "4", "--batch", "8", "--steps", "6", "--no-reference",
           "--ours", "output_layer=fused", "--ours", "output_layer=chunked,ce_chunk=16",
           "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    runs = json.loads(out.read_text())["runs"]
    assert [(r["batch_size"], "fused" in r["trainer"]) for r in runs] == [
        (4, True),
        (4, False),
        (8, True),
        (8, False),
    ]
    assert "batch 8 (6 steps)" in proc.stdout
    bad = [*cmd[:-2], "--ours", "output_layer=chunked"]
    proc = subprocess.run(bad, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "train.ce_chunk" in proc.stderr


@pytest.mark.bench
def test_head_bound_gap_reports_each_run(tmp_path):
    """head_bound_gap.py: per run folder the gap between the rows' logit bound and their largest
    logit (never negative: the bound is Cauchy-Schwarz's) and the share of blocks that would
    fall back; a folder without a model says so."""
    if not triton_available():
        pytest.skip("Triton is not installed: the script reads the kernels' margins")
    from pillm.models.checkpoint import save_checkpoint

    model = GPT(GPTConfig(vocab_size=300, n_layer=1, d_model=32, n_head=2, context=16))
    save_checkpoint(tmp_path / "run" / "model.pt", model, {})
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    np.save(tokens / "valid.npy", np.random.default_rng(0).integers(0, 300, 16 * 20, np.uint16))
    cmd = [sys.executable, "benchmarks/head_bound_gap.py", "--tokens", str(tokens), "--rows",
           "256", "--device", "cpu", str(tmp_path / "run"), str(tmp_path / "none")]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {line.split(" | ")[0]: line.split(" | ")[1:] for line in proc.stdout.splitlines()}
    assert rows[str(tmp_path / "none")] == ["no model.pt"]
    n, p0, _p50, _p99, top, falling = rows[str(tmp_path / "run")]
    assert int(n) == 256 and 0.0 <= float(p0) <= float(top) < 98.0 and falling == "0.0%"


@pytest.mark.bench
def test_head_bound_gap_follows_training(tmp_path):
    """head_bound_gap.py --train-steps: the paper config's training (a small model here) with the
    gaps of every k-th step's training rows, read from the final hidden states."""
    if not triton_available():
        pytest.skip("Triton is not installed: the script reads the kernels' margins")
    import yaml

    cfg = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    cfg["model"] |= {"n_layer": 1, "d_model": 32, "n_head": 2, "context": 16}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    rng = np.random.default_rng(0)
    for split in ("train", "valid", "test"):
        np.save(tokens / f"{split}.npy", rng.integers(0, 300, 16 * 40, np.uint16))
    meta = {"vocab_size": 300, "bytes": {s: 4 * 16 * 40 for s in ("train", "valid", "test")}}
    (tokens / "meta.json").write_text(json.dumps(meta))
    cmd = [sys.executable, "benchmarks/head_bound_gap.py", "--tokens", str(tokens), "--device",
           "cpu", "--config", str(tmp_path / "config.yaml"), "--train-steps", "5", "--batch", "4",
           "--every", "2"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if re.match(r"step \d", line)]
    assert [r[0] for r in rows] == ["step 1", "step 3", "step 5"]
    for _, n, p0, _p50, _p99, top, falling in rows:
        assert int(n) == 4 * 16 and 0.0 <= float(p0) <= float(top) < 98.0 and falling == "0.0%"
    assert "over the 3 steps seen: 0.0%" in proc.stdout

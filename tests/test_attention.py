"""Causal self-attention (pillm.models.attention) against PyTorch's SDPA: values and the gradient
of the qkv projection, without and with dropout.

Three paths, as for the fused output layer: the SDPA path (CPU without the interpreter: the
call as before, bit for bit), the Triton kernels under the interpreter (CPU tensors, a
subprocess with TRITON_INTERPRET=1) and the compiled kernels on a GPU (skipped without CUDA).
Dropout's coins come from another generator than PyTorch's, so with dropout the kernels are
checked against the same formula with their own coins, read off by a value matrix that is the
identity (then the output is the dropped-out probability matrix itself).
"""

import re
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

try:
    import triton
except ImportError:  # the tests that need it say so
    triton = None

from pillm.core.kernels import triton_available, uses_kernels
from pillm.models.attention import causal_attention, kernels_apply, sdpa_attention
from pillm.models.gpt import GPT, GPTConfig
from tests.triton_interpreter import run_interpreter_check


def _qkv(b: int, t: int, h: int, hd: int, seed: int, device: str = "cpu") -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, t, 3 * h * hd, generator=g).to(device)


def _math(qkv: torch.Tensor, n_head: int, keep: torch.Tensor | None, p: float) -> torch.Tensor:
    """softmax(q kᵀ / sqrt(hd), causal) v with the entries ``keep`` kept (scaled by 1/(1-p))."""
    b, t, c3 = qkv.shape
    c = c3 // 3
    q, k, v = (z.view(b, t, n_head, -1).transpose(1, 2) for z in qkv.split(c, 2))
    s = q @ k.transpose(-1, -2) / (c // n_head) ** 0.5
    s = s.masked_fill(torch.ones(t, t, dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    probs = torch.softmax(s, -1)
    if keep is not None:
        probs = probs * keep / (1 - p)
    return (probs @ v).transpose(1, 2).reshape(b, t, c)


def _check(qkv: torch.Tensor, n_head: int, dtype: torch.dtype, tol: float) -> None:
    """Values and d(qkv) of the kernels against the float64 formula."""
    x = qkv.detach().to(dtype).requires_grad_()
    y = causal_attention(x, n_head, 0.0)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(1)).to(y.device)
    (y.float() * g).sum().backward()
    ref_in = x.detach().double().requires_grad_()
    ref = _math(ref_in, n_head, None, 0.0)
    (ref * g.double()).sum().backward()
    for ours, theirs in ((y, ref), (x.grad, ref_in.grad)):
        err = (ours.double() - theirs).abs().max().item()
        assert err <= tol * theirs.abs().max().item(), (tuple(qkv.shape), dtype, err)


def _coins(b: int, t: int, h: int, hd: int, p: float, seed: int, device: str = "cpu"):
    """(qkv whose values are the identity, the kernels' output, the entries they kept)."""
    g = torch.Generator().manual_seed(seed)
    qk = torch.randn(b, t, 2 * h * hd, generator=g)
    eye = torch.eye(t, hd)[None, :, None, :].expand(b, t, h, hd).reshape(b, t, h * hd)
    qkv = torch.cat([qk, eye], 2).to(device).requires_grad_()
    torch.manual_seed(seed)
    y = causal_attention(qkv, h, p)
    probs = y.detach().view(b, t, h, hd).transpose(1, 2)[..., :t]  # (b, h, t, t): dropped P
    return qkv, y, (probs != 0).double()


def _check_dropout(b: int, t: int, h: int, hd: int, p: float, tol: float, device: str = "cpu"):
    """The kernels' dropout is the formula with their own coins, in values and gradients; about
    1 - p of the entries are kept; another seed draws other coins."""
    qkv, y, keep = _coins(b, t, h, hd, p, seed=5, device=device)
    causal = torch.ones(t, t, dtype=torch.bool, device=device).tril()
    kept = keep[..., causal].mean().item()
    n = keep[..., causal].numel()
    assert abs(kept - (1 - p)) < 4 * ((p * (1 - p)) / n) ** 0.5 + 1e-9, (kept, n)
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(2)).to(device)
    (y.float() * g).sum().backward()
    ref_in = qkv.detach().double().requires_grad_()
    ref = _math(ref_in, h, keep, p)
    (ref * g.double()).sum().backward()
    for ours, theirs in ((y, ref), (qkv.grad, ref_in.grad)):
        err = (ours.double() - theirs).abs().max().item()
        assert err <= tol * theirs.abs().max().item(), (b, t, err)
    _, _, other = _coins(b, t, h, hd, p, seed=6, device=device)
    assert not torch.equal(other, keep)


def test_cpu_path_is_sdpa_bit_for_bit():
    """Without the kernels the call is the nanoGPT form as it was (CPU results do not change)."""
    qkv = _qkv(2, 20, 2, 8, seed=0)
    assert not kernels_apply(qkv, 2) or uses_kernels(qkv.device)
    b, t, c = 2, 20, 16
    q, k, v = qkv.split(c, dim=2)
    q, k, v = (z.view(b, t, 2, 8).transpose(1, 2) for z in (q, k, v))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    want = want.transpose(1, 2).contiguous().view(b, t, c)
    assert torch.equal(sdpa_attention(qkv, 2, 0.0), want)
    if not uses_kernels(qkv.device):
        assert torch.equal(causal_attention(qkv, 2, 0.0), want)


def test_which_calls_the_kernels_take():
    """Short contexts and power-of-two head widths on a kernel device; all else SDPA."""
    if not uses_kernels(torch.device("cpu")):
        assert not kernels_apply(torch.zeros(1, 8, 3 * 64), 1)
    cuda_like = torch.zeros(1, 8, 3 * 64, device="meta")
    assert not kernels_apply(cuda_like, 1)  # a meta tensor: no kernel device
    with pytest.raises(ValueError, match="dropout"):
        causal_attention(torch.zeros(1, 4, 12), 1, 1.0)


def _interpreter_check() -> None:
    """Run by the subprocess below (TRITON_INTERPRET=1): the kernels on CPU tensors."""
    assert uses_kernels(torch.device("cpu")), "the interpreter did not engage"
    # the full tile, ragged contexts (padded queries and keys), the smallest tile, widths 16-64
    for b, t, h, hd in ((2, 128, 2, 32), (3, 50, 2, 16), (1, 64, 1, 64), (2, 7, 2, 16)):
        qkv = _qkv(b, t, h, hd, seed=t)
        assert kernels_apply(qkv, h)
        _check(qkv, h, torch.float32, 2e-6)
        _check(qkv, h, torch.bfloat16, 3e-2)
    _check_dropout(2, 16, 2, 16, 0.3, 2e-6)
    _check_dropout(1, 100, 1, 128, 0.1, 2e-6)  # a ragged tile of 128: all four key blocks
    print("interpreter ok")


def test_kernels_match_sdpa_in_the_interpreter():
    run_interpreter_check("tests.test_attention")


def _compile_for_hopper(kernel, constexprs: dict, warps: int):
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = list(kernel.arg_names)
    ptr = {"lse_ptr": "*fp32", "seed_ptr": "*i64"}
    sig = {n: "constexpr" if n in constexprs else ptr.get(n, "*bf16") if n.endswith("_ptr")
           else "fp32" if n in ("scale", "p_drop") else "i32" for n in names}  # fmt: skip
    # pointers divisible by 16, as at run time (Triton specializes them so)
    divisible = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(names)
                 if n.endswith("_ptr")}  # fmt: skip
    src = ASTSource(kernel, sig, {(names.index(k),): v for k, v in constexprs.items()}, divisible)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": warps, "num_stages": 1})  # fmt: skip


def test_kernels_compile_for_an_h100(tmp_path):
    """Ahead of time, no GPU needed: both kernels at the paper's shape (T = 128, heads of 64,
    8 warps) and the smallest tile (64, 4 warps), with and without dropout, build for sm_90
    with Hopper's tensor-core instructions and spill no registers (4 warps at T = 128 did)."""
    if not triton_available():
        pytest.skip("Triton is not installed: the kernels cannot be compiled here")
    from pillm.models import attention_kernels

    for bt, hd, warps in ((128, 64, 8), (64, 32, 4)):
        for kernel in (attention_kernels.attention_forward, attention_kernels.attention_backward):
            for dropout in (False, True):
                constexprs = {"C": 4 * hd, "HD": hd, "BT": bt, "DROPOUT": dropout,
                              "PRECISION": None, "UPCAST": False}  # fmt: skip
                compiled = _compile_for_hopper(kernel, constexprs, warps)
                assert 0 < compiled.metadata.shared <= 227 * 1024
                assert "wgmma" in compiled.asm["ptx"]
                assert _stack_bytes(compiled.asm["cubin"], tmp_path) == 0, (kernel, constexprs)


def _stack_bytes(cubin: bytes, tmp_path) -> int:
    tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    (tmp_path / "k.cubin").write_bytes(cubin)
    usage = subprocess.run([str(tool), "-res-usage", str(tmp_path / "k.cubin")],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    return int(re.search(r"STACK:(\d+)", usage)[1])


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@CUDA
def test_kernels_on_gpu_at_the_paper_shape():
    """bf16 (the trainer's dtype), T = 128, 4 heads of 64, a batch of 32 and a ragged context;
    dropout as the formula with the kernels' coins; a rerun gives the same bits."""
    assert kernels_apply(_qkv(32, 128, 4, 64, seed=0, device="cuda"), 4)
    for b, t in ((32, 128), (5, 77)):
        _check(_qkv(b, t, 4, 64, seed=t, device="cuda"), 4, torch.bfloat16, 3e-2)
        _check(_qkv(b, t, 4, 64, seed=t, device="cuda"), 4, torch.float32, 1e-5)
    _check_dropout(8, 64, 4, 64, 0.1, 1e-5, device="cuda")
    qkv = _qkv(32, 128, 4, 64, seed=3, device="cuda").bfloat16().requires_grad_()
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        y = causal_attention(qkv, 4, 0.1)
        (grad,) = torch.autograd.grad(y.float().square().sum(), qkv)
        runs.append((y, grad))
    assert torch.equal(runs[0][0], runs[1][0]) and torch.equal(runs[0][1], runs[1][1])


@CUDA
def test_a_replayed_graph_draws_new_coins_and_the_model_compiles():
    """Under CUDA-graph replay each call draws a new seed on the device; the GPT block compiles
    around the custom op (dropout on), and its loss matches the eager model's without dropout."""
    qkv = _qkv(4, 128, 4, 64, seed=1, device="cuda").bfloat16()
    causal_attention(qkv, 4, 0.1)  # warm up (compile the kernels) outside the capture
    graph, out = torch.cuda.CUDAGraph(), None
    with torch.cuda.graph(graph):
        out = causal_attention(qkv, 4, 0.1)
    graph.replay()
    first = out.clone()
    graph.replay()
    assert not torch.equal(first, out)
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, context=128, n_layer=2, d_model=128, n_head=2)).cuda()
    idx = torch.randint(0, 64, (4, 128), device="cuda")
    eager = model(idx, idx)[1]
    compiled = torch.compile(model)(idx, idx)[1]
    assert torch.allclose(eager, compiled, rtol=1e-4, atol=1e-4)

"""SAFFU's CUDA path: the fixed-order weight gradient and forward (pillm.saffu.kernels.segment_sum)
against embedding_bag's, the AdamW step that sums the gradient inside the update
(pillm.saffu.optim.RowAdamW) against torch's AdamW, their Triton kernels in the interpreter
(CPU), and bit-for-bit reruns on a GPU.
Its own module, without polars, so the GPU host (no polars) can run it."""

import pytest
import torch
import torch.nn.functional as F

from pillm.accel.kernels import uses_kernels
from pillm.saffu.kernels.segment_sum import (
    BLOCK_V,
    AdamWScalars,
    adamw_step,
    chunk_table,
    max_parts,
    segment_weight_grad,
    weighted_rows,
)
from pillm.saffu.kernels.softmax_loss import loss_and_logit_grad, softmax_rows
from pillm.saffu.model import SaffuLM, evaluate
from pillm.saffu.optim import RowAdamW, TorchAdamW, adamw_for
from tests.triton_interpreter import ROOT, interpreter_env, run_interpreter_check


def test_chunk_table_cuts_long_inputs_and_keeps_empty_ones():
    """Inputs of 0, 3, 9 and 4 entries, chunks of 4, room for 5 chunks: every input has a direct
    program (the empty one and the long one write zeros, the long one's row is merged over),
    the 9 are cut into chunks of 4, 4 and 1, the two spare part programs and the merge programs
    of the short inputs are empty (they store nothing)."""
    crow = torch.tensor([0, 0, 3, 12, 16])
    direct, parts, merge = chunk_table(crow, 4, 5)

    def ranges(c):
        return list(zip(c.start.tolist(), c.end.tolist(), c.dest.tolist(), strict=True))

    assert ranges(direct) == [(0, 0, 0), (0, 3, 1), (3, 3, 2), (12, 16, 3)]
    assert ranges(parts) == [(3, 7, 0), (7, 11, 1), (11, 12, 2), (0, 0, 3), (0, 0, 4)]
    assert ranges(merge) == [(0, 0, 0), (0, 0, 1), (0, 3, 2), (3, 3, 3)]  # partial rows 0-2
    assert (direct.skip_empty, parts.skip_empty, merge.skip_empty) == (False, True, True)


def test_part_bound_holds_at_its_worst_case():
    """max_parts bounds the chunks whatever the inputs: at its worst every long input has one
    entry more than a chunk (two chunks each)."""
    for entries, chunk in ((20 * 1024, 256), (45, 4), (9, 8), (1, 256)):
        for length in (chunk + 1, 2 * chunk, entries):
            lengths = [length] * (entries // length) + [entries % length]
            crow = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
            _, parts, _ = chunk_table(crow, chunk, max_parts(entries, chunk))
            used = int((parts.end > parts.start).sum())
            assert used == sum(-(-n // chunk) for n in lengths if n > chunk) <= len(parts)


def _check_softmax_rows(
    idx, wts, w0, y, block_v: int, tol: float = 1e-6, evaluated: bool = True
) -> None:
    """The fused softmax pass (pillm.saffu.kernels.softmax_loss) against torch: each row's loss and
    argmax, the mean loss and its gradient with respect to the logits, ``evaluate``'s totals
    (unless not ``evaluated``: it runs the default ``BLOCK_V`` whatever ``block_v``), and a
    rerun bit for bit."""
    logits = weighted_rows(idx, wts, w0)  # the kernel's forward: the same logits' bits
    rows = softmax_rows(idx, wts, w0, y, block_v=block_v)
    want = F.cross_entropy(logits, y, reduction="none")
    torch.testing.assert_close(rows.nll, want, atol=tol, rtol=tol)
    assert torch.equal(rows.argmax, logits.argmax(-1))
    ref = logits.clone().requires_grad_()
    F.cross_entropy(ref, y).backward()
    loss, grad = loss_and_logit_grad(idx, wts, w0, y, block_v=block_v)
    torch.testing.assert_close(loss, want.mean(), atol=tol, rtol=tol)
    torch.testing.assert_close(grad, ref.grad, atol=tol / len(y), rtol=tol)
    again = loss_and_logit_grad(idx, wts, w0, y, block_v=block_v)
    assert torch.equal(loss, again[0]) and torch.equal(grad, again[1]), "a rerun differs"
    if not evaluated:
        return
    model = SaffuLM(*w0.shape).to(w0.device)
    model.weight.data.copy_(w0)
    got = evaluate(model, idx, wts, y, chunk=max(1, len(y) // 3))  # ragged chunks
    assert got["nll"] == pytest.approx(float(want.double().sum()), rel=tol)
    assert got["acc"] == float((logits.argmax(-1) == y).float().mean())


def _interpreter_check() -> None:
    """Run by the subprocess below (TRITON_INTERPRET=1): the kernel on CPU tensors."""
    assert uses_kernels(torch.device("cpu")), "the interpreter did not engage"
    g = torch.Generator().manual_seed(5)
    n_in, vocab, b, k = 12, 1100, 40, 5  # two column blocks, the second ragged
    idx = torch.randint(0, n_in - 3, (b, k), generator=g)  # the last 3 inputs never appear
    idx[:, 0] = 4  # one input in every row: 40+ entries, several chunks of 8
    wts = torch.rand(b, k, generator=g)
    wts[1, 2:] = 0.0
    grad = torch.randn(b, vocab, generator=g)
    w = torch.zeros(n_in, vocab, requires_grad=True)
    F.embedding_bag(idx, w, per_sample_weights=wts, mode="sum").backward(grad)
    got = segment_weight_grad(idx, wts, grad, n_in, chunk=8)
    torch.testing.assert_close(got, w.grad, atol=1e-5, rtol=1e-5)
    assert got[-3:].abs().max() == 0  # unused inputs: zero rows
    assert torch.equal(got, segment_weight_grad(idx, wts, grad, n_in, chunk=8))
    w0 = torch.randn(n_in, vocab, generator=g)
    torch.testing.assert_close(
        weighted_rows(idx, wts, w0), F.embedding_bag(idx, w0, per_sample_weights=wts, mode="sum")
    )
    y = torch.randint(0, vocab, (b,), generator=g)
    _check_row_adamw(idx, wts, y, w0, chunk=8)
    # The softmax pass runs a program per (row, column block), each row alone: 16 rows (row 1's
    # zero weights among them; evaluate's chunks of 5 leave a ragged one) cover it at 2/5 of
    # the interpreter's time. evaluate runs the default BLOCK_V: checked once, at 1024.
    r = slice(0, 16)
    for block_v in (128, BLOCK_V):  # nine blocks, the last ragged; two, the second ragged
        _check_softmax_rows(idx[r], wts[r], w0, y[r], block_v, evaluated=block_v == BLOCK_V)
    tied = torch.zeros(n_in, vocab)
    tied[:, [5, 6, 700]] = 1.0  # every row's largest logit thrice: in one block, and in another
    rows = softmax_rows(idx[r], wts[r], tied, y[r], block_v=128)
    assert rows.argmax.tolist() == [5] * 16  # the first column of the max, as argmax's
    model = SaffuLM(n_in, vocab)
    assert isinstance(adamw_for(model, (0.9, 0.99), 0.0), RowAdamW)  # where the kernels run
    print("interpreter ok")


def _check_row_adamw(idx, wts, y, w0, chunk, steps=4, weight_decay=0.1, tol=2e-6):
    """``adamw_step`` (the gradient summed inside the update, inputs longer than ``chunk`` from
    partial rows) against torch.optim.AdamW on embedding_bag's gradient: the weights and both
    moments after ``steps`` steps of changing rates (a warm-up), and a rerun bit for bit."""
    betas, rates = (0.9, 0.99), [0.01 * (i + 1) for i in range(steps)]
    ref = w0.clone().requires_grad_()
    opt = torch.optim.AdamW([ref], lr=rates[0], betas=betas, weight_decay=weight_decay,
                            fused=ref.device.type == "cuda")  # fmt: skip
    for lr in rates:
        opt.param_groups[0]["lr"] = lr
        opt.zero_grad()
        F.cross_entropy(F.embedding_bag(idx, ref, per_sample_weights=wts, mode="sum"), y).backward()
        opt.step()
    runs = []
    for _ in range(2):
        w, m, v = w0.clone(), torch.zeros_like(w0), torch.zeros_like(w0)
        for t, lr in enumerate(rates, 1):
            logits = F.embedding_bag(idx, w, per_sample_weights=wts, mode="sum").requires_grad_()
            (grad,) = torch.autograd.grad(F.cross_entropy(logits, y), logits)
            adamw_step(idx, wts, grad, w, m, v, AdamWScalars.at(lr, betas, 1e-8, weight_decay, t),
                       chunk=chunk)  # fmt: skip
        runs.append((w, m, v))
    state = opt.state[ref]
    for got, want in zip(
        runs[0], (ref.detach(), state["exp_avg"], state["exp_avg_sq"]), strict=True
    ):
        torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True)), "a rerun differs"


def test_fixed_order_kernel_matches_embedding_bag_in_the_interpreter():
    run_interpreter_check("tests.saffu.test_saffu_cuda")


@pytest.mark.gpu
def test_sparse_products_rerun_bitwise_on_cuda():
    """SaffuLM's product on CUDA, run three times on the same inputs at the paper's SAFFU shape
    (4,098 inputs, a 50,257-type vocabulary, 20 non-zeros a row, 1,024 rows): the same logits
    and the same weight gradient bit for bit, equal to embedding_bag's within float32 rounding.
    (Two GPU builds of the paper differed in SAFFU's 8th digit while its explicit solution did
    not; with cuSPARSE's product of the transposed rows as the weight gradient this test
    failed: up to 1.8e-5 apart, one H100.)"""
    g = torch.Generator(device="cuda").manual_seed(0)
    n_in, vocab, b, k = 4098, 50257, 1024, 20
    idx = torch.randint(0, n_in, (b, k), generator=g, device="cuda")
    idx[:, :4] = 7  # a frequent input: 4,096 entries add into one row of the gradient
    wts = torch.rand(b, k, generator=g, device="cuda")
    wts = wts / wts.sum(1, keepdim=True)
    weight = torch.randn(n_in, vocab, generator=g, device="cuda") * 0.02
    up = torch.randn(b, vocab, generator=g, device="cuda")
    model = SaffuLM(n_in, vocab).cuda()
    runs = []
    for _ in range(3):
        model.weight.data.copy_(weight)
        model.weight.grad = None
        out = model(idx, wts)
        out.backward(up)
        runs.append((out.detach(), model.weight.grad))
    diffs = [(float((o - runs[0][0]).abs().max()), float((g - runs[0][1]).abs().max()))
             for o, g in runs[1:]]  # fmt: skip
    assert diffs == [(0.0, 0.0)] * len(diffs), f"(forward, weight gradient) max |diff|: {diffs}"
    w = weight.clone().requires_grad_()
    F.embedding_bag(idx, w, per_sample_weights=wts, mode="sum").backward(up)
    torch.testing.assert_close(runs[0][1], w.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
def test_training_step_never_waits_for_the_gpu():
    """A SAFFU training step (forward, then AdamW with the fixed-order weight gradient summed
    inside it: the pipeline's step on CUDA) at the paper's shape makes no synchronising CUDA call (pillm.saffu.kernels.segment_sum: its tables are sized by the
    shapes, not the data)."""
    g = torch.Generator(device="cuda").manual_seed(1)
    n_in, vocab, b, k = 4098, 50257, 1024, 20
    idx = torch.randint(0, n_in, (b, k), generator=g, device="cuda")
    idx[:, :4] = 7  # a long input: its chunks and merge run too
    wts = torch.rand(b, k, generator=g, device="cuda")
    y = torch.randint(0, vocab, (b,), generator=g, device="cuda")
    model = SaffuLM(n_in, vocab).cuda()
    opt = adamw_for(model, (0.9, 0.99), 0.0)
    assert isinstance(opt, RowAdamW)

    def step():
        opt.step(idx, wts, y, 0.01)

    step()  # compiles the kernels
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(2):
            step()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
def test_row_adamw_matches_torch_adamw_and_reruns_bitwise_on_cuda():
    """At the paper's SAFFU shape with a frequent input (4,096 entries: partial rows and their
    merge), ``adamw_step`` against torch's fused AdamW on the fixed-order gradient, and the
    pipeline's two steppers (RowAdamW, TorchAdamW) from the same start: the same weights within
    float32 rounding after several steps."""
    g = torch.Generator(device="cuda").manual_seed(2)
    n_in, vocab, b, k = 4098, 50257, 1024, 20
    idx = torch.randint(0, n_in, (b, k), generator=g, device="cuda")
    idx[:, :4] = 7
    wts = torch.rand(b, k, generator=g, device="cuda")
    wts = wts / wts.sum(1, keepdim=True)
    y = torch.randint(0, vocab, (b,), generator=g, device="cuda")
    w0 = torch.randn(n_in, vocab, generator=g, device="cuda") * 0.02
    _check_row_adamw(idx, wts, y, w0, chunk=256, steps=3, tol=1e-5)
    weights = []
    for cls in (RowAdamW, TorchAdamW):
        model = SaffuLM(n_in, vocab).cuda()
        model.weight.data.copy_(w0)
        opt = cls(model, (0.9, 0.99), 0.0)
        losses = [float(opt.step(idx, wts, y, lr)) for lr in (0.003, 0.01, 0.01)]
        weights.append((model.weight.detach(), losses))
    torch.testing.assert_close(weights[0][0], weights[1][0], atol=1e-5, rtol=1e-5)
    assert weights[0][1] == pytest.approx(weights[1][1], rel=1e-6)
    _check_softmax_rows(idx, wts, w0, y, block_v=1024, tol=1e-5)
    model = SaffuLM(n_in, vocab).cuda()
    model.weight.data.copy_(w0)
    opt = RowAdamW(model, (0.9, 0.99), 0.0)
    again = [float(opt.step(idx, wts, y, lr)) for lr in (0.003, 0.01, 0.01)]
    assert again == weights[0][1] and torch.equal(model.weight, weights[0][0]), "a rerun differs"


@pytest.mark.bench
def test_row_adamw_benchmark_agrees_with_the_reference_in_the_interpreter(tmp_path):
    """benchmarks/row_adamw.py at a tiny shape under the Triton interpreter: every setting of the
    sweep runs, its weights after one step equal the reference's (the fixed-order gradient, then
    torch's AdamW), and the figures are written."""
    import json
    import subprocess
    import sys

    env = interpreter_env()  # skips where the interpreter cannot run the kernels (GPU host)
    out = tmp_path / "row_adamw.json"
    cmd = [sys.executable, "benchmarks/row_adamw.py", "--device", "cpu", "--n-in", "12",
           "--vocab", "300", "--nnz", "3", "--batch", "16", "--chunk", "4", "--chunk", "64",
           "--block-v", "128", "--warps", "4", "--repeats", "1", "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["longest_input_entries"] > 4  # the Zipf rows give the chunk of 4 a long input
    diffs = [v for k, v in row.items() if k.endswith("_max_abs_diff")]
    assert len(diffs) == 2 and max(diffs) < 1e-6, row
    assert row["reference_ms"] > 0 and row["forward_ms"] > 0

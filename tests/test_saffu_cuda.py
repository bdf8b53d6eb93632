"""SAFFU's CUDA product on a GPU: reruns give the same bits. Its own module, without polars, so
the GPU host (no polars) can run it."""

import pytest
import torch

from pillm.saffu.model import SaffuLM


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_sparse_products_rerun_bitwise_on_cuda():
    """SaffuLM's product on CUDA, run three times on the same inputs at the paper's SAFFU shape
    (4,098 inputs, a 50,257-type vocabulary, 20 non-zeros a row, 1,024 rows): the same logits
    and the same weight gradient bit for bit. (Two GPU builds of the paper differed in SAFFU's
    8th digit while its explicit solution did not; with cuSPARSE's product of the transposed
    rows as the weight gradient, this test failed: up to 1.8e-5 apart, one H100.)"""
    g = torch.Generator(device="cuda").manual_seed(0)
    n_in, vocab, b, k = 4098, 50257, 1024, 20
    idx = torch.randint(0, n_in, (b, k), generator=g, device="cuda")
    idx[:, :4] = 7  # a frequent input: many entries add into one row of the gradient
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

"""Which layout of the dense operand makes cuSPARSE's CSR product rerun bit for bit, and at
what speed (SAFFU's weight gradient X^T G at the paper shape). Session 6 probe, one H100."""

import time

import torch

from pillm.saffu.model import bag_weight_grad, csr_columns

g = torch.Generator(device="cuda").manual_seed(0)
n_in, V, b, k = 4098, 50257, 1024, 20
idx = torch.randint(0, n_in, (b, k), generator=g, device="cuda")
idx[:, :4] = 7
wts = torch.rand(b, k, generator=g, device="cuda")
wts = wts / wts.sum(1, keepdim=True)
G = torch.randn(b, V, generator=g, device="cuda")
ways = {
    "row-major G": lambda: csr_columns(idx, wts, n_in) @ G,
    "column-major G": lambda: csr_columns(idx, wts, n_in) @ G.t().contiguous().t(),
    "transposed out": lambda: (G.t() @ csr_columns(idx, wts, n_in).t()).t(),
    "embedding_bag backward": lambda: bag_weight_grad(idx, wts, G, n_in),
}
for name, fn in ways.items():
    try:
        outs = [fn() for _ in range(3)]
        same = all(torch.equal(o, outs[0]) for o in outs)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - t) * 100
        err = (outs[0] - ways["embedding_bag backward"]()).abs().max().item()
        print(f"{name}: {ms:.2f} ms, reruns equal: {same}, max |diff| to bag: {err:.2e}")
    except Exception as e:  # noqa: BLE001
        print(f"{name}: failed: {type(e).__name__}: {str(e)[:120]}")

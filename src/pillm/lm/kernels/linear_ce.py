"""Fused output layer + cross-entropy in row chunks: the (N, V) logits never exist at once.

Contract: ``linear_cross_entropy(h, w, y, chunk)`` equals ``F.cross_entropy((h @ w.T).float(),
y)`` (mean over rows); ``loss_and_grads`` gives the same loss and both gradients without autograd
(``fused_ce``'s computation where Triton cannot run).

Forward walks ``chunk`` rows at a time: logits of the chunk in the compute dtype, log-sum-exp
and the target logit in float32, and, while the chunk's logits are still at hand, the gradient
of the mean loss w.r.t. them, ``(softmax - onehot) / N``, which it turns straight into the
chunk's ``dL/dh = G w`` and its share of ``dL/dw = Gᵀ h`` (float32 accumulator). Backward only
scales the two saved gradients by the incoming one (Liger-kernel style). Memory for the head
falls from N x V logits (and their float32 copy and gradient) to ``chunk`` x V; FLOPs stay the
same as the unfused head (one forward and two gradient matmuls).
"""

from __future__ import annotations

import torch


def loss_and_grads(
    h: torch.Tensor,
    w: torch.Tensor,
    targets: torch.Tensor,
    chunk: int,
    compute_dtype: torch.dtype,
    need_h: bool = True,
    need_w: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """(mean loss, dL/dh in h's dtype or None, dL/dw float32 or None), ``chunk`` rows at a time.

    ``h``: (N, d), ``w``: (V, d), ``targets``: (N,). No autograd: the gradients are computed."""
    n = h.shape[0]
    stat = torch.float64 if compute_dtype == torch.float64 else torch.float32
    hc, wc = h.to(compute_dtype), w.to(compute_dtype)
    dh = torch.empty_like(h) if need_h else None
    dw = torch.zeros(w.shape, dtype=stat, device=w.device) if need_w else None
    total = torch.zeros((), dtype=stat, device=h.device)
    cols = torch.arange(w.shape[0], device=h.device)
    for s in range(0, n, chunk):
        hs, ts = hc[s : s + chunk], targets[s : s + chunk]
        logits = (hs @ wc.t()).to(stat)  # (n_c, V): as the unfused head's logits.float()
        lse = torch.logsumexp(logits, dim=-1)  # (n_c,)
        total = total + (lse - logits.gather(1, ts[:, None]).squeeze(1)).sum()
        if need_h or need_w:
            p = torch.exp(logits - lse[:, None])  # softmax
            # dL/dlogits of the mean loss; pointwise (no scatter), so a compiler fuses it
            g = (torch.where(cols == ts[:, None], p - 1.0, p) / n).to(compute_dtype)
            if need_h:
                dh[s : s + chunk] = (g @ wc).to(h.dtype)
            if need_w:
                dw += (g.t() @ hs).to(stat)
    return total / n, dh, dw


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, targets, chunk: int, compute_dtype: torch.dtype):  # noqa: D102
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        loss, dh, dw = loss_and_grads(h, w, targets, chunk, compute_dtype, need_h, need_w)
        ctx.w_dtype = w.dtype
        ctx.save_for_backward(dh, dw)
        return loss

    @staticmethod
    def backward(ctx, grad_out):  # noqa: D102
        dh, dw = ctx.saved_tensors
        gh = dh * grad_out.to(dh.dtype) if dh is not None else None
        gw = (dw * grad_out).to(ctx.w_dtype) if dw is not None else None
        return gh, gw, None, None, None


def linear_cross_entropy(
    h: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk: int = 1024,
    compute_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Mean cross-entropy of ``h @ weight.T`` against ``targets``, ``chunk`` rows at a time.

    ``h``: (..., d) final hidden states; ``weight``: (V, d) output layer; ``targets``: (...,)
    class ids. ``compute_dtype`` is the dtype of the matmuls (bf16 under CUDA autocast; default
    ``h.dtype``); softmax statistics are float32 (float64 inputs stay float64).
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 rows, got {chunk} (train.ce_chunk: 0 turns it off)")
    if compute_dtype is None:
        compute_dtype = h.dtype
    h2, t2 = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
    if h2.shape[0] != t2.shape[0]:
        raise ValueError(f"{h2.shape[0]} hidden rows but {t2.shape[0]} targets")
    with torch.autocast(h.device.type, enabled=False):  # dtypes are chosen explicitly here
        return _LinearCrossEntropy.apply(h2, weight, t2, chunk, compute_dtype)

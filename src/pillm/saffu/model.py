"""SAFFU explicit-solution baseline: a re-implementation of the single-layer explicit solution of
arXiv 2311.07498 / 2311.07510 (DESIGN 3.5) as a language model. No public code exists; this is ours.

The layer. ``p(y | x) = softmax(x W)`` over the full output vocabulary, ``W`` in R^{n x V},
with inputs ``x >= 0``, ``||x||_1 = 1`` and one-hot targets ``y``.

The explicit solution (our derivation). Cross-entropy over rows ``(x_t, y_t)`` has gradient
``X^T (P - Y)``, so a stationary point satisfies ``X^T P = X^T Y = F``, where
``F[i, j] = sum_t x_t[i] y_t[j]`` is the generalised co-occurrence of input feature i and output
type j (fractional counts when x is not one-hot). For one-hot inputs ``softmax(x_t W)`` is the
softmax of row i of W, and the stationarity condition reads ``softmax(W[i]) = F[i] / F[i].sum()``:
``W[i, j] = log F[i, j] + c_i`` is exactly optimal (the empirical conditional) whenever every
``F[i, j] > 0``, for any translation ``c``. The translation is free for every 1-normalised input,
one-hot or not: adding ``c_i`` to row i (the translation the published solution leaves free; it
acts on rows here because W stores inputs as rows) shifts every logit of ``x`` by the same
``x . c``, which softmax ignores. Adding
``d_j`` to a column instead acts as an output bias (it does change predictions).
For mixed inputs (several non-zero ``x_i``), ``softmax(x log F)`` is the geometric pool
``prod_i p(j | i)^{x_i}`` of the rows' conditionals: a one-pass warm start, not a stationary point
in general (tests/saffu/test_saffu.py measures the gap to the gradient-descent optimum on a toy).

The LM. Input types are the ``top_types`` most frequent train types plus one "other" bucket (a
dense (V+1) x V map is infeasible for GPT-2's 50,257 types). Two views of the context before
each predicted token, each non-negative and 1-normalised: the *block* view, a uniform bag of the
previous ``block`` tokens (uniform self-attention over the block), and the *radial* view, the
previous ``radius`` tokens weighted 1/k by their distance k. Aggregation ``sum`` adds the two
views in one type space (shared rows of W); ``cat`` concatenates them (separate rows: twice the
inputs). Either way the input is (view_B + view_R) / 2, so ``||x||_1 = 1``. The SAFFU attention
and decoder matrices of the seed are not learned here: the views are fixed (uniform and 1/k).

Counts are smoothed towards the train unigram ``u`` (a Dirichlet prior of mass alpha):
``W[i, j] = log(F[i, j] + alpha u_j) - log(F[i].sum() + alpha)``, alpha chosen on the held-out
split from ``alphas``, the grid extended past an edge pick (pillm.core.selection.search_grid).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pillm.accel.kernels import uses_kernels
from pillm.saffu.kernels.segment_sum import by_input, segment_weight_grad, weighted_rows
from pillm.saffu.kernels.softmax_loss import softmax_rows

AGGREGATIONS = ("sum", "cat")
# torch calls its sparse CSR layout beta; the two products used here are tested against
# embedding_bag (tests/saffu/test_saffu.py), so the per-process notice is noise in the job logs.
warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")


# ---------------------------------------------------------------- the explicit solution


def cooccurrence(idx: Tensor, wts: Tensor, targets: Tensor, n_in: int, vocab: int) -> Tensor:
    """Generalised co-occurrence ``F = X^T Y`` (float64, n_in x vocab) in one pass over sparse
    rows: row t of X has weights ``wts[t]`` at inputs ``idx[t]``; Y is one-hot ``targets``."""
    assert idx.shape == wts.shape and idx.shape[0] == targets.shape[0]
    f = torch.zeros(n_in, vocab, dtype=torch.float64, device=idx.device)
    cols = targets[:, None].expand_as(idx)
    f.index_put_((idx.flatten(), cols.flatten()), wts.flatten().double(), accumulate=True)
    return f


def explicit_solution(f: Tensor, alpha: float = 0.0, prior: Tensor | None = None) -> Tensor:
    """``W[i, j] = log(F[i, j] + alpha prior_j) - log(F[i].sum() + alpha)``.

    The row translation makes each row a log-conditional; any other translation gives the same
    predictions for 1-normalised inputs. ``alpha = 0`` is the unsmoothed solution (exactly optimal
    for one-hot inputs when every count is positive; a zero count gives -inf).
    """
    if alpha > 0:
        if prior is None:
            raise ValueError("explicit_solution: alpha > 0 needs a prior distribution")
        f = f + alpha * prior.to(f)[None, :]
    return (f.log() - f.sum(1, keepdim=True).log()).float()


def unigram(targets: Tensor, vocab: int) -> Tensor:
    """Add-one smoothed unigram distribution of the train targets (every type > 0)."""
    counts = torch.bincount(targets, minlength=vocab).double() + 1.0
    return counts / counts.sum()


# ---------------------------------------------------------------- features


def type_index(train: Tensor, vocab: int, top_types: int) -> tuple[Tensor, int]:
    """Token id -> input type: the ``top_types`` most frequent train types get 0..K-1 (by rank,
    ties by id), every other id the "other" bucket K. Returns (map, K + 1)."""
    counts = torch.bincount(train, minlength=vocab)
    k = min(top_types, vocab)
    order = torch.argsort(counts, descending=True, stable=True)
    index = torch.full((vocab,), k, dtype=torch.long)
    index[order[:k]] = torch.arange(k)
    return index, k + 1


def n_inputs(agg: str, m: int) -> int:
    if agg not in AGGREGATIONS:
        raise ValueError(f"saffu aggregation {agg!r}: use one of {AGGREGATIONS}")
    return m if agg == "sum" else 2 * m


def _view(types: Tensor, offsets: int, weight_of: Tensor) -> tuple[Tensor, Tensor]:
    """The previous ``offsets`` types of every position j >= 1 (N-1 rows), with weights
    ``weight_of[k-1]`` for distance k, renormalised over the distances that exist."""
    n = types.shape[0]
    pad = torch.full((offsets,), -1, dtype=types.dtype, device=types.device)
    padded = torch.cat([pad, types])
    # column k-1 holds the type at j - k, i.e. padded[offsets + j - k] for j = 1..n-1
    cols = [padded[offsets - k + 1 : offsets - k + n] for k in range(1, offsets + 1)]
    idx = torch.stack(cols, 1)  # (N-1, offsets)
    valid = idx >= 0
    w = weight_of[None, :].to(types.device) * valid
    w = w / w.sum(1, keepdim=True)
    return idx.clamp(min=0), w.float()


def context_features(
    tokens: Tensor, index: Tensor, m: int, block: int, radius: int, agg: str
) -> tuple[Tensor, Tensor]:
    """Sparse rows (idx, wts), each (N-1, block + radius), of the inputs predicting tokens[1:].

    Every row is non-negative with weights summing to 1: (block view + radial view) / 2, the
    radial view's indices shifted by ``m`` under ``cat``.
    """
    if block < 1 or radius < 1:
        raise ValueError(f"saffu block ({block}) and radius ({radius}) must be >= 1")
    n_inputs(agg, m)
    types = index.to(tokens.device)[tokens]
    bi, bw = _view(types, block, torch.ones(block))
    ri, rw = _view(types, radius, 1.0 / torch.arange(1, radius + 1, dtype=torch.float32))
    if agg == "cat":
        ri = ri + m
    return torch.cat([bi, ri], 1), torch.cat([bw, rw], 1) / 2


# ---------------------------------------------------------------- the model


def csr_rows(idx: Tensor, wts: Tensor, n_in: int) -> Tensor:
    """The rows (``idx``, ``wts``: (B, k), k non-zeros each) as a (B, n_in) CSR matrix."""
    b, k = idx.shape
    crow = torch.arange(0, b * k + 1, k, device=idx.device)
    return torch.sparse_csr_tensor(
        crow, idx.flatten(), wts.flatten(), (b, n_in), check_invariants=False
    )


def csr_columns(idx: Tensor, wts: Tensor, n_in: int) -> Tensor:
    """The transpose of ``csr_rows`` (n_in, B), built directly: entries sorted by input."""
    crow, rows, vals = by_input(idx, wts, n_in)
    return torch.sparse_csr_tensor(crow, rows, vals, (n_in, idx.shape[0]), check_invariants=False)


class SparseRowsTimesW(torch.autograd.Function):
    """``X W`` and its weight gradient ``X^T G`` as two sparse-times-dense products (cuSPARSE
    SpMM on CUDA). The same values as ``embedding_bag`` up to float32 summation order, but not
    the same bits on a rerun: ``SparseRowsFixedOrder`` is the model's product on CUDA, this one
    a comparison in benchmarks/saffu_step.py."""

    @staticmethod
    def forward(ctx, idx: Tensor, wts: Tensor, weight: Tensor) -> Tensor:
        ctx.save_for_backward(idx, wts)
        ctx.n_in = weight.shape[0]
        return csr_rows(idx, wts, ctx.n_in) @ weight

    @staticmethod
    def backward(ctx, grad: Tensor):
        idx, wts = ctx.saved_tensors
        return None, None, csr_columns(idx, wts, ctx.n_in) @ grad.contiguous()


class SparseRowsFixedOrder(SparseRowsTimesW):
    """``X W`` and its weight gradient, each summed in a fixed order by one Triton kernel
    (``pillm.saffu.kernels.segment_sum``), so that a rerun on CUDA gives the same bits (its
    speed against cuSPARSE's: benchmarks/README.md, "SAFFU step and update")."""

    @staticmethod
    def forward(ctx, idx: Tensor, wts: Tensor, weight: Tensor) -> Tensor:
        ctx.save_for_backward(idx, wts)
        ctx.n_in = weight.shape[0]
        return weighted_rows(idx, wts, weight)

    @staticmethod
    def backward(ctx, grad: Tensor):
        idx, wts = ctx.saved_tensors
        return None, None, segment_weight_grad(idx, wts, grad, ctx.n_in)


class SaffuLM(nn.Module):
    """One softmax layer on sparse non-negative inputs: logits = x W (no bias: with
    ||x||_1 = 1 a bias is a column translation of W). On CUDA the product and its weight
    gradient run as fixed-order sums (``SparseRowsFixedOrder``), elsewhere
    as ``embedding_bag`` (faster on CPU); tests/saffu/test_saffu.py checks both give the same logits
    and gradients, tests/saffu/test_saffu_cuda.py that CUDA reruns give the same bits."""

    def __init__(self, n_in: int, vocab: int):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, vocab))

    def forward(self, idx: Tensor, wts: Tensor) -> Tensor:
        if idx.device.type == "cuda":
            return SparseRowsFixedOrder.apply(idx, wts, self.weight)  # (B, V)
        return F.embedding_bag(idx, self.weight, per_sample_weights=wts, mode="sum")


@torch.no_grad()
def evaluate(
    model: SaffuLM, idx: Tensor, wts: Tensor, targets: Tensor, chunk: int, accuracy: bool = True
) -> dict[str, float]:
    """Total and mean NLL (nats), accuracy, count over all rows, in chunks of ``chunk`` rows.

    Where the kernels run (CUDA) the loss and the argmax come from one pass that never stores
    the logits (``pillm.saffu.kernels.softmax_loss``), elsewhere from torch's ``cross_entropy`` and
    ``argmax`` on them. ``accuracy=False`` leaves out "acc": the held-out checks of training
    need only the loss, and on the CPU the argmax reads every chunk's logits once more; the
    loss is the same either way."""
    nll = torch.zeros((), dtype=torch.float64, device=idx.device)
    correct = torch.zeros((), dtype=torch.long, device=idx.device)
    fused = uses_kernels(idx.device)
    for s in range(0, idx.shape[0], chunk):
        i, w, y = idx[s : s + chunk], wts[s : s + chunk], targets[s : s + chunk]
        if fused:  # the logits are never stored (pillm.saffu.kernels.softmax_loss)
            rows = softmax_rows(i, w, model.weight, y)
            nll += rows.nll.double().sum()
            predicted = rows.argmax
        else:
            logits = model(i, w).float()
            nll += F.cross_entropy(logits, y, reduction="sum").double()
            predicted = logits.argmax(-1) if accuracy else None
        if accuracy:
            correct += (predicted == y).sum()
    n = idx.shape[0]
    total = nll.item()
    out = {"nll": total, "loss": total / n, "n": float(n)}
    return {**out, "acc": correct.item() / n} if accuracy else out


def heldout_loss(model: SaffuLM, idx: Tensor, wts: Tensor, targets: Tensor, chunk: int) -> float:
    """Mean NLL over the rows: ``evaluate``'s loss without its accuracy."""
    return evaluate(model, idx, wts, targets, chunk, accuracy=False)["loss"]


# ---------------------------------------------------------------- the cold start


def cold_start(prior: Tensor, n_in: int, init_std: float, seed: int) -> Tensor:
    """Every row the log of the train unigram (the unigram model: with ||x||_1 = 1 a constant
    row is an output bias), plus N(0, init_std^2) noise drawn from ``seed`` on the prior's
    device (so CPU and GPU draw different noise: GPU metrics match CPU within tolerance)."""
    gen = torch.Generator(device=prior.device).manual_seed(seed)  # drawn where it is used
    noise = torch.randn(n_in, prior.shape[0], generator=gen, device=prior.device) * init_std
    return prior.log().float()[None, :] + noise

"""How linear is each FFN block? Closed-form linear (and rank-r bilinear) probes of FFN maps.

Contract. Each FFN block is treated as a position-wise map X (rows, d_in) -> Y (rows, d_out),
X being the block's FFN input and Y its output before any dropout, residual add or norm. Rows
are streamed into float64 Gram statistics (``pillm.ridge.GramStats``) of [X, 1] -> Y, so
memory is O(d²) whatever the number of tokens. Every ``holdout_every``-th batch is held out;
``r2_lin`` is the held-out R² of the exact least-squares map fitted on the other batches
(minimum-norm when [X, 1] is rank-deficient; an optional ridge is recorded). A second pass fits
[X, 1, products of the top-r principal components] the same way: ``r2_bilinear``.

Families: the pipeline's ``GPT``; Hugging Face ``gpt2``, ``gpt_neox``, ``llama``, ``bert``.
BERT's FFN is two modules (``intermediate`` then ``output.dense``): it is captured by a pre-hook
on the first and a hook on the second, and swapped as a pair.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce

import torch
import torch.nn as nn
from torch import Tensor

from pillm.core.ridge import (
    GramStats,
    RidgeFallbackWarning,
    RidgeSolution,
    r2_score_from_stats,
    solve_ridge,
)
from pillm.models.gpt import GPT
from pillm.probe.intervals import WindowScores, bootstrap_r2
from pillm.probe.masks import RowMask
from pillm.probe.variance import excluded_share, outlier_stats

_F64 = torch.float64
# family -> (attribute of the base model holding the blocks, FFN-input module, FFN-output module)
_LAYOUT: dict[str, tuple[str, str, str]] = {
    "pillm": ("blocks", "mlp", "mlp"),
    "gpt2": ("h", "mlp", "mlp"),
    "gpt_neox": ("layers", "mlp", "mlp"),
    "llama": ("layers", "mlp", "mlp"),
    "bert": ("encoder.layer", "intermediate", "output.dense"),
}
Batch = Tensor | Sequence[Tensor | None] | Mapping[str, Tensor]


def _get(obj: object, path: str) -> nn.Module:
    return reduce(getattr, path.split("."), obj)


def _set(obj: object, path: str, value: nn.Module | None) -> None:
    head, _, last = path.rpartition(".")
    setattr(_get(obj, head) if head else obj, last, value)


class SplitFFN(nn.Module):
    """second(first(x)): a view (sharing the model's modules) of BERT's two-module FFN."""

    def __init__(self, first: nn.Module, second: nn.Module):
        super().__init__()
        self.first, self.second = first, second

    def forward(self, x: Tensor) -> Tensor:
        return self.second(self.first(x))


def model_family(model: nn.Module) -> str:
    """'pillm' for ``pillm.model.GPT``, else the HF ``config.model_type``; ValueError if unknown."""
    if isinstance(model, GPT):
        return "pillm"
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in _LAYOUT:
        raise ValueError(f"unsupported model_type={model_type!r}; supported: {sorted(_LAYOUT)}")
    return model_type


def _block_list(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """(family, the model's own ModuleList of blocks: assigning into it replaces a block)."""
    family = model_family(model)
    # HF task heads (GPT2LMHeadModel, BertForMaskedLM, ...) wrap the base model; base_model
    # resolves to it (or to the model itself for GPT2Model/BertModel), so both work.
    base = model if family == "pillm" else model.base_model
    return family, _get(base, _LAYOUT[family][0])


def _blocks(model: nn.Module) -> tuple[str, list[nn.Module]]:
    family, blocks = _block_list(model)
    return family, list(blocks)


def _hook_points(model: nn.Module) -> list[tuple[nn.Module, nn.Module]]:
    """Per block: (module whose input is the FFN input, module whose output is the FFN output)."""
    family, blocks = _blocks(model)
    _, first, second = _LAYOUT[family]
    points = [(_get(block, first), _get(block, second)) for block in blocks]
    if missing := [i for i, (a, b) in enumerate(points) if a is None or b is None]:
        raise ValueError(f"blocks {missing} have no FFN ({first} is None)")
    return points


def ffn_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Per block, in order: (qualified name, module mapping FFN input -> FFN output).

    BERT: a ``SplitFFN`` view of (intermediate, output.dense), named by both joined with '+'.
    """
    name = {id(m): n for n, m in model.named_modules()}
    return [
        (name[id(a)], a) if a is b else (f"{name[id(a)]}+{name[id(b)]}", SplitFFN(a, b))
        for a, b in _hook_points(model)
    ]


class FFNCapture:
    """Rows recorded by ``capture_ffn_io``. Set ``attention_mask`` (shape (B, T), nonzero =
    keep) before a forward to drop padding rows; ``pop()`` returns and forgets what was seen."""

    def __init__(self, layers: Sequence[int], attention_mask: Tensor | None = None):
        self.layers = list(layers)
        self.attention_mask = attention_mask
        self._rows: dict[int, list[tuple[Tensor, Tensor]]] = {i: [] for i in self.layers}
        self._pending: dict[int, Tensor] = {}

    def _add(self, i: int, x: Tensor, y: Tensor) -> None:
        x2, y2 = x.detach().reshape(-1, x.shape[-1]), y.detach().reshape(-1, y.shape[-1])
        if self.attention_mask is not None:
            keep = self.attention_mask.reshape(-1).to(x2.device) != 0
            if keep.shape[0] != x2.shape[0]:
                raise ValueError(f"mask has {keep.shape[0]} positions, FFN input {len(x2)} rows")
            x2, y2 = x2[keep], y2[keep]
        self._rows[i].append((x2, y2))

    def pop(self) -> dict[int, tuple[Tensor, Tensor]]:
        """{layer: (X (rows, d_in), Y (rows, d_out))} for the forwards since the last pop."""
        out = {
            i: (torch.cat([x for x, _ in rows]), torch.cat([y for _, y in rows]))
            for i, rows in self._rows.items()
            if rows
        }
        self._rows = {i: [] for i in self.layers}
        return out


@contextlib.contextmanager
def capture_ffn_io(
    model: nn.Module, layers: Sequence[int] | None = None, attention_mask: Tensor | None = None
) -> Iterator[FFNCapture]:
    """Record FFN input/output rows of ``layers`` (default all) for every forward in the block.

    Hooks bind to the modules present on entry: enter ``swap_ffns`` outside this block. They are
    removed in ``finally``, so none survives an exception. Chunked BERT FFNs are unsupported.
    """
    points = _hook_points(model)
    layers = list(range(len(points))) if layers is None else list(layers)
    if bad := [i for i in layers if not 0 <= i < len(points)]:
        raise IndexError(f"layers {bad} out of range for {len(points)} blocks")
    cap = FFNCapture(layers, attention_mask)

    def hooks(i: int) -> tuple[Callable, Callable]:  # a factory, so each closure binds its i
        def pre(module: nn.Module, args: tuple, kwargs: dict) -> None:
            cap._pending[i] = args[0] if args else next(iter(kwargs.values()))

        def post(module: nn.Module, args: tuple, kwargs: dict, output: object) -> None:
            if i not in cap._pending:
                raise RuntimeError(f"layer {i}: FFN output seen without its input")
            cap._add(i, cap._pending.pop(i), output[0] if isinstance(output, tuple) else output)

        return pre, post

    handles = []
    try:  # registration inside try: a failure half-way still removes what was registered
        for i in layers:
            (first, second), (pre, post) = points[i], hooks(i)
            handles.append(first.register_forward_pre_hook(pre, with_kwargs=True))
            handles.append(second.register_forward_hook(post, with_kwargs=True))
        yield cap
    finally:
        for h in handles:
            h.remove()
        cap._pending.clear()


def _ids_of(batch: Batch) -> tuple[Tensor, Tensor | None]:
    """(input ids (B, T), attention mask (B, T) or None) of a batch in any accepted form."""
    if isinstance(batch, Tensor):
        return batch, None
    if isinstance(batch, Mapping):
        return batch["input_ids"], batch.get("attention_mask")
    return batch[0], (batch[1] if len(batch) > 1 else None)


def _forward(model: nn.Module, batch: Batch, cap: FFNCapture, device: torch.device | str) -> None:
    ids, mask = _ids_of(batch)
    ids, cap.attention_mask = ids.to(device), (None if mask is None else mask.to(device))
    if isinstance(model, GPT):
        model.hidden(ids)  # causal and maskless: padded rows are only dropped by the capture
    else:  # the base model runs every FFN; skipping the task head saves the vocab projection
        model.base_model(input_ids=ids, attention_mask=cap.attention_mask)


def _with_ones(x: Tensor) -> Tensor:
    return torch.cat([x, x.new_ones(x.shape[0], 1)], dim=1)


@dataclass
class BlockStats:
    """One block's Gram statistics of fitting (``train``) and held-out rows: the rows the row
    policy keeps and, when asked for, those it leaves out (None otherwise)."""

    train: GramStats
    held: GramStats
    train_excluded: GramStats | None = None
    held_excluded: GramStats | None = None

    def __iter__(self) -> Iterator[GramStats]:  # ``tr, va = stats[i]`` as before the policy
        return iter((self.train, self.held))

    def all_rows(self) -> tuple[GramStats, GramStats]:
        """(fitting, held-out) statistics of every row, kept or not."""
        if self.train_excluded is None or self.held_excluded is None:
            return self.train, self.held
        return self.train.merge(self.train_excluded), self.held.merge(self.held_excluded)


REPLAY_BYTES = 4 * 2**30  # captured rows a probe keeps for its later passes (SmolLM2 at the
# paper's 160 windows of 128 tokens: 2.8 GB of float32 FFN inputs and outputs)

Captured = tuple[bool, dict[int, tuple[Tensor, Tensor]], Tensor | None, Tensor]


class Recording:
    """What a capture pass yields, batch by batch, kept for the probe's later passes over the
    same batches: they read it instead of running the model again (a pass is one forward of
    every batch, most of a probe's time on a CPU). The rows are the forward's own tensors, so a
    replayed pass computes the same bits. Kept while it fits in ``budget`` bytes; past that it
    is dropped and the later passes run the model as before."""

    def __init__(self, budget: int = REPLAY_BYTES):
        self.budget, self.bytes, self.complete = budget, 0, False
        self.items: list[Captured] | None = []

    def add(self, item: Captured) -> None:
        if self.items is None:
            return
        _, rows, keep, window = item
        tensors = [t for xy in rows.values() for t in xy] + [window]
        tensors += [] if keep is None else [keep]
        self.bytes += sum(t.numel() * t.element_size() for t in tensors)
        if self.bytes > self.budget:
            self.items = None  # too large: the later passes run the model
        else:
            self.items.append(item)

    @property
    def replayable(self) -> bool:
        return self.complete and self.items is not None


def _captured(
    model: nn.Module,
    batches: Iterable[Batch],
    device: torch.device | str,
    holdout_every: int,
    layers: Sequence[int] | None,
    row_mask: RowMask | None,
    heldout_only: bool = False,
    recording: Recording | None = None,
) -> Iterator[Captured]:
    """Per batch, in eval mode and without gradients: (held out?, {layer: (X, Y)}, the row
    policy's keep flags of the captured rows by token (None: keep all; each block adds its own
    massive-activation rows, ``RowMask.rows``), each row's window in the batch).

    Batch b is held out when (b + 1) % holdout_every == 0; ``heldout_only`` skips the others
    without running them. Padding rows (attention mask 0) are dropped before anything else.
    ``recording``: a whole pass (not ``heldout_only``) records into it; once it holds a whole
    pass, passes with it read it instead of running the model (the same batches, mask and
    held-out rule: one ``probe_model`` call's).
    """
    if holdout_every < 2:
        raise ValueError(f"holdout_every must be >= 2, got {holdout_every}")
    if recording is not None and recording.replayable:
        for held, rows, keep, window in recording.items or []:
            if held or not heldout_only:
                picked = rows if layers is None else {i: rows[i] for i in layers}
                yield held, picked, keep, window
        return
    record = recording if recording is not None and not heldout_only else None
    flags = [m.training for m in model.modules()]  # eval() for the pass, then restore each flag
    try:
        model.eval()
        with torch.no_grad(), capture_ffn_io(model, layers) as cap:
            for b, batch in enumerate(batches):
                held = (b + 1) % holdout_every == 0
                if heldout_only and not held:
                    continue
                _forward(model, batch, cap, device)
                ids, pad = _ids_of(batch)
                n_win, t = ids.shape
                window = torch.arange(n_win).repeat_interleave(t)
                keep = None if row_mask is None else row_mask(ids.cpu()).reshape(-1)
                if pad is not None:
                    real = pad.reshape(-1).cpu() != 0
                    window = window[real]
                    keep = None if keep is None else keep[real]
                keep = None if keep is None else keep.to(device)
                item = (held, cap.pop(), keep, window.to(device))
                if record is not None:
                    record.add(item)
                yield item
        if record is not None:
            record.complete = True
    finally:
        for m, flag in zip(model.modules(), flags, strict=True):
            m.training = flag


def accumulate_ffn_stats(
    model: nn.Module,
    batches: Iterable[Batch],
    device: torch.device | str = "cpu",
    holdout_every: int = 5,
    layers: Sequence[int] | None = None,
    featurize: Callable[[int, Tensor], Tensor] | None = None,
    row_mask: RowMask | None = None,
    excluded: bool = False,
    recording: Recording | None = None,
) -> dict[int, BlockStats]:
    """One pass: {layer: BlockStats} of featurize(layer, X) -> Y.

    Default features [X, 1]; X arrives float64 on ``device``. Batch b is held out when
    (b + 1) % holdout_every == 0. ``row_mask`` (``pillm.probe.masks``) picks the rows of the
    fit; with ``excluded`` the rows it leaves out are accumulated beside them. Memory: one batch
    of rows plus O(p² + pk) per layer and row set (and what ``recording`` keeps, ``_captured``).
    """
    featurize = featurize or (lambda _i, x: _with_ones(x))
    stats: dict[int, BlockStats] = {}
    passes = _captured(model, batches, device, holdout_every, layers, row_mask, False, recording)
    for held, rows, keep, _ in passes:
        for i, (x, y) in rows.items():
            h = featurize(i, x.to(device=device, dtype=_F64))
            if i not in stats:
                p, k = h.shape[1], y.shape[1]
                z = [GramStats.zeros(p, k, device) for _ in range(4 if excluded else 2)]
                stats[i] = BlockStats(*z)
            s = stats[i]
            if row_mask is None:
                (s.held if held else s.train).update(h, y)  # rows die here: only sums survive
                continue
            k = row_mask.rows(keep, y)  # by token, then this block's massive-activation rows
            (s.held if held else s.train).update(h[k], y[k])
            if excluded:
                out = s.held_excluded if held else s.train_excluded
                out.update(h[~k], y[~k])  # type: ignore[union-attr]
    for i, s in stats.items():
        if s.train.n == 0 or s.held.n == 0:
            raise ValueError(
                f"layer {i}: {s.train.n} train / {s.held.n} held-out rows; need both > 0"
                + ("" if row_mask is None else " (probe.rows leaves too few rows: relax it)")
            )
    return stats


def score_windows(
    model: nn.Module,
    batches: Iterable[Batch],
    weights: Mapping[int, Tensor],
    device: torch.device | str = "cpu",
    holdout_every: int = 5,
    row_mask: RowMask | None = None,
    weights_all: Mapping[int, Tensor] | None = None,
    recording: Recording | None = None,
) -> dict[int, tuple[WindowScores, WindowScores | None]]:
    """Held-out rows of each window scored by fitted affine maps (``W``: (d_in + 1, d_out)).

    {layer: (scores of ``weights[layer]`` on the rows ``row_mask`` keeps, scores of
    ``weights_all[layer]`` on every row or None)}; one pass over the held-out batches only.
    """
    layers = sorted(weights)
    parts: dict[int, tuple[list[WindowScores], list[WindowScores]]] = {i: ([], []) for i in layers}
    for _, rows, keep, window in _captured(
        model, batches, device, holdout_every, layers, row_mask, True, recording
    ):
        n_win = int(window.max()) + 1 if window.numel() else 0
        for i, (x, y) in rows.items():
            h, y = _with_ones(x.to(device=device, dtype=_F64)), y.to(dtype=_F64)
            w = weights[i].to(device=device, dtype=_F64)
            if row_mask is None:
                parts[i][0].append(WindowScores.of(y, h @ w, window, n_win))
            else:
                k = row_mask.rows(keep, y)
                parts[i][0].append(WindowScores.of(y[k], h[k] @ w, window[k], n_win))
            if weights_all is not None:
                wa = weights_all[i].to(device=device, dtype=_F64)
                parts[i][1].append(WindowScores.of(y, h @ wa, window, n_win))
    return {
        i: (WindowScores.cat(kept), WindowScores.cat(every) if every else None)
        for i, (kept, every) in parts.items()
    }


def _solve(stats: GramStats, ridge: float, rtol: float | None) -> RidgeSolution:
    # LayerNorm outputs obey Σ_j (x_j - β_j) / γ_j = 0, so [X, 1] is exactly singular for
    # LN-fed FFNs and the fit takes ridge.py's eigh pseudo-inverse (expected, hence silenced;
    # solver and kappa are reported). That drops the null direction; a tiny ridge would not,
    # it would put rounding noise / λ into W along it (harmless for R², not for effective rank).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RidgeFallbackWarning)
        return solve_ridge(stats, lam=ridge * float(stats.hth.diagonal().mean()), rtol=rtol)


def effective_rank(w: Tensor) -> float:
    """exp(entropy of the singular values normalised to sum 1); 0 for a zero matrix."""
    s = torch.linalg.svdvals(w.to(_F64))
    p = s[s > 0] / s.sum()
    return float(torch.exp(-(p * p.log()).sum())) if p.numel() else 0.0


def _bilinear_basis(tr: GramStats, d: int, rank: int) -> tuple[Tensor, Tensor]:
    """(mean (d,), whitened top-``rank`` principal directions (d, rank)) from train stats."""
    mu = tr.h_sum[:d] / tr.n
    cov = tr.hth[:d, :d] / tr.n - torch.outer(mu, mu)
    ev, vec = torch.linalg.eigh((cov + cov.T) / 2)
    ev, vec = ev.flip(0)[:rank], vec.flip(1)[:, :rank]
    # Numerically null directions (LayerNorm's sum constraint, rank > true rank) carry only
    # rounding noise: drop them rather than amplify it. Whitening the rest puts z_i z_j on the
    # scale of X's features whatever the spectrum, so one scalar ridge suits all features.
    keep = ev > float(ev[0]) * 1e-10
    return mu, vec[:, keep] / ev[keep].sqrt()


def probe_model(
    model: nn.Module,
    batches: Iterable[Batch],
    device: torch.device | str = "cpu",
    holdout_every: int = 5,
    rank: int = 16,
    *,
    layers: Sequence[int] | None = None,
    ridge: float = 0.0,
    rtol: float | None = None,
    row_mask: RowMask | None = None,
    outlier_k: int = 0,
    resamples: int = 0,
    seed: int = 0,
    replay_bytes: int = REPLAY_BYTES,
) -> list[dict]:
    """Per probed block, a dict of linear-recoverability metrics and the fitted map ``W``.

    ``batches``: input_ids (B, T), (input_ids, attention_mask) or {"input_ids", "attention_mask"}
    (moved to ``device``, where the model must live); read more than once when ``rank`` > 0 or
    ``resamples`` > 0, so pass a re-iterable (list, DataLoader). Those later passes replay the
    first pass's captured rows while they fit in ``replay_bytes`` (``Recording``: the same
    values, without running the model again). Run the model in float32: the
    eigh cutoff ``rtol`` (ridge.py default p·eps) cannot drop the LN null direction of
    half-precision rows.

    Rows: every fit and score uses the rows ``row_mask`` keeps (``pillm.probe.masks``; None:
    all); beside it the same map is fitted and scored on all rows (``*_all`` keys). Keys: layer,
    name, r2_lin, r2_lin_all, r2_feature_median, effective_rank (of W's d_in x d_out linear
    part), n_train_rows, n_heldout_rows (kept rows), n_excluded_rows (fitting + held-out rows
    left out), excluded_share (of the all-rows held-out output variance, carried by the rows
    left out), d_in, d_out, lam, ridge (lam / mean diag of HᵀH), solver, kappa, W ((d_in + 1,
    d_out) float64 CPU, last row = bias), W_all, heldout (the held-out ``GramStats`` of [X, 1]
    -> Y, to score any other linear map on the same rows); with ``outlier_k`` > 0 (None else)
    outlier_k, outlier_share, r2_no_outliers, outlier_features and their ``_all`` twins
    (``pillm.probe.variance``); with ``resamples`` > 0 (None else) r2_lin_lo, r2_lin_hi,
    r2_lin_all_lo, r2_lin_all_hi, the 95 % percentile bootstrap over held-out windows, and
    n_heldout_windows; and, None when rank = 0, r2_bilinear, bilinear_gain (over r2_lin),
    bilinear_rank (capped at the numerically nonzero principal directions), bilinear_features,
    bilinear_solver, all on the kept rows.
    """
    if (rank > 0 or resamples > 0) and isinstance(batches, Iterator):
        raise TypeError("rank or resamples > 0 need two passes over batches: pass a list")
    names = [n for n, _ in ffn_modules(model)]
    masked = row_mask is not None
    # the later passes (scores, bilinear fit) replay the first pass's rows where they fit
    recording = Recording(replay_bytes) if rank > 0 or resamples > 0 else None
    lin = accumulate_ffn_stats(
        model, batches, device, holdout_every, layers, None, row_mask, masked, recording
    )
    out: list[dict] = []
    none = dict.fromkeys(["outlier_k", "outlier_share", "r2_no_outliers", "outlier_features",
                          "outlier_share_all", "r2_no_outliers_all", "outlier_features_all",
                          "r2_lin_lo", "r2_lin_hi", "r2_lin_all_lo", "r2_lin_all_hi",
                          "n_heldout_windows", "r2_bilinear", "bilinear_gain", "bilinear_rank",
                          "bilinear_features", "bilinear_solver"])  # fmt: skip
    for i, st in lin.items():
        tr, va = st.train, st.held
        d_in, d_out = tr.hty.shape[0] - 1, tr.hty.shape[1]
        sol = _solve(tr, ridge, rtol)
        r2, r2_per = r2_score_from_stats(sol.weight, va)
        tr_all, va_all = st.all_rows()
        sol_all = _solve(tr_all, ridge, rtol) if masked else sol
        rec = dict(
            layer=i, name=names[i], r2_lin=r2,
            r2_lin_all=r2_score_from_stats(sol_all.weight, va_all)[0] if masked else r2,
            r2_feature_median=float(torch.quantile(r2_per, 0.5)),
            effective_rank=effective_rank(sol.weight[:d_in]),
            n_train_rows=tr.n, n_heldout_rows=va.n, n_excluded_rows=tr_all.n + va_all.n - tr.n - va.n,
            excluded_share=excluded_share(va, st.held_excluded) if masked else 0.0,  # type: ignore[arg-type]
            d_in=d_in, d_out=d_out, lam=sol.lam, ridge=ridge, solver=sol.solver, kappa=sol.kappa,
            W=sol.weight.cpu(), W_all=sol_all.weight.cpu(), heldout=va, **none,
        )  # fmt: skip
        if outlier_k > 0:
            rec.update(outlier_k=outlier_k, **outlier_stats(sol.weight, tr, va, outlier_k))
            extra = outlier_stats(sol_all.weight, tr_all, va_all, outlier_k)
            rec.update({f"{k}_all": v for k, v in extra.items()})
        out.append(rec)
    if resamples > 0:
        fits = {r["layer"]: r["W"] for r in out}
        fits_all = {r["layer"]: r["W_all"] for r in out} if masked else None
        scores = score_windows(
            model, batches, fits, device, holdout_every, row_mask, fits_all, recording
        )
        for rec in out:
            kept, every = scores[rec["layer"]]
            lo, hi = bootstrap_r2(kept, resamples, seed)
            lo_all, hi_all = bootstrap_r2(every, resamples, seed) if every else (lo, hi)
            rec.update(r2_lin_lo=lo, r2_lin_hi=hi, r2_lin_all_lo=lo_all, r2_lin_all_hi=hi_all,
                       n_heldout_windows=kept.windows)  # fmt: skip
    if rank > 0:
        bases = {
            i: _bilinear_basis(st.train, st.train.hty.shape[0] - 1, rank) for i, st in lin.items()
        }

        def quad(i: int, x: Tensor) -> Tensor:
            mu, proj = bases[i]
            z = (x - mu) @ proj
            iu = torch.triu_indices(z.shape[1], z.shape[1], device=z.device)
            return torch.cat([_with_ones(x), z[:, iu[0]] * z[:, iu[1]]], dim=1)

        bil = accumulate_ffn_stats(
            model, batches, device, holdout_every, layers, quad, row_mask, recording=recording
        )
        for rec in out:
            tr, va = bil[rec["layer"]]
            sol = _solve(tr, ridge, rtol)
            r2b, r = r2_score_from_stats(sol.weight, va)[0], bases[rec["layer"]][1].shape[1]
            rec.update(r2_bilinear=r2b, bilinear_gain=r2b - rec["r2_lin"], bilinear_rank=r)
            rec.update(bilinear_features=tr.hth.shape[0], bilinear_solver=sol.solver)
    return out


def linear_replacement(W: Tensor, dtype: torch.dtype = torch.float32) -> nn.Linear:
    """nn.Linear computing x @ W[:-1] + W[-1] for W of shape (d_in + 1, d_out)."""
    d_in, d_out = W.shape[0] - 1, W.shape[1]
    lin = nn.Linear(d_in, d_out, device=W.device, dtype=dtype)
    with torch.no_grad():
        lin.weight.copy_(W[:-1].T)
        lin.bias.copy_(W[-1])
    return lin


def default_low_rank(d_in: int, d_out: int, factor: int = 8) -> int:
    """Rank giving ~``factor``x fewer weights than the dense d_in x d_out map (at least 1)."""
    return max(1, d_in * d_out // (factor * (d_in + d_out)))


class LowRankLinear(nn.Module):
    """x -> up(down(x)): rank-k factorisation with k (d_in + d_out) + d_out parameters."""

    def __init__(self, down: nn.Linear, up: nn.Linear):
        super().__init__()
        self.down, self.up = down, up

    def forward(self, x: Tensor) -> Tensor:
        return self.up(self.down(x))

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def low_rank_replacement(
    W: Tensor, rank: int | None = None, dtype: torch.dtype = torch.float32
) -> LowRankLinear:
    """Best rank-k (Eckart-Young) approximation of the linear part of W, bias kept exact.

    Default k = ``default_low_rank(d_in, d_out)`` (about 8x fewer weights than the dense map).
    """
    d_in, d_out = W.shape[0] - 1, W.shape[1]
    k = default_low_rank(d_in, d_out) if rank is None else rank
    if not 1 <= k <= min(d_in, d_out):
        raise ValueError(f"rank must be in [1, {min(d_in, d_out)}], got {k}")
    u, s, vh = torch.linalg.svd(W[:-1].to(_F64), full_matrices=False)
    root = s[:k].sqrt()  # split S evenly so both factors have comparable norms
    down = nn.Linear(d_in, k, bias=False, device=W.device, dtype=dtype)
    up = nn.Linear(k, d_out, device=W.device, dtype=dtype)
    with torch.no_grad():
        down.weight.copy_((u[:, :k] * root).T)
        up.weight.copy_((root.unsqueeze(1) * vh[:k]).T)
        up.bias.copy_(W[-1])
    return LowRankLinear(down, up)


@contextlib.contextmanager
def swap_ffns(model: nn.Module, replacements: Mapping[int, nn.Module]) -> Iterator[nn.Module]:
    """Temporarily make ``replacements[i]`` block i's FFN (maps (..., d) -> (..., d)).

    BERT: ``intermediate`` becomes the replacement and ``output.dense`` an Identity, so dropout,
    residual and LayerNorm still follow. Originals are restored (same objects) in ``finally``.
    """
    family, blocks = _blocks(model)
    _, first, second = _LAYOUT[family]
    if bad := [i for i in replacements if not 0 <= i < len(blocks)]:
        raise IndexError(f"layers {bad} out of range for {len(blocks)} blocks")
    saved: list[tuple[nn.Module, str, nn.Module | None]] = []
    try:
        for i, repl in replacements.items():
            block = blocks[i]
            saved.append((block, first, _get(block, first)))
            _set(block, first, repl)
            if second != first:
                saved.append((block, second, _get(block, second)))
                _set(block, second, nn.Identity())
        yield model
    finally:
        for block, path, original in reversed(saved):
            _set(block, path, original)


# ---------------------------------------------------------------- swaps without the intact prefix


@contextlib.contextmanager
def record_block_outputs(model: nn.Module) -> Iterator[list[list[object]]]:
    """Every block's output, one entry per forward call, for the forwards run inside (per
    block: a list in call order). The hooks are removed on exit."""
    _, blocks = _blocks(model)
    recorded: list[list[object]] = [[] for _ in blocks]
    handles = [
        block.register_forward_hook(lambda _m, _a, out, i=i: recorded[i].append(out))
        for i, block in enumerate(blocks)
    ]
    try:
        yield recorded
    finally:
        for h in handles:
            h.remove()


def _copy(out: object) -> object:
    """A block output (a tensor, or a tuple holding tensors) with fresh tensors: a block that
    adds to its input in place must not change the recording it replays from."""
    if isinstance(out, Tensor):
        return out.clone()
    if type(out) is tuple:
        return tuple(_copy(o) for o in out)
    return out


class _Replay(nn.Module):
    """Stands in for a block below a swapped one: returns the intact model's recorded output of
    the block just below the swap, one per forward call, and computes nothing (whatever it is
    given: the blocks it replaces are skipped)."""

    def __init__(self, outputs: Sequence[object]):
        super().__init__()
        self.outputs, self.calls = outputs, 0

    def forward(self, *args, **kwargs) -> object:
        if self.calls >= len(self.outputs):
            raise RuntimeError(f"replayed block called {self.calls + 1} times, recorded "
                               f"{len(self.outputs)} forwards")  # fmt: skip
        self.calls += 1
        return _copy(self.outputs[self.calls - 1])


@contextlib.contextmanager
def replay_below(
    model: nn.Module, layer: int, outputs: Sequence[object] | None
) -> Iterator[nn.Module]:
    """Temporarily skip blocks 0 .. layer-1: each forward takes block layer-1's recorded output
    (``outputs``, from ``record_block_outputs`` over the same inputs in the same order) as the
    input of block ``layer``. A swap at ``layer`` leaves the blocks below it as they were, so
    the model computes exactly what a whole forward would (the same bits) at the cost of the
    blocks from ``layer`` on. Raises if the forwards inside do not use every recorded output
    once. ``layer`` 0 (or ``outputs`` None) skips nothing."""
    if layer == 0 or outputs is None:
        yield model
        return
    _, blocks = _block_list(model)
    saved = [blocks[i] for i in range(layer)]
    stand_ins = [_Replay(outputs) for _ in range(layer)]
    try:
        for i, stand_in in enumerate(stand_ins):
            blocks[i] = stand_in
        yield model
        if any(s.calls != len(outputs) for s in stand_ins):
            raise RuntimeError(f"replay below block {layer}: the forwards used "
                               f"{[s.calls for s in stand_ins]} of {len(outputs)} recorded "
                               "outputs (run the same batches as the recording)")  # fmt: skip
    finally:
        for i, original in enumerate(saved):
            blocks[i] = original

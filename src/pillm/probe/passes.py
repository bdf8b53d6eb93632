"""Capture passes over a probe's batches, and the recording that later passes replay.

A pass runs every batch once in eval mode without gradients and yields, per batch, the FFN rows
``pillm.probe.capture`` records; ``Recording`` keeps a whole pass so the probe's later passes over
the same batches read it instead of running the model again.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import torch
import torch.nn as nn
from torch import Tensor

from pillm.probe.capture import Batch, _forward, _ids_of, capture_ffn_io
from pillm.probe.masks import RowMask

REPLAY_BYTES = 4 * 2**30  # captured rows a probe keeps for its later passes (SmolLM2 at the
# paper's 160 windows of 128 tokens: 2.8 GB of float32 FFN inputs and outputs)

Captured = tuple[bool, dict[int, tuple[Tensor, Tensor]], Tensor | None, Tensor]


class Recording:
    """What a capture pass yields, batch by batch, kept for the probe's later passes over the
    same batches: they read it instead of running the model again (a pass is one forward of
    every batch, most of a probe's time on a CPU). The rows are the forward's own tensors, so a
    replayed pass computes the same bits. Kept while it fits in ``budget`` bytes; past that it
    is dropped and the later passes run the model again."""

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

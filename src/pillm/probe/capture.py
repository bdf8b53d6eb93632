"""Activation capture of FFN blocks: where each family keeps its FFN, and hooks that record it.

Each FFN block is treated as a position-wise map X (rows, d_in) -> Y (rows, d_out), X being the
block's FFN input and Y its output before any dropout, residual add or norm. Hooks are added
only inside ``capture_ffn_io``'s ``with`` block and removed in its ``finally``.

Families: the pipeline's ``GPT``; Hugging Face ``gpt2``, ``gpt_neox``, ``llama``, ``bert``.
BERT's FFN is two modules (``intermediate`` then ``output.dense``): it is captured by a pre-hook
on the first and a hook on the second, and swapped as a pair (``pillm.probe.swap``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import reduce

import torch
import torch.nn as nn
from torch import Tensor

from pillm.models.gpt import GPT

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

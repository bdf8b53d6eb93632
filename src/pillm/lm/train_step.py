"""One optimizer step of ``train.fit``: eager (CPU, the reference numerics) or fast (CUDA).

At the paper shape a step is 4,096 tokens: a GPU spends more time launching a few hundred small
kernels than running them. The fast path removes that overhead with three levers, each a
``train.*`` config key and each applied on CUDA only (CPU always runs the eager step, so CPU
metrics stay bit-identical whatever the keys say):

- ``compile``: ``torch.compile`` of forward + loss (Inductor fuses the elementwise ops);
- ``cuda_graphs``: after ``GRAPH_WARMUP`` eager steps, the whole step (forward, backward,
  gradient clip, fused AdamW with ``capturable=True`` and the learning rate as a device tensor)
  is captured once into a CUDA graph (pillm.accel.cuda_graph) and replayed: one launch per
  step, no host sync;
- ``output_layer``: how the output layer and cross-entropy run: ``dense`` (the model's own
  logits, then ``F.cross_entropy``), ``chunked`` (``kernels.linear_ce``, ``ce_chunk`` rows at a
  time, so the (tokens x vocab) logits never exist at once) or ``fused`` (``kernels.fused_ce``:
  Triton kernels that keep the logits on chip, for the small model width of the paper). Where
  the kernels' tiles cannot serve the model's width on the device (``kernels.tiles``), a
  ``fused`` step computes the logits densely and says why in one line (``output_layer_at``).

If compiling or capturing fails (e.g. a variant's module that Dynamo or graph capture cannot
handle) the step falls back, warns on stderr, and ``path()`` reports what actually ran, which
``fit`` records in the run's metrics (``compiled``, ``cuda_graphs``).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass

import torch

from pillm.accel.cuda_graph import GraphedStep
from pillm.accel.kernels import uses_kernels
from pillm.core.adamw import AdamW
from pillm.lm.config import TrainConfig, check_output_layer
from pillm.lm.kernels.fused_ce import fused_linear_cross_entropy, kernel_tiles
from pillm.lm.kernels.linear_ce import linear_cross_entropy
from pillm.models.gpt import GPT

GRAPH_WARMUP = 3  # eager steps before capture (pillm.accel.cuda_graph)
AMP = torch.bfloat16  # the matmuls' dtype on CUDA (autocast); CPU runs float32


@dataclass(frozen=True)
class StepOptions:
    compile: bool = False
    cuda_graphs: bool = False
    ce_chunk: int = 0  # rows per chunk of output_layer "chunked"
    output_layer: str = "dense"  # dense | chunked | fused (pillm.lm.config.OUTPUT_LAYERS)
    backend: str | Callable = "inductor"  # torch.compile backend (tests: "aot_eager", no codegen)

    def __post_init__(self) -> None:
        check_output_layer(self.output_layer, self.ce_chunk)

    @classmethod
    def from_config(cls, train_cfg: TrainConfig, device: str) -> StepOptions:
        """The ``train.compile / cuda_graphs / ce_chunk / output_layer`` keys on CUDA; all off
        elsewhere."""
        if not device.startswith("cuda"):
            return cls()
        return cls(
            compile=train_cfg.compile,
            cuda_graphs=train_cfg.cuda_graphs,
            ce_chunk=train_cfg.ce_chunk,
            output_layer=train_cfg.output_layer,
        )

    @property
    def fast(self) -> bool:
        return self.compile or self.cuda_graphs or self.output_layer != "dense"


def make_optimizer(
    model: torch.nn.Module, cfg: TrainConfig, device: str, capturable: bool = False
) -> torch.optim.Optimizer:
    """AdamW, fused on CUDA; ``capturable``: step counters and lr on the device (CUDA graphs)."""
    # Decay matrices only (nanoGPT): biases, LayerNorm gains and nothing 1-D.
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": cfg.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    if not capturable:
        return AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), fused=device.startswith("cuda"))
    lr = torch.tensor(float(cfg.lr), device=device)
    opt = AdamW(groups, lr=lr, betas=tuple(cfg.betas), fused=True, capturable=True)
    for g in opt.param_groups:  # one shared device scalar: a step sets it with one fill_
        g["lr"] = lr
    return opt


def output_layer_at(output_layer: str, d: int, vocab: int, device: str) -> str:
    """The output layer a step on ``device`` runs for ``output_layer`` at width ``d`` and
    ``vocab`` classes: ``fused`` gives way to ``dense`` where the kernels have no tiles for that
    width there (``kernels.tiles.choose_tiles``), said once on stderr."""
    dev = torch.device(device)
    if output_layer != "fused" or not uses_kernels(dev):
        return output_layer
    choice = kernel_tiles(d, vocab, AMP if dev.type == "cuda" else torch.float32, dev)
    if choice.blocks is None:
        _say_dense(choice.reason)
        return "dense"
    return output_layer


@functools.cache
def _say_dense(reason: str) -> None:
    print(f"train.output_layer: fused: {reason}; the logits are computed densely "
          "(train.output_layer: dense)", file=sys.stderr)  # fmt: skip


class TrainStep:
    """``step(chunk, lr) -> loss``: one AdamW step on a (B, T+1) batch of token windows.

    The returned loss is a device tensor that stays valid (no host sync is needed to read it
    later). ``grad_clip`` > 0 clips the global gradient norm before the step.
    """

    def __init__(self, model: GPT, train_cfg: TrainConfig, device: str, options: StepOptions):
        if options.cuda_graphs and not device.startswith("cuda"):
            raise ValueError(f"train.cuda_graphs needs a CUDA device, got {device!r}")
        self.model, self.device, self.options = model, device, options
        self.ce_chunk = options.ce_chunk  # plain values: what the compiled loss guards on
        self.clip = float(train_cfg.grad_clip)
        self.amp = AMP if device.startswith("cuda") else None
        vocab, d = model.lm_head.weight.shape
        self.output_layer = output_layer_at(options.output_layer, d, vocab, device)
        self.opt = make_optimizer(model, train_cfg, device, capturable=options.cuda_graphs)
        self.lr = self.opt.param_groups[0]["lr"] if options.cuda_graphs else None
        self.loss_fn = (
            torch.compile(self._loss, dynamic=False, backend=options.backend)
            if options.compile
            else self._loss
        )
        self.compiled = options.compile
        self.runner = GraphedStep(
            self._guarded, options.cuda_graphs, lambda: self.opt.zero_grad(set_to_none=True),
            GRAPH_WARMUP, "this run (metric cuda_graphs = 0)",
        )  # fmt: skip

    def path(self) -> dict[str, float]:
        """What ran (1/0), for the run's metrics."""
        return {"compiled": float(self.compiled), "cuda_graphs": float(self.runner.graphed)}

    # -------------------------------------------------------------------- the step itself
    def _autocast(self) -> torch.autocast:
        kind = self.device.split(":")[0]
        return torch.autocast(kind, dtype=self.amp, enabled=self.amp is not None)

    def _loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.output_layer == "dense":
            return self.model(x, y)[1]
        w = self.model.lm_head.weight
        dtype = self.amp or w.dtype
        if self.output_layer == "fused":
            return fused_linear_cross_entropy(self.model.hidden(x), w, y, compute_dtype=dtype)
        return linear_cross_entropy(self.model.hidden(x), w, y, self.ce_chunk, dtype)

    def _eager(self, chunk: torch.Tensor, lr: float) -> torch.Tensor:
        """The reference step: exactly the operations (and order) of the original loop."""
        x, y = chunk[:, :-1], chunk[:, 1:]
        for g in self.opt.param_groups:
            g["lr"] = lr
        with self._autocast():
            _, loss = self.model(x, y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.opt.step()
        return loss.detach()

    def _fast(self, chunk: torch.Tensor) -> torch.Tensor:
        """Forward, backward, clip, step with no host sync (capturable as one graph)."""
        x, y = chunk[:, :-1], chunk[:, 1:]
        with self._autocast():
            loss = self.loss_fn(x, y)
        loss.backward()
        if self.clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.opt.step()
        return loss.detach()

    def __call__(self, chunk: torch.Tensor, lr: float) -> torch.Tensor:
        if not self.options.fast:
            return self._eager(chunk, lr)
        if self.lr is not None:
            self.lr.fill_(lr)  # a device write, no sync
        else:
            for g in self.opt.param_groups:
                g["lr"] = lr
        return self.runner(chunk)

    def _guarded(self, chunk: torch.Tensor) -> torch.Tensor:
        if not self.compiled or self.runner.n_calls > 1:
            return self._fast(chunk)
        try:  # the first call compiles: a variant Dynamo/Inductor cannot handle runs eagerly
            return self._fast(chunk)
        except Exception as err:  # noqa: BLE001 - any compiler failure means: run uncompiled
            print(f"warning: torch.compile failed ({type(err).__name__}: {err}); "
                  "this run trains uncompiled (metric compiled = 0)", file=sys.stderr)  # fmt: skip
            self.compiled, self.loss_fn = False, self._loss
            self.opt.zero_grad(set_to_none=True)
            return self._fast(chunk)

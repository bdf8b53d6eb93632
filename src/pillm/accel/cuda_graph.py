"""One training step replayed from a CUDA graph: the project's one implementation of capture.

A small model's step is a few dozen kernels that each run for microseconds, so the GPU waits on
the host launching them. ``GraphedStep`` runs the step eagerly for a few warm-up calls (on a side
stream, as the CUDA-graph docs ask: optimizer state and library handles get allocated), then
captures it once and replays it: one launch per step and no host sync. The step must be
capturable: no host sync inside, device tensors for anything that changes between steps (an
optimizer built with ``capturable=True`` and its learning rate as a device tensor), and
gradients set to None before capture (``prepare``) so backward allocates them in the graph.

If capture fails the step keeps running eagerly and says so on stderr; ``graphed`` tells which
path ran, for the run's metrics.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from torch import Tensor

WARMUP_CALLS = 3  # eager calls before capture


class GraphedStep:
    """``step(*inputs) -> Tensor`` (inputs: device tensors of fixed shape), replayed from a CUDA
    graph after ``warmup`` eager calls when ``enabled``; always eager otherwise (CPU).

    ``prepare()`` runs before every eager call and before capture (typically
    ``opt.zero_grad(set_to_none=True)``). Each call returns a tensor that stays valid after the
    next replay (a clone of the graph's output).
    """

    def __init__(
        self,
        step: Callable[..., Tensor],
        enabled: bool,
        prepare: Callable[[], None] = lambda: None,
        warmup: int = WARMUP_CALLS,
        name: str = "this run",
    ):
        self.step, self.enabled, self.prepare, self.warmup, self.name = (
            step, enabled, prepare, warmup, name,
        )  # fmt: skip
        self.graph: torch.cuda.CUDAGraph | None = None
        self.side = torch.cuda.Stream() if enabled else None
        self.n_calls = 0

    @property
    def graphed(self) -> bool:
        return self.graph is not None

    def __call__(self, *inputs: Tensor) -> Tensor:
        self.n_calls += 1
        if self.graph is not None:
            for static, value in zip(self.static_inputs, inputs, strict=True):
                static.copy_(value)
            self.graph.replay()
            return self.static_output.clone()
        if self.enabled and self.n_calls > self.warmup:
            out = self._capture(inputs)
            if out is not None:
                return out
        return self._eager(inputs)

    def _eager(self, inputs: tuple[Tensor, ...]) -> Tensor:
        self.prepare()
        if self.side is None:
            return self.step(*inputs)
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):  # warm-up off the capture-to-be stream (CUDA docs)
            out = self.step(*inputs)
        torch.cuda.current_stream().wait_stream(self.side)
        return out.clone()

    def _capture(self, inputs: tuple[Tensor, ...]) -> Tensor | None:
        """Capture the step into a CUDA graph and run it once; None if capture failed."""
        self.static_inputs = [x.clone() for x in inputs]
        self.prepare()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):  # records only: nothing runs until replay
                self.static_output = self.step(*self.static_inputs)
        except Exception as err:  # noqa: BLE001 - any capture failure means: run without graphs
            print(f"warning: CUDA graph capture failed ({type(err).__name__}: {err}); "
                  f"{self.name} runs without graphs", file=sys.stderr)  # fmt: skip
            self.enabled, self.side = False, None
            torch.cuda.synchronize()
            return None
        self.graph = graph
        graph.replay()
        return self.static_output.clone()

"""The LM's output layer + cross-entropy without its (tokens x vocab) logits in memory at once.

Both return the mean cross-entropy of ``h @ w.T`` against the targets and compute both gradients
in the forward (the loss is a training step's last operation), so the backward only scales them:

- ``linear_ce``: torch operations, ``chunk`` rows of logits at a time (``train.output_layer:
  chunked``);
- ``fused_ce``: Triton kernels (``fused_ce_kernels``) that keep the logits on chip
  (``train.output_layer: fused``), their tiles chosen per width and device (``tiles``), with
  ``linear_ce``'s computation where Triton cannot run or no tiles fit.

``pillm.lm.train_step`` picks one; ``benchmarks/output_layer_speed.py`` times them
(``benchmarks/README.md``).
"""

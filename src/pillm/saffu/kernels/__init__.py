"""SAFFU's CUDA kernels: its sparse products and softmax loss as fixed-order sums.

Contract of the package: every function takes a batch of sparse rows ``X`` (B, n_in) as ``k``
non-zeros a row (``idx`` (B, k) integer inputs, ``wts`` (B, k) weights), the weight ``W``
(n_in, V) and dense (B, V) matrices as contiguous row-major float32 tensors, and returns float32
values summed in an order that depends on the shapes and ``idx`` alone (no atomics), so a rerun
on the same device gives the same bits.

- ``segment_sum``: ``X W``, ``X^T G`` and an AdamW update with ``X^T G`` summed inside it
  (``embedding_bag``'s values where the kernels do not run);
- ``softmax_loss``: the softmax cross-entropy of ``X W`` without storing its logits, and its
  gradient with respect to the logits (kernels only);
- ``segment_kernels``: the Triton programs both launch, imported only where they run (a CUDA
  device, or CPU tensors under the Triton interpreter: ``pillm.accel.kernels.uses_kernels``), so
  a CPU job never imports Triton.

Their speed at the paper shape is in benchmarks/README.md ("SAFFU step and update").
"""

"""GPU plumbing: one device per job, CUDA graphs, the driver's queries, where Triton kernels run."""

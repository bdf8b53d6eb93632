"""The samplers' loops never make the host wait for the GPU (CUDA only).

A sampler that waits at every step leaves the GPU idle between steps. torch's sync debug mode
"error" raises at any synchronizing operation."""

import contextlib

import pytest
import torch

from pillm.core.runtime import resolve_device
from pillm.generative.diffusion import EpsModel, linear_beta_schedule, sample_ddpm
from pillm.generative.features import FeatureConfig, RandomFeatureNet
from pillm.generative.flow import sample_flow
from pillm.lora.base import pad_batch, to_device

cuda = pytest.mark.gpu


@contextlib.contextmanager
def no_host_sync():
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


@cuda
@pytest.mark.parametrize("n_buckets", [1, 4])
def test_ddpm_sampling_never_syncs(n_buckets):
    net = RandomFeatureNet(6, 6, FeatureConfig(width=16), seed=0, trainable=False).cuda()
    model = EpsModel(net, timesteps=50, n_buckets=n_buckets).cuda()
    sched = linear_beta_schedule(50)  # the shortest schedule the default betas allow
    with no_host_sync():
        x = sample_ddpm(model, 300, 6, sched, seed=0, device="cuda", batch_size=128, clip_x0=1.0)
    assert x.shape == (300, 6) and bool(torch.isfinite(x).all())


@cuda
def test_flow_sampling_never_syncs():
    net = RandomFeatureNet(6, 6, FeatureConfig(width=16), seed=0, trainable=False).cuda()
    with no_host_sync():
        x = sample_flow(net, 300, 6, steps=5, method="heun", seed=0, device="cuda", batch_size=128)
    assert x.shape == (300, 6)


@cuda
def test_sst2_batches_reach_the_gpu_without_a_wait():
    """The SST-2 LoRA step's ids, mask and labels (a copy from pageable memory waited)."""
    with no_host_sync():
        x, m = pad_batch([[5, 6, 7], [8]], 0, "cuda")
        y = to_device(torch.tensor([1, 0]), "cuda")
    assert x.cpu().tolist() == [[5, 6, 7], [8, 0, 0]] and m.cpu().tolist() == [[1, 1, 1], [1, 0, 0]]
    assert y.cpu().tolist() == [1, 0]


@cuda
def test_the_audit_switch_turns_on_torchs_sync_debug_mode(monkeypatch):
    monkeypatch.setenv("PILLM_SYNC_DEBUG", "warn")
    try:
        resolve_device("cuda")
        assert torch.cuda.get_sync_debug_mode() == 1
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_a_job_planned_for_a_gpu_refuses_to_fall_back_to_cpu(monkeypatch):
    """device: auto without a usable GPU in a job the workflow planned for one (the shell prefix
    sets PILLM_DEVICE_KIND=cuda) stops, naming the variables that hide the GPU; unplanned, it
    runs on CPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.delenv("PILLM_DEVICE_KIND", raising=False)
    assert resolve_device("auto") == "cpu"
    monkeypatch.setenv("PILLM_DEVICE_KIND", "cuda")
    with pytest.raises(RuntimeError, match="CUDA_VISIBLE_DEVICES=1"):
        resolve_device("auto")

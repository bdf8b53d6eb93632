"""Benchmark: DDPM sampling with a host sync at every step, against the pipeline's sync-free loop.

Until 2026-11-28 ``EpsModel.forward`` turned the sampler's Python timestep into a tensor with
``torch.as_tensor``: a copy from pageable memory, so the host waited for the GPU at each of the
T steps of every batch. The "sync" arm reproduces that (``SyncingEpsModel``); the "free" arm is
the pipeline's path (``torch.full``). Each of ``--procs`` processes samples the paper's shape (the
PIL diffusion net at width 4,096, ``--n`` rows in batches of 2,048, T = 1,000) at once, as the
DAG's jobs share one GPU; run it under MPS, as the DAG does. Prints seconds per process (mean and
slowest) and the sync / free ratio, per image size and process count.

    python benchmarks/ddpm_sample.py --procs 1 --procs 8 --out ddpm_sample.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")

WORKER = """
import json, sys, time, torch
from pillm.core.runtime import resolve_device, sync, tf32
from pillm.generative.diffusion import EpsModel, linear_beta_schedule, sample_ddpm
from pillm.generative.flow import FeatureConfig, RandomFeatureNet

class SyncingEpsModel(EpsModel):
    def forward(self, x, t):  # the old path: a Python timestep copied to the device
        return super().forward(x, torch.as_tensor(t, device=x.device) if isinstance(t, int) else t)

dim, width, n, T, syncing, start_at = {dim}, {width}, {n}, {T}, {syncing}, {start_at}
device = resolve_device("{device}")
net = RandomFeatureNet(dim, dim, FeatureConfig(width=width), seed=0, trainable=False)
torch.nn.init.normal_(net.w_out, std=1e-3, generator=torch.Generator().manual_seed(1))
net = net.to(device)
model = (SyncingEpsModel if syncing else EpsModel)(net, T).to(device)
sched = linear_beta_schedule(T)
with tf32(device.startswith("cuda")):
    sample_ddpm(model, 64, dim, sched, device=device)  # warm-up: kernels, libraries
    sync(device)
    time.sleep(max(0.0, start_at - time.time()))
    t0 = time.time()
    x = sample_ddpm(model, n, dim, sched, seed=0, device=device)
    sync(device)
print(json.dumps({{"start": t0, "seconds": time.time() - t0, "sum": float(x.double().sum())}}))
"""


def run(dim, width, n, T, procs, syncing, device, margin=8.0) -> dict:
    start_at = time.time() + margin + procs  # start-up (imports, CUDA context) off the clock
    code = WORKER.format(
        dim=dim, width=width, n=n, T=T, syncing=syncing, start_at=start_at, device=device
    )
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    jobs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(procs)
    ]
    texts = [j.communicate()[0] for j in jobs]
    if any(j.returncode for j in jobs):
        raise SystemExit(f"a worker failed (procs={procs}, sync={syncing})")
    outs = [json.loads(t.strip().splitlines()[-1]) for t in texts]
    if max(o["start"] for o in outs) > start_at + 0.5:
        raise SystemExit(f"start-up outlasted the common start (procs={procs})")
    secs = [o["seconds"] for o in outs]
    return {"dim": dim, "width": width, "n": n, "timesteps": T, "procs": procs,
            "arm": "sync" if syncing else "free", "mean_s": round(sum(secs) / len(secs), 3),
            "max_s": round(max(secs), 3), "sample_sum": outs[0]["sum"]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procs", type=int, action="append", help="process counts (default 1, 8)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--n", type=int, default=5000, help="rows sampled (the paper's n_eval)")
    ap.add_argument("--tiny", action="store_true", help="small shapes (a CPU smoke test)")
    ap.add_argument("--images", action="append", choices=["mnist", "cifar10"],
                    help="image sizes to run (repeatable; default both)")  # fmt: skip
    ap.add_argument("--margin", type=float, default=8.0,
                    help="seconds (plus one a process) for the processes' start-up before the "
                    "common start")  # fmt: skip
    ap.add_argument("--out", help="write the rows as JSON")
    a = ap.parse_args()
    dims = {"tiny": 8} if a.tiny else {"mnist": 784, "cifar10": 3072}
    dims = {k: v for k, v in dims.items() if a.tiny or not a.images or k in a.images}
    width, T, n = (16, 50, 64) if a.tiny else (4096, 1000, a.n)
    rows = []
    for name, dim in dims.items():
        for procs in a.procs or [1, 8]:
            pair = {s: run(dim, width, n, T, procs, s, a.device, a.margin) for s in (True, False)}
            if pair[True]["sample_sum"] != pair[False]["sample_sum"]:
                raise SystemExit(f"{name}: the two arms sampled different values")
            rows += pair.values()
            print(f"{name:8s} procs {procs:2d}: sync {pair[True]['mean_s']:.2f} s "
                  f"(slowest {pair[True]['max_s']:.2f}), free {pair[False]['mean_s']:.2f} s "
                  f"(slowest {pair[False]['max_s']:.2f}): "
                  f"{pair[True]['mean_s'] / pair[False]['mean_s']:.2f}x", flush=True)  # fmt: skip
    if a.out:
        Path(a.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

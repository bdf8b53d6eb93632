"""Benchmark: the per-job fixed cost of LM runs, and what each lever removes.

Every LM job of the pipeline is a process: interpreter and imports, CUDA context, data on the
device, then torch.compile and CUDA-graph capture in its first steps, and only then the training
the paper is about. This script runs ``python -m pillm run-lm`` exactly as the ``run_lm`` rule
does (same ``--params`` from the config) and reads each job's own timing records:

* ``startup_time_s``: process start to the run's first line (interpreter, imports);
* ``warmup_time_s``: the first ``train.warmup_steps_timing`` steps beyond their steady-state
  share (compilation, graph capture, allocator warm-up);
* ``grad_time_s`` / ``solve_time_s``: the training and solves; ``job_time_s``: the whole job.

Cases: ``cold`` (an empty compile cache: ``TORCHINDUCTOR_CACHE_DIR`` in a fresh folder), ``warm``
(the same cache again: what every job after the first of its shape sees in a pipeline run), and
``lm-extras`` for several seeds in one process (its per-variant batching).

    python benchmarks/job_overhead.py --tokens-dir results/paper/tokens/wikitext2 --device cuda
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from pillm.lm import plan as lm_plan  # noqa: E402
from pillm.plan import check_config  # noqa: E402

RECORDS = ("startup_time_s", "warmup_time_s", "grad_time_s", "solve_time_s", "job_time_s",
           "tokens_per_s", "compiled", "cuda_graphs")  # fmt: skip


def merge(base: dict, over: dict) -> dict:
    """``over`` on ``base``, section by section (as Snakemake merges config files)."""
    for k, v in over.items():
        base[k] = merge(base.get(k) or {}, v) if isinstance(v, dict) else v
    return base


def config(paths: list[str]) -> dict:
    cfg: dict = {}
    for p in paths:
        merge(cfg, yaml.safe_load(Path(p).read_text()))
    check_config(cfg, ROOT / "config" / "schema.yaml")
    return cfg


def run_lm(cfg: dict, variant: str, seed: int, tokens: str, out: Path, device: str, env: dict):
    cmd = [sys.executable, "-m", "pillm", "run-lm", "--variant", variant, "--seeds", str(seed),
           "--tokens-dir", tokens, "--deps", "--params", json.dumps(lm_plan.lm_params(cfg, variant)),
           "--device", device, "--out-dirs", str(out)]  # fmt: skip
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode:
        raise SystemExit(f"run-lm {variant} failed:\n{done.stderr[-3000:]}")
    rows = json.loads((out / "metrics.json").read_text())
    values = {r["metric"]: r["value"] for r in rows if r["metric"] in RECORDS}
    return {"variant": variant, "seed": seed, "wall_s": wall, **values}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens-dir", required=True)
    ap.add_argument("--configfile", nargs="+", default=[str(ROOT / "config" / "config.yaml")])
    ap.add_argument("--variants", nargs="+", default=["baseline", "attn_only"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--extras-seeds", type=int, default=3)
    ap.add_argument("--out", default=None, help="JSON record")
    args = ap.parse_args()
    cfg = config(args.configfile)
    import os

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": f"{tmp}/inductor",
               "PYTHONPATH": f"{ROOT / 'src'}:{os.environ.get('PYTHONPATH', '')}"}  # fmt: skip
        for case, seed in (("cold", 0), ("warm", 1), ("warm", 2)):
            for v in args.variants:
                row = run_lm(cfg, v, seed, args.tokens_dir, Path(tmp) / v / str(seed),
                             args.device, env)  # fmt: skip
                rows.append({"case": case, **row})
                print(json.dumps({k: round(x, 3) if isinstance(x, float) else x
                                  for k, x in rows[-1].items()}), flush=True)  # fmt: skip
        # several runs in one process: what a job that trained all seeds of a variant would pay
        v = args.variants[0]
        code = (
            "import json, sys, time\n"
            "from pillm.lm.run import run_variant\n"
            "p = json.loads(sys.argv[1])\n"
            "for seed in (3, 4, 5):\n"
            "    t0 = time.perf_counter()\n"
            "    m = run_variant(sys.argv[2], seed, p, sys.argv[3], {}, f'{sys.argv[4]}/{seed}',"
            " sys.argv[5])\n"
            "    print(json.dumps({'seed': seed, 'wall_s': time.perf_counter() - t0,"
            " 'grad_time_s': m['grad_time_s'], 'warmup_time_s': m.get('warmup_time_s')}))\n"
        )
        done = subprocess.run([sys.executable, "-c", code, json.dumps(lm_plan.lm_params(cfg, v)), v,
                               args.tokens_dir, f"{tmp}/inproc", args.device], env=env,
                              capture_output=True, text=True)  # fmt: skip
        if done.returncode:
            raise SystemExit(f"in-process runs failed:\n{done.stderr[-3000:]}")
        in_process = [json.loads(ln) for ln in done.stdout.splitlines() if ln.startswith("{")]
        for r in in_process:
            print(json.dumps({"case": "in-process", "variant": v, **r}), flush=True)
        dirs = [str(Path(tmp) / v / str(s)) for s in range(min(3, args.extras_seeds))]
        params = {"data": cfg["data"], "lambada": cfg["lambada"], "samples": cfg["samples"]}
        extras = []
        for batch in ([dirs[0]], dirs):
            cmd = [sys.executable, "-m", "pillm", "lm-extras", "--run-dirs", *batch,
                   "--tokens-dir", args.tokens_dir, "--params", json.dumps(params),
                   "--device", args.device]  # fmt: skip
            t0 = time.perf_counter()
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"lm-extras failed:\n{done.stderr[-3000:]}")
            extras.append({"runs": len(batch), "wall_s": time.perf_counter() - t0})
            print(json.dumps(extras[-1]), flush=True)
    print("\nper-job fixed cost (run-lm): wall - grad - solve")
    for r in rows:
        fixed = r["wall_s"] - r.get("grad_time_s", 0) - r.get("solve_time_s", 0)
        print(f"  {r['case']:<5} {r['variant']:<12} wall {r['wall_s']:6.1f} s  fixed {fixed:5.1f} s"
              f"  startup {r.get('startup_time_s', float('nan')):4.1f} s"
              f"  warm-up {r.get('warmup_time_s', float('nan')):5.1f} s"
              f"  train {r.get('grad_time_s', 0):5.1f} s")  # fmt: skip
    for r in in_process:
        warmup = r["warmup_time_s"]  # None: a variant that only solves has no training warm-up
        warmup = float("nan") if warmup is None else warmup
        print(
            f"  one process, {v} seed {r['seed']}: wall {r['wall_s']:5.1f} s "
            f"(train {r['grad_time_s']:.1f} s, warm-up {warmup:.1f} s)"
        )
    one, many = extras
    print(
        f"lm-extras: 1 run {one['wall_s']:.1f} s; {many['runs']} runs in one process "
        f"{many['wall_s']:.1f} s ({many['wall_s'] / many['runs']:.1f} s a run)"
    )
    if args.out:
        Path(args.out).write_text(
            json.dumps({"run_lm": rows, "in_process": in_process, "lm_extras": extras}, indent=1)
        )


if __name__ == "__main__":
    main()

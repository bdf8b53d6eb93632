"""The driver of these records: scaling points and the cost job, in one process on the device.

    PYTHONPATH=src python3 measure.py OUT wikitext2:d256_L4_f100 wikitext2:d768_L4_f100 cost

It reads config.yaml and schema.yaml from the working directory (copies of config/), tokens from
tokens/<corpus>/ and writes OUT/measure.jsonl (and OUT/cost.json). An item
``corpus:point:{json}`` overrides the point's variants, seeds, lrs or lr_extend.
"""

import json
import sys
import time
from pathlib import Path

import yaml

from pillm.core.config import apply_schema
from pillm.lm.scaling import cost_params, families, point_params
from pillm.lm.scaling_cost import measure_cost
from pillm.lm.scaling_run import run_point

RUN_KEYS = ("grad_time_s", "warmup_time_s", "solve_time_s", "job_time_s", "startup_time_s",
            "tokens_per_s", "train_steps", "peak_memory_mb", "val_loss", "test_ppl",
            "params_non_embedding")  # fmt: skip


def toks(folder: str) -> list[str]:
    return [f"{folder}/{s}" for s in ("train.npy", "valid.npy", "test.npy", "meta.json")]


def point(cfg, corpus, name, variants=None, seeds=None, lrs=None, ext=None) -> dict:
    p = point_params(cfg, corpus, name)
    if variants:
        p["runs"] = {v: p["runs"][v] for v in variants}
        p["families"] = families(variants)
    p["seeds"] = seeds or p["seeds"]
    p["lrs"] = lrs or p["lrs"]
    p["lr_extend"] = p["lr_extend"] if ext is None else ext
    d = Path("/tmp/scal") / corpus / name
    t0 = time.perf_counter()
    run_point(p, toks(f"tokens/{corpus}"), str(d / "runs.parquet"), str(d / "curves.parquet"),
              str(d / "lr.json"), "cuda")  # fmt: skip
    wall = time.perf_counter() - t0
    runs = []
    for v in p["runs"]:
        for s in p["seeds"]:
            rows = json.loads((d / v / f"seed{s}" / "metrics.json").read_text())
            m = {r["metric"]: r["value"] for r in rows}
            runs.append({"variant": v, "seed": s, **{k: m.get(k) for k in RUN_KEYS}})
    lr = json.loads((d / "lr.json").read_text())
    return {"kind": "point", "corpus": corpus, "point": name, "wall_s": wall, "lr": lr, "runs": runs}


def main() -> None:
    out, items = Path(sys.argv[1]), sys.argv[2:]
    cfg = apply_schema(yaml.safe_load(Path("config.yaml").read_text()), "schema.yaml")
    with open(out / "measure.jsonl", "a") as log:
        for item in items:
            t0 = time.perf_counter()
            if item == "cost":
                measure_cost(cost_params(cfg), toks("tokens/wikitext2"), str(out / "cost.json"),
                             "cuda")  # fmt: skip
                rec = {"kind": "cost", "wall_s": time.perf_counter() - t0,
                       "rows": json.loads((out / "cost.json").read_text())}  # fmt: skip
            else:
                corpus, name, *rest = item.split(":", 2)
                rec = point(cfg, corpus, name, **(json.loads(rest[0]) if rest else {}))
            log.write(json.dumps(rec) + "\n")
            log.flush()
            print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()

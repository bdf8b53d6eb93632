"""GPU-time estimate of the paper config's scaling study from the H200 records beside this file.

Per run: training seconds (grad_time_s of measure.jsonl's d=256 and d=768 points at 5 epochs on
WikiText-2; d=128/384/512 interpolated by cost.json's FFN-only AdamW times), scaled by epochs/5
and by the corpus's train tokens, plus the test/validation evaluation (forward of the test split)
and, for pil_then_attn, the solve (cost.json: Gram in proportion to tokens and depth, the
decomposition per layer). A point runs 3 seeds of each variant plus the rate search on the first
seed: 3.5 runs per family (3 grid points, an edge extension half the time), one reused.

    python benchmarks/records/scaling_h200/estimate.py
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
TOKENS = {"wikitext2": 232309, "ptb": 83604, "tinyshakespeare": 305972}  # GPT-2 BPE train
TEST = {"wikitext2": 295877, "ptb": 105243, "tinyshakespeare": 15299}
FAMILY_HEADS = ("baseline", "attn_only", "ffn_only")  # the search runs' variants


def records():
    points = [json.loads(x) for x in (HERE / "measure.jsonl").read_text().splitlines()]
    grad = {}
    for p in points:
        if p["kind"] == "point" and p["corpus"] == "wikitext2":
            d = int(p["point"].split("_")[0][1:])
            by = {}
            for r in p["runs"]:
                if r["seed"] != 0:  # later seeds: no compile in the timed window
                    by.setdefault(r["variant"], []).append(r["grad_time_s"])
            grad[d] = {v: sum(x) / len(x) for v, x in by.items()}
    cost = {r["d_model"]: r for r in json.loads((HERE / "cost.json").read_text())}
    return grad, cost


def run_grad(grad, cost, v, d, layers):
    a = {k: cost[k]["adamw_s"] for k in cost}
    if d in grad:
        g = grad[d][v]
    elif d < 256:
        g = grad[256][v] * a[d] / a[256]
    else:
        g = grad[256][v] + (grad[768][v] - grad[256][v]) * (a[d] - a[256]) / (a[768] - a[256])
    return g * (0.25 + 0.75 * layers / 4)  # embeddings and head: about a quarter of a step


def point(grad, cost, corpus, d, layers, frac, variants, seeds, epochs, search):
    t = TOKENS[corpus] * frac / TOKENS["wikitext2"]
    ev = 0.05 * TEST[corpus] / TEST["wikitext2"] * (d / 256) ** 1.5
    runs = {v: seeds + (search - 1 if v in FAMILY_HEADS else 0) for v in variants}
    s = sum(n * (run_grad(grad, cost, v, d, layers) * epochs / 5 * t + ev) for v, n in runs.items())
    if "pil_then_attn" in variants:
        c = cost[d]
        s += seeds * (c["gram_s"] * t * 1.1 + c["decompose_s"]) * layers / 4
    return s, sum(runs.values())


def main() -> None:
    grad, cost = records()
    v5 = ["baseline", "attn_only", "ffn_only", "pil_then_attn", "frozen_ffn_attn"]
    v3 = ["baseline", "attn_only", "ffn_only"]
    runs_of = ((5, (128, 256, 384, 512, 768)), (2, (128, 256, 512)), (2, (128, 256)))
    for epochs, cw in runs_of:  # the last: config/config.yaml
        search = 3.5
        pts = [("wikitext2", d, 4, 1.0, v5) for d in (128, 256, 384, 512, 768)]
        pts += [("wikitext2", 256, n, 1.0, v5) for n in (2, 8)]
        pts += [("wikitext2", 256, 4, f, v5) for f in (0.25, 0.5)]
        pts += [(c, d, 4, 1.0, v3) for c in ("ptb", "tinyshakespeare") for d in cw]
        total = runs = 0.0
        for p in pts:
            s, n = point(grad, cost, *p, seeds=3, epochs=epochs, search=search)
            total, runs = total + s, runs + n
        job = sum(c["solve_s"] + c["adamw_s"] * epochs / 5 for c in cost.values())
        print(f"{epochs} epochs, other corpora at d={list(cw)}: {len(pts)} point jobs, "
              f"{runs:.0f} runs, {total:.0f} s of runs + {job:.0f} s cost job = "
              f"{total + job:.0f} s of kernel time on one H200")


if __name__ == "__main__":
    main()

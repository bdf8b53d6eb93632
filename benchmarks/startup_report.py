"""Where a job's wall went before and around its work: reads the ``<pid>.prof`` / ``<pid>.json``
pairs that ``startup_trace.py`` writes and prints, per pillm process, its command, start and end
(seconds after ``--t0``, a Unix time, default the first start), its wall under cProfile, and
the seconds Python spent compiling source to bytecode (``builtins.compile``: nonzero only
without a bytecode cache), and the first ``--top`` functions by own time. The seconds are lower
bounds: cProfile's counts stop where a library installs its own profile hook.

    python benchmarks/startup_report.py /tmp/prof_dag [--t0 1764358305] [--top 3]
"""

from __future__ import annotations

import argparse
import json
import pstats
from pathlib import Path


def summarize(prof: Path, top: int) -> dict:
    st = pstats.Stats(
        str(prof)
    ).stats  # (file, line, name) -> (cc, nc, own s, cumulative s, callers)
    compile_s = sum(v[2] for k, v in st.items() if k[2] == "<built-in method builtins.compile>")
    own = sorted(st.items(), key=lambda kv: -kv[1][2])[:top]
    return {
        "compile_s": round(compile_s, 2),
        "top_own_s": [f"{Path(k[0]).name}:{k[2]} {v[2]:.2f}" for k, v in own],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--t0", type=float, help="Unix time the starts are counted from")
    ap.add_argument("--top", type=int, default=3)
    args = ap.parse_args()
    runs = []
    for d in args.dirs:
        for meta in sorted(d.glob("*.json")):
            info = json.loads(meta.read_text())
            argv = info["argv"]
            cmd = argv[argv.index("pillm") + 1 :]
            label = " ".join(a for a in cmd if not a.startswith(("{", "[")))
            runs.append((info, label, meta.with_suffix(".prof")))
    t0 = args.t0 if args.t0 is not None else min(r[0]["start"] for r in runs)
    print("start_s end_s wall_s compile_s command | top own time")
    for info, label, prof in sorted(runs, key=lambda r: r[0]["start"]):
        wall = info["end"] - info["start"]
        row = summarize(prof, args.top)
        print(f"{info['start'] - t0:7.1f} {info['end'] - t0:6.1f} {wall:6.1f} {row['compile_s']:9.2f} "
              f"{label[:80]} | {'; '.join(row['top_own_s'])}")  # fmt: skip


if __name__ == "__main__":
    main()

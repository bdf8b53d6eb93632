"""benchmarks/probe_throughput.py, job_overhead.py and assemble_gpu_results.py on tiny CPU inputs.

Each script runs as a subprocess from the repository root, as a person runs it, and the tests read
what it writes. One torch thread per process (``OMP_NUM_THREADS=1``, ``--threads 1``): on a busy
2-core machine two OpenMP threads per tiny op made a forward of a 16-wide model 100x slower.
"""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pillm.models.checkpoint import load_checkpoint, save_checkpoint
from pillm.models.gpt import GPT, GPTConfig

# Tests of a benchmark script: run in CI (`pytest -m bench`), not in the default selection.
pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p
    ),
}


def _run(script: str, *args, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(BENCH / script), *map(str, args)]
    return subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300)


def _module(script: str):
    """A benchmark script imported as a module (its ``__main__`` block does not run)."""
    spec = importlib.util.spec_from_file_location(script.removesuffix(".py"), BENCH / script)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- probe_throughput.py ---------------------------------------------------------------------


def _checkpoint(path: Path, vocab_size: int, n_layer: int = 2) -> Path:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=vocab_size, context=32, n_layer=n_layer, d_model=16, n_head=2,
                    ffn_mult=2)  # fmt: skip
    save_checkpoint(path, GPT(cfg), {})
    return path


def test_probe_throughput_times_capture_fit_at_1x_and_4x_rows(tmp_path, shared_data):
    """A 2-block GPT-2-vocabulary checkpoint, 512 rows of 16 tokens (batches of 3 windows): the
    record of each scale is self-consistent, and its mean R²_lin is what ``probe_model`` gives on
    the same windows in this process (the timed probe measures the real probe, all batches)."""
    ckpt = _checkpoint(tmp_path / "model.pt", 50257)
    out = tmp_path / "probe.json"
    run = _run("probe_throughput.py", "--model", "pillm", "--checkpoint", ckpt, "--rows", 512,
               "--seq-len", 16, "--threads", 1, "--data", shared_data, "--out", out)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert rec["model"] == "pillm" and rec["device"] == "CPU, 1 threads"
    assert rec["label"] == f"pillm baseline, trained ({ckpt})"
    assert [r["scale"] for r in rec["results"]] == [1, 4]
    assert [r["rows"] for r in rec["results"]] == [512, 2048]
    for r in rec["results"]:
        assert r["blocks"] == 2
        assert r["capture_fit_s"] > 0 and r["forward_s"] > 0 and r["peak_mem_mb"] >= 0
        assert r["rows_per_s"] == pytest.approx(r["rows"] / r["capture_fit_s"])
        assert r["block_rows_per_s"] == pytest.approx(r["rows_per_s"] * r["blocks"])
        assert r["overhead_vs_forward"] == pytest.approx(r["capture_fit_s"] / r["forward_s"])
        assert 0 < r["mean_r2_lin"] <= 1
    assert "1x: 512 rows x 2 blocks" in run.stdout and "4x: 2,048 rows" in run.stdout
    assert "peak memory at 4x rows / at 1x rows" in run.stdout

    from pillm.data.sources import load_corpus
    from pillm.data.tokenizer import encode, gpt2_tokenizer
    from pillm.models.pretrained import ProbeModel
    from pillm.probe.fit import probe_model
    from pillm.probe.run import token_windows

    texts, _ = load_corpus("wikitext2", "local", str(shared_data), 0.1)
    tok = gpt2_tokenizer("local", str(shared_data))
    model = load_checkpoint(ckpt)
    pm = ProbeModel("x", "x", "causal", model, lambda t: encode(tok, t).astype("int64"))
    for r in rec["results"]:
        win = token_windows(pm, texts["test"], 16, r["rows"] // 16)
        blocks = probe_model(model, list(win.split(3)), "cpu", 5, rank=0)
        assert r["mean_r2_lin"] == pytest.approx(sum(b["r2_lin"] for b in blocks) / 2, rel=1e-6)


def test_probe_throughput_runs_a_hub_encoder(tmp_path, shared_data):
    """MiniLM (offline package): the other trunk (``base_model``), encoder windows with
    [CLS] .. [SEP]; six blocks at both scales."""
    out = tmp_path / "probe.json"
    run = _run("probe_throughput.py", "--model", "minilm", "--rows", 256, "--seq-len", 16,
               "--threads", 1, "--data", shared_data, "--out", out)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rec = json.loads(out.read_text())
    assert (rec["model"], rec["label"]) == ("minilm", "all-MiniLM-L6-v2")
    assert [(r["scale"], r["rows"], r["blocks"]) for r in rec["results"]] == [(1, 256, 6),
                                                                              (4, 1024, 6)]  # fmt: skip
    for r in rec["results"]:
        assert r["capture_fit_s"] > 0 and r["forward_s"] > 0
        assert r["overhead_vs_forward"] == pytest.approx(r["capture_fit_s"] / r["forward_s"])
        assert 0 < r["mean_r2_lin"] <= 1


def test_probe_throughput_rejects_a_checkpoint_of_another_vocabulary(tmp_path, shared_data):
    ckpt = _checkpoint(tmp_path / "bpe64.pt", 64, n_layer=1)
    out = tmp_path / "probe.json"
    run = _run("probe_throughput.py", "--model", "pillm", "--checkpoint", ckpt, "--rows", 256,
               "--seq-len", 16, "--threads", 1, "--data", shared_data, "--out", out)  # fmt: skip
    assert run.returncode == 1 and not out.exists()
    said = f"--checkpoint {ckpt}: vocabulary 64, but this benchmark feeds GPT-2 BPE ids (50257)"
    assert said in run.stderr
    assert "Traceback" not in run.stderr


# ---- job_overhead.py ---------------------------------------------------------------------------


@pytest.fixture()
def bpe_tokens(tmp_path, shared_data) -> Path:
    """A tokens folder as the tokenize rule writes it (BPE-300 trained on a WikiText-2 slice,
    tokenizer.json included, as lm-extras needs), small enough for seconds of CPU training."""
    from pillm.data.corpus import tokenize_corpus

    wiki = shared_data / "wikitext-2-v1"
    val = (wiki / "validation.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    test = (wiki / "test.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    texts = {"train": val[:300], "valid": val[300:360], "test": test[:60]}
    for split, lines in texts.items():
        (corpus / f"{split}.txt").write_text("".join(lines), encoding="utf-8")
    meta = {"corpus": "wikitext2-slice", "policy": "a test slice",
            "bytes": {s: (corpus / f"{s}.txt").stat().st_size for s in texts}}  # fmt: skip
    (corpus / "meta.json").write_text(json.dumps(meta))
    tokenize_corpus(str(corpus), "bpe", 300, "local", str(shared_data), str(tmp_path / "tokens"))
    return tmp_path / "tokens"


def _tiny_config(path: Path, shared_data: Path) -> Path:
    """Merged onto config/config.yaml by the script (section by section)."""
    path.write_text(f"""
data: {{local_dir: {shared_data}}}
model: {{n_layer: 1, d_model: 16, n_head: 2, ffn_mult: 2, context: 16, dropout: 0.0}}
train: {{epochs: 1, batch_size: 8, max_steps: 6, eval_every: 0, eval_batch_size: 16,
        warmup_steps_timing: 2}}
lambada: {{max_examples: 4, batch_size: 4}}
samples: {{prompts: ["The history of the"], max_new_tokens: 3}}
probe: {{seq_len: 16}}  # within the tiny model's context (checked before any job)
lora: {{max_len: 16}}
""")
    return path


def test_job_overhead_reads_every_jobs_own_timing_records(tmp_path, shared_data, bpe_tokens):
    """The real commands on the CPU: run-lm cold, warm, warm (seeds 0, 1, 2), three runs in one
    process (seeds 3, 4, 5), lm-extras on one run and on two. Each run-lm row carries the job's
    own records, and they fit inside the wall time the script measured around the process."""
    cfg = _tiny_config(tmp_path / "tiny.yaml", shared_data)
    out = tmp_path / "overhead.json"
    run = _run("job_overhead.py", "--tokens-dir", bpe_tokens, "--configfile",
               ROOT / "config" / "config.yaml", cfg, "--variants", "baseline", "--device", "cpu",
               "--extras-seeds", 2, "--out", out)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    rec = json.loads(out.read_text())
    rows = rec["run_lm"]
    assert [(r["case"], r["variant"], r["seed"]) for r in rows] == [
        ("cold", "baseline", 0), ("warm", "baseline", 1), ("warm", "baseline", 2)]  # fmt: skip
    records = _module("job_overhead.py").RECORDS
    for r in rows:
        assert set(records) <= set(r)
        assert r["compiled"] == 0 and r["cuda_graphs"] == 0  # the CPU runs the eager step
        assert r["solve_time_s"] == 0 and r["grad_time_s"] > 0 and r["tokens_per_s"] > 0
        assert r["startup_time_s"] > 0
        # clocks of /proc (10 ms ticks) inside the script's own perf_counter span
        assert r["job_time_s"] >= r["startup_time_s"] + r["grad_time_s"] - 0.02
        assert r["wall_s"] >= r["job_time_s"] - 0.02
    assert [r["seed"] for r in rec["in_process"]] == [3, 4, 5]
    for r in rec["in_process"]:
        assert r["wall_s"] > r["grad_time_s"] > 0 and isinstance(r["warmup_time_s"], float)
    assert [e["runs"] for e in rec["lm_extras"]] == [1, 2]
    assert all(e["wall_s"] > 0 for e in rec["lm_extras"])
    assert "per-job fixed cost (run-lm): wall - grad - solve" in run.stdout
    assert "lm-extras: 1 run" in run.stdout and "2 runs in one process" in run.stdout


def test_job_overhead_reports_a_failed_run_lm_with_its_error(tmp_path):
    out = tmp_path / "overhead.json"
    run = _run("job_overhead.py", "--tokens-dir", tmp_path / "no_tokens", "--variants",
               "baseline", "--device", "cpu", "--out", out)  # fmt: skip
    assert run.returncode == 1 and not out.exists()
    assert "run-lm baseline failed:" in run.stderr and "no_tokens" in run.stderr


def test_job_overhead_report_of_a_variant_that_only_solves(tmp_path, monkeypatch, capsys):
    """Each command stubbed (a finished run-lm writes the records a solve-only run writes): a
    variant without training has no warm-up record, and the report still prints and writes its
    JSON (it raised TypeError on ``None:.1f`` after every job had run). Also checks what it runs:
    one compile cache for all its jobs, empty before the cold one; lm-extras on seeds 0.. ."""
    mod = _module("job_overhead.py")
    calls: list[list[str]] = []
    caches: list[tuple[str, bool]] = []

    def fake_run(cmd, env, capture_output, text):
        calls.append(cmd)
        cache = env["TORCHINDUCTOR_CACHE_DIR"]
        caches.append((cache, Path(cache).exists()))
        if "run-lm" in cmd:
            run_dir = Path(cmd[cmd.index("--out-dirs") + 1])
            run_dir.mkdir(parents=True)
            Path(cache).mkdir(parents=True, exist_ok=True)  # what a real first job leaves
            values = {"startup_time_s": 1.5, "grad_time_s": 0.0, "solve_time_s": 0.25,
                      "job_time_s": 2.0, "test_loss": 5.0}  # fmt: skip
            rows = [{"metric": k, "value": v} for k, v in values.items()]
            (run_dir / "metrics.json").write_text(json.dumps(rows))
            return subprocess.CompletedProcess(cmd, 0, "", "")
        if cmd[1] == "-c":  # the in-process runs print what run_variant returned
            lines = [json.dumps({"seed": s, "wall_s": 0.5, "grad_time_s": 0.0,
                                 "warmup_time_s": None}) for s in (3, 4, 5)]  # fmt: skip
            return subprocess.CompletedProcess(cmd, 0, "\n".join(lines) + "\n", "")
        return subprocess.CompletedProcess(cmd, 0, "", "")  # lm-extras

    monkeypatch.setattr(mod.subprocess, "run", fake_run)
    out = tmp_path / "overhead.json"
    monkeypatch.setattr(sys, "argv", ["job_overhead.py", "--tokens-dir", str(tmp_path),
                                      "--variants", "pil_pure", "--device", "cpu",
                                      "--out", str(out)])  # fmt: skip
    mod.main()
    printed = capsys.readouterr().out
    rec = json.loads(out.read_text())
    assert [r["warmup_time_s"] for r in rec["in_process"]] == [None, None, None]
    assert "one process, pil_pure seed 3: wall   0.5 s (train 0.0 s, warm-up nan s)" in printed
    assert [(r["case"], r["seed"], r["solve_time_s"]) for r in rec["run_lm"]] == [
        ("cold", 0, 0.25), ("warm", 1, 0.25), ("warm", 2, 0.25)]  # fmt: skip
    assert "test_loss" not in rec["run_lm"][0]  # only the timing records

    run_lm = [c for c in calls if "run-lm" in c]
    assert len(run_lm) == 3 and len(calls) == 6
    params = json.loads(run_lm[0][run_lm[0].index("--params") + 1])
    assert set(params) == {"model", "train", "pil"}  # a solving variant gets its pil section
    assert len({c for c, _ in caches}) == 1 and [e for _, e in caches][:2] == [False, True]
    extras = [c for c in calls if "lm-extras" in c]
    run_dirs = [c[c.index("--out-dirs") + 1] for c in run_lm]
    assert [c[c.index("--run-dirs") + 1 : c.index("--tokens-dir")] for c in extras] == [
        run_dirs[:1], run_dirs[:3]]  # fmt: skip


# ---- assemble_gpu_results.py -------------------------------------------------------------------

SNAKEFILE = """
R = "results/paper"

rule all:
    input: f"{R}/lm/model.pt", f"{R}/fresh/model.pt", f"{R}/broken/model.pt", f"{R}/figure.txt"

rule train:  # came back without its checkpoint
    output: f"{R}/lm/metrics.json", f"{R}/lm/model.pt"
    shell: "echo trained > {output[0]}; echo weights > {output[1]}"

rule fresh:  # nothing of it came back
    output: f"{R}/fresh/metrics.json", f"{R}/fresh/model.pt"
    shell: "touch {output}"

rule broken:  # came back without a real result (metrics.json) too
    output: f"{R}/broken/metrics.json", f"{R}/broken/curve.parquet", f"{R}/broken/model.pt"
    shell: "touch {output}"

rule gen:  # came back without its image array and sample grid
    output: f"{R}/gen/samples.json", f"{R}/gen/images.npz", f"{R}/gen/grid.png"
    shell: "touch {output}"

rule figure:  # a CPU-side job: reads the grid (blank when it is a stand-in)
    input: f"{R}/gen/grid.png"
    output: f"{R}/figure.txt"
    shell: "echo figure > {output}"
"""


def _planned(cwd: Path) -> set[str]:
    cmd = [sys.executable, "-m", "snakemake", "-n", "--rerun-triggers", "mtime",
           "--configfile", "config.yaml"]  # fmt: skip
    done = subprocess.run(cmd, cwd=cwd, env=ENV, capture_output=True, text=True, check=True)
    return {rule for rule, _, _ in _module("assemble_gpu_results.py").jobs(done.stdout)}


def test_assemble_stands_in_only_for_bulk_of_jobs_whose_results_came_back(tmp_path):
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "config.yaml").write_text("name: paper\n")
    res = tmp_path / "results" / "paper"
    back = {"lm/metrics.json": "2026-01-01", "gen/samples.json": "2026-01-02",
            "broken/curve.parquet": "2026-01-03"}  # fmt: skip
    stamps = {}
    for rel, day in back.items():
        (res / rel).parent.mkdir(parents=True, exist_ok=True)
        (res / rel).write_text(rel)
        stamps[rel] = time.mktime(time.strptime(day, "%Y-%m-%d"))
        os.utime(res / rel, (stamps[rel], stamps[rel]))
    assert _planned(tmp_path) == {"train", "fresh", "broken", "gen", "figure"}

    run = _run("assemble_gpu_results.py", "--configfile", "config.yaml", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    listing = res / "standins.txt"
    made = ["results/paper/gen/grid.png", "results/paper/lm/model.pt"]
    assert sorted(listing.read_text().split()) == made
    assert "2 stand-ins, listed in results/paper/standins.txt" in run.stdout
    for rel, twin in (("lm/model.pt", "lm/metrics.json"), ("gen/grid.png", "gen/samples.json")):
        assert (res / rel).stat().st_size == 0  # empty, dated like the job's other outputs
        assert (res / rel).stat().st_mtime == stamps[twin]
    # rejected: a job of which nothing came back, one that lacks a real result; and a missing
    # bulk file that no job needs is left missing
    for rel in ("fresh/model.pt", "broken/model.pt", "broken/metrics.json", "gen/images.npz"):
        assert not (res / rel).exists()
    for rel in back:  # what came back is kept as it was
        assert (res / rel).read_text() == rel and (res / rel).stat().st_mtime == stamps[rel]
    # Snakemake now runs only what is left: the jobs with real results missing, the CPU side
    assert _planned(tmp_path) == {"fresh", "broken", "figure"}

    again = _run("assemble_gpu_results.py", "--configfile", "config.yaml", cwd=tmp_path)
    assert again.returncode == 0 and sorted(listing.read_text().split()) == made  # no duplicates

    gone = _run("assemble_gpu_results.py", "--configfile", "config.yaml", "--remove", cwd=tmp_path)
    assert gone.returncode == 0 and not listing.exists()
    assert not (res / "lm" / "model.pt").exists() and not (res / "gen" / "grid.png").exists()
    assert all((res / rel).read_text() == rel for rel in back)


def test_assemble_fails_when_snakemake_cannot_plan(tmp_path):
    """A dry run that fails (here: a config file that is not there) is an error, not a plan with
    nothing to stand in for; no listing is written."""
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "results" / "paper").mkdir(parents=True)
    run = _run("assemble_gpu_results.py", "--configfile", "missing.yaml", cwd=tmp_path)
    assert run.returncode == 1
    assert "snakemake -n failed:" in run.stderr and "missing.yaml" in run.stderr
    assert not (tmp_path / "results" / "paper" / "standins.txt").exists()


def test_assemble_reads_planned_jobs_from_dry_run_text():
    """``jobs``: rule, outputs and missing outputs of each planned job; a job planned for another
    reason than missing outputs is not one."""
    text = (
        "Building DAG of jobs...\n"
        "[Fri Nov 27 14:37:37 2026]\n"
        "rule run_lm:\n"
        "    input: tokens/train.npy\n"
        "    output: r/seed0/metrics.json, r/seed0/model.pt\n"
        "    jobid: 3\n"
        "    reason: Missing output files: r/seed0/model.pt\n"
        "[Fri Nov 27 14:37:37 2026]\n"
        "localrule probe:\n"
        "    output: p.json\n"
        "    reason: Missing output files: p.json; Input files updated by another job: m.pt\n"
        "[Fri Nov 27 14:37:37 2026]\n"
        "rule tables:\n"
        "    output: t.tex\n"
        "    reason: Input files updated by another job: p.json\n"
    )
    assert list(_module("assemble_gpu_results.py").jobs(text)) == [
        ("run_lm", ["r/seed0/metrics.json", "r/seed0/model.pt"], ["r/seed0/model.pt"]),
        ("probe", ["p.json"], ["p.json"]),
    ]

"""What a run will do before it starts: jobs by rule, a wall-time estimate, what is missing.

``pillm plan --configfile config/smoke.yaml`` prints these lines, and the Snakefile's ``onstart``
prints the same lines (from the DAG Snakemake just built) at the start of every run. Estimates come
from recorded figures, never from a model of the hardware: the per-rule ``benchmark:`` files of a
previous run of the same config (``results/<name>/benchmarks/``) when present, else the committed
reference figures in ``benchmarks/estimates.json`` (``python -m pillm.timings`` writes its records
from a Snakemake log and a benchmarks folder of a finished run). GPU rules that no record of this
device kind covers are named apart, with a GPU host's time. Torch-free.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import yaml

from pillm.accel.gpu_slots import listed_devices
from pillm.data import download_plan
from pillm.timings import load_estimates, read_benchmarks, summarise

ROOT = Path(__file__).resolve().parents[2]
SMOKE = "config/smoke.yaml"

# Rules that hold one GPU slot (they declare gpu=1 in workflow/rules/*.smk; a test checks).
GPU_RULES = ("run_lm", "lm_extras", "sensitivity_run", "probe", "generative", "gen_classifier",
             "gen_lr_run", "lora_rate", "lora", "saffu", "scaling_point", "scaling_cost_warm", "scaling_cost",
             "solve_timing")  # fmt: skip


def device_kind() -> str:
    """``cuda`` when the NVIDIA driver lists a GPU this process may use, else ``cpu``; read from
    the driver's files, so planning never imports torch."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return "cpu"
    gpus = Path("/proc/driver/nvidia/gpus")
    return "cuda" if gpus.is_dir() and any(gpus.iterdir()) else "cpu"


def job_device_kind(device: str) -> str:
    """``cpu`` or ``cuda``: where jobs of config ``device`` (cpu, cuda[:N] or auto) run on this
    machine; auto is ``device_kind()``."""
    if device == "auto":
        return device_kind()
    return "cuda" if device.startswith("cuda") else "cpu"


def gpu_count() -> int:
    """How many GPUs this process may use (``gpu_sizes_mb``); 0 without a readable driver."""
    return len(gpu_sizes_mb())


def gpu_memory_mb() -> int | None:
    """Memory of the GPUs this process may use (MiB, summed over them); None when
    ``nvidia-smi`` is missing or fails."""
    return sum(gpu_sizes_mb().values()) or None


def gpu_sizes_mb() -> dict[int, int]:
    """GPU index -> memory (MiB) of the GPUs this process may use, from ``nvidia-smi``; empty
    when it is missing or fails. Honours ``CUDA_VISIBLE_DEVICES`` by index or UUID (prefix)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    try:
        out = subprocess.run(
            [smi, "--query-gpu=index,uuid,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        rows = [[v.strip() for v in line.split(",")] for line in out.splitlines()]
        sizes = {int(i): int(float(mb)) for i, _, mb in rows}
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    visible = listed_devices(os.environ.get("CUDA_VISIBLE_DEVICES")) or []
    listed = {int(i) for i, uuid, _ in rows for v in visible
              if v == i or (v.startswith("GPU-") and uuid.startswith(v))}  # fmt: skip
    return {i: mb for i, mb in sizes.items() if i in listed} if listed else sizes


# -- the estimate ------------------------------------------------------------------------------


def _record(estimates: dict, name: str, kind: str) -> dict | None:
    for rec in estimates.get("records", []):
        if rec["config"] == name and rec["device"] == kind:
            return rec
    return None


def estimate(
    counts: dict[str, int],
    name: str,
    kind: str,
    results: Path,
    estimates: dict,
    cores: int | None = None,
    gpus: int | None = None,
) -> tuple[float | None, str, list[str]]:
    """(wall seconds or None, where the figures come from, rules without a figure).

    Per rule: jobs x mean seconds per job (a previous run's benchmark files first, else the
    reference record of this config name and device kind), summed and divided by how many jobs
    ran at once in the record, scaled by this machine's cores (CPU) or GPUs (CUDA) against the
    record's. A CPU rule (not in GPU_RULES) missing there takes the other device kind's record
    of the config: a CPU job's seconds do not depend on the GPU beside it. Those jobs count at
    the lower of the two records' concurrencies (the CPU side of a build is mostly a chain).
    Rough: one figure per rule, not per job size."""  # fmt: skip
    rec = _record(estimates, name, kind)
    previous = summarise(read_benchmarks(results / "benchmarks")) if results.is_dir() else {}
    if rec is None and not previous:
        return None, f"no recorded figures for config {name!r} on {kind}", sorted(counts)
    rules = dict(rec["rules"]) if rec else {}
    rules.update(previous)
    parallel = rec["parallel"] if rec else 1
    if rec and kind == "cpu" and cores and rec.get("cores"):
        parallel *= min(cores, sum(counts.values())) / rec["cores"]
    elif rec and kind == "cuda" and gpus and rec.get("gpus"):
        parallel *= gpus / rec["gpus"]
    parallel = max(parallel, 1)
    other = _record(estimates, name, "cpu" if kind == "cuda" else "cuda")
    # a CPU rule this record lacks: the other device kind's figure of it
    spare = other["rules"] if other else {}
    borrowed = {r: spare[r] for r in counts if r in spare and r not in rules and r not in GPU_RULES}
    unknown = sorted(r for r in counts if r not in rules and r not in borrowed)
    job_s = sum(n * rules[r]["mean_s"] for r, n in counts.items() if r in rules)
    wall = job_s / parallel
    source = rec["source"] if rec else "none"
    if previous:
        source = f"{results / 'benchmarks'} (previous run) + {source}"
    if borrowed:
        assert other is not None
        wall += sum(counts[r] * f["mean_s"] for r, f in borrowed.items()) / max(
            min(parallel, other["parallel"]), 1
        )
        source += f"; {', '.join(sorted(borrowed))} from the {other['device']} record"
    return wall, source, unknown


def _hms(seconds: float) -> str:
    m = round(seconds / 60)
    return f"{m // 60} h {m % 60:02d} min" if m >= 60 else f"{max(m, 1)} min"


def missing(config: dict[str, Any], root: Path, kind: str) -> list[str]:
    """What this machine lacks for this config, each with the fix."""
    out = []
    if not (shutil.which("latexmk") and shutil.which("pdflatex")):
        out.append(
            "TeX (latexmk, pdflatex) not found: everything but the PDF builds, the arXiv sources "
            "included (config key pdf: auto); for the PDF apt-get install texlive-latex-base "
            "texlive-latex-recommended texlive-latex-extra texlive-fonts-recommended latexmk"
        )
    device = str(config.get("device", "auto"))
    if device.startswith("cuda") and kind != "cuda":
        out.append(f"device: {device} but no CUDA GPU is visible: set device: auto or cpu")
    # Runtime requirements every build imports (pyproject.toml and requirements.txt declare
    # them); the pretrained model packages are checked with the config (pillm.plan).
    for pkg in ("torch", "transformers", "peft"):
        if find_spec(pkg) is None:
            fix = f"pip install -r {root / 'requirements.txt'} (or pip install .)"
            out.append(f"python package {pkg} not installed: {fix}")
    return out


def plan_lines(
    counts: dict[str, int], config: dict[str, Any], root: Path = ROOT, kind: str | None = None
) -> list[str]:
    """The plan: jobs by rule, the estimate, what is missing; the same lines for ``pillm plan``
    and the start of a Snakemake run."""
    kind = kind or device_kind()
    counts = {r: n for r, n in counts.items() if r != "all"}  # the target rule, no job
    name = config["name"]
    results = Path(f"results/{name}")
    lines = [f"pillm plan: config {name!r}, device {kind}, {sum(counts.values())} jobs to run"]
    lines += [f"  {rule:<18} {n:>5}" for rule, n in sorted(counts.items())]
    affinity = getattr(os, "sched_getaffinity", None)  # the cores `--cores all` counts (taskset)
    cores, gpus = len(affinity(0)) if affinity else os.cpu_count() or 1, gpu_count()
    records = load_estimates(root / "benchmarks" / "estimates.json")
    wall, source, unknown = estimate(counts, name, kind, results, records, cores, gpus)
    if wall is None:
        other = "cuda" if kind == "cpu" else "cpu"
        ref, ref_source, _ = estimate(counts, name, other, Path("/nonexistent"), records)
        lines.append(f"  estimated wall time: unknown ({source})")
        if ref is not None:
            lines.append(f"  for reference, on {other}: about {_hms(ref)} ({ref_source})")
    else:
        here = f"{cores} core{'s' * (cores > 1)}"
        here += f", {gpus} GPU{'s' * (gpus > 1)}" if kind == "cuda" else ""
        # GPU rules without a figure on this device kind: said apart, with a GPU host's time
        gpu_gap = [r for r in unknown if r in GPU_RULES] if kind == "cpu" else []
        some = sum(n for r, n in counts.items() if r not in gpu_gap)
        part = f" for the {some} jobs of its CPU rules" if gpu_gap else ""
        if some:
            lines.append(
                f"  estimated wall time: about {_hms(wall)}{part} on {here} (from {source})"
            )
        else:
            lines.append(f"  estimated wall time: unknown on {here} (no CPU record of its rules)")
        if gpu_gap:
            lines.append(gpu_host_line({r: counts[r] for r in gpu_gap}, name, records))
        if rest := [r for r in unknown if r not in gpu_gap]:
            lines.append(f"  no figure for: {', '.join(rest)}")
    gpu_jobs = sum(counts.get(r, 0) for r in GPU_RULES)
    no_cpu_figure = wall is None or any(r in GPU_RULES for r in unknown)
    if kind == "cpu" and gpu_jobs and (no_cpu_figure or wall > 3600):
        how = "no CPU figure is recorded for them" if no_cpu_figure else f"about {_hms(wall)}"
        lines.append(
            f"  WARNING: no CUDA GPU here: config {name!r} runs its {gpu_jobs} GPU jobs on CPU "
            f"threads ({how}). For a run of minutes: --configfile {SMOKE}"
        )
    for item in missing(config, root, kind):
        lines.append(f"  missing: {item}")
    lines += [f"  {line}" for line in download_plan(config["data"], hub_needs(config))]
    return lines


def gpu_host_line(counts: dict[str, int], name: str, records: dict) -> str:
    """What the GPU rules of ``counts`` cost where a record has them: on a GPU host (this
    config's CUDA record), since no CPU record of them exists."""
    jobs = sum(counts.values())
    head = f"  GPU rules ({jobs} jobs: {', '.join(sorted(counts))}): no CPU record"
    ref, _, unknown = estimate(counts, name, "cuda", Path("/nonexistent"), records)
    rec = _record(records, name, "cuda")
    if ref is None or rec is None or unknown:
        return f"{head}, nor a GPU host's"
    host = f"{rec['gpus']} GPU{'s' * (rec['gpus'] > 1)}, {rec['cores']} cores"
    return f"{head}; about {_hms(ref)} on a GPU host ({host}: its CUDA record)"


def hub_needs(config: dict[str, Any]) -> list[str]:
    """The hub sources a run reads with ``data.source: hub`` (keys of HUB_DATASETS)."""
    needs = [config["data"]["corpus"]]
    if config["tokenizer"]["kind"] == "gpt2":
        needs.append("gpt2_tokenizer")
    if config["lm"]["variants"]:
        needs.append("lambada")
    if config["lora"]["models"]:
        needs.append("sst2")
    needs += list(config["generative"]["datasets"])
    needs += [c for c in config["probe"]["corpora"] if c not in needs]
    return needs


# -- the command -------------------------------------------------------------------------------


def dag_counts(configfiles: list[str], config_args: list[str], root: Path = ROOT) -> dict:
    """Jobs Snakemake would run, by rule, from a dry run's job table."""
    cmd = [sys.executable, "-m", "snakemake", "--dry-run", "--quiet", "rules",
           "--snakefile", str(root / "Snakefile"), "--cores", "1"]  # fmt: skip
    if configfiles:
        cmd += ["--configfile", *configfiles]
    if config_args:
        cmd += ["--config", *config_args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"snakemake dry run failed:\n{proc.stdout}{proc.stderr}")
    counts: dict[str, int] = {}
    table = False
    for line in proc.stdout.splitlines():
        parts = line.split()
        if line.startswith("job ") and parts[-1] == "count":
            table = True
        elif table and len(parts) == 2 and parts[1].isdigit():
            if parts[0] == "total":
                break
            counts[parts[0]] = int(parts[1])
    return counts


def load_config(
    configfiles: list[str], overrides: list[str] | None = None, root: Path = ROOT
) -> dict[str, Any]:
    """The config a run would see: the files merged in order, then ``KEY=YAML`` overrides read
    as Snakemake reads ``--config`` (scalars as strings), then typed and defaulted by the schema."""
    from pillm.core.config import apply_schema

    config: dict[str, Any] = {}
    for path in configfiles or [str(root / "config" / "config.yaml")]:
        _merge(config, yaml.safe_load(Path(path).read_text()))
    for item in overrides or []:
        key, _, value = item.partition("=")
        _merge(config, {key: yaml.load(value, Loader=yaml.BaseLoader)})
    return apply_schema(config, root / "config" / "schema.yaml")


def _merge(base: dict, new: dict) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            _merge(base[k], v)
        else:
            base[k] = v


def workflow_root() -> Path:
    """The checkout to plan: the working directory where it holds a Snakefile (where snakemake
    runs; the installed package may be another checkout's, or none), else this package's."""
    return next((r for r in (Path.cwd(), ROOT) if (r / "Snakefile").is_file()), Path.cwd())


def plan(configfile: list[str] | None, config: list[str] | None) -> None:
    """``pillm plan``: print the plan for these config files (default config/config.yaml)."""
    configfiles, root = configfile or [], workflow_root()
    counts = dag_counts(configfiles, config or [], root)
    print("\n".join(plan_lines(counts, load_config(configfiles, config, root), root)))

# Snakemake glue shared by every wing: config check, paths, code stamps, GPU resources, the
# shell of a GPU job. What each study runs is planned in its wing (pillm.<study>.plan, torch-free,
# unit-tested) and mapped to paths in its own rules file.
import glob
import json
import os
import shlex
import sys
from pathlib import Path

import yaml

# The checkout this workflow lives in (not the working directory): its schema, templates, paper
# sources and package, so the workflow also runs as a Snakemake module from another directory.
ROOT = Path(workflow.current_basedir.get_path_or_uri(secret_free=True)).parents[1]
# The planner and every job import this checkout's package, whichever pillm is installed: the
# code stamps fingerprint this checkout's src/pillm, so that is the code the jobs must run.
SRC = ROOT / "src"
sys.path.insert(0, str(SRC))

import pillm

if Path(pillm.__file__).resolve().parent != (SRC / "pillm").resolve():
    raise WorkflowError(
        f"this workflow plans with {SRC / 'pillm'}, but this Snakemake process already "
        f"imported pillm from {Path(pillm.__file__).parent}; run snakemake from a process that "
        "has not imported another pillm (one checkout's workflow per process)"
    )

from pillm import codedeps, estimate, owner, plan, scheduler_exit
from pillm.accel import mps
from pillm.models.registry import OWN_PREFIX


def source(path):
    """A file of this checkout (schema, templates, paper sources), by absolute path."""
    return str(ROOT / path)


# Overrides typed by the schema, its defaults filled, then every check.
plan.check_config(config, source("config/schema.yaml"))

CORPUS = config["data"]["corpus"]
RESULTS = f"results/{config['name']}"  # one tree per config: smoke and paper runs never clobber
OWNER = owner.claimant(workflow.configfiles, config["name"])
# A different config with the same name stops here, naming both.
owner.check(RESULTS, OWNER)
# Tables, macros, figures: never in the source tree.
GENERATED = f"{RESULTS}/paper/generated"


def generated(path):
    """A generated paper file (table, macros, figure) under this config's results tree."""
    return f"{GENERATED}/{path}"


# GPU memory and start priority of each GPU rule, and how GPU jobs share a CUDA host, as data
# (config/resources.yaml).
RESOURCES = yaml.safe_load(Path(source("config/resources.yaml")).read_text())
GPU_MEM_MB = RESOURCES["gpu_mem_mb"]
PRIORITY = RESOURCES["priority"]
SHARING = RESOURCES["sharing"]
DEVICE_KIND = estimate.device_kind()
# Without a visible CUDA GPU the GPU rules run on CPU threads: the gpu resource must not make
# them wait for each other (the SLURM profile still finds GPU rules by their literal gpu=1).
# On a CUDA host up to sharing.jobs_per_gpu jobs per visible GPU run at once, as far as their
# declared GPU memory allows (each lands on its own device: pillm.accel.gpu_slots);
# `--resources gpu=N` sets another number.
if DEVICE_KIND == "cpu":
    workflow.global_resources["gpu"] = 1_000_000
elif "gpu" not in workflow.global_resources:
    workflow.global_resources["gpu"] = SHARING["jobs_per_gpu"] * max(
        1, estimate.gpu_count()
    )
if "gpu_mem_mb" not in workflow.global_resources:
    _gpu_mb = estimate.gpu_memory_mb() if DEVICE_KIND == "cuda" else None
    workflow.global_resources["gpu_mem_mb"] = int(0.95 * _gpu_mb) if _gpu_mb else 10**12


def gpu_mem(need):
    """GPU memory a job reserves: ``need`` MiB, or a GPU_MEM_MB key; at most the whole budget."""
    budget = workflow.global_resources["gpu_mem_mb"]
    mb = GPU_MEM_MB[need] if isinstance(need, str) else int(need)
    return min(mb, getattr(budget, "value", budget))  # Snakemake 9: a Resource


# CPU threads of every GPU rule. On CPU they do the work: up to 4, but at least two jobs run at
# once (the small jobs' start-up and Python are single-threaded, so two jobs of one thread each
# keep 2 cores busier than one job of two). On a CUDA host the work is on the device: a job
# holds one of --cores (so `--cores all` lets a job per core share the GPUs) and runs
# sharing.torch_threads torch threads.
GPU_THREADS = max(1, min(4, workflow.cores // 2)) if DEVICE_KIND == "cpu" else 1
TORCH_THREADS = "{threads}" if DEVICE_KIND == "cpu" else str(SHARING["torch_threads"])
# CUDA MPS: the GPU jobs' kernels share the GPU instead of time-slicing it (pillm.accel.mps: a
# user-level daemon, started before the jobs and quit after them; no card setting changes).
MPS_DIR = mps.directory_for(ROOT)
USE_MPS = DEVICE_KIND == "cuda" and SHARING["mps"]
# Every job's shell: bash's strict mode (Snakemake's default prefix), this checkout's src first
# on PYTHONPATH (the braces are doubled for Snakemake's format of the prefix) and, on a CUDA
# host, that the jobs are planned for a GPU (core.runtime refuses a CPU fallback) and the MPS
# pipe while the daemon runs.
shell.prefix(
    f"set -euo pipefail; export PYTHONPATH={shlex.quote(str(SRC))}"
    "${{PYTHONPATH:+:$PYTHONPATH}}; "
    + ("export PILLM_DEVICE_KIND=cuda; " if DEVICE_KIND == "cuda" else "")
    + (mps.client_prefix(MPS_DIR) if USE_MPS else "")
)


onstart:
    from collections import Counter

    counts = Counter(job.rule.name for job in workflow.dag.needrun_jobs())
    print(
        "\n".join(estimate.plan_lines(dict(counts), config, ROOT)), file=sys.stderr
    )
    owner.claim(RESULTS, OWNER)
    if not BUILD_PDF and config["pdf"] == "auto":
        print(f"pillm: TeX not found: building every table, figure, the report and the arXiv "
              f"sources, not the PDF. For it: {plan.TEX_INSTALL}", file=sys.stderr)  # fmt: skip
    if USE_MPS:
        print(mps.start(MPS_DIR), file=sys.stderr)


# Both also cancel the scheduler's idle wake-up timers, which would hold the exit for up to the
# rate limit's timespan (pillm.scheduler_exit).
onsuccess:
    if USE_MPS and (line := mps.stop(MPS_DIR)):
        print(line, file=sys.stderr)
    scheduler_exit.cancel_scheduler_timers()


onerror:
    if USE_MPS and (line := mps.stop(MPS_DIR)):
        print(line, file=sys.stderr)
    scheduler_exit.cancel_scheduler_timers()


def res(path):
    """Path under this config's results tree."""
    return f"{RESULTS}/{path}"


def in_results(paths):
    """A wing plan's relative paths (a path, a list, or a dict of lists) under the results tree,
    each checked to stay inside it (plan.check_outputs)."""
    if isinstance(paths, str):
        plan.check_outputs([res(paths)], RESULTS)
        return res(paths)
    if isinstance(paths, dict):
        return {k: in_results(v) for k, v in paths.items()}
    plan.check_outputs([res(p) for p in paths], RESULTS)
    return [res(p) for p in paths]


wildcard_constraints:
    seed=r"\d+",
    corpus="wikitext2|ptb|tinyshakespeare",
    model=r"[A-Za-z0-9_-]+",
    dataset="mnist|cifar10",
    setting=r"[a-z0-9_]+",


# This checkout's package (not whichever pillm is installed): the code its jobs run.
PACKAGE = ROOT / "src" / "pillm"


def code(command, params=None):
    """The code stamp of ``python -m pillm <command>``: a file named by the fingerprint of the
    modules it imports (pillm.codedeps), so a real code edit reruns exactly the rules that run
    that code and a comment or docstring edit reruns nothing. One stamp tree per config.
    With ``params`` (the config the command reads), also its config stamp: a rule whose command
    gets its config inside a params function of ``input`` or ``output`` passes it, because
    Snakemake's params trigger skips such derived params (a config edit would rerun nothing).
    """
    stamp = codedeps.stamp(command, res("code"), PACKAGE)
    if params is None:
        return stamp
    return [stamp, codedeps.config_stamp(command, as_json(params), res("config"))]


def logfile(path):
    return res(f"logs/{path}.log")


def benchfile(path):
    return res(f"benchmarks/{path}.tsv")


# What every GPU job shares: the device flag (config key `device`, checked by the schema's
# pattern) and its torch CPU threads; each GPU rule declares gpu=1 itself (the SLURM profile
# finds GPU rules by that line).
DEVICE = config["device"]
JOB_DEVICE_KIND = estimate.job_device_kind(DEVICE)  # cpu or cuda: where these jobs run
# The timing jobs (solve_timing, scaling_cost) run alone on a CUDA host: each declares the whole
# GPU memory budget (gpu_mem caps at it), so no other GPU job runs beside it.
TIMING_ALONE = JOB_DEVICE_KIND == "cuda"


def gpu_shell(command):
    """The shell of a GPU job: its pillm command, then the device and thread flags and the log;
    PILLM_GPU_MEM_MB tells the GPU slot picker (pillm.accel.gpu_slots) the memory it declared.
    """
    return (
        f"PILLM_GPU_MEM_MB={{resources.gpu_mem_mb}} {command}"
        f" --device {DEVICE} --threads {TORCH_THREADS} > {{log}} 2>&1"
    )


# Every tables rule renders through the same shared templates (pillm.paper.report).
TEMPLATES = sorted(glob.glob(source("paper/templates/*.tex.j2")))


def as_json(obj):
    return json.dumps(obj, sort_keys=True)


def parent(path):
    return os.path.dirname(path)


def own_model(wildcards):
    """Whether a job's ``model`` is one of this pipeline's own (``pillm-s<k>``)."""
    return wildcards.model.startswith(OWN_PREFIX)


def own_model_mem(key):
    """A probe or SST-2 rule's gpu_mem_mb: ``<key>_own`` for the pipeline's own small models,
    ``key`` for the pretrained ones."""
    return lambda w: gpu_mem(f"{key}_own" if own_model(w) else key)


def own_model_inputs(wildcards):
    """The pipeline's own models need their checkpoint and the tokenizer they were trained with."""
    if not own_model(wildcards):
        return {}
    run = res(f"lm/baseline/seed{wildcards.model.removeprefix(OWN_PREFIX)}")
    return {
        "checkpoint": f"{run}/model.pt",
        "run_metrics": f"{run}/metrics.json",
        "tokenizer": res(f"tokens/{CORPUS}/tokenizer.json"),
    }


def own_model_and(files):
    """An input function: the own model's files (own_model_inputs) and the results-tree files
    that ``files(wildcards)`` names (a dict of lists: a LoRA job's rate files)."""
    return lambda w: {**own_model_inputs(w), **in_results(files(w))}


# What each rules file hands the paper (workflow/rules/paper.smk): wing(...) at its end.
WINGS = {}


def wing(name, paper, summaries=(), tables=()):
    """Register a rules file's outputs: ``paper`` the generated files the PDF reads,
    ``summaries`` its run summaries (the provenance page), ``tables`` its rendered tables (the
    HTML report)."""
    WINGS[name] = {
        "paper": list(paper),
        "summaries": list(summaries),
        "tables": list(tables),
    }


def wing_files(kind):
    """One kind of registered output over every wing, in registration order."""
    return [f for w in WINGS.values() for f in w[kind]]


# The PDF where TeX is found (config key pdf); everything else, the arXiv sources included,
# without it.
BUILD_PDF = plan.builds_pdf(config)


def all_targets():
    pdf = [res("paper/main.pdf")] if BUILD_PDF else []
    targets = [
        *wing_files("paper"),
        *pdf,
        res("paper/arxiv.tar.gz"),
        res("report/index.html"),
    ]
    plan.check_outputs(targets, RESULTS)  # every one inside results/<name>/
    return targets

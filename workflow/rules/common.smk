# Snakemake glue shared by every stage: config check, paths, code stamps, job lists.
# What to run is planned in pillm.plan (torch-free, unit-tested); this file only maps it to paths.
import glob
import json
import os
import re
import sys
from pathlib import Path

from pillm import codedeps, estimate, owner, plan
from pillm.plan import VARIANTS, dependencies
from pillm.core.records import git_revision  # provenance rule: the build's revision

# The checkout this workflow lives in (not the working directory): its schema, templates, paper
# sources and package, so the workflow also runs as a Snakemake module from another directory.
ROOT = Path(workflow.current_basedir.get_path_or_uri(secret_free=True)).parents[1]


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


# Without a visible CUDA GPU the GPU rules run on CPU threads: the gpu resource must not make
# them wait for each other (the SLURM profile still finds GPU rules by their literal gpu=1).
if estimate.device_kind() == "cpu":
    workflow.global_resources["gpu"] = 1_000_000
# GPU memory (MiB) one job may take at the paper scale, per GPU rule: the peak_memory_mb the H100
# paper build of 2026-11-26 recorded (LM runs <= 4.7 GB, SAFFU 9.6 GB, generative 5.7 GB, probe
# 3.9 GB, SST-2 3.1 GB; the generative AdamW arms and grid runs <= 1.9 GB in the builds of
# 2026-11-27, so they declare less than the PIL fits; the functional-gradient LM solve, 26.9 GB
# then, takes its logits a few sequences at a time since: pillm.lm.pil), rounded
# up for the CUDA context and the allocator's cache. Jobs that would not fit beside each other
# wait instead of failing with "CUDA out of memory" (sharing one H100 twelve ways did); the
# budget is the visible GPUs' memory unless --resources gpu_mem_mb=N sets it; on CPU it limits
# nothing.
# The LM and sensitivity jobs train several runs in one process (5 seeds, 9 grid points): 8 GB.
# Under MPS their processes held 5.5-7.8 GiB early in their second run while PyTorch had allocated
# at most 3.9 GB, and at 6 GB declared 3 jobs failed out of memory (run F of 2026-11-27). Each run's
# memory is now handed back after it (pillm.lm.run.run_many; before, the allocated peak grew by
# ~0.3 GB a run): the baseline's 5 seeds alone then peaked at 6.0 GiB in nvidia-smi.
# The one-H100 build of 5c2ff7b (2026-11-28): the functional-gradient variant's runs peaked at
# 10.2 GB allocated (the others <= 4.1 GB), so it declares 12 GB; the SST-2 jobs and probes of
# this pipeline's models at 0.9 and 1.3 GB (the pretrained models keep 5 and 6 GB); the SAFFU jobs
# that reuse a chosen rate at 8.8 GB (those that choose, 10.4 GB); a PIL generative
# fit declares by its feature count (pillm.plan.pil_fit_memory_mb). In that build's middle,
# 290-350 s, nine of the fourteen slots ran: three or four SAFFU jobs and four probes had
# declared the whole budget, and the GPU was 51-94 % busy (30 s means). In the two-GPU
# build of that commit the declarations held the whole budget from 150 s to 270 s while the
# cards held at most 62 of their 80 GB each, and one card was 46-82 % busy for 60 s.
# The LAMBADA and sample jobs (lm_extras) peaked at 0.13-0.34 GB allocated (H200 builds of
# cc618bb, 2026-11-28), so they declare 1 GB instead of 4. There, and on an H100 at f5ef371, the
# SAFFU jobs that choose the rates peaked at 9.5-9.6 GB once the search dropped a beaten
# rate's weights at once (10.35 GB before), so they declared 11.2 GB instead of 12. Since their
# AdamW sums the weight gradient inside the update on CUDA (no stored 823 MB gradient), they
# peaked at 7.9-8.0 GB and those that reuse a rate at 7.1-7.2 GB (H200 build of a03f6d7,
# benchmarks/gpu_runs/2026-11-28_session19): 1.6 GB less each, so both declare 1.6 GB less.
GPU_MEM_MB = {"run_lm": 8000, "run_lm_fgrad": 12000, "lm_extras": 1000, "sensitivity_run": 8000,
              "probe": 6000, "probe_own": 2500, "generative_adamw": 3000, "gen_classifier": 3000,
              "gen_lr_run": 3000, "lora": 5000, "lora_own": 3000, "saffu": 9600,
              "saffu_reuse": 8900}  # fmt: skip
if "gpu_mem_mb" not in workflow.global_resources:
    _gpu_mb = estimate.gpu_memory_mb() if estimate.device_kind() == "cuda" else None
    workflow.global_resources["gpu_mem_mb"] = int(0.95 * _gpu_mb) if _gpu_mb else 10**12


def gpu_mem(need):
    """GPU memory a job reserves: ``need`` MiB, or a GPU_MEM_MB key; at most the whole budget."""
    budget = workflow.global_resources["gpu_mem_mb"]
    mb = GPU_MEM_MB[need] if isinstance(need, str) else int(need)
    return min(mb, getattr(budget, "value", budget))  # Snakemake 9: a Resource


# Start order where ready jobs wait for GPU memory. Snakemake's greedy scheduler
# (profiles/default/config.yaml) starts them in decreasing priority while the declared memory
# lasts, so jobs that others wait for, and the longest ones, go first. (The ILP scheduler instead
# maximises the sum of the started jobs' priorities, which starts many small jobs first: run F,
# benchmarks/gpu_runs/2026-11-27_h100_mps_f.) In run G (..._h100_mps_g), with only SAFFU and the
# grid runs ordered, the LM baseline (the refits, probes and SST-2 jobs read it) and the
# generative classifiers (every generative fit reads one), ready at 12-17 s, started at 154-179 s.
# Run H (..._h100_mps_h) ordered those, and the other LM and sensitivity jobs (priority 0, as
# the short probe, SST-2 and PIL fit jobs) waited until 503-509 s behind them, ending the run:
# they are long, so they come before the short jobs, the longest first (shared, run H: the
# sensitivity grids 84-106 s, variants trained from scratch 51-92 s, variants that solve or
# fine-tune on top of another 18-54 s).
# Among the jobs that used to share priority 0, the longest go first too: in the one-GPU build of
# 8e42bac (..._h100_det/one_gpu) they all waited until 376-464 s and the LoRA arms (38-47 s
# shared), started last, ended the run at 493 s behind the LAMBADA passes (29-39 s), the probes
# (8-27 s) and the short SST-2 heads and PIL fits.
PRIORITY = {"saffu_rates": 10, "gen_classifier": 9, "lm_built_on": 8, "gen_lr_run": 7,
            "generative_adamw": 6, "saffu": 5, "sensitivity_run": 4, "lm_scratch": 4,
            "lm_derived": 3, "lora_gradient": 3, "lm_extras": 2, "probe": 1}  # fmt: skip


def lm_priority(wildcards):
    """Variants others build on first, then those trained from scratch, then the rest."""
    built_on = {d for v in config["lm"]["variants"] for d in dependencies(v)}
    if wildcards.variant in built_on:
        return PRIORITY["lm_built_on"]
    return PRIORITY["lm_derived" if dependencies(wildcards.variant) else "lm_scratch"]


def saffu_rates_job(wildcards):
    """Whether other SAFFU jobs reuse this one's chosen rates (they wait for it)."""
    job = plan.saffu_job(wildcards.setting, wildcards.frac, int(wildcards.seed))
    return job in {plan.saffu_rates_job(config, *j) for j in plan.saffu_jobs(config)}


def saffu_priority(wildcards):
    """SAFFU jobs are the longest; those whose rates other jobs reuse go first."""
    return PRIORITY["saffu_rates" if saffu_rates_job(wildcards) else "saffu"]


# CPU threads of every GPU rule. On CPU they do the work: up to 4, but at least two jobs run at
# once (the small jobs' start-up and Python are single-threaded: on 2 cores the smoke run took
# 508 s with one thread a job against 760 s with two, 2026-11-27). With a GPU the work is on the
# device, and 4 threads a job let only cores/4 jobs share it however large --resources gpu=N is.
GPU_THREADS = (
    max(1, min(4, workflow.cores // 2)) if estimate.device_kind() == "cpu" else 2
)


onstart:
    from collections import Counter

    counts = Counter(job.rule.name for job in workflow.dag.needrun_jobs())
    print(
        "\n".join(estimate.plan_lines(dict(counts), config, ROOT)), file=sys.stderr
    )
    owner.claim(RESULTS, OWNER)


def res(path):
    """Path under this config's results tree."""
    return f"{RESULTS}/{path}"


LM_VARIANTS = config["lm"]["variants"]
# The studies that declare claims: one paper/claims/<study>.yaml each (pillm.paper.claims).
CLAIM_STUDIES = sorted(p.stem for p in (ROOT / "paper" / "claims").glob("*.yaml"))
SEEDS = config["lm"]["seeds"]
PROBE = config["probe"]
GEN = config["generative"]
LORA = config["lora"]
SAFFU = config["saffu"]
SAFFU_SETTINGS = plan.saffu_settings(config)


wildcard_constraints:
    variant="|".join(VARIANTS),
    seed=r"\d+",
    corpus="wikitext2|ptb|tinyshakespeare",
    model=r"[A-Za-z0-9_-]+",
    dataset="mnist|cifar10",
    setting=r"[a-z0-9_]+",


# This checkout's package (not whichever pillm is installed): the code its jobs run.
PACKAGE = ROOT / "src" / "pillm"


def code(command):
    """The code stamp of ``python -m pillm <command>``: a file named by the fingerprint of the
    modules it imports (pillm.codedeps), so a real code edit reruns exactly the rules that run
    that code and a comment or docstring edit reruns nothing. One stamp tree per config.
    """
    return codedeps.stamp(command, res("code"), PACKAGE)


def logfile(path):
    return res(f"logs/{path}.log")


def benchfile(path):
    return res(f"benchmarks/{path}.tsv")


# What every GPU job shares: the device flag and its torch CPU threads (each GPU rule declares
# gpu=1 itself: the SLURM profile finds GPU rules by that line).
DEVICE = config["device"]


def mps_priority(bulk):
    """A rule's ``params.mps`` (see gpu_shell): MPS's below-normal client priority for a bulk job.

    Bulk: the job's kernels are large and fill the GPU (PIL generative fits, SAFFU). Where jobs
    share a GPU through CUDA MPS, such a job yields, so the small kernels of the latency-bound
    jobs (LM training, the generative AdamW arms, whose steps are chains of small kernels) are
    not queued behind its blocks; without MPS the variable does nothing.
    """
    return "CUDA_MPS_CLIENT_PRIORITY=1 " if bulk else ""


def gpu_shell(command, mps=False):
    """The shell of a GPU job: its pillm command, then the device and thread flags and the log;
    PILLM_GPU_MEM_MB tells the GPU slot picker (pillm.core.gpu_slots) the memory it declared.
    ``mps``: the rule's ``params.mps`` (mps_priority, per job) prefixes the command.
    """
    priority = "{params.mps}" if mps else ""
    return (
        f"{priority}PILLM_GPU_MEM_MB={{resources.gpu_mem_mb}} {command}"
        " --device {params.device} --threads {threads} > {log} 2>&1"
    )


# Every tables rule renders through the same shared templates (pillm.paper.report).
TEMPLATES = sorted(glob.glob(source("paper/templates/*.tex.j2")))


def as_json(obj):
    return json.dumps(obj, sort_keys=True)


def parent(path):
    return os.path.dirname(path)


def lm_runs(name):
    return expand(
        res("lm/{variant}/seed{seed}/{name}"),
        variant=LM_VARIANTS,
        seed=SEEDS,
        name=name,
    )


def lm_run_inputs(wildcards):
    """Runs a variant builds on (every seed): their metrics and checkpoints."""
    deps = {}
    for d in dependencies(wildcards.variant):
        runs = [res(f"lm/{d}/seed{s}") for s in SEEDS]
        deps[f"dep_{d}"] = [
            f"{r}/{f}" for r in runs for f in ("metrics.json", "model.pt")
        ]
    return deps


def probe_jobs(name):
    return expand(
        res("probe/{model}/{corpus}/{name}"),
        model=plan.probe_model_names(config),
        corpus=PROBE["corpora"],
        name=name,
    )


def own_model(wildcards):
    """Whether a job's ``model`` is one of this pipeline's own (``pillm-s<k>``)."""
    return wildcards.model.startswith(plan.OWN_PREFIX)


def own_model_mem(key):
    """A probe or SST-2 rule's gpu_mem_mb: ``<key>_own`` for the pipeline's own small models,
    ``key`` for the pretrained ones."""
    return lambda w: gpu_mem(f"{key}_own" if own_model(w) else key)


def own_model_inputs(wildcards):
    """The pipeline's own models need their checkpoint and the tokenizer they were trained with."""
    if not own_model(wildcards):
        return {}
    run = res(f"lm/baseline/seed{wildcards.model.removeprefix(plan.OWN_PREFIX)}")
    return {
        "checkpoint": f"{run}/model.pt",
        "run_metrics": f"{run}/metrics.json",
        "tokenizer": res(f"tokens/{CORPUS}/tokenizer.json"),
    }


def gen_jobs(name):
    return [
        res(f"generative/{ds}/{s}/seed{seed}/{name}")
        for ds, s, seed in plan.generative_jobs(config)
    ]


def gen_lr_grids(name):
    return [res(f"generative/{ds}/lr_{fam}/{name}") for ds, fam in plan.lr_grids(GEN)]


def gen_lr_runs(wildcards):
    """One grid's runs, a rate each (generative.gradient.lr_grid)."""
    return [res(p) for p in plan.lr_grid_runs(GEN, wildcards.dataset, wildcards.family)]


def gen_setting(wildcards):
    return plan.settings(GEN, wildcards.dataset)[wildcards.setting]


def gen_is_adamw(wildcards):
    return gen_setting(wildcards).method == "adamw"


def gen_lr_input(wildcards):
    """An AdamW setting's learning-rate pick (its family's grid job); nothing for PIL."""
    s = gen_setting(wildcards)
    if s.method != "adamw":
        return []
    return res(f"generative/{wildcards.dataset}/lr_{s.family}/lr.json")


def lora_jobs(name):
    return expand(
        res("lora/{model}/{method}/{name}"),
        model=plan.lora_model_names(config),
        method=LORA["methods"],
        name=name,
    )


def saffu_runs(name):
    return [
        res(f"saffu/{plan.saffu_job(*job)}/{name}") for job in plan.saffu_jobs(config)
    ]


def sensitivity_grid():
    """(point, seed) of one sensitivity variant's runs, in the order its job runs them."""
    seeds = config["sensitivity"]["seeds"]
    return [(p, s) for p in plan.sensitivity_points(config) for s in seeds]


def sensitivity_outputs(name):
    """One sensitivity variant's run files (the {variant} wildcard left to the rule)."""
    return [
        res(f"sensitivity/{{variant}}/{p}/seed{s}/{name}")
        for p, s in sensitivity_grid()
    ]


def sensitivity_runs(name):
    return [
        res(f"sensitivity/{v}/{p}/seed{s}/{name}")
        for v, p, s in plan.sensitivity_jobs(config)
    ]


def timing_records():
    """The committed solve-vs-gradient records (benchmarks/solve_vs_grad.py); outside a git
    checkout, every record in benchmarks/records/."""
    import subprocess

    pattern = "benchmarks/records/solve_vs_grad_*.json"
    try:
        listed = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", pattern],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        listed = []
    return [source(f) for f in sorted(listed)] or sorted(glob.glob(source(pattern)))


def all_targets():
    return [
        generated("numbers.tex"),
        generated("tables/lm_main.tex"),
        generated("probe_numbers.tex"),
        generated("figures/training_curves.pdf"),
        res("paper/main.pdf"),
        res("paper/arxiv.tar.gz"),
        res("report/tables"),
    ]

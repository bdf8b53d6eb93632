# SAFFU explicit-solution baseline (re-implementation): one job per (setting, train fraction,
# seed), GPU when visible, running warm and cold start; the Kneser-Ney baseline (CPU); then
# aggregation with the claim frame, tables beside the LM summary, figures. Paths, job lists and
# each command's parameters come from the wing's plan (pillm.saffu.plan).
from pillm.saffu import plan as saffu_plan

# A job's (setting, fraction tag, seed) from its wildcards.
saffu_job = lambda w: (w.setting, w.frac, int(w.seed))
# The config a SAFFU job reads (its code stamp carries it: workflow/rules/common.smk, code).
saffu_cfg = lambda w: saffu_plan.saffu_job_params(config, w.setting, int(w.seed))
# The job folder as the rule's output, its wildcards constrained (saffu_plan.job_folder).
SAFFU_OUT = res(saffu_plan.job_folder(config))
SAFFU_PNG = expand(generated("figures/{name}.png"), name=saffu_plan.FIGURES)


# Later seeds reuse the rates their first seed chose, the other settings those the main setting
# chose on the full train split (saffu_plan.job_inputs). A job whose rates others reuse gates
# them: it runs first and at MPS's normal priority. One thread, Snakemake's default: its small
# sparse CPU ops slow down with more (4x at two threads on 2 cores).
rule saffu:
    input:
        unpack(lambda w: in_results(saffu_plan.job_inputs(config, *saffu_job(w)))),
        code=lambda w: code("saffu", saffu_cfg(w)),
    output:
        multiext(SAFFU_OUT, metrics="metrics.json", curve="curve.parquet"),
    log:
        logfile(saffu_plan.JOB),
    benchmark:
        benchfile(saffu_plan.JOB)
    priority: lambda w: PRIORITY[saffu_plan.priority_class(config, *saffu_job(w))]
    conda:
        "../envs/pillm.yaml"
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=lambda w: gpu_mem(saffu_plan.memory_class(config, *saffu_job(w))),
    params:
        args=lambda w, input, output: saffu_plan.job_args(config, w, input, output),
    shell:
        gpu_shell("python -m pillm saffu {params.args}")


# The n-gram baseline: CPU only (no polars: it also runs on GPU hosts), every train window of
# the SAFFU runs.
rule saffu_kn:
    input:
        tokens=in_results(saffu_plan.token_files(config)),
        code=code("saffu-kn"),
    output:
        metrics=res("saffu/kneser_ney/metrics.json"),
    log:
        logfile("saffu_kn"),
    priority: PRIORITY["saffu_kn"]
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json(saffu_plan.kn_params(config)),
        tokens_dir=lambda w, input: parent(input.tokens[0]),
        out_dir=subpath(output.metrics, parent=True),
    shell:
        "python -m pillm saffu-kn --params {params.cfg:q} --tokens-dir {params.tokens_dir}"
        " --out-dir {params.out_dir} > {log} 2>&1"


rule saffu_aggregate:
    input:
        metrics=in_results(saffu_plan.job_files(config, "metrics.json")),
        curves=in_results(saffu_plan.job_files(config, "curve.parquet")),
        kn=rules.saffu_kn.output.metrics,
        code=code("saffu-aggregate"),
    output:
        **in_results(saffu_plan.SUMMARIES),
    log:
        logfile("saffu_aggregate"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json(saffu_plan.aggregate_params(config)),
        out_dir=subpath(output.runs, parent=True),
    shell:
        "python -m pillm saffu-aggregate --metrics {input.metrics} --curves {input.curves}"
        " --kn-metrics {input.kn} --params {params.cfg:q} --out-dir {params.out_dir}"
        " --claims {output.claims} > {log} 2>&1"


rule saffu_tables:
    input:
        summary=rules.saffu_aggregate.output.summary,
        lm=res("summary/lm.parquet"),
        templates=TEMPLATES,
        code=code("saffu-tables", saffu_plan.tables_params(config)),
    output:
        tables=expand(generated("tables/{name}.tex"), name=saffu_plan.TABLES),
        numbers=generated("saffu_numbers.tex"),
    log:
        logfile("saffu_tables"),
    conda:
        "../envs/pillm.yaml"
    params:
        args=lambda w, input, output: saffu_plan.tables_args(config, input, output),
    shell:
        "python -m pillm saffu-tables {params.args} > {log} 2>&1"


rule saffu_figures:
    input:
        runs=rules.saffu_aggregate.output.runs,
        curves=rules.saffu_aggregate.output.curves,
        code=code("saffu-figures"),
    output:
        pdf=expand(generated("figures/{name}.pdf"), name=saffu_plan.FIGURES),
        png=report(SAFFU_PNG, caption="../report/saffu_figures.rst", category="Figures"),
    log:
        logfile("saffu_figures"),
    conda:
        "../envs/pillm.yaml"
    params:
        summary_dir=lambda w, input: parent(input.runs),
        out_dir=lambda w, output: parent(output.pdf[0]),
        main=config["saffu"]["main_setting"],
    shell:
        "python -m pillm saffu-figures --summary-dir {params.summary_dir}"
        " --main-setting {params.main} --out-dir {params.out_dir} > {log} 2>&1"


wing(
    "saffu",
    paper=[rules.saffu_tables.output, rules.saffu_figures.output.pdf],
    summaries=[rules.saffu_aggregate.output.runs],
    tables=[rules.saffu_tables.output],
)


localrules:
    saffu_aggregate,
    saffu_tables,
    saffu_figures,

# Sensitivity of the contribution share: a learning-rate x dropout grid (config sensitivity),
# each point's baseline / attn_only / ffn_only trained by run-lm with train.lr and model.dropout
# overridden (pillm.lm.plan.sensitivity_params), then one table and the \Sens* macros (a run
# trained by lm.trained_margin, as the LM study's).


# A sensitivity job's runs: their records, and their checkpoints as temporary files (the report
# reads only the metrics).
SENSITIVITY_RUNS = in_results(lm_plan.sensitivity_outputs(config))
SENSITIVITY_RUNS["checkpoint"] = temp(SENSITIVITY_RUNS["checkpoint"])


# One job per variant and seed runs the whole grid in one process (run-lm with one params set
# per run).
rule sensitivity_run:
    input:
        tokens=in_results(lm_plan.token_files(config)),
        code=code("run-lm"),
    output:
        **SENSITIVITY_RUNS,
    log:
        logfile("sensitivity_run/{variant}/seed{seed}"),
    benchmark:
        benchfile("sensitivity_run/{variant}/seed{seed}")
    priority: PRIORITY["sensitivity_run"]  # long: 9 runs (config/resources.yaml)
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=gpu_mem("sensitivity_run"),
    params:
        args=lambda w: lm_plan.sensitivity_args(config, w.variant, int(w.seed), RESULTS),
    shell:
        gpu_shell("python -m pillm run-lm --variant {wildcards.variant} {params.args}")


rule sensitivity_report:
    input:
        **in_results(lm_plan.sensitivity_report_inputs(config)),
        templates=TEMPLATES,
        code=code("sensitivity"),
    output:
        **in_results(lm_plan.sensitivity_summaries()),
        table=generated("tables/lm_sensitivity.tex"),
        numbers=generated("sensitivity_numbers.tex"),
    log:
        logfile("sensitivity_report"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json(lm_plan.sensitivity_report_params(config)),
        template_dir=lambda w, input: parent(input.templates[0]),
        out_dir=subpath(output.summary, parent=True),
    shell:
        "python -m pillm sensitivity --metrics {input.metrics} --params {params.cfg:q}"
        " --tokens-meta {input.tokens_meta} --templates {params.template_dir}"
        " --out-dir {params.out_dir} --table {output.table} --numbers {output.numbers} > {log} 2>&1"


wing(
    "sensitivity",
    paper=[
        rules.sensitivity_report.output.table,
        rules.sensitivity_report.output.numbers,
    ],
    summaries=[rules.sensitivity_report.output.runs],
)

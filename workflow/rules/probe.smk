# R2_lin probing: how linear is each FFN block? One job per (model, corpus); GPU when visible.
from pillm.probe import plan as probe_plan


rule probe:
    input:
        unpack(lambda w: own_model_inputs(w) | in_results(probe_plan.job_inputs())),
        code=code("probe"),
    output:
        **in_results(probe_plan.job_outputs()),
    log:
        logfile("probe/{model}/{corpus}"),
    benchmark:
        benchfile("probe/{model}/{corpus}")
    priority: lambda w: PRIORITY[probe_plan.priority_class(w.model)]
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=own_model_mem("probe"),
    params:
        args=probe_plan.job_args(config),
    shell:
        gpu_shell("python -m pillm probe {params.args}")


rule probe_aggregate:
    input:
        **in_results(probe_plan.aggregate_inputs(config)),
        code=code("probe-aggregate"),
    output:
        probe=res("summary/probe.parquet"),
        gradient=res("summary/probe_gradient.parquet"),
        jobs=res("summary/probe_jobs.parquet"),
        claims=res("summary/claims/probe.parquet"),
    log:
        logfile("probe_aggregate"),
    conda:
        "../envs/pillm.yaml"
    params:
        out_dir=subpath(output.probe, parent=True),
        cfg=as_json(probe_plan.aggregate_params(config)),
    shell:
        "python -m pillm probe-aggregate --blocks {input.blocks} --gradients {input.gradients}"
        " --metrics {input.metrics} --out-dir {params.out_dir} --params {params.cfg:q}"
        " --claims {output.claims} > {log} 2>&1"


rule probe_tables:
    input:
        summary=rules.probe_aggregate.output,
        templates=TEMPLATES,
        code=code("probe-tables"),
    output:
        tables=in_results(probe_plan.table_files()),
        numbers=in_results(probe_plan.NUMBERS),
    log:
        logfile("probe_tables"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json(probe_plan.table_params(config)),
        summary_dir=lambda w, input: parent(input.summary[0]),
        template_dir=lambda w, input: parent(input.templates[0]),
        tables_dir=lambda w, output: parent(output.tables[0]),
    shell:
        "python -m pillm probe-tables --summary-dir {params.summary_dir}"
        " --params {params.cfg:q} --templates {params.template_dir}"
        " --tables-dir {params.tables_dir} --numbers {output.numbers} > {log} 2>&1"


rule probe_figures:
    input:
        summary=rules.probe_aggregate.output,
        code=code("probe-figures"),
    output:
        pdf=in_results(probe_plan.figure_files("pdf")),
        png=report(
            in_results(probe_plan.figure_files("png")),
            caption="../report/probe_figures.rst",
            category="Figures",
        ),
    log:
        logfile("probe_figures"),
    conda:
        "../envs/pillm.yaml"
    params:
        summary_dir=lambda w, input: parent(input.summary[0]),
        out_dir=lambda w, output: parent(output.pdf[0]),
    shell:
        "python -m pillm probe-figures --summary-dir {params.summary_dir}"
        " --out-dir {params.out_dir} > {log} 2>&1"


wing(
    "probe",
    paper=[rules.probe_tables.output, rules.probe_figures.output.pdf],
    summaries=[rules.probe_aggregate.output.jobs],
    tables=[rules.probe_tables.output],
)


localrules:
    probe_aggregate,
    probe_tables,
    probe_figures,

# SST-2 on frozen base models: closed-form heads vs LoRA (peft); one job per (base model and
# seed, method); GPU when visible. Paths, job lists and each job's parameters come from the
# wing's plan (pillm.lora.plan).
from pillm.lora import plan as lora_plan

LORA = config["lora"]
# The job folder as the rule's output, its method constrained (lora_plan.job_folder).
LORA_OUT = res(lora_plan.job_folder())


# One rate of LoRA's search per job, at once (pillm.lora.run.rate_job): the lora job reads
# their runs, so a model's LoRA fits chain one run and the rerun, not every rate in turn.
# One thread: on a CPU shared with other jobs, a 2-thread OpenMP team spin-waits and ran
# MiniLM's LoRA steps ~15x slower than one thread (measured); GPU jobs do not care.
rule lora_rate:
    input:
        unpack(own_model_inputs),
        code=code("lora-rate", lora_plan.job_params(config)),
    output:
        res(lora_plan.RATE),
    log:
        logfile(lora_plan.RATE_JOB),
    benchmark:
        benchfile(lora_plan.RATE_JOB)
    priority: PRIORITY["lora_gradient"]  # the longest SST-2 jobs
    conda:
        "../envs/pillm.yaml"
    threads: 1
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=own_model_mem("lora"),
    params:
        args=lambda w, input, output: lora_plan.rate_args(config, w, input, output),
    shell:
        gpu_shell("python -m pillm lora-rate {params.args}")


rule lora:
    input:
        unpack(own_model_and(lora_plan.rate_inputs(config))),
        code=code("lora", lora_plan.job_params(config)),
    output:
        multiext(LORA_OUT, metrics="metrics.json", curve="curve.parquet"),
    log:
        logfile(lora_plan.JOB),
    benchmark:
        benchfile(lora_plan.JOB)
    priority: lambda w: PRIORITY[lora_plan.priority_class(w.model, w.method)]
    conda:
        "../envs/pillm.yaml"
    threads: 1
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=own_model_mem("lora"),
    params:
        args=lambda w, input, output: lora_plan.job_args(config, w, input, output),
    shell:
        gpu_shell("python -m pillm lora {params.args}")


rule lora_aggregate:
    input:
        metrics=in_results(lora_plan.job_files(config, "metrics.json")),
        curves=in_results(lora_plan.job_files(config, "curve.parquet")),
        code=code("lora-aggregate"),
    output:
        summary=res("summary/lora.parquet"),
        curves=res("summary/lora_curves.parquet"),
        claims=res("summary/claims/lora.parquet"),
    log:
        logfile("lora_aggregate"),
    conda:
        "../envs/pillm.yaml"
    params:
        jobs=lora_plan.job_names(config),
        out_dir=subpath(output.summary, parent=True),
    shell:
        "python -m pillm lora-aggregate --metrics {input.metrics} --curves {input.curves}"
        " --jobs {params.jobs} --out-dir {params.out_dir} > {log} 2>&1"


rule lora_tables:
    input:
        summary=rules.lora_aggregate.output,
        templates=TEMPLATES,
        code=code("lora-tables"),
    output:
        table=generated("tables/lora.tex"),
        numbers=generated("lora_numbers.tex"),
    log:
        logfile("lora_tables"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json({"name": config["name"], **LORA}),
        summary_dir=lambda w, input: parent(input.summary[0]),
        template_dir=lambda w, input: parent(input.templates[0]),
    shell:
        "python -m pillm lora-tables --summary-dir {params.summary_dir} --params {params.cfg:q}"
        " --templates {params.template_dir} --table {output.table}"
        " --numbers {output.numbers} > {log} 2>&1"


rule lora_figures:
    input:
        summary=rules.lora_aggregate.output,
        code=code("lora-figures"),
    output:
        pdf=generated("figures/lora_accuracy_time.pdf"),
        png=report(
            generated("figures/lora_accuracy_time.png"),
            caption="../report/lora_figures.rst",
            category="Figures",
        ),
    log:
        logfile("lora_figures"),
    conda:
        "../envs/pillm.yaml"
    params:
        summary_dir=lambda w, input: parent(input.summary[0]),
    shell:
        "python -m pillm lora-figures --summary-dir {params.summary_dir}"
        " --pdf {output.pdf} --png {output.png} > {log} 2>&1"


wing(
    "lora",
    paper=[rules.lora_tables.output, rules.lora_figures.output.pdf],
    summaries=[rules.lora_aggregate.output.summary],
    tables=[rules.lora_tables.output],
)


localrules:
    lora_aggregate,
    lora_tables,
    lora_figures,

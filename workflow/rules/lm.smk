# Language models: one job per variant (all its seeds in one process), gradient-trained and/or
# closed-form solved; then the study's summaries, tables and figures.
from pillm.lm import plan as lm_plan
from pillm.lm.variants import VARIANTS

# The paper's timing: the scaling study's cost command at the LM study's one width (rule
# solve_timing below).
SOLVE_TIMING = gpu_shell(
    "python -m pillm scaling-cost --params {params.cfg:q} --tokens {input.split} --out {output}"
)


wildcard_constraints:
    variant="|".join(VARIANTS),


rule run_lm:
    input:
        unpack(lambda w: in_results(lm_plan.run_inputs(config, w.variant))),
        code=code("run-lm"),
    output:
        **in_results(lm_plan.run_outputs(config)),
    log:
        logfile("run_lm/{variant}"),
    benchmark:
        benchfile("run_lm/{variant}")
    priority: lambda w: PRIORITY[lm_plan.priority_class(config, w.variant)]
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=lambda w: gpu_mem(lm_plan.gpu_mem_class(w.variant)),
    params:
        args=lambda w: lm_plan.run_args(config, w.variant, RESULTS),
    shell:
        gpu_shell("python -m pillm run-lm --variant {wildcards.variant} {params.args}")


# One job per variant evaluates all its seeds: start-up, not evaluation, dominates per-run jobs.
rule lm_extras:
    input:
        **in_results(lm_plan.extras_inputs(config)),
        code=code("lm-extras"),
    output:
        **in_results(lm_plan.extras_outputs(config)),
    log:
        logfile("lm_extras/{variant}"),
    benchmark:
        benchfile("lm_extras/{variant}")
    priority: PRIORITY["lm_extras"]
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=gpu_mem("lm_extras"),
    params:
        args=lambda w: lm_plan.extras_args(config, w.variant, RESULTS),
    shell:
        gpu_shell("python -m pillm lm-extras {params.args}")


# The timing the paper quotes: the PIL solve of every FFN layer against FFN-only AdamW at the
# study's shape (pillm.lm.scaling_cost). On a CUDA host it declares the whole GPU memory budget,
# so no other GPU job runs beside it; its priority starts it after the rest.
rule solve_timing:
    input:
        split=in_results(lm_plan.token_files(config)),
        code=code("scaling-cost"),
    output:
        res("lm/solve_timing.json"),
    log:
        logfile("lm/solve_timing"),
    benchmark:
        benchfile("solve_timing/lm")
    priority: PRIORITY["solve_timing"]
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=gpu_mem(10**12 if TIMING_ALONE else "solve_timing"),
    params:
        cfg=as_json(lm_plan.timing_params(config, alone=TIMING_ALONE)),
    shell:
        SOLVE_TIMING


rule aggregate:
    input:
        **in_results(lm_plan.aggregate_inputs(config)),
        code=code("aggregate"),
    output:
        **in_results(lm_plan.summary_files()),
    log:
        logfile("aggregate"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json(lm_plan.aggregate_params(config)),
        out_dir=subpath(output.runs, parent=True),
    shell:
        "python -m pillm aggregate --metrics {input.metrics} --curves {input.curves}"
        " --solves {input.solves} --samples {input.samples}"
        " --params {params.cfg:q} --out-dir {params.out_dir} > {log} 2>&1"


# The LM tables: lm_main in the Snakemake report (captioned by workflow/report/lm_main.rst), the
# others beside it.
LM_TABLE_FILES = {
    "table": report(
        generated("tables/lm_main.tex"),
        caption="../report/lm_main.rst",
        category="Tables",
    ),
    "more": [
        generated(f"tables/{name}.tex")
        for name in (
            "lm_contribution",
            "lm_features",
            "lm_strategies",
            "lm_targets",
            "lm_samples",
            "lm_solves",
        )
    ],
}


rule tables:
    input:
        **in_results(lm_plan.tables_inputs(config)),
        templates=TEMPLATES,
        code=code("tables"),
    output:
        **LM_TABLE_FILES,
        numbers=generated("numbers.tex"),
    log:
        logfile("tables"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json(lm_plan.tables_params(config)),
        summary_dir=lambda w, input: parent(input.runs),
        template_dir=lambda w, input: parent(input.templates[0]),
        tables_dir=subpath(output.table, parent=True),
    shell:
        "python -m pillm tables --summary-dir {params.summary_dir} --params {params.cfg:q}"
        " --tokens-meta {input.tokens_meta} --templates {params.template_dir}"
        " --tables-dir {params.tables_dir} --numbers {output.numbers} > {log} 2>&1"


rule figure_curves:
    input:
        curves=rules.aggregate.output.curves,
        code=code("figure-curves"),
    output:
        pdf=generated("figures/training_curves.pdf"),
        png=report(
            generated("figures/training_curves.png"),
            caption="../report/training_curves.rst",
            category="Figures",
        ),
    log:
        logfile("figure_curves"),
    conda:
        "../envs/pillm.yaml"
    shell:
        "python -m pillm figure-curves --curves {input.curves} --pdf {output.pdf}"
        " --png {output.png} > {log} 2>&1"


rule figure_lambda:
    input:
        solves=rules.aggregate.output.solves,
        code=code("figure-lambda"),
    output:
        pdf=generated("figures/pil_lambda.pdf"),
        png=report(
            generated("figures/pil_lambda.png"),
            caption="../report/pil_lambda.rst",
            category="Figures",
        ),
    log:
        logfile("figure_lambda"),
    conda:
        "../envs/pillm.yaml"
    shell:
        "python -m pillm figure-lambda --solves {input.solves} --pdf {output.pdf}"
        " --png {output.png} > {log} 2>&1"


rule figure_width:
    input:
        summary=rules.aggregate.output.lm,
        code=code("figure-width"),
    output:
        pdf=generated("figures/pil_width.pdf"),
        png=report(
            generated("figures/pil_width.png"),
            caption="../report/pil_width.rst",
            category="Figures",
        ),
    log:
        logfile("figure_width"),
    conda:
        "../envs/pillm.yaml"
    shell:
        "python -m pillm figure-width --summary {input.summary} --pdf {output.pdf}"
        " --png {output.png} > {log} 2>&1"


wing(
    "lm",
    paper=[
        rules.tables.output,
        rules.figure_curves.output.pdf,
        rules.figure_lambda.output.pdf,
        rules.figure_width.output.pdf,
    ],
    summaries=[rules.aggregate.output.runs],
    tables=[rules.tables.output],
)


# Aggregation, tables, figures: seconds each, never queued on a cluster.
localrules:
    aggregate,
    tables,
    figure_curves,
    figure_lambda,
    figure_width,

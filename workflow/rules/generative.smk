# Generative fits on images: PIL flow matching and PIL diffusion vs the same nets trained by AdamW
# (learning rate from a held-out grid, every seed of generative.seeds). Paths, command arguments,
# config params and per-job resources come from the wing's plan (pillm.generative.plan).
from pillm.generative import plan as gen_plan

GEN = config["generative"]


wildcard_constraints:
    family="|".join(gen_plan.FAMILIES),


# A generative job's (dataset, setting, seed) from its wildcards.
gen_job = lambda w: (w.dataset, w.setting, int(w.seed))


rule gen_images:
    input:
        code=code("gen-images"),
    output:
        in_results(gen_plan.IMAGES),
    log:
        logfile("generative/{dataset}/images"),
    priority: PRIORITY["data"]  # every generative job waits for it
    conda:
        "../envs/pillm.yaml"
    # Decode in parallel, with a quarter of the cores at most: the corpus splits and both
    # datasets' decodes fit the cores together at the start, before GPU jobs take them (a
    # greedy scheduler never starts a job that needs more cores than are free).
    threads: max(1, min(8, workflow.cores // 4))
    params:
        data=as_json(config["data"]),
    shell:
        "python -m pillm gen-images --dataset {wildcards.dataset} --data {params.data:q}"
        " --out {output} --threads {threads} > {log} 2>&1"


rule gen_classifier:
    input:
        images=in_results(gen_plan.IMAGES),
        code=code("gen-classifier", gen_plan.classifier_params(config)),
    output:
        **in_results(gen_plan.classifier_files()),
    log:
        logfile("generative/{dataset}/classifier"),
    benchmark:
        benchfile("generative/{dataset}/classifier")
    priority: PRIORITY["gen_classifier"]  # every fit of the dataset reads it
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=gpu_mem("gen_classifier"),
    params:
        args=lambda w, input, output: gen_plan.classifier_args(config, w, input, output),
    shell:
        gpu_shell("python -m pillm gen-classifier {params.args}")


rule gen_lr_run:
    input:
        images=in_results(gen_plan.IMAGES),
        code=code("gen-lr-run", gen_plan.job_params(config)),
    output:
        in_results(gen_plan.LR_RUN),
    log:
        logfile("generative/{dataset}/lr_{family}/lr{lr}"),
    benchmark:
        benchfile("generative/{dataset}/lr_{family}/lr{lr}")
    priority: PRIORITY["gen_lr_run"]  # each grid gates its family's seeds
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=gpu_mem("gen_lr_run"),
    params:
        args=lambda w, input, output: gen_plan.lr_run_args(config, w, input, output),
    shell:
        gpu_shell("python -m pillm gen-lr-run {params.args}")


# The pick of one grid from its rates' runs (each rate is its own GPU job, so they run at once).
rule gen_lr_grid:
    input:
        runs=lambda w: in_results(gen_plan.lr_grid_runs(GEN, w.dataset, w.family)),
        code=code("gen-lr-pick"),
    output:
        **in_results(gen_plan.lr_pick_outputs()),
    log:
        logfile("generative/{dataset}/lr_{family}"),
    priority: PRIORITY["gen_lr_pick"]
    conda:
        "../envs/pillm.yaml"
    params:
        out_dir=subpath(output.lr, parent=True),
    shell:
        "python -m pillm gen-lr-pick --runs {input.runs} --out-dir {params.out_dir}"
        " > {log} 2>&1"


rule generative:
    input:
        unpack(lambda w: in_results(gen_plan.job_inputs(config, *gen_job(w)))),
        code=code("generative", gen_plan.job_params(config)),
    output:
        **in_results(gen_plan.job_outputs()),
    log:
        logfile("generative/{dataset}/{setting}/seed{seed}"),
    benchmark:
        benchfile("generative/{dataset}/{setting}/seed{seed}")
    priority: lambda w: PRIORITY[gen_plan.priority_class(config, *gen_job(w))]
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=lambda w: gpu_mem(gen_plan.gpu_need(config, w.dataset, w.setting)),
    params:
        args=lambda w, input, output: gen_plan.job_args(config, w, input, output),
    shell:
        gpu_shell("python -m pillm generative {params.args}")


rule gen_aggregate:
    input:
        **in_results(gen_plan.aggregate_inputs(config)),
        code=code("gen-aggregate"),
    output:
        **in_results(gen_plan.summary_files()),
    log:
        logfile("gen_aggregate"),
    conda:
        "../envs/pillm.yaml"
    params:
        out_dir=subpath(output.runs, parent=True),
    shell:
        "python -m pillm gen-aggregate --metrics {input.metrics} --curves {input.curves}"
        " --samplers {input.samplers} --classifiers {input.classifiers}"
        " --lr-picks {input.lr} --lr-curves {input.lr_curves}"
        " --out-dir {params.out_dir} --claims {output.claims} > {log} 2>&1"


rule gen_tables:
    input:
        summary=rules.gen_aggregate.output,
        templates=TEMPLATES,
        code=code("gen-tables"),
    output:
        tables=expand(generated("tables/gen_{name}.tex"), name=gen_plan.TABLES),
        numbers=generated("gen_numbers.tex"),
    log:
        logfile("gen_tables"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json(gen_plan.tables_params(config)),
        summary_dir=lambda w, input: parent(input.summary[0]),
        template_dir=lambda w, input: parent(input.templates[0]),
        tables_dir=lambda w, output: parent(output.tables[0]),
    shell:
        "python -m pillm gen-tables --summary-dir {params.summary_dir}"
        " --params {params.cfg:q} --templates {params.template_dir}"
        " --tables-dir {params.tables_dir} --numbers {output.numbers} > {log} 2>&1"


GEN_FIGURES = {
    ext: expand(generated(f"figures/gen_{{name}}.{ext}"), name=gen_plan.FIGURES)
    for ext in ("pdf", "png")
}


rule gen_figures:
    input:
        summary=rules.gen_aggregate.output,
        grids=in_results(gen_plan.job_files(config, "samples.png")),
        code=code("gen-figures"),
    output:
        pdf=GEN_FIGURES["pdf"],
        png=report(
            GEN_FIGURES["png"], caption="../report/gen_figures.rst", category="Figures"
        ),
    log:
        logfile("gen_figures"),
    conda:
        "../envs/pillm.yaml"
    params:
        summary_dir=lambda w, input: parent(input.summary[0]),
        results_dir=lambda w, input: gen_plan.grids_root(input.grids[0]),
        out_dir=lambda w, output: parent(output.pdf[0]),
    shell:
        "python -m pillm gen-figures --summary-dir {params.summary_dir}"
        " --results-dir {params.results_dir} --out-dir {params.out_dir} > {log} 2>&1"


wing(
    "generative",
    paper=[rules.gen_tables.output, rules.gen_figures.output.pdf],
    summaries=[rules.gen_aggregate.output.runs],
    tables=[rules.gen_tables.output],
)


localrules:
    gen_lr_grid,
    gen_aggregate,
    gen_tables,
    gen_figures,

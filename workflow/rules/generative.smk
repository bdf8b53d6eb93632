# Generative fits on images: PIL flow matching and PIL diffusion vs the same nets trained by AdamW
# (learning rate from a held-out grid, every seed of generative.seeds).
from pillm.generative import plan as gen_plan

GEN = config["generative"]


rule gen_images:
    input:
        code=code("gen-images"),
    output:
        res("generative/{dataset}/images.npz"),
    log:
        logfile("generative/{dataset}/images"),
    conda:
        "../envs/pillm.yaml"
    # Every generative job waits for it, and the GPU jobs that start meanwhile fill the slots
    # (one H100, 2026-11-27: the classifiers, ready at 19 s, started at 67 s): decode in parallel.
    threads: 8
    params:
        data=as_json(config["data"]),
    shell:
        "python -m pillm gen-images --dataset {wildcards.dataset} --data {params.data:q}"
        " --out {output} --threads {threads} > {log} 2>&1"


rule gen_classifier:
    input:
        images=rules.gen_images.output,
        code=code("gen-classifier"),
    output:
        model=res("generative/{dataset}/classifier.pt"),
        metrics=res("generative/{dataset}/classifier.json"),
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
        # Only what the classifier and its floor depend on: other generative keys keep it.
        cfg=as_json(
            {
                k: GEN[k]
                for k in (
                    "classifier",
                    "seed",
                    "n_eval",
                    "kid_subsets",
                    "kid_subset_size",
                )
            }
        ),
        out_dir=subpath(output.model, parent=True),
    shell:
        gpu_shell(
            "python -m pillm gen-classifier --dataset {wildcards.dataset} --params {params.cfg:q}"
            " --images {input.images} --out-dir {params.out_dir}",
        )


rule gen_lr_run:
    input:
        images=rules.gen_images.output,
        code=code("gen-lr-run"),
    output:
        res("generative/{dataset}/lr_{family}/runs/lr{lr}.json"),
    log:
        logfile("generative/{dataset}/lr_{family}/lr{lr}"),
    benchmark:
        benchfile("generative/{dataset}/lr_{family}/lr{lr}")
    wildcard_constraints:
        family="|".join(gen_plan.FAMILIES),
    priority: PRIORITY["gen_lr_run"]  # each grid gates its family's seeds
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=gpu_mem("gen_lr_run"),
    params:
        cfg=as_json(
            {k: v for k, v in GEN.items() if k not in ("datasets", "classifier")}
        ),
    shell:
        gpu_shell(
            "python -m pillm gen-lr-run --dataset {wildcards.dataset} --family {wildcards.family}"
            " --lr {wildcards.lr} --params {params.cfg:q} --images {input.images} --out {output}",
        )


# The pick of one grid from its rates' runs (each rate is its own GPU job, so they run at once).
rule gen_lr_grid:
    input:
        runs=lambda w: in_results(gen_plan.lr_grid_runs(GEN, w.dataset, w.family)),
        code=code("gen-lr-pick"),
    output:
        lr=res("generative/{dataset}/lr_{family}/lr.json"),
        curves=res("generative/{dataset}/lr_{family}/curves.parquet"),
    log:
        logfile("generative/{dataset}/lr_{family}"),
    wildcard_constraints:
        family="|".join(gen_plan.FAMILIES),
    conda:
        "../envs/pillm.yaml"
    params:
        out_dir=subpath(output.lr, parent=True),
    shell:
        "python -m pillm gen-lr-pick --runs {input.runs} --out-dir {params.out_dir}"
        " > {log} 2>&1"


rule generative:
    input:
        images=rules.gen_images.output,
        classifier=rules.gen_classifier.output.model,
        lr=lambda w: in_results(gen_plan.lr_pick_files(config, w.dataset, w.setting)),
        code=code("generative"),
    output:
        metrics=res("generative/{dataset}/{setting}/seed{seed}/metrics.json"),
        curves=res("generative/{dataset}/{setting}/seed{seed}/curves.parquet"),
        samplers=res("generative/{dataset}/{setting}/seed{seed}/samplers.parquet"),
        grid=res("generative/{dataset}/{setting}/seed{seed}/samples.png"),
    log:
        logfile("generative/{dataset}/{setting}/seed{seed}"),
    benchmark:
        benchfile("generative/{dataset}/{setting}/seed{seed}")
    priority: lambda w: PRIORITY[gen_plan.priority_class(config, w.dataset, w.setting)]
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=lambda w: gpu_mem(
            gen_plan.gpu_memory_mb(
                config, w.dataset, w.setting, GPU_MEM_MB["generative_adamw"]
            )
        ),
    params:
        # Not datasets (the DAG's business) nor classifier (an input file already).
        cfg=as_json(
            {k: v for k, v in GEN.items() if k not in ("datasets", "classifier")}
        ),
        lr=lambda w, input: f"--lr {input.lr}" if input.lr else "",
        # The AdamW arms gate the run's end (chains of small graphed steps): normal priority.
        mps=lambda w: mps_priority(
            bulk=not gen_plan.is_adamw(config, w.dataset, w.setting)
        ),
        out_dir=subpath(output.metrics, parent=True),
    shell:
        gpu_shell(
            "python -m pillm generative --dataset {wildcards.dataset} --setting {wildcards.setting}"
            " --seed {wildcards.seed} --params {params.cfg:q} --images {input.images}"
            " --classifier {input.classifier} {params.lr} --out-dir {params.out_dir}",
            mps=True,
        )


rule gen_aggregate:
    input:
        metrics=in_results(gen_plan.job_files(config, "metrics.json")),
        curves=in_results(gen_plan.job_files(config, "curves.parquet")),
        samplers=in_results(gen_plan.job_files(config, "samplers.parquet")),
        classifiers=expand(
            res("generative/{dataset}/classifier.json"), dataset=GEN["datasets"]
        ),
        lr=in_results(gen_plan.lr_grid_files(config, "lr.json")),
        lr_curves=in_results(gen_plan.lr_grid_files(config, "curves.parquet")),
        code=code("gen-aggregate"),
    output:
        runs=res("summary/generative.parquet"),
        curves=res("summary/generative_curves.parquet"),
        samplers=res("summary/generative_samplers.parquet"),
        classifiers=res("summary/generative_classifiers.parquet"),
        lr=res("summary/generative_lr.parquet"),
        lr_curves=res("summary/generative_lr_curves.parquet"),
        speed=res("summary/generative_speed.parquet"),
        claims=res("summary/claims/generative.parquet"),
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
        tables=expand(
            generated("tables/gen_{name}.tex"),
            name=["main", "speed", "lr", "ablations", "samplers", "cost"],
        ),
        numbers=generated("gen_numbers.tex"),
    log:
        logfile("gen_tables"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json({"name": config["name"], "generative": GEN}),
        summary_dir=lambda w, input: parent(input.summary[0]),
        template_dir=lambda w, input: parent(input.templates[0]),
        tables_dir=lambda w, output: parent(output.tables[0]),
    shell:
        "python -m pillm gen-tables --summary-dir {params.summary_dir}"
        " --params {params.cfg:q} --templates {params.template_dir}"
        " --tables-dir {params.tables_dir} --numbers {output.numbers} > {log} 2>&1"


rule gen_figures:
    input:
        summary=rules.gen_aggregate.output,
        grids=in_results(gen_plan.job_files(config, "samples.png")),
        code=code("gen-figures"),
    output:
        pdf=expand(
            generated("figures/gen_{name}.pdf"),
            name=["samples", "lambda", "samplers", "budget"],
        ),
        png=report(
            expand(
                generated("figures/gen_{name}.png"),
                name=["samples", "lambda", "samplers", "budget"],
            ),
            caption="../report/gen_figures.rst",
            category="Figures",
        ),
    log:
        logfile("gen_figures"),
    conda:
        "../envs/pillm.yaml"
    params:
        summary_dir=lambda w, input: parent(input.summary[0]),
        # results/<name>/generative: the grids sit at <dataset>/<setting>/seed<s>/samples.png.
        results_dir=lambda w, input: parent(parent(parent(parent(input.grids[0])))),
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

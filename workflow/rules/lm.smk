# Language models: one job per variant (all its seeds in one process), gradient-trained and/or
# closed-form solved; then the study's summaries, tables and figures.
from pillm.lm import plan as lm_plan
from pillm.lm.variants import VARIANTS, dependencies

LM_VARIANTS = config["lm"]["variants"]
SEEDS = config["lm"]["seeds"]


wildcard_constraints:
    variant="|".join(VARIANTS),


rule run_lm:
    input:
        unpack(lambda w: in_results(lm_plan.dependency_files(config, w.variant))),
        tokens=multiext(
            res(f"tokens/{CORPUS}/"),
            "train.npy",
            "valid.npy",
            "test.npy",
            "meta.json",
        ),
        code=code("run-lm"),
    output:
        metrics=expand(res("lm/{{variant}}/seed{seed}/metrics.json"), seed=SEEDS),
        curve=expand(res("lm/{{variant}}/seed{seed}/curve.parquet"), seed=SEEDS),
        solve=expand(res("lm/{{variant}}/seed{seed}/solve.parquet"), seed=SEEDS),
        checkpoint=expand(res("lm/{{variant}}/seed{seed}/model.pt"), seed=SEEDS),
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
        gpu_mem_mb=lambda w: gpu_mem(
            "run_lm_fgrad" if VARIANTS[w.variant].target == "fgrad" else "run_lm"
        ),
    params:
        cfg=lambda w: as_json(lm_plan.lm_params(config, w.variant)),
        deps=lambda w: " ".join(
            f"{d}={res(f'lm/{d}')}" for d in dependencies(w.variant)
        ),
        tokens_dir=lambda w, input: parent(input.tokens[0]),
        out_dirs=lambda w, output: " ".join(parent(m) for m in output.metrics),
        seeds=" ".join(map(str, SEEDS)),
        device=DEVICE,
    shell:
        "PILLM_GPU_MEM_MB={resources.gpu_mem_mb}"
        " python -m pillm run-lm --variant {wildcards.variant} --seeds {params.seeds}"
        " --tokens-dir {params.tokens_dir} --deps {params.deps} --params {params.cfg:q}"
        " --device {params.device} --out-dirs {params.out_dirs} > {log} 2>&1"


# One job per variant evaluates all its seeds: start-up, not evaluation, dominated per-run jobs.
rule lm_extras:
    input:
        metrics=expand(res("lm/{{variant}}/seed{seed}/metrics.json"), seed=SEEDS),
        checkpoints=expand(res("lm/{{variant}}/seed{seed}/model.pt"), seed=SEEDS),
        tokens=res(f"tokens/{CORPUS}/tokenizer.json"),
        code=code("lm-extras"),
    output:
        extras=expand(res("lm/{{variant}}/seed{seed}/extras.json"), seed=SEEDS),
        samples=expand(res("lm/{{variant}}/seed{seed}/samples.json"), seed=SEEDS),
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
        cfg=as_json(
            {
                "data": config["data"],
                "lambada": config["lambada"],
                "samples": config["samples"],
            }
        ),
        run_dirs=lambda w, input: " ".join(parent(m) for m in input.metrics),
        tokens_dir=lambda w, input: parent(input.tokens),
        device=DEVICE,
    shell:
        "PILLM_GPU_MEM_MB={resources.gpu_mem_mb}"
        " python -m pillm lm-extras --run-dirs {params.run_dirs} --tokens-dir {params.tokens_dir}"
        " --params {params.cfg:q} --device {params.device} > {log} 2>&1"


rule aggregate:
    input:
        metrics=in_results(
            lm_plan.run_files(config, "metrics.json")
            + lm_plan.run_files(config, "extras.json")
        ),
        curves=in_results(lm_plan.run_files(config, "curve.parquet")),
        solves=in_results(lm_plan.run_files(config, "solve.parquet")),
        samples=in_results(lm_plan.run_files(config, "samples.json")),
        code=code("aggregate"),
    output:
        runs=res("summary/runs.parquet"),
        lm=res("summary/lm.parquet"),
        curves=res("summary/curves.parquet"),
        solves=res("summary/solves.parquet"),
        samples=res("summary/samples.parquet"),
        claims=res("summary/claims/lm.parquet"),
    log:
        logfile("aggregate"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json({"variants": LM_VARIANTS, "seeds": SEEDS}),
        out_dir=subpath(output.runs, parent=True),
    shell:
        "python -m pillm aggregate --metrics {input.metrics} --curves {input.curves}"
        " --solves {input.solves} --samples {input.samples}"
        " --params {params.cfg:q} --out-dir {params.out_dir} > {log} 2>&1"


rule tables:
    input:
        runs=rules.aggregate.output.runs,
        lm=rules.aggregate.output.lm,
        samples=rules.aggregate.output.samples,
        kn=res("summary/kneser_ney.parquet"),  # the contribution table's Kneser-Ney row (saffu)
        tokens_meta=res(f"tokens/{CORPUS}/meta.json"),
        templates=TEMPLATES,
        code=code("tables"),
    output:
        table=report(
            generated("tables/lm_main.tex"),
            caption="../report/lm_main.rst",
            category="Tables",
        ),
        more=expand(
            generated("tables/{name}.tex"),
            name=[
                "lm_contribution",
                "lm_features",
                "lm_strategies",
                "lm_targets",
                "lm_samples",
            ],
        ),
        numbers=generated("numbers.tex"),
    log:
        logfile("tables"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=lambda w: as_json(
            {
                "name": config["name"],
                "model": config["model"],
                "train": config["train"],
                "variants": LM_VARIANTS,
                "seeds": SEEDS,
            }
        ),
        summary_dir=lambda w, input: parent(input.runs),
        template_dir=lambda w, input: parent(input.templates[0]),
        tables_dir=subpath(output.table, parent=True),
    shell:
        "python -m pillm tables --summary-dir {params.summary_dir}"
        " --tokens-meta {input.tokens_meta} --params {params.cfg:q}"
        " --templates {params.template_dir} --tables-dir {params.tables_dir}"
        " --numbers {output.numbers} > {log} 2>&1"


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

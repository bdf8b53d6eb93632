# R2_lin probing: how linear is each FFN block? One job per (model, corpus); GPU when visible.
from pillm.probe import plan as probe_plan

PROBE = config["probe"]


rule probe:
    input:
        unpack(own_model_inputs),
        corpus=multiext(res("data/{corpus}/"), "test.txt", "valid.txt", "meta.json"),
        code=code("probe"),
    output:
        blocks=res("probe/{model}/{corpus}/blocks.parquet"),
        gradient=res("probe/{model}/{corpus}/gradient.parquet"),
        metrics=res("probe/{model}/{corpus}/metrics.json"),
    log:
        logfile("probe/{model}/{corpus}"),
    benchmark:
        benchfile("probe/{model}/{corpus}")
    priority: PRIORITY["probe"]
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=own_model_mem("probe"),
    params:
        # Not probe.models: which models run is the DAG's business, not any one job's.
        cfg=as_json({k: v for k, v in PROBE.items() if k != "models"}),
        own=lambda w, input: (
            f"--checkpoint {input.checkpoint} --tokenizer {input.tokenizer}"
            if "checkpoint" in input.keys()
            else ""
        ),
        corpus_dir=lambda w, input: parent(input.corpus[0]),
        out_dir=subpath(output.blocks, parent=True),
    shell:
        gpu_shell(
            "python -m pillm probe --model {wildcards.model} --corpus {wildcards.corpus}"
            " --corpus-dir {params.corpus_dir} --params {params.cfg:q} {params.own}"
            " --out-dir {params.out_dir}"
        )


rule probe_aggregate:
    input:
        blocks=in_results(probe_plan.job_files(config, "blocks.parquet")),
        gradients=in_results(probe_plan.job_files(config, "gradient.parquet")),
        metrics=in_results(probe_plan.job_files(config, "metrics.json")),
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
        cfg=as_json(
            {
                "main_corpus": (PROBE["swap_corpora"] or PROBE["corpora"])[0],
                "bootstrap_resamples": PROBE["bootstrap_resamples"],
            }
        ),
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
        tables=expand(
            generated("tables/probe_{name}.tex"),
            name=["summary", "corpora", "gradient", "blocks", "masks", "cost"],
        ),
        numbers=generated("probe_numbers.tex"),
    log:
        logfile("probe_tables"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json(
            {
                "name": config["name"],
                "corpora": PROBE["corpora"],
                "swap_corpora": PROBE["swap_corpora"],
                "main_corpus": (PROBE["swap_corpora"] or PROBE["corpora"])[0],
                "bilinear_rank": PROBE["bilinear_rank"],
                "low_rank_factor": PROBE["low_rank_factor"],
                "holdout_every": PROBE["holdout_every"],
                "rows": PROBE["rows"],
                "outlier_features": PROBE["outlier_features"],
                "bootstrap_resamples": PROBE["bootstrap_resamples"],
            }
        ),
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
        pdf=expand(
            generated("figures/probe_{name}.pdf"),
            name=[
                "r2_depth",
                "bilinear",
                "feature_median",
                "corpora",
                "gradient",
                "masks",
            ],
        ),
        png=report(
            expand(
                generated("figures/probe_{name}.png"),
                name=[
                    "r2_depth",
                    "bilinear",
                    "feature_median",
                    "corpora",
                    "gradient",
                    "masks",
                ],
            ),
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

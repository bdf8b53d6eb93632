# Sensitivity of the contribution share: a learning-rate x dropout grid (config sensitivity),
# each point's baseline / attn_only / ffn_only trained by run-lm with train.lr and model.dropout
# overridden (pillm.lm.plan.sensitivity_params), then one table and the \Sens* macros.


# One job per variant runs its whole grid in one process (run-lm with one params set per run).


rule sensitivity_run:
    input:
        tokens=multiext(
            res(f"tokens/{CORPUS}/"),
            "train.npy",
            "valid.npy",
            "test.npy",
            "meta.json",
        ),
        code=code("run-lm"),
    output:
        metrics=in_results(lm_plan.sensitivity_variant_files(config, "metrics.json")),
        curve=in_results(lm_plan.sensitivity_variant_files(config, "curve.parquet")),
        solve=in_results(lm_plan.sensitivity_variant_files(config, "solve.parquet")),
        checkpoint=temp(
            in_results(lm_plan.sensitivity_variant_files(config, "model.pt"))
        ),
    log:
        logfile("sensitivity_run/{variant}"),
    benchmark:
        benchfile("sensitivity_run/{variant}")
    wildcard_constraints:
        variant="baseline|attn_only|ffn_only",
    priority: PRIORITY["sensitivity_run"]  # long: 9 runs (common.smk)
    conda:
        "../envs/pillm.yaml"
    threads: GPU_THREADS
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=gpu_mem("sensitivity_run"),
    params:
        cfg=lambda w: as_json(
            [
                lm_plan.sensitivity_params(config, w.variant, p)
                for p, _ in lm_plan.sensitivity_grid(config)
            ]
        ),
        seeds=" ".join(str(s) for _, s in lm_plan.sensitivity_grid(config)),
        tokens_dir=lambda w, input: parent(input.tokens[0]),
        out_dirs=lambda w, output: " ".join(parent(m) for m in output.metrics),
        device=DEVICE,
    shell:
        "PILLM_GPU_MEM_MB={resources.gpu_mem_mb}"
        " python -m pillm run-lm --variant {wildcards.variant} --seeds {params.seeds}"
        " --tokens-dir {params.tokens_dir} --params {params.cfg:q}"
        " --device {params.device} --out-dirs {params.out_dirs} > {log} 2>&1"


rule sensitivity_report:
    input:
        metrics=in_results(lm_plan.sensitivity_files(config, "metrics.json")),
        tokens_meta=res(f"tokens/{CORPUS}/meta.json"),
        templates=TEMPLATES,
        code=code("sensitivity"),
    output:
        summary=res("summary/sensitivity.parquet"),
        runs=res("summary/sensitivity_runs.parquet"),
        table=generated("tables/lm_sensitivity.tex"),
        numbers=generated("sensitivity_numbers.tex"),
    log:
        logfile("sensitivity_report"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json(config["sensitivity"]),
        template_dir=lambda w, input: parent(input.templates[0]),
        out_dir=subpath(output.summary, parent=True),
    shell:
        "python -m pillm sensitivity --metrics {input.metrics}"
        " --tokens-meta {input.tokens_meta} --params {params.cfg:q}"
        " --templates {params.template_dir} --out-dir {params.out_dir}"
        " --table {output.table} --numbers {output.numbers} > {log} 2>&1"


wing(
    "sensitivity",
    paper=[
        rules.sensitivity_report.output.table,
        rules.sensitivity_report.output.numbers,
    ],
    summaries=[rules.sensitivity_report.output.runs],
)

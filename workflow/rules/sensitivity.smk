# Sensitivity of the contribution share: a learning-rate x dropout grid (config sensitivity),
# each point's baseline / attn_only / ffn_only trained by run-lm with train.lr and model.dropout
# overridden (pillm.plan.sensitivity_params), then one table and the \Sens* macros.
# Job list: sensitivity_runs (common.smk).


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
        metrics=sensitivity_outputs("metrics.json"),
        curve=sensitivity_outputs("curve.parquet"),
        solve=sensitivity_outputs("solve.parquet"),
        checkpoint=temp(sensitivity_outputs("model.pt")),
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
                plan.sensitivity_params(config, w.variant, p)
                for p, _ in sensitivity_grid()
            ]
        ),
        seeds=" ".join(str(s) for _, s in sensitivity_grid()),
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
        metrics=sensitivity_runs("metrics.json"),
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

# SAFFU explicit-solution baseline (re-implementation): one job per (setting, train fraction,
# seed), GPU when visible, running warm and cold start; the Kneser-Ney baseline (CPU); then
# aggregation with the claim frame, tables beside the LM summary, figures.
from pillm.saffu import plan as saffu_plan

SAFFU = config["saffu"]
SAFFU_SETTINGS = saffu_plan.saffu_settings(config)
# A job's (setting, fraction tag, seed) from its wildcards.
saffu_job = lambda w: (w.setting, w.frac, int(w.seed))


rule saffu:
    input:
        tokens=multiext(
            res(f"tokens/{CORPUS}/"),
            "train.npy",
            "valid.npy",
            "test.npy",
            "meta.json",
        ),
        code=code("saffu"),
        # later seeds reuse the rates their first seed chose, the other settings those the
        # main setting chose on the full train split
        rates=lambda w: in_results(saffu_plan.rates_files(config, *saffu_job(w))),
    output:
        metrics=res("saffu/{setting}/{frac}/seed{seed}/metrics.json"),
        curve=res("saffu/{setting}/{frac}/seed{seed}/curve.parquet"),
    log:
        logfile("saffu/{setting}/{frac}/seed{seed}"),
    benchmark:
        benchfile("saffu/{setting}/{frac}/seed{seed}")
    wildcard_constraints:  # rule-level: "setting" and "seed" are also generative wildcards
        setting="|".join(SAFFU_SETTINGS),
        frac=r"f[0-9.]+",
        seed=r"\d+",
    priority: lambda w: PRIORITY[saffu_plan.priority_class(config, *saffu_job(w))]
    conda:
        "../envs/pillm.yaml"
    # one thread: its small sparse CPU ops slow down with more (4x at two threads on 2 cores)
    threads: 1
    resources:
        gpu=1,  # the SLURM profile finds GPU rules by this line
        gpu_mem_mb=lambda w: gpu_mem(saffu_plan.memory_class(config, *saffu_job(w))),
    params:
        cfg=lambda w: as_json(
            saffu_plan.saffu_job_params(config, w.setting, int(w.seed))
        ),
        fraction=lambda w: saffu_plan.saffu_fraction(config, w.frac),
        tokens_dir=lambda w, input: parent(input.tokens[0]),
        out_dir=subpath(output.metrics, parent=True),
        rates=lambda w, input: f"--rates-from {input.rates[0]}" if input.rates else "",
        # A rates job gates other jobs: on two H100s the one of the other settings ran 254 s
        # at MPS's below-normal priority and they ended the run after it (2026-11-27): normal.
        mps=lambda w: mps_priority(
            bulk=not saffu_plan.chooses_rates(config, *saffu_job(w))
        ),
    shell:
        gpu_shell(
            "python -m pillm saffu --setting {wildcards.setting} --fraction {params.fraction}"
            " --tokens-dir {params.tokens_dir} --params {params.cfg:q}"
            " --out-dir {params.out_dir} {params.rates}",
            mps=True,
        )


# The n-gram baseline: CPU only (no polars: it also runs on GPU hosts), every train window of
# the SAFFU runs.
rule saffu_kn:
    input:
        tokens=multiext(
            res(f"tokens/{CORPUS}/"),
            "train.npy",
            "valid.npy",
            "test.npy",
            "meta.json",
        ),
        code=code("saffu-kn"),
    output:
        metrics=res("saffu/kneser_ney/metrics.json"),
    log:
        logfile("saffu_kn"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json({k: SAFFU[k] for k in ("kn", "fractions", "seeds")}),
        tokens_dir=lambda w, input: parent(input.tokens[0]),
        out_dir=subpath(output.metrics, parent=True),
    shell:
        "python -m pillm saffu-kn --params {params.cfg:q} --tokens-dir {params.tokens_dir}"
        " --out-dir {params.out_dir} > {log} 2>&1"


rule saffu_aggregate:
    input:
        metrics=in_results(saffu_plan.job_files(config, "metrics.json")),
        curves=in_results(saffu_plan.job_files(config, "curve.parquet")),
        kn=rules.saffu_kn.output.metrics,
        code=code("saffu-aggregate"),
    output:
        runs=res("summary/saffu_runs.parquet"),
        summary=res("summary/saffu.parquet"),
        curves=res("summary/saffu_curves.parquet"),
        kn=res("summary/kneser_ney.parquet"),  # the LM table's Kneser-Ney row
        claims=res("summary/claims/saffu.parquet"),
    log:
        logfile("saffu_aggregate"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json(
            {
                "settings": list(SAFFU_SETTINGS),
                **{
                    k: SAFFU[k]
                    for k in (
                        "main_setting",
                        "inits",
                        "fractions",
                        "seeds",
                        "ablation_seeds",
                    )
                },
            }
        ),
        out_dir=subpath(output.runs, parent=True),
    shell:
        "python -m pillm saffu-aggregate --metrics {input.metrics} --curves {input.curves}"
        " --kn-metrics {input.kn} --params {params.cfg:q} --out-dir {params.out_dir}"
        " --claims {output.claims} > {log} 2>&1"


rule saffu_tables:
    input:
        summary=rules.saffu_aggregate.output.summary,
        lm=res("summary/lm.parquet"),
        templates=TEMPLATES,
        code=code("saffu-tables"),
    output:
        tables=expand(
            generated("tables/{name}.tex"),
            name=["saffu", "saffu_sizes", "saffu_ablation"],
        ),
        numbers=generated("saffu_numbers.tex"),
    log:
        logfile("saffu_tables"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=as_json({k: v for k, v in SAFFU.items() if k != "settings"}),
        summary_dir=lambda w, input: parent(input.summary),
        template_dir=lambda w, input: parent(input.templates[0]),
        tables_dir=lambda w, output: parent(output.tables[0]),
    shell:
        "python -m pillm saffu-tables --summary-dir {params.summary_dir}"
        " --lm-summary {input.lm} --params {params.cfg:q} --templates {params.template_dir}"
        " --tables-dir {params.tables_dir} --numbers {output.numbers} > {log} 2>&1"


rule saffu_figures:
    input:
        runs=rules.saffu_aggregate.output.runs,
        curves=rules.saffu_aggregate.output.curves,
        code=code("saffu-figures"),
    output:
        pdf=expand(
            generated("figures/{name}.pdf"),
            name=["saffu_curves", "saffu_ablation"],
        ),
        png=report(
            expand(
                generated("figures/{name}.png"),
                name=["saffu_curves", "saffu_ablation"],
            ),
            caption="../report/saffu_figures.rst",
            category="Figures",
        ),
    log:
        logfile("saffu_figures"),
    conda:
        "../envs/pillm.yaml"
    params:
        summary_dir=lambda w, input: parent(input.runs),
        out_dir=lambda w, output: parent(output.pdf[0]),
        main=SAFFU["main_setting"],
    shell:
        "python -m pillm saffu-figures --summary-dir {params.summary_dir}"
        " --main-setting {params.main} --out-dir {params.out_dir} > {log} 2>&1"


wing(
    "saffu",
    paper=[rules.saffu_tables.output, rules.saffu_figures.output.pdf],
    summaries=[rules.saffu_aggregate.output.runs],
    tables=[rules.saffu_tables.output],
)


localrules:
    saffu_aggregate,
    saffu_tables,
    saffu_figures,

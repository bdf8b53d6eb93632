# Paper: aggregate runs (polars) -> tables, numbers, figures -> PDF -> arXiv tarball.


rule aggregate:
    input:
        metrics=lm_runs("metrics.json") + lm_runs("extras.json"),
        curves=lm_runs("curve.parquet"),
        solves=lm_runs("solve.parquet"),
        samples=lm_runs("samples.json"),
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


rule claims:
    input:
        # one frame per claims file: paper/claims/<study>.yaml reads summary/claims/<study>.parquet,
        # written by that study's aggregate rule
        frames=[res(f"summary/claims/{study}.parquet") for study in CLAIM_STUDIES],
        tokens_meta=res(f"tokens/{CORPUS}/meta.json"),
        claims=[source(f"paper/claims/{study}.yaml") for study in CLAIM_STUDIES],
        templates=TEMPLATES,
        code=code("claims"),
    output:
        parquet=res("summary/claims.parquet"),
        table=generated("tables/claims.tex"),
        numbers=generated("claims_numbers.tex"),
        flips_tex=generated("claims_flips.tex"),
        flips_txt=report(
            res("summary/claims_flips.txt"),
            caption="../report/claims_flips.rst",
            category="Claims",
        ),
    log:
        logfile("claims"),
    conda:
        "../envs/pillm.yaml"
    params:
        cfg=lambda w: as_json({"name": config["name"]}),
        template_dir=lambda w, input: parent(input.templates[0]),
        history=res("history/claims.jsonl"),  # append-only, so not an output
    shell:
        "python -m pillm claims --frames {input.frames} --tokens-meta {input.tokens_meta}"
        " --claims {input.claims} --params {params.cfg:q} --templates {params.template_dir}"
        " --out {output.parquet} --table {output.table} --numbers {output.numbers}"
        " --flips-tex {output.flips_tex} --flips-txt {output.flips_txt}"
        " --history {params.history} > {log} 2>&1"


rule provenance:
    input:
        summaries=[
            rules.aggregate.output.runs,
            rules.sensitivity_report.output.runs,
            rules.probe_aggregate.output.jobs,
            rules.lora_aggregate.output.summary,
            rules.saffu_aggregate.output.runs,
            rules.gen_aggregate.output.runs,
        ],
        templates=TEMPLATES,
        code=code("provenance"),
    output:
        generated("provenance.tex"),
    log:
        logfile("provenance"),
    conda:
        "../envs/pillm.yaml"
    params:
        rev=git_revision(),  # a new commit rewrites the first page's revision
        template_dir=lambda w, input: parent(input.templates[0]),
    shell:
        "python -m pillm provenance --summaries {input.summaries}"
        " --templates {params.template_dir} --numbers {output} > {log} 2>&1"


rule timing_macros:
    input:
        records=timing_records(),
        templates=TEMPLATES,
        code=code("timing-macros"),
    output:
        generated("timing_numbers.tex"),
    log:
        logfile("timing_macros"),
    conda:
        "../envs/pillm.yaml"
    params:
        template_dir=lambda w, input: parent(input.templates[0]),
    shell:
        "python -m pillm timing-macros --records {input.records}"
        " --templates {params.template_dir} --numbers {output} > {log} 2>&1"


rule pdf:
    input:
        generated=[
            rules.claims.output.table,
            rules.claims.output.numbers,
            rules.claims.output.flips_tex,
            rules.tables.output.table,
            rules.tables.output.more,
            rules.tables.output.numbers,
            rules.figure_curves.output.pdf,
            rules.figure_lambda.output.pdf,
            rules.figure_width.output.pdf,
            rules.probe_tables.output,
            rules.probe_figures.output.pdf,
            rules.saffu_tables.output,
            rules.saffu_figures.output.pdf,
            rules.lora_tables.output,
            rules.lora_figures.output.pdf,
            rules.gen_tables.output,
            rules.gen_figures.output.pdf,
            rules.sensitivity_report.output.table,
            rules.sensitivity_report.output.numbers,
            rules.provenance.output,
            rules.timing_macros.output,
        ],
        sources=[
            source("paper/main.tex"),
            source("paper/refs.bib"),
            *sorted(glob.glob(source("paper/sections/*.tex"))),
        ],
        code=code("pdf"),
    output:
        pdf=report(
            res("paper/main.pdf"), caption="../report/paper.rst", category="Paper"
        ),
        bbl=res("paper/build/main.bbl"),
    log:
        logfile("pdf"),
    conda:
        "../envs/pillm.yaml"
    params:
        build_dir=subpath(output.bbl, parent=True),
        # The sources as links beside this config's generated/: the source tree stays clean.
        stage=res("paper/sources"),
        paper=lambda w, input: parent(input.sources[0]),  # main.tex: the paper sources
    shell:
        "rm -rf {params.stage:q} && mkdir -p {params.stage:q}"
        ' && for f in {params.paper:q}/*; do ln -s "$f" {params.stage:q}/; done'
        " && rm -f {params.stage:q}/generated && ln -s ../generated {params.stage:q}/generated"
        " && python -m pillm pdf --paper-dir {params.stage:q} --build-dir {params.build_dir}"
        " --out {output.pdf} > {log} 2>&1"


rule arxiv:
    input:
        pdf=rules.pdf.output.pdf,
        bbl=rules.pdf.output.bbl,
        code=code("arxiv"),
    output:
        res("paper/arxiv.tar.gz"),
    log:
        logfile("arxiv"),
    conda:
        "../envs/pillm.yaml"
    params:
        build_dir=lambda w, input: parent(input.bbl),
    shell:
        "python -m pillm arxiv --build-dir {params.build_dir} --out {output} > {log} 2>&1"


rule report_tables:
    # Every table of the paper as HTML (written by render_report beside its .tex) for
    # `snakemake --report`: one page per table, with its caption.
    input:
        rules.tables.output,
        rules.claims.output.table,
        rules.probe_tables.output,
        rules.saffu_tables.output,
        rules.lora_tables.output,
        rules.gen_tables.output,
    output:
        report(
            directory(res("report/tables")),
            patterns=["{name}.html"],
            caption="../report/tables.rst",
            category="Tables",
        ),
    log:
        logfile("report_tables"),
    conda:
        "../envs/pillm.yaml"
    params:
        tables=lambda w, input: parent(input[0]),
    shell:
        "mkdir -p {output} && cp {params.tables:q}/*.html {output}/ > {log} 2>&1"


# Aggregation, tables, figures, claims, the PDF: seconds each, never queued on a cluster.
localrules:
    aggregate,
    tables,
    figure_curves,
    figure_lambda,
    figure_width,
    claims,
    pdf,
    arxiv,
    report_tables,
    probe_aggregate,
    probe_tables,
    probe_figures,
    gen_lr_grid,
    gen_aggregate,
    gen_tables,
    gen_figures,
    lora_aggregate,
    lora_tables,
    lora_figures,
    saffu_aggregate,
    saffu_tables,
    saffu_figures,

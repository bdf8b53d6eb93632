# Paper: the claims over every study, the provenance page, the PDF, the arXiv tarball, the results
# page (report/index.html).
from pillm.core.records import git_revision  # provenance rule: the build's revision
from pillm.lm.labels import LABELS  # the LM variants' names in the claim sentences
from pillm.paper import results_page  # the results page's sections and captions
from pillm.paper.commands import claims_args

# The studies that declare claims: one paper/claims/<study>.yaml each (pillm.paper.claims).
CLAIM_STUDIES = sorted(p.stem for p in (ROOT / "paper" / "claims").glob("*.yaml"))
# The arms' table labels, by study, for the claim sentences (a claims file's own names: win).
CLAIM_LABELS = {"lm": dict(LABELS)}
CLAIM_LABELS["scaling"] = scaling_plan.arm_labels(
    config,
    CLAIM_LABELS["lm"],
    scaling_plan.declared_arms(ROOT / "paper" / "claims" / "scaling.yaml"),
)
# The claims job's config name, labels and append-only verdict history (not an output).
CLAIMS_JOB = (config["name"], CLAIM_LABELS, res("history/claims.jsonl"))
# The flip report, shown in the HTML report.
CLAIMS_FLIPS = report(
    res("summary/claims_flips.txt"),
    caption="../report/claims_flips.rst",
    category="Claims",
)
# The manuscript's sources, main.tex first: the pdf rule stages main.tex's folder.
PAPER_SOURCES = [
    source("paper/main.tex"),
    source("paper/refs.bib"),
    *sorted(glob.glob(source("paper/sections/*.tex"))),
]


rule claims:
    input:
        # one frame per claims file: paper/claims/<study>.yaml reads summary/claims/<study>.parquet,
        # written by that study's aggregate rule
        frames=[res(f"summary/claims/{study}.parquet") for study in CLAIM_STUDIES],
        tokens_meta=res(f"tokens/{CORPUS}/meta.json"),
        claims=[source(f"paper/claims/{study}.yaml") for study in CLAIM_STUDIES],
        templates=TEMPLATES,
        code=code("claims", CLAIMS_JOB[:2]),
    output:
        parquet=res("summary/claims.parquet"),
        table=generated("tables/claims.tex"),
        numbers=generated("claims_numbers.tex"),
        flips_tex=generated("claims_flips.tex"),
        flips_txt=CLAIMS_FLIPS,
    log:
        logfile("claims"),
    conda:
        "../envs/pillm.yaml"
    params:
        args=lambda w, input, output: claims_args(*CLAIMS_JOB, input, output),
    shell:
        "python -m pillm claims {params.args} > {log} 2>&1"


rule provenance:
    input:
        summaries=wing_files("summaries"),
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
        record=rules.solve_timing.output,
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
        "python -m pillm timing-macros --record {input.record}"
        " --templates {params.template_dir} --numbers {output} > {log} 2>&1"


# What this file hands the PDF and the HTML report, after every study's wing(...).
wing(
    "paper",
    paper=[
        rules.claims.output.table,
        rules.claims.output.numbers,
        rules.claims.output.flips_tex,
        rules.provenance.output,
        rules.timing_macros.output,
    ],
    tables=[rules.claims.output.table],
)


rule pdf:
    input:
        generated=wing_files("paper"),
        sources=PAPER_SOURCES,
        code=code("pdf"),
    output:
        pdf=report(res("paper/main.pdf"), "../report/paper.rst", category="Paper"),
        bbl=res("paper/build/main.bbl"),
    log:
        logfile("pdf"),
    conda:
        "../envs/pillm.yaml"
    params:
        # The sources as links beside this config's generated/: the source tree stays clean.
        stage=res("paper/sources"),
        paper=lambda w, input: parent(input.sources[0]),  # main.tex: the paper sources
    shell:
        "rm -rf {params.stage:q} && mkdir -p {params.stage:q}"
        ' && for f in {params.paper:q}/*; do ln -s "$f" {params.stage:q}/; done'
        " && rm -f {params.stage:q}/generated && ln -s ../generated {params.stage:q}/generated"
        " && python -m pillm pdf --paper-dir {params.stage:q} --build-dir $(dirname {output.bbl})"
        " --out {output.pdf} > {log} 2>&1"


# BibTeX's main.bbl as plainnat writes it, from refs.bib in Python (pillm.paper.bbl): the arXiv
# sources' bibliography where TeX (and so BibTeX) is not installed.
rule bbl:
    input:
        sources=PAPER_SOURCES,
        code=code("bbl"),
    output:
        res("paper/bbl/main.bbl"),
    log:
        logfile("bbl"),
    conda:
        "../envs/pillm.yaml"
    params:
        paper=lambda w, input: parent(input.sources[0]),
    shell:
        "python -m pillm bbl --paper-dir {params.paper:q} --out {output} > {log} 2>&1"


# The arXiv sources: with TeX the PDF build's main.bbl (BibTeX's own), without it rule bbl's.
rule arxiv:
    input:
        generated=wing_files("paper"),
        front=rules.provenance.output[0],  # generated/provenance.tex: names the folder
        sources=PAPER_SOURCES,
        bbl=rules.pdf.output.bbl if BUILD_PDF else rules.bbl.output[0],
        code=code("arxiv"),
    output:
        res("paper/arxiv.tar.gz"),
    log:
        logfile("arxiv"),
    conda:
        "../envs/pillm.yaml"
    params:
        paper=lambda w, input: parent(input.sources[0]),
        generated=lambda w, input: parent(input.front),
    shell:
        "python -m pillm arxiv --paper-dir {params.paper:q} --generated-dir {params.generated:q}"
        " --bbl {input.bbl:q} --out {output} > {log} 2>&1"


# The landing page of a build (pillm.paper.results_page): the claims first, then a section per
# wing (every wing but this file's, in registration order) with its tables (.tex; the .html
# beside each is read) and figures (the .png beside each .pdf), under the captions of
# workflow/report/captions/<wing>.yaml.
PAGE = results_page.page_sections(WINGS)


rule results_page:
    input:
        claims=rules.claims.output.parquet,
        flips=rules.claims.output.flips_txt,
        tables=[f for s in PAGE.values() for f in s["tables"]],
        figures=[f for s in PAGE.values() for f in s["figures"]],
        captions=[source(f"{results_page.CAPTIONS_DIR}/{w}.yaml") for w in PAGE],
        code=code("results-page"),
    output:
        report(res("report/index.html"), "../report/results.rst", category="Overview"),
    log:
        logfile("results_page"),
    conda:
        "../envs/pillm.yaml"
    params:
        page=as_json({"name": config["name"], "sections": results_page.stems(PAGE)}),
    shell:
        "python -m pillm results-page --claims {input.claims} --flips {input.flips}"
        " --tables {input.tables} --figures {input.figures} --captions {input.captions}"
        " --params {params.page:q} --out {output} > {log} 2>&1"


# Aggregation, tables, figures, claims, the PDF: seconds each, never queued on a cluster.
localrules:
    claims,
    pdf,
    bbl,
    arxiv,
    results_page,

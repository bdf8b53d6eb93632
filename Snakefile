# pillm: closed-form (pseudoinverse) solves vs gradient training of Transformer FFN blocks.
# Full reproduction: snakemake --cores all   (CPU smoke: add --configfile config/smoke.yaml)
# Before a run: python -m pillm plan --configfile ...  (jobs, estimated time, what is missing).
# Embeddable: every path is the checkout's (workflow/rules/common.smk ROOT); as a module, pass
# `config:` (its configfile below is then skipped).
# One rules file per wing (pillm.plan.STUDIES, plus data, the LM sensitivity grid and the paper).
import os

from snakemake.utils import min_version

min_version("9.0")


configfile: os.path.join(workflow.basedir, "config", "config.yaml")


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/lm.smk"
include: "workflow/rules/sensitivity.smk"
include: "workflow/rules/scaling.smk"
include: "workflow/rules/probe.smk"
include: "workflow/rules/generative.smk"
include: "workflow/rules/lora.smk"
include: "workflow/rules/saffu.smk"
include: "workflow/rules/paper.smk"


rule all:
    default_target: True
    input:
        all_targets(),

"""The smoke config end to end through the Snakefile, then incremental re-runs and failures.

One pipeline run in a copy of the repository (beside a ``shared/data`` link, as in a fresh
clone), then dry runs that check which rules a change reruns.
"""

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from pillm.paper.latex import fmt_num
from pillm.plan import tex_found

from ..conftest import SMOKE, SMOKE_TIMEOUT_S

pytestmark = pytest.mark.workflow
GEN = "results/smoke/paper/generated"  # a run's tables, macros, figures (not paper/)
TEX = all(shutil.which(t) for t in ("latexmk", "pdflatex"))
NEEDS_TEX = pytest.mark.skipif(not TEX, reason="TeX (latexmk, pdflatex) not installed: the "
                               "smoke build leaves the PDF out")  # fmt: skip
# The rules a change reaches last: the arXiv tarball, and the PDF where TeX builds it.
PDF_RULES = {"pdf", "arxiv"} if TEX else {"arxiv"}


def snakemake(workdir: Path, *args: str, env=None, check=True) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        ["snakemake", "--cores", "2", *args],
        cwd=workdir,
        capture_output=True,
        text=True,
        env=env,
        timeout=SMOKE_TIMEOUT_S,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


@contextlib.contextmanager
def edited(path: Path, old: str | None = None, new: str = ""):
    """Replace the first ``old`` in a source file by ``new`` (default: append a line of code);
    restore content and mtime on exit, so later tests still see an up-to-date tree."""
    text, st = path.read_text(), path.stat()
    assert old is None or old in text
    path.write_text(text + "\n_EDITED = 1\n" if old is None else text.replace(old, new, 1))
    try:
        yield
    finally:
        path.write_text(text)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def rule_commands(workdir: Path) -> dict[str, str]:
    """rule -> the pillm command its shell runs."""
    found = {}
    for smk in (workdir / "workflow/rules").glob("*.smk"):
        text = smk.read_text()
        # a rules file may name a job's shell once (NAME = gpu_shell("python -m pillm ..."))
        named = dict(re.findall(r'(?m)^([A-Z_]+) = \w+\(\s*"python -m pillm ([a-z0-9-]+)', text))
        for block in re.split(r"(?m)^rule ", text)[1:]:
            shell = block.split("shell:", 1)[-1].split()[0] if "shell:" in block else ""
            if m := re.search(r"python -m pillm ([a-z0-9-]+)", block):
                found[block.split(":")[0]] = m.group(1)
            elif shell in named:
                found[block.split(":")[0]] = named[shell]
    return found


def planned_rules(workdir: Path, *args: str) -> set[str]:
    """Rules a dry run would execute, read from its 'Job stats' table."""
    return rules_of(snakemake(workdir, "-n", *args).stdout)


def rules_of(out: str) -> set[str]:
    """The rules of a dry run's output (``planned_rules``)."""
    if "Nothing to be done" in out:
        return set()
    stats = out.split("Job stats:")[1].split("total")[0]
    return {m.group(1) for m in re.finditer(r"^(\w+)\s+\d+\s*$", stats, re.M)} - {"job"}


@pytest.fixture(scope="module")
def workdir(smoke_build) -> Path:
    """The smoke build's copy of the repository (conftest.SmokeBuild, started with the session)."""
    return smoke_build.wait()


def test_table_perplexity_equals_metrics_json(workdir):
    records = json.loads((workdir / "results/smoke/lm/baseline/seed0/metrics.json").read_text())
    ppl = next(r["value"] for r in records if r["metric"] == "test_ppl")
    assert next(r["data_policy"] for r in records).startswith("local:wikitext2")
    table = (workdir / GEN / "tables/lm_main.tex").read_text()
    row = next(line for line in table.splitlines() if line.strip().startswith("Baseline"))
    cells = [c.strip() for c in row.rstrip("\\ ").split("&")]
    assert cells[5] == f"{ppl:,.1f}".replace(",", "{,}")
    numbers = (workdir / GEN / "numbers.tex").read_text()
    assert f"\\newcommand{{\\BaselinePPL}}{{{cells[5]}}}" in numbers
    extras = json.loads((workdir / "results/smoke/lm/baseline/seed0/extras.json").read_text())
    metrics = {r["metric"]: r["value"] for r in extras}
    assert 0 <= metrics["lambada_acc"] <= 1 and metrics["extras_peak_memory_mb"] > 0


def test_every_run_record_carries_the_revisions_of_its_data(workdir):
    """Read from the offline mirror (no hub commit), a record names the digest of the
    SHA256SUMS that pins the files it read."""
    import hashlib

    digest = hashlib.sha256((workdir.parent / "shared/data/SHA256SUMS").read_bytes()).hexdigest()
    offline = f"offline mirror, SHA256SUMS sha256:{digest}"
    runs = {"lm/baseline/seed0/metrics.json": {"wikitext2"}}
    runs["lm/baseline/seed0/extras.json"] = {"wikitext2", "lambada"}
    runs["generative/mnist/classifier.json"] = {"mnist"}
    for rel, sources in runs.items():
        records = json.loads((workdir / "results/smoke" / rel).read_text())
        assert {r["data_revisions"] for r in records} == {
            json.dumps(dict.fromkeys(sorted(sources), offline))
        }, rel


def test_up_to_date_tree_has_nothing_to_do(workdir):
    assert planned_rules(workdir, *SMOKE) == set()


def test_probe_every_model_and_corpus_into_the_paper(workdir):
    import polars as pl

    probe = pl.read_parquet(workdir / "results/smoke/summary/probe.parquet")
    cfg = yaml.safe_load((workdir / "config/smoke.yaml").read_text())["probe"]
    jobs = set(probe.select("model", "corpus").unique().iter_rows())
    cross = {"pillm-s0" if m == "pillm" else m for m in cfg["cross_corpus_models"]}
    assert jobs == {
        (m, c)
        for m in ["pillm-s0", "minilm", "smollm2"]
        for c in (cfg["corpora"] if m in cross else cfg["swap_corpora"][:1])
    }
    assert "smollm2" not in cross  # the smoke build runs both kinds of probe model
    blocks = dict(probe.group_by("model").agg(pl.col("layer").n_unique()).iter_rows())
    assert cfg["max_blocks"] == {"smollm2": 7}  # of its 30, spread over depth
    assert blocks == {"pillm-s0": 2, "minilm": 6, "smollm2": 7}
    smol_layers = probe.filter(pl.col("model") == "smollm2")["layer"].unique().sort().to_list()
    assert smol_layers[0] == 0 and smol_layers[-1] == 29
    swapped = probe.filter(pl.col("delta_linear").is_not_null())["corpus"].unique().to_list()
    assert swapped == cfg["swap_corpora"]
    smol = probe.filter(pl.col("model") == "smollm2", pl.col("corpus") == "wikitext2")
    lo = smol["r2_lin"].min()
    numbers = (workdir / GEN / "probe_numbers.tex").read_text()
    assert f"\\newcommand{{\\ProbeSmolLMRlinMin}}{{{fmt_num(lo, 3)}}}" in numbers
    for name in ["r2_depth", "bilinear", "feature_median", "corpora", "gradient"]:
        assert (workdir / GEN / f"figures/probe_{name}.pdf").stat().st_size > 1000


def test_generative_fits_reach_the_paper(workdir):
    import polars as pl

    runs = pl.read_parquet(workdir / "results/smoke/summary/generative.parquet")
    cfg = yaml.safe_load((workdir / "config/smoke.yaml").read_text())["generative"]
    assert set(runs["dataset"]) == set(cfg["datasets"])
    assert {"pil", "adamw", "adamw_out"} == set(runs["method"])
    assert {"flow", "diffusion"} == set(runs["model"])
    fd = runs.filter(pl.col("dataset") == "mnist", pl.col("setting") == "flow_pil")["fd_self"][0]
    numbers = (workdir / GEN / "gen_numbers.tex").read_text()
    assert f"\\newcommand{{\\GenMnistFlowPilFd}}{{{fd:.2f}}}" in numbers
    for name in ["samples", "lambda", "samplers", "budget"]:
        assert (workdir / GEN / f"figures/gen_{name}.pdf").stat().st_size > 1000


def test_lora_jobs_reach_the_paper_table_and_macros(workdir):
    import polars as pl

    jobs = pl.read_parquet(workdir / "results/smoke/summary/lora.parquet")
    cfg = yaml.safe_load((workdir / "config/smoke.yaml").read_text())["lora"]
    n_jobs = len(cfg["models"]) * len(cfg["seeds"]) * len(cfg["methods"])
    assert jobs.height == n_jobs and jobs["accuracy"].null_count() == 0
    model = f"minilm-s{cfg['seeds'][0]}"
    row = jobs.filter((pl.col("model") == model) & (pl.col("method") == "pil_lora")).row(
        0, named=True
    )
    records = json.loads(
        (workdir / f"results/smoke/lora/{model}/pil_lora/metrics.json").read_text()
    )
    assert next(r["value"] for r in records if r["metric"] == "accuracy") == row["accuracy"]
    assert row["n_train"] == cfg["n_train"] and row["n_eval"] == 872
    frame = pl.read_parquet(workdir / "results/smoke/summary/claims/lora.parquet")
    assert frame.filter(pl.col("metric") == "accuracy").height == n_jobs
    cell = f"{100 * row['accuracy']:.1f}"
    table = (workdir / GEN / "tables/lora.tex").read_text()
    assert f"all-MiniLM-L6-v2 & Random-feature head (PIL, closed form) & {cell} &" in table
    numbers = (workdir / GEN / "lora_numbers.tex").read_text()
    assert f"\\newcommand{{\\LoraMiniLMPilLoraAcc}}{{{cell}}}" in numbers
    assert (workdir / GEN / "figures/lora_accuracy_time.pdf").stat().st_size > 1000
    trained = frame.filter(pl.col("metric") == "trained")
    for group in cfg["models"]:  # LoRA's record holds the trained rule's inputs and verdict
        path = workdir / f"results/smoke/lora/{group}-s{cfg['seeds'][0]}/lora/metrics.json"
        m = {r["metric"]: r["value"] for r in json.loads(path.read_text())}
        assert m["trained_alpha"] == cfg["trained_alpha"] and "trained_margin" not in m
        assert 0.5 <= m["majority_rate"] <= 1 and 0 <= m["trained_p"] <= 1
        rule = m["train_loss_kept"] < m["chance_loss"] and m["trained_p"] < m["trained_alpha"]
        assert m["trained"] == float(rule)
        arm = trained.filter(pl.col("a") == f"{group}_lora")["value"].to_list()
        assert arm == [m["trained"]]


def test_saffu_runs_reach_the_paper_table_and_macros(workdir):
    import polars as pl

    cfg = yaml.safe_load((workdir / "config/smoke.yaml").read_text())["saffu"]
    main = cfg["main_setting"]
    runs = [workdir / f"results/smoke/saffu/{main}/f100/seed{s}/metrics.json" for s in cfg["seeds"]]
    rows = [r for run in runs for r in json.loads(run.read_text())]
    ppl = [r["value"] for r in rows if r["init"] == "explicit" and r["metric"] == "test_ppl"]
    assert len(ppl) == len(cfg["seeds"])  # one job a seed, both starts
    later = [r for r in rows if r["seed"] != cfg["seeds"][0] and r["metric"] == "lr_tuned_here"]
    assert later and all(r["value"] == 0 for r in later)  # the first seed's job chose the rates
    warm = f"{sum(ppl) / len(ppl):,.1f}".replace(",", "{,}")
    numbers = (workdir / GEN / "saffu_numbers.tex").read_text()
    assert f"\\newcommand{{\\SaffuWarmPPL}}{{{warm}}}" in numbers
    table = (workdir / GEN / "tables/saffu.tex").read_text()
    row = next(line for line in table.splitlines() if "(warm)" in line)
    assert f" & {warm}" in row
    assert table.count("SAFFU") >= 3 and "GPT baseline" in table and "Kneser-Ney" in table
    sizes = (workdir / GEN / "tables/saffu_sizes.tex").read_text()
    assert all(f"{100 * f:g} &" in sizes for f in cfg["fractions"])
    ablation = (workdir / GEN / "tables/saffu_ablation.tex").read_text()
    assert all(s["name"].replace("_", "\\_") in ablation for s in cfg["settings"])
    frame = pl.read_parquet(workdir / "results/smoke/summary/claims/saffu.parquet")
    assert {"warm_f100", "cold_f100", "kn_f100", "gain_f100"} <= set(frame["a"])
    for name in ["curves", "ablation"]:
        assert (workdir / GEN / f"figures/saffu_{name}.pdf").stat().st_size > 1000


def test_probe_code_edit_reruns_probes_not_training(workdir):
    with edited(workdir / "src/pillm/probe/run.py"):
        rules = planned_rules(workdir, *SMOKE)
    assert {"probe", "probe_aggregate", "probe_tables"} | PDF_RULES <= rules
    assert not rules & {"run_lm", "lm_extras", "aggregate", "tables"}


@pytest.mark.parametrize("module", ["lm/kernels/linear_ce.py", "core/ridge.py"])
def test_deep_module_edit_restamps_exactly_the_commands_that_import_it(workdir, module):
    """The rules whose code stamp changes are those whose command's import closure holds the
    module, found here independently of the Snakefile: a dry run lists each job's stamp."""
    from pillm import codedeps

    package = workdir / "src/pillm"
    expected = {
        rule
        for rule, cmd in rule_commands(workdir).items()
        if package / module in codedeps.closure(cmd, package)
    }
    assert "run_lm" in expected
    stamps = workdir / "results/smoke/code"
    before = set(stamps.rglob("*.sha"))
    with edited(package / module):
        out = snakemake(workdir, "-n", *SMOKE).stdout
    new = {str(p.relative_to(workdir)) for p in set(stamps.rglob("*.sha")) - before}
    restamped = {
        m.group(1)
        for m in re.finditer(r"(?m)^rule (\w+):\n    input: (.*)$", out)
        if set(m.group(2).split(", ")) & new
    }
    assert restamped == expected
    planned = planned_rules(workdir, *SMOKE)  # the edit is reverted: back to the old stamps
    assert planned == set()


def test_comment_and_docstring_edits_rerun_nothing(workdir):
    ridge = workdir / "src/pillm/core/ridge.py"
    with edited(ridge, '"""', '"""Reworded: '):
        assert planned_rules(workdir, *SMOKE) == set()
    with edited(ridge, "\nimport ", "\n# a new comment\nimport "):
        assert planned_rules(workdir, *SMOKE) == set()


def test_every_job_log_says_what_it_did(workdir):
    """No empty logs: every job's log has at least its start and end lines (pillm.cli)."""
    logs = sorted((workdir / "results/smoke/logs").rglob("*.log"))
    assert logs
    empty = [str(p.relative_to(workdir)) for p in logs if not p.read_text().strip()]
    assert not empty, empty


# The training jobs' logs (results/<name>/logs/...): each says its phases, not only that it ran.
TRAINING_LOGS = ("run_lm/*.log", "sensitivity_run/*/*.log", "scaling_point/*/*.log",
                 "lora/*/*.log", "saffu/*/*/*.log", "generative/*/*/seed*.log",
                 "generative/*/lr_*/lr*.log")  # fmt: skip


def test_training_job_logs_say_their_phases(workdir):
    """Beyond the command line's started and done lines (pillm.cli), a training job's log has
    its phases (pillm.core.log.say), one line each."""
    root = workdir / "results/smoke/logs"
    said = re.compile(r"^\[\s*[\d.]+ s\] ")  # a line of pillm.core.log.say
    plain = re.compile(r"^\[\s*[\d.]+ s\] pillm [\w-]+: (started|done)")
    bare, seen = [], set()
    for pattern in TRAINING_LOGS:
        for log in sorted(root.glob(pattern)):
            seen.add(pattern)
            lines = log.read_text().split("\n")
            if not [line for line in lines if said.match(line) and not plain.match(line)]:
                bare.append(str(log.relative_to(root)))
    assert seen == set(TRAINING_LOGS)  # every kind of training job ran in the smoke build
    assert not bare, bare


@NEEDS_TEX
def test_the_pdf_is_built(workdir):
    assert (workdir / "results/smoke/paper/main.pdf").read_bytes().startswith(b"%PDF")


def test_macros_used_in_math_have_math_safe_values(workdir):
    """A macro inside $...$ whose value holds "$" stops pdflatex: checked without TeX too."""
    from ..paper.test_math_macros import SECTIONS, math_unsafe

    numbers = sorted((workdir / GEN).glob("*.tex"))
    assert len(numbers) >= 8, numbers
    assert math_unsafe(SECTIONS, numbers) == {}


@NEEDS_TEX
def test_the_pdfs_tables_fit_the_page(workdir):
    """No generated table of the smoke PDF is wider than the text (TeX's Overfull \\hbox) or,
    as a float, taller than the page."""
    from ..paper.test_table_width import overfull_tables

    log = (workdir / "results/smoke/paper/build/main.log").read_text(errors="replace")
    assert overfull_tables(log) == []
    assert "Float too large" not in log  # a float taller than the page is cut at its foot


@NEEDS_TEX
def test_arxiv_tarball_compiles_on_its_own(workdir, tmp_path):
    from pillm.paper.build import compile_unpacked

    tar = workdir / "results/smoke/paper/arxiv.tar.gz"
    with tarfile.open(tar) as t:
        names = t.getnames()
    assert "main.bbl" in names and "generated/tables/lm_main.tex" in names
    assert compile_unpacked(str(tar), str(tmp_path)).read_bytes().startswith(b"%PDF")


def pdf_info_string(pdf: bytes, key: str) -> str:
    """A string of the PDF's info dictionary as hyperref writes it (UTF-16, octal escapes)."""
    raw = re.search(rb"/" + key.encode() + rb"\s*\(((?:\\.|[^\\)])*)\)", pdf).group(1)
    text = re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), raw)
    text = re.sub(rb"\\(.)", rb"\1", text)
    return text.decode("utf-16") if text.startswith(b"\xfe\xff") else text.decode("latin-1")


@NEEDS_TEX
def test_pdf_has_title_and_author_and_the_tarball_plain_modes(workdir):
    pdf = (workdir / "results/smoke/paper/main.pdf").read_bytes()
    assert pdf_info_string(pdf, "Title").startswith("How Much Do Feed-Forward Blocks Contribute")
    assert pdf_info_string(pdf, "Author") == "The pillm authors"
    with tarfile.open(workdir / "results/smoke/paper/arxiv.tar.gz") as t:
        modes = {m.mode for m in t.getmembers() if m.isfile()}
    assert modes == {0o644}


def test_html_report_has_tables_and_figures(workdir):
    snakemake(workdir, *SMOKE, "--report", "report.html")
    html = (workdir / "report.html").read_text(errors="replace")
    assert "lm_main.tex" in html and "training_curves.png" in html
    # Every table also as an HTML table with its caption (pillm.paper.html), on the results
    # page (pillm.paper.results_page), which the report carries as its Overview.
    page = (workdir / GEN / "tables/lm_main.html").read_text()
    assert "<caption>" in page and "<th>" in page
    landing = (workdir / "results/smoke/report/index.html").read_text()
    assert 'id="tab:main"' in landing and 'id="claims-table"' in landing
    assert "index.html" in html


def test_config_change_reruns_training_and_downstream_only(workdir):
    # The same config with one value changed as a user types it (a second config file with the
    # same name would be refused: results/smoke/ belongs to config/smoke.yaml).
    changed = [*SMOKE, "--config", "train={lr: 0.002}"]
    out = snakemake(workdir, "-n", *changed).stdout  # one dry run: its rules, then its jobs
    rules = rules_of(out)
    assert (
        rules
        == {
            "run_lm",
            "lm_extras",
            "aggregate",
            "tables",
            "claims",  # every LM claim reads the runs
            "provenance",  # the first page counts the runs behind the paper
            "results_page",  # the claims, tables and figures on one page
            "figure_curves",
            "figure_lambda",
            "figure_width",
            "probe",  # the baseline changed, so its probe jobs (and only theirs) rerun
            "probe_aggregate",
            "probe_tables",
            "probe_figures",
            "lora",  # likewise its SST-2 jobs: the MiniLM ones stay up to date
            "lora_rate",  # and its LoRA rate runs
            "lora_aggregate",
            "lora_tables",
            "lora_figures",
            "saffu_tables",  # it places the GPT baseline beside SAFFU; the SAFFU jobs stay up to date
            "scaling_point",  # the scaling points train with the LM study's train section
            "scaling_cost",  # (their own rates from scaling.lrs, the rest of the schedule shared)
            "scaling_cost_warm",
            "scaling_report",
            "scaling_figures",
            "solve_timing",  # the paper's timing trains the FFNs with the same train section
            "timing_macros",
            "all",
        }
        | PDF_RULES
    )
    probe_jobs = re.findall(r"output: (results/smoke/probe/[^/]+)/", out)
    assert probe_jobs and {p.rsplit("/", 1)[1] for p in probe_jobs} == {"pillm-s0"}
    lora_jobs = re.findall(r"output: results/smoke/lora/([^/]+)/", out)
    assert lora_jobs and set(lora_jobs) == {"pillm-s0"}


def test_config_edits_rerun_the_jobs_whose_command_reads_them(workdir):
    # These rules' commands get their config inside a params function of input and output,
    # which Snakemake's params trigger does not compare: the config stamp beside the code stamp
    # carries it (workflow/rules/common.smk, code).
    changes = ["lora={max_steps: 30}", "generative={n_eval: 120, classifier: {epochs: 1}}",
               "saffu={max_steps: 50}"]  # fmt: skip
    rules = rules_of(snakemake(workdir, "-n", *SMOKE, "--config", *changes).stdout)
    assert {"lora", "lora_rate", "gen_classifier", "gen_lr_run", "generative", "saffu"} <= rules
    assert not {"run_lm", "probe", "scaling_point", "sensitivity_run"} & rules


def test_template_change_reruns_only_the_tables_rules_and_paper(workdir):
    template = workdir / "paper/templates/table.tex.j2"
    template.write_text(template.read_text() + "\\#{ edited }\n")
    # one shared table template: every study's tables rule reads it, nothing upstream does
    assert (
        planned_rules(workdir, *SMOKE)
        == {
            "tables",
            "probe_tables",
            "gen_tables",
            "lora_tables",
            "saffu_tables",
            "sensitivity_report",
            "claims",
            "provenance",
            "timing_macros",  # every rule that renders lists the three shared templates
            "scaling_report",
            "scaling_figures",
            "results_page",
            "all",
        }
        | PDF_RULES
    )


def test_model_source_edit_reruns_training(workdir):
    with edited(workdir / "src/pillm/models/gpt.py"):
        rules = planned_rules(workdir, *SMOKE)
    assert "run_lm" in rules
    assert not rules & {"prepare_corpus", "tokenize"}


def test_invalid_config_stops_before_any_job_naming_the_key(workdir):
    cfg = yaml.safe_load((workdir / "config/smoke.yaml").read_text())
    cfg["train"]["lr"] = -0.1
    (workdir / "config/bad.yaml").write_text(yaml.safe_dump(cfg))
    proc = snakemake(workdir, "-n", "--configfile", "config/bad.yaml", check=False)
    assert proc.returncode != 0
    assert "train.lr" in proc.stdout + proc.stderr


TEX_BINARIES = ("latexmk", "pdflatex")


def path_without(names: tuple[str, ...], path: str, shadow_root: Path) -> str:
    """``path`` with ``names`` hidden and every interpreter left where it is.

    A directory that holds none of ``names`` stays in the PATH as it is (so a venv's ``bin``, a
    pyenv shim directory or a conda env keep their interpreters: a venv's ``python`` symlinked
    elsewhere is no longer the venv). Only a directory that holds one of them (e.g. /usr/bin) is
    replaced by a shadow directory of links to its other entries. The running interpreter's
    directory goes first, so ``python -m pillm`` in the rules is this environment's.
    """
    here = str(Path(sys.executable).parent)
    dirs = [here] + [d for d in path.split(os.pathsep) if d and d != here]
    out = []
    for i, d in enumerate(dirs):
        if not os.path.isdir(d):
            continue
        if not any(os.path.exists(os.path.join(d, n)) for n in names):
            out.append(d)
            continue
        shadow = shadow_root / f"shadow{i}"
        shadow.mkdir(parents=True)
        for exe in os.listdir(d):
            if exe not in names:
                (shadow / exe).symlink_to(os.path.join(d, exe))
        out.append(str(shadow))
    return os.pathsep.join(out)


def test_without_tex_everything_but_the_pdf_builds_and_says_how_to_get_it(workdir, tmp_path):
    """Last: it may leave the PDF out of date. PATH keeps every tool but latexmk and pdflatex:
    the build exits 0 with every table, figure and the arXiv sources (main.bbl from
    pillm.paper.bbl), says once how to get the PDF, and
    ``pdf: true`` stops before any job naming the key and the install."""
    env = {**os.environ, "PATH": path_without(TEX_BINARIES, os.environ["PATH"], tmp_path)}
    for name in TEX_BINARIES:
        assert shutil.which(name, path=env["PATH"]) is None
    python = shutil.which("python", path=env["PATH"])
    probe = [python, "-c", "import pillm, sys; print(sys.prefix)"]
    assert subprocess.run(probe, env=env, capture_output=True, text=True).stdout.strip() == (
        sys.prefix
    ), "the PATH without TeX must keep this environment's python (with pillm) first"
    table = workdir / GEN / "tables/lm_main.tex"
    before = table.stat().st_mtime
    proc = snakemake(workdir, *SMOKE, "--forcerun", "tables", env=env, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert out.count("TeX not found") == 1 and "apt-get install texlive-latex-base" in out
    assert "rule pdf:" not in out and "rule arxiv:" in out
    if tex_found():  # the first build's main.bbl was BibTeX's: rule bbl writes one now
        assert "rule bbl:" in out
    else:  # a machine without TeX: the first build wrote it already
        assert (workdir / "results/smoke/paper/bbl/main.bbl").is_file()
    assert table.stat().st_mtime > before
    with tarfile.open(workdir / "results/smoke/paper/arxiv.tar.gz") as t:
        names = t.getnames()  # the arXiv sources, with main.bbl written without BibTeX
        bbl = t.extractfile("main.bbl").read().decode()
    assert "main.tex" in names and "generated/tables/lm_main.tex" in names
    assert bbl.startswith("\\begin{thebibliography}") and "\\bibitem[" in bbl
    assert (workdir / GEN / "figures/training_curves.pdf").exists()
    strict = snakemake(workdir, *SMOKE, "-n", "--config", "pdf=true", env=env, check=False)
    assert strict.returncode != 0
    assert "pdf: true" in strict.stdout + strict.stderr

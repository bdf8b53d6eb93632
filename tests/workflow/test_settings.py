"""Typed config sections: built from the config files, defaults equal to the schema's, and
unknown or missing keys named by their dotted path."""

import dataclasses

import pytest
import yaml

from pillm.core.config import ConfigError, Section
from pillm.data.config import DataConfig
from pillm.generative.config import ClassifierJobConfig, GenerativeConfig
from pillm.lm.config import (
    ExtrasParams,
    LambadaConfig,
    LMParams,
    ModelConfig,
    PILConfig,
    SamplesConfig,
    TrainConfig,
)
from pillm.lora.config import LoraConfig
from pillm.probe.config import ProbeConfig
from pillm.probe.plan import JOB_FREE
from pillm.saffu.config import SaffuJobConfig
from pillm.saffu.plan import saffu_job_params

from ..conftest import REPO

SCHEMA = yaml.safe_load((REPO / "config/schema.yaml").read_text())
# config section (dotted) -> the dataclass a job builds from it, and the keys its rule leaves
# out, dotted below the section (job lists are the DAG's business; the classifier is its own
# job; probe.gradient.trained_gain is the aggregation's, pillm.probe.plan.JOB_FREE)
SECTIONS = {
    "data": (DataConfig, set()),
    "model": (ModelConfig, set()),
    "train": (TrainConfig, set()),
    "pil": (PILConfig, set()),
    "lambada": (LambadaConfig, set()),
    "samples": (SamplesConfig, set()),
    "probe": (ProbeConfig, {"models", "cross_corpus_models", *(f"gradient.{k}" for k in JOB_FREE)}),
    "generative": (GenerativeConfig, {"datasets", "classifier"}),
    "lora": (LoraConfig, {"models", "seeds"}),
}
CLASSIFIER_KEYS = {"classifier", "seed", "n_eval", "kid_subsets", "kid_subset_size"}


def job_dict(cfg: dict, section: str) -> dict:
    """The dict a job of ``section`` receives, as its rule builds it."""
    left_out = SECTIONS[section][1]
    out = {k: v for k, v in cfg[section].items() if k not in left_out}
    for key in (k for k in left_out if "." in k):
        head, tail = key.split(".")
        out[head] = {k: v for k, v in out[head].items() if k != tail}
    return out


def _schema_node(path: str) -> dict:
    node = SCHEMA
    for key in path.split("."):
        node = node["properties"][key]
    return node


def _walk(cls: type, path: str):
    """(dotted path, dataclass) for ``cls`` and every sub-section below it."""
    yield path, cls
    for f in dataclasses.fields(cls):
        if isinstance(f.type, str) and f.type in {c.__name__ for c in Section.__subclasses__()}:
            sub = next(c for c in Section.__subclasses__() if c.__name__ == f.type)
            yield from _walk(sub, f"{path}.{f.name}")


@pytest.mark.parametrize("section", list(SECTIONS))
def test_fields_and_defaults_are_the_schemas(section):
    cls, left_out = SECTIONS[section]
    for path, sub in _walk(cls, section):
        props = _schema_node(path)["properties"]
        below = path.removeprefix(section).lstrip(".")
        props = {k: v for k, v in props.items()
                 if (f"{below}.{k}" if below else k) not in left_out}  # fmt: skip
        _assert_same_fields(sub, props, path)
    props = _schema_node("generative")["properties"]
    _assert_same_fields(ClassifierJobConfig, {k: props[k] for k in CLASSIFIER_KEYS}, "generative")


def _assert_same_fields(cls: type, props: dict, path: str) -> None:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    assert set(fields) == set(props), path
    for name, f in fields.items():
        default = f.default
        if f.default_factory is not dataclasses.MISSING:  # a mapping's or list's default
            default = f.default_factory()
        assert default == props[name].get("default", dataclasses.MISSING), f"{path}.{name}"


@pytest.mark.parametrize("config", ["config.yaml", "smoke.yaml"])
def test_every_config_file_builds(config):
    cfg = yaml.safe_load((REPO / "config" / config).read_text())
    for section, (cls, _) in SECTIONS.items():
        assert isinstance(cls.from_dict(job_dict(cfg, section), section), cls)
    gen = cfg["generative"]
    ClassifierJobConfig.from_dict({k: gen[k] for k in CLASSIFIER_KEYS}, "generative")
    lm = LMParams.from_dict({k: cfg[k] for k in ("model", "train", "pil")})
    assert lm.train.betas == tuple(cfg["train"]["betas"]) and lm.pil.lambdas[-1] > 0
    assert LMParams.from_dict({k: cfg[k] for k in ("model", "train")}).pil is None
    ExtrasParams.from_dict({k: cfg[k] for k in ("data", "lambada", "samples")})
    name = cfg["saffu"]["main_setting"]
    job = SaffuJobConfig.from_dict(saffu_job_params(cfg, name, cfg["saffu"]["seeds"][0]), "saffu")
    assert job.setting(name).block >= 1


def test_schema_defaults_fill_absent_keys():
    cfg = yaml.safe_load((REPO / "config/smoke.yaml").read_text())["train"]
    bare = {k: v for k, v in cfg.items() if k not in ("compile", "cuda_graphs", "ce_chunk")}
    t = TrainConfig.from_dict(bare, "train")
    assert (t.compile, t.cuda_graphs, t.ce_chunk) == (False, False, 0)


def test_unknown_and_missing_keys_are_named_by_dotted_path():
    cfg = yaml.safe_load((REPO / "config/smoke.yaml").read_text())
    probe = job_dict(cfg, "probe")
    probe["gradient"] = {**probe["gradient"], "lrr": 1.0}
    with pytest.raises(ConfigError, match=r"probe\.gradient\.lrr"):
        ProbeConfig.from_dict(probe, "probe")
    pil = {k: v for k, v in cfg["pil"].items() if k != "kappa_max"}
    with pytest.raises(ConfigError, match=r"missing config key\(s\) pil\.kappa_max"):
        PILConfig.from_dict(pil, "pil")
    with pytest.raises(ConfigError, match=r"saffu setting 'nope'"):
        main = cfg["saffu"]["main_setting"]
        SaffuJobConfig.from_dict(saffu_job_params(cfg, main, cfg["saffu"]["seeds"][0])).setting(
            "nope"
        )

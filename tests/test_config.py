import copy
from pathlib import Path

import pytest
import yaml

from pillm.plan import ConfigError, validate_config

REPO = Path(__file__).resolve().parents[1]
SCHEMA = REPO / "config" / "schema.yaml"


def load(name: str) -> dict:
    return yaml.safe_load((REPO / "config" / name).read_text())


@pytest.mark.parametrize("name", ["config.yaml", "smoke.yaml"])
def test_shipped_configs_are_valid(name):
    validate_config(load(name), SCHEMA)


@pytest.mark.parametrize(
    "path,value,key",
    [
        (("train", "lr"), -0.1, "train.lr"),
        (("train", "epochs"), "five", "train.epochs"),
        (("lm", "variants"), ["baseline", "nonsense"], "lm.variants.1"),
        (("data", "source"), "ftp", "data.source"),
    ],
)
def test_bad_values_name_the_key(path, value, key):
    cfg = copy.deepcopy(load("smoke.yaml"))
    cfg[path[0]][path[1]] = value
    with pytest.raises(ConfigError, match=rf"- {key}:"):
        validate_config(cfg, SCHEMA)


def test_unknown_key_is_rejected():
    cfg = load("smoke.yaml")
    cfg["train"]["learning_rate"] = 1e-3
    with pytest.raises(ConfigError, match="learning_rate"):
        validate_config(cfg, SCHEMA)

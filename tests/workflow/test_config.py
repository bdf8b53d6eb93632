import copy
from pathlib import Path

import pytest
import yaml

from pillm.core.config import ConfigError
from pillm.plan import check_config
from pillm.plan import validate as validate_config

REPO = Path(__file__).resolve().parents[2]
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


def test_variant_names_come_from_the_registry_not_the_schema():
    from pillm.lm.variants import VARIANTS

    assert "refit_single16d" not in SCHEMA.read_text()  # no copy of the registry to drift
    cfg = copy.deepcopy(load("smoke.yaml"))
    cfg["lm"]["variants"] = ["baseline", "no_such_variant"]
    with pytest.raises(ConfigError, match=r"- lm\.variants\.1: 'no_such_variant' is not one of"):
        validate_config(cfg, SCHEMA)
    cfg["lm"]["variants"] = list(VARIANTS)
    validate_config(cfg, SCHEMA)


def test_check_config_runs_the_plan_checks_too():
    cfg = copy.deepcopy(load("smoke.yaml"))
    check_config(cfg, SCHEMA)
    cfg["saffu"]["main_setting"] = "nope"
    with pytest.raises(ConfigError, match="saffu.main_setting"):
        check_config(cfg, SCHEMA)
    cfg = copy.deepcopy(load("smoke.yaml"))
    cfg["lm"]["variants"] = ["refit"]
    with pytest.raises(ConfigError, match=r"lm.variants needs \['baseline'\]"):
        check_config(cfg, SCHEMA)


def test_a_bad_key_in_a_jobs_params_is_one_line_naming_it(capsys):
    """Every command reports a config error as one line with the dotted key, exit status 2."""
    from pillm.cli import main

    argv = ["saffu", "--setting", "s", "--fraction", "1.0", "--tokens-dir", "x",
            "--params", '{"bogus": 1}', "--device", "cpu", "--out-dir", "y"]  # fmt: skip
    assert main(argv) == 2
    assert "saffu.bogus" in capsys.readouterr().err


def test_command_line_overrides_are_typed_by_the_schema():
    """snakemake --config train='{lr: 0.002}' lm='{seeds: [0]}' hands over strings (YAML
    BaseLoader); check_config types them, so the rules see a float and a list of ints."""
    cfg = copy.deepcopy(load("smoke.yaml"))
    cfg["train"]["lr"] = "0.002"
    cfg["lm"]["seeds"] = ["0", "1"]
    check_config(cfg, SCHEMA)
    assert cfg["train"]["lr"] == 0.002 and isinstance(cfg["train"]["lr"], float)
    assert cfg["lm"]["seeds"] == [0, 1]


def test_a_wrongly_typed_override_still_names_its_key():
    cfg = copy.deepcopy(load("smoke.yaml"))
    cfg["train"]["lr"] = "fast"
    with pytest.raises(ConfigError, match=r"- train\.lr:"):
        check_config(cfg, SCHEMA)
    cfg = copy.deepcopy(load("smoke.yaml"))
    cfg["train"]["learnig_rate"] = "0.1"
    with pytest.raises(ConfigError, match="learnig_rate"):
        check_config(cfg, SCHEMA)


def test_schema_defaults_are_filled():
    schema = yaml.safe_load(SCHEMA.read_text())
    default = schema["properties"]["train"]["properties"]["compile"]["default"]
    cfg = copy.deepcopy(load("smoke.yaml"))
    cfg["train"].pop("compile", None)
    check_config(cfg, SCHEMA)
    assert cfg["train"]["compile"] == default


def test_snakemake_config_overrides_reach_the_rules(tmp_path):
    """The real thing: a dry run with section overrides as people type them."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "snakemake", "-n", "--quiet", "rules", "--cores", "1",
           "--snakefile", str(REPO / "Snakefile"), "--configfile", str(REPO / "config/smoke.yaml"),
           "--config", "train={lr: 0.002}", "lm={seeds: [0]}", "--", "all"]  # fmt: skip
    ok = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = subprocess.run(cmd[:-2] + ["train={lr: fast}"], cwd=REPO, capture_output=True, text=True)
    assert bad.returncode != 0 and "train.lr" in bad.stdout + bad.stderr

"""Where the data folder is, the data section's check before a run, and the download plan."""

import json
from pathlib import Path

import pytest
import yaml

from pillm.core.config import ConfigError, apply_schema
from pillm.data import check_data_config, download_plan
from pillm.data.config import DataConfig
from pillm.data.files import HUB_DATASETS, DataConfigError, DataError, data_dir, default_data_dir
from pillm.data.revisions import pins

REPO = Path(__file__).resolve().parents[2]
SMOKE = yaml.safe_load((REPO / "config/smoke.yaml").read_text())["data"]
PIN = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def no_env(monkeypatch, tmp_path):
    """No PILLM_DATA, and a home of our own: the default folder is tmp_path's."""
    monkeypatch.delenv("PILLM_DATA", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return tmp_path


def data(**kw):
    return {"corpus": "wikitext2", "heldout_fraction": 0.1, **kw}


def test_the_data_folder_is_local_dir_then_pillm_data_then_the_cache(no_env, monkeypatch):
    assert default_data_dir() == no_env / "home/.cache/pillm/data"  # never beside the checkout
    assert data_dir("") == data_dir(None) == default_data_dir()
    monkeypatch.setenv("XDG_CACHE_HOME", str(no_env / "xdg"))
    assert data_dir(None) == no_env / "xdg/pillm/data"
    monkeypatch.setenv("PILLM_DATA", "../shared/data")
    assert data_dir("") == Path("../shared/data")
    assert data_dir("~/mirror") == no_env / "home/mirror"  # the config value wins


def test_config_files_leave_the_folder_to_pillm_data_and_the_revisions_to_the_pins():
    for name in ("config.yaml", "smoke.yaml"):
        section = yaml.safe_load((REPO / "config" / name).read_text())["data"]
        assert section["local_dir"] == "" and section["revisions"] == {}
        assert DataConfig.from_dict(section, "data").local_dir == ""
    filled = apply_schema({"data": data(revisions={"ptb": PIN})}, REPO / "config/schema.yaml")
    assert filled["data"]["revisions"] == {**pins(), "ptb": PIN}
    assert filled["data"]["local_dir"] == "" and filled["data"]["source"] == "auto"


def test_local_without_a_mirror_stops_naming_both_settings_and_the_fix(no_env):
    with pytest.raises(DataConfigError) as err:
        check_data_config(data(source="local"))
    text = str(err.value)
    assert str(default_data_dir()) in text and "does not exist" in text
    assert "data.local_dir" in text and "PILLM_DATA" in text and "../shared/data" in text
    assert "data.source: auto" in text
    assert isinstance(err.value, ConfigError) and isinstance(err.value, DataError)
    (no_env / "empty").mkdir()
    with pytest.raises(DataConfigError, match=r"data.local_dir: .*empty\) holds no SHA256SUMS"):
        check_data_config(data(source="local", local_dir=str(no_env / "empty")))


def test_the_mirror_one_setting_away(no_env, shared_data, monkeypatch):
    assert check_data_config(data(source="local", local_dir=str(shared_data))) == shared_data
    monkeypatch.setenv("PILLM_DATA", str(shared_data))
    assert check_data_config({**SMOKE, "source": "local"}) == shared_data
    assert check_data_config(SMOKE) == shared_data


def test_auto_and_hub_need_no_folder_yet_but_a_file_is_refused(no_env):
    assert check_data_config(data()) == default_data_dir()
    assert check_data_config(data(source="hub")) == default_data_dir()
    assert not default_data_dir().exists()  # the check creates nothing
    (no_env / "afile").write_text("x")
    with pytest.raises(DataConfigError, match="is a file, not a folder"):
        check_data_config(data(local_dir=str(no_env / "afile")))


def test_bad_revisions_and_keys_are_named(no_env):
    with pytest.raises(DataConfigError, match=r"data\.revisions\.sst2: 'v1\.0' is not a commit"):
        check_data_config(data(revisions={"sst2": "v1.0"}))
    with pytest.raises(ConfigError, match=r"data\.revisions\.glue"):
        check_data_config(data(revisions={"glue": PIN}))
    with pytest.raises(DataConfigError, match="data.source must be one of"):
        check_data_config(data(source="ftp"))


def test_plan_of_a_first_build_lists_every_download_and_what_differs(no_env):
    text = "\n".join(download_plan(data(revisions={"mnist": PIN})))
    assert f"no mirror in {default_data_dir()}" in text and "builds it there" in text
    assert "MB in all" in text
    for key, hub in HUB_DATASETS.items():
        assert f"{key}: {hub.repo_id}" in text
    assert f"ylecun/mnist @ {PIN}" in text  # the config's pin
    assert f"Salesforce/wikitext (wikitext-2-v1) @ {pins()['wikitext2']}" in text
    assert "ptb_text_only @ the current commit of refs/convert/parquet, resolved" in text
    assert "PNG" in text and "JPEG" in text  # CIFAR-10
    assert "SST-2" in text and "hub's order" in text
    assert "PILLM_DATA" in text  # how to use the offline mirror instead


def test_plan_of_a_hub_run_lists_what_it_reads(no_env, monkeypatch):
    lines = download_plan(data(source="hub"), needs=["wikitext2", "gpt2_tokenizer"])
    text = "\n".join(lines)
    assert "read from the Hugging Face hub by each job" in text
    assert "Salesforce/wikitext" in text and "openai-community/gpt2" in text
    assert "uoft-cs/cifar10" not in text and "PNG" not in text
    assert "full train split" in text
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "HF_HUB_OFFLINE is set" in "\n".join(download_plan(data(source="hub")))


def test_plan_of_a_mirror_downloads_nothing(no_env, shared_data):
    text = "\n".join(download_plan(data(local_dir=str(shared_data))))
    assert "nothing is downloaded" in text and "offline mirror (no hub revision)" in text
    text = "\n".join(download_plan(data(source="local")))
    assert "stops before any job" in text and "PILLM_DATA" in text


def test_plan_of_a_built_mirror_names_its_revisions_and_a_changed_pin(no_env):
    built = no_env / "built"
    built.mkdir()
    (built / "SHA256SUMS").write_text("")
    revisions = {k: {"repo": h.repo_id, "revision": pins()[k] or PIN, "how": "x"}
                 for k, h in HUB_DATASETS.items()}  # fmt: skip
    (built / "MIRROR.json").write_text(json.dumps({"built": "then", "revisions": revisions}))
    text = "\n".join(download_plan(data(local_dir=str(built), revisions={"sst2": PIN})))
    assert "built from the hub (then)" in text
    assert f"ptb: ptb-text-only/ptb_text_only @ {PIN}" in text
    assert f"data.revisions.sst2 is {PIN}: delete {built}" in text
    assert "PNG" in text  # a hub-built mirror holds the hub's CIFAR-10

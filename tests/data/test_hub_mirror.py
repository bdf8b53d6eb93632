"""The hub path, run against a LOCAL STAND-IN for the Hugging Face hub (no network here).

The stand-in replaces ``datasets.load_dataset``, ``huggingface_hub.hf_hub_download`` and
``huggingface_hub.HfApi`` with functions that serve rows shaped as the hub serves them (WikiText
rows with "" for blank lines, stripped PTB sentences, GLUE train in another order, image
structs, ...), made from the offline mirror, and a "current commit" per repository. It records
every call and refuses a load without a 40-hex revision. What it cannot test: that the real
hub's rows at those revisions are shaped this way; the build checks that against the committed
checksums on a machine that is online.
"""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from pillm.data import files
from pillm.data import mirror as mirror_mod
from pillm.data.config import RevisionsConfig
from pillm.data.files import HUB_DATASETS, MIRROR_FILES, DataConfigError, DataError
from pillm.data.revisions import COMMIT, pins
from pillm.data.sources import load_corpus

REPO = Path(__file__).resolve().parents[2]
FAKE_REV = "0123456789abcdef0123456789abcdef01234567"  # a commit a config pins
HEAD = {key: f"{i:x}" * 40 for i, key in enumerate(sorted(HUB_DATASETS), start=1)}  # "current"
ALL_PINNED = {key: FAKE_REV for key in HUB_DATASETS}


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _tsv_rows(path: Path) -> tuple[list[str], list[int]]:
    rows = [r.rsplit("\t", 1) for r in path.read_text(encoding="utf-8").split("\n")[1:] if r]
    return [s for s, _ in rows], [int(y) for _, y in rows]


class HubStandIn:
    """Serves the offline mirror's data shaped as the hub's datasets; records the calls."""

    def __init__(self, mirror: Path):
        self.mirror, self.calls, self.resolved = mirror, [], []

    def _split(self, key: str, split: str):
        import datasets

        m = self.mirror
        if key == "wikitext2":
            if split == "train":  # the mirror has no train split: any rows will do here
                split = "validation"
            rows = ["" if r == " \n" else r for r in _lines(m / f"wikitext-2-v1/{split}.txt")]
            return datasets.Dataset.from_dict({"text": rows})
        if key == "ptb":
            if split == "train":
                split = "validation"
            return datasets.Dataset.from_dict(
                {"sentence": [r.strip() for r in _lines(m / f"ptb/{split}.txt")]}
            )
        if key == "tinyshakespeare":
            text = (m / "tinyshakespeare/input.txt").read_text(encoding="utf-8")
            a, b = int(len(text) * 0.9), int(len(text) * 0.95)
            part = {"train": text[:a], "validation": text[a:b], "test": text[b:]}[split]
            return datasets.Dataset.from_dict({"text": [part]})
        if key == "lambada":
            rows = [json.loads(r)["text"] for r in _lines(m / "lambada/lambada_test.jsonl")]
            return datasets.Dataset.from_dict({"text": rows})
        if key == "sst2":
            if split == "validation":
                s, y = _tsv_rows(m / "sst2/test.tsv")
            else:  # GLUE train: the mirror's two files, in another order (as the hub's is)
                s1, y1 = _tsv_rows(m / "sst2/train.tsv")
                s2, y2 = _tsv_rows(m / "sst2/dev.tsv")
                s, y = s2 + s1, y2 + y1
            return datasets.Dataset.from_dict({"sentence": s, "label": y})
        if key in ("mnist", "cifar10"):
            import pyarrow.parquet as pq

            return datasets.Dataset(pq.read_table(m / f"{key}/{split}.parquet"))
        raise AssertionError(f"stand-in has no dataset {key}")

    def load_dataset(self, repo_id, config=None, *, split=None, revision=None, **kw):
        import datasets

        key = next(k for k, h in HUB_DATASETS.items() if h.repo_id == repo_id)
        assert revision and COMMIT.match(revision), f"hub load of {repo_id} without a commit"
        assert config == HUB_DATASETS[key].config
        self.calls.append((repo_id, split, revision))
        if split is not None:
            return self._split(key, split)
        names = ("train", "validation", "test")
        return datasets.DatasetDict({s: self._split(key, s) for s in names})

    def hf_hub_download(self, repo_id, filename, *, repo_type=None, revision=None, **kw):
        assert repo_id == HUB_DATASETS["gpt2_tokenizer"].repo_id and repo_type == "model"
        assert revision and COMMIT.match(revision), "hub download without a commit"
        self.calls.append((repo_id, filename, revision))
        return str(self.mirror / "gpt2-tokenizer" / filename)

    def api(self):
        stand_in = self

        class HfApi:
            def _info(self, repo_id, revision=None, **kw):
                key = next(k for k, h in HUB_DATASETS.items() if h.repo_id == repo_id)
                assert revision == HUB_DATASETS[key].branch, "resolved on another branch"
                stand_in.resolved.append(key)
                return SimpleNamespace(sha=HEAD[key])

            dataset_info = model_info = _info

        return HfApi


def install(stand_in: HubStandIn, patch) -> HubStandIn:
    import datasets
    import huggingface_hub

    patch.setattr(datasets, "load_dataset", stand_in.load_dataset)
    patch.setattr(huggingface_hub, "hf_hub_download", stand_in.hf_hub_download)
    patch.setattr(huggingface_hub, "HfApi", stand_in.api())
    return stand_in


@pytest.fixture
def hub_stand_in(shared_data, monkeypatch):
    return install(HubStandIn(shared_data), monkeypatch)


@pytest.fixture(scope="module")
def first_build(shared_data, tmp_path_factory):
    """A user's first build: no mirror, the committed data.revisions (``{}``: some sources
    pinned, PTB and Tiny Shakespeare null), the two jobs run as their rules run them: the corpus
    job builds the whole mirror in the empty data folder, the tokenize job reads GPT-2 BPE."""
    import pillm.cli

    root = tmp_path_factory.mktemp("first-build")
    data = {"corpus": "ptb", "source": "auto", "local_dir": str(root / "data"),
            "heldout_fraction": 0.1, "revisions": {}}  # fmt: skip
    tok = {"tokenizer": {"kind": "gpt2", "vocab_size": 8192}, "data": data}
    with pytest.MonkeyPatch.context() as patch:
        stand_in = install(HubStandIn(shared_data), patch)
        cli = ["prepare-corpus", "--corpus", "ptb", "--params", json.dumps(data)]
        assert pillm.cli.main([*cli, "--out-dir", str(root / "corpus")]) == 0
        n_calls = len(stand_in.calls)
        cli = ["tokenize", "--corpus-dir", str(root / "corpus"), "--params", json.dumps(tok)]
        assert pillm.cli.main([*cli, "--out-dir", str(root / "tokens")]) == 0
        assert len(stand_in.calls) == n_calls  # the mirror is there now: no hub call
    return SimpleNamespace(
        root=root, mirror=root / "data", stand_in=stand_in, data=json.dumps(data)
    )


def test_first_build_builds_the_mirror_layout_and_checksums(first_build, shared_data):
    root = first_build.mirror
    sums = files.read_checksums(root)
    built = {r for r, f in MIRROR_FILES.items() if f.check != "skipped"}
    assert set(sums) == built
    for rel, spec in MIRROR_FILES.items():
        if spec.check == "bytes":  # byte-identical to the committed checksums
            assert sums[rel] == spec.sha256 == files.read_checksums(shared_data)[rel], rel
        elif spec.check == "differs":
            assert sums[rel] != spec.sha256, rel  # CIFAR-10: rebuilt, but honestly not the same
    record = json.loads((root / "MIRROR.json").read_text())
    assert record["files"]["mnist/test.parquet"]["same_bytes_as_mirror"] is False
    assert set(record["not_built"]) == {r for r in MIRROR_FILES if r not in built}
    # The built folder is a mirror the local source reads, with the same text as the original.
    texts, _ = load_corpus("wikitext2", "local", str(root), 0.1)
    assert texts == load_corpus("wikitext2", "local", str(shared_data), 0.1)[0]


def test_first_build_records_every_revision_it_used(first_build):
    """Pinned sources at their pins, null ones at the commit resolved once, before any
    download: in MIRROR.json (per source and per file) and in the corpus and token meta."""
    committed, stand_in = pins(), first_build.stand_in
    assert sorted(stand_in.resolved) == sorted(k for k, v in committed.items() if v is None)
    used = {key: committed[key] or HEAD[key] for key in HUB_DATASETS}
    for repo_id, _, revision in stand_in.calls:  # every download at the recorded commit
        key = next(k for k, h in HUB_DATASETS.items() if h.repo_id == repo_id)
        assert revision == used[key], key

    record = json.loads((first_build.mirror / "MIRROR.json").read_text())
    assert {k: r["revision"] for k, r in record["revisions"].items()} == used
    for key, rec in record["revisions"].items():
        assert rec["repo"] == HUB_DATASETS[key].repo_id
        assert ("resolved" in rec["how"]) == (committed[key] is None), rec["how"]
    for rel, rec in record["files"].items():
        assert rec["revision"] == used[MIRROR_FILES[rel].dataset], rel

    corpus = json.loads((first_build.root / "corpus/meta.json").read_text())
    assert corpus["revision"] == HEAD["ptb"]  # PTB: null in the config, resolved at the build
    assert corpus["revisions"]["ptb"]["revision"] == HEAD["ptb"]
    assert "resolved" in corpus["revisions"]["ptb"]["how"]
    tokens = json.loads((first_build.root / "tokens/meta.json").read_text())
    assert tokens["revisions"]["ptb"] == corpus["revisions"]["ptb"]
    gpt2 = tokens["revisions"]["gpt2_tokenizer"]
    assert gpt2["revision"] == committed["gpt2_tokenizer"]
    assert gpt2["repo"] == "openai-community/gpt2"


def test_a_smoke_job_records_the_revision_the_first_build_resolved(first_build, shared_data):
    """A job of the smoke config (run-lm, baseline), its tokens made from the mirror the first
    build made: every row of its run record names PTB's commit, resolved at that build, and
    that of the GPT-2 tokenizer files when it reads GPT-2 BPE; the offline mirror gives the
    digest of its SHA256SUMS instead."""
    import hashlib
    import shlex

    import pillm.cli
    from pillm.core.config import apply_schema
    from pillm.lm import plan as lm_plan

    config = apply_schema(yaml.safe_load((REPO / "config/smoke.yaml").read_text()),
                          REPO / "config/schema.yaml")  # fmt: skip
    config["data"] = {**json.loads(first_build.data), "eval_tokens": 4096}
    config["train"].update(max_steps=4, eval_every=0)  # the record, not the model, is tested
    digest = hashlib.sha256((shared_data / "SHA256SUMS").read_bytes()).hexdigest()
    offline = f"offline mirror, SHA256SUMS sha256:{digest}"
    cases = {  # a name: (the data folder, the tokenizer, the revisions the record names)
        "built": (first_build.mirror, "gpt2", {"gpt2_tokenizer": pins()["gpt2_tokenizer"],
                                               "ptb": HEAD["ptb"]}),
        "offline": (shared_data, "bpe", {"ptb": offline}),
    }  # fmt: skip
    for name, (folder, kind, expected) in cases.items():
        root = first_build.root / name
        config["data"]["local_dir"] = str(folder)
        tok = {"tokenizer": {"kind": kind, "vocab_size": 512}, "data": config["data"]}
        data = json.dumps(config["data"])
        cli = ["prepare-corpus", "--corpus", "ptb", "--params", data]
        assert pillm.cli.main([*cli, "--out-dir", str(root / "corpus")]) == 0
        cli = ["tokenize", "--corpus-dir", str(root / "corpus"), "--params", json.dumps(tok)]
        assert pillm.cli.main([*cli, "--out-dir", str(root / "tokens/ptb")]) == 0
        args = shlex.split(lm_plan.run_args(config, "baseline", str(root)))
        assert pillm.cli.main(["run-lm", "--variant", "baseline", *args, "--device", "cpu"]) == 0
        records = json.loads((root / "lm/baseline/seed0/metrics.json").read_text())
        assert {r["data_revisions"] for r in records} == {json.dumps(expected)}, name


def test_mirror_job_reports_the_revisions_of_the_built_mirror(first_build, tmp_path):
    from pillm.data.sources import mirror_job

    mirror_job("auto", str(first_build.mirror), str(tmp_path / "mirror.json"), {})
    record = json.loads((tmp_path / "mirror.json").read_text())
    assert record["revisions"]["ptb"]["revision"] == HEAD["ptb"]
    assert record["built_from_hub"]["revisions"]["wikitext2"]["revision"] == pins()["wikitext2"]


def test_config_pins_win_and_are_recorded(hub_stand_in, tmp_path):
    root = mirror_mod.build_mirror(tmp_path / "built", ["lambada", "ptb"], ALL_PINNED)
    record = json.loads((root / "MIRROR.json").read_text())
    assert {k: r["revision"] for k, r in record["revisions"].items()} == {
        "lambada": FAKE_REV,
        "ptb": FAKE_REV,
    }
    assert hub_stand_in.resolved == []  # nothing to resolve
    assert {rev for *_, rev in hub_stand_in.calls} == {FAKE_REV}


def test_hub_source_resolves_a_null_revision_and_records_it(hub_stand_in, tmp_path):
    texts, meta = load_corpus("ptb", "hub", str(tmp_path / "unused"), 0.1, {"ptb": None})
    assert hub_stand_in.resolved == ["ptb"]
    assert meta["source"] == "hub" and meta["revision"] == HEAD["ptb"]
    assert meta["revisions"]["ptb"]["revision"] == HEAD["ptb"]
    assert "data.revisions.ptb: null" in meta["revisions"]["ptb"]["how"]
    _, meta = load_corpus("wikitext2", "hub", None, 0.1, ALL_PINNED)
    assert meta["revisions"]["wikitext2"]["revision"] == FAKE_REV
    assert "pinned" in meta["revisions"]["wikitext2"]["how"]
    assert not (tmp_path / "unused").exists()  # the hub source writes no data folder


def test_stand_in_hub_content_mismatch_stops_the_build(hub_stand_in, monkeypatch, tmp_path):
    spec = MIRROR_FILES["sst2/train.tsv"]
    monkeypatch.setitem(
        MIRROR_FILES, "sst2/train.tsv", dataclasses.replace(spec, content_sha256="0" * 64)
    )
    with pytest.raises(DataError, match=r"sst2/train\.tsv .*content digest"):
        mirror_mod.build_mirror(tmp_path / "built", ["sst2"], ALL_PINNED)


def test_auto_reads_an_existing_mirror_without_the_hub(shared_data, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("hub was called"))
    texts, meta = load_corpus("wikitext2", "auto", str(shared_data), 0.1)
    assert meta["source"] == "local"
    assert meta["revision"] is None and "offline mirror" in meta["revisions"]["wikitext2"]["how"]


def test_a_revision_that_is_not_a_commit_is_refused(tmp_path):
    with pytest.raises(DataConfigError, match=r"data\.revisions\.wikitext2: 'main' is not a"):
        mirror_mod.build_mirror(tmp_path / "m", ["wikitext2"], {"wikitext2": "main"})
    with pytest.raises(DataConfigError, match=r"unknown data\.revisions key\(s\) gpt2"):
        pins({"gpt2": FAKE_REV})
    assert not (tmp_path / "m").exists()


def test_offline_mode_names_data_local_dir(tmp_path):
    """HF_HUB_OFFLINE=1 in a fresh process (the hub library reads it at import), cold cache:
    the first build cannot resolve PTB's null revision and stops before creating the folder."""
    code = (
        "from pillm.data import sources as s\n"
        f"s.load_corpus('wikitext2', 'auto', {str(tmp_path / 'none')!r}, 0.1)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "DataError" in last and "HF_HUB_OFFLINE is set" in last, proc.stderr[-2000:]
    assert "data.local_dir" in last and "no SHA256SUMS" in last and "PILLM_DATA" in last
    assert "data.revisions.ptb" in last
    assert not (tmp_path / "none").exists()


def test_citation_cff_is_cff_1_2_and_license_is_mit():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    assert {"cff-version", "message", "title", "authors"} <= set(cff)
    assert all("name" in a or "family-names" in a for a in cff["authors"])
    assert cff["license"] == "MIT"
    assert (REPO / "LICENSE").read_text().startswith("MIT License")


def test_mirror_table_matches_the_offline_mirrors_checksums(shared_data):
    """MIRROR_FILES is the committed copy of the mirror's SHA256SUMS: same files, same digests."""
    sums = files.read_checksums(shared_data)
    assert {rel: f.sha256 for rel, f in MIRROR_FILES.items()} == sums
    for rel, spec in MIRROR_FILES.items():
        assert spec.dataset in HUB_DATASETS, rel
        assert spec.check in ("bytes", "content", "differs", "skipped"), rel
        assert (spec.content_sha256 is not None) == (spec.check == "content"), rel
    for rel in ("mnist/train.parquet", "mnist/test.parquet"):
        assert mirror_mod.content_digest(shared_data / rel) == MIRROR_FILES[rel].content_sha256


def test_the_pins_are_the_configs_and_are_commits():
    """The table keeps repositories, not commits; the commits are data.revisions', one value
    each in config/schema.yaml and RevisionsConfig, and every key names a hub source."""
    schema = yaml.safe_load((REPO / "config/schema.yaml").read_text())
    node = schema["properties"]["data"]["properties"]["revisions"]["properties"]
    assert {k: v["default"] for k, v in node.items()} == dataclasses.asdict(RevisionsConfig())
    assert set(node) == set(HUB_DATASETS)
    assert not any(f.name == "revision" for f in dataclasses.fields(files.HubDataset))
    for key, pin in pins().items():
        assert pin is None or COMMIT.match(pin), f"{key}: a pin is a 40-hex commit ({pin!r})"

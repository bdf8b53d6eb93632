"""The hub path, run against a LOCAL STAND-IN for the Hugging Face hub (no network here).

The stand-in replaces ``datasets.load_dataset`` and ``huggingface_hub.hf_hub_download`` with
functions that serve rows shaped as the hub serves them (WikiText rows with "" for blank lines,
stripped PTB sentences, GLUE train in another order, image structs, ...), made from the offline
mirror. It also checks that every call passes the pinned revision. What it cannot test: that the
real hub's rows at those revisions are shaped this way; the build checks that against the
committed checksums on a machine that is online.
"""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pillm.data import files
from pillm.data import mirror as mirror_mod
from pillm.data.files import HUB_DATASETS, MIRROR_FILES, DataError
from pillm.data.sources import load_corpus

REPO = Path(__file__).resolve().parents[2]
FAKE_REV = "0123456789abcdef0123456789abcdef01234567"  # the stand-in's "commit"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _tsv_rows(path: Path) -> tuple[list[str], list[int]]:
    rows = [r.rsplit("\t", 1) for r in path.read_text(encoding="utf-8").split("\n")[1:] if r]
    return [s for s, _ in rows], [int(y) for _, y in rows]


class HubStandIn:
    """Serves the offline mirror's data shaped as the hub's datasets; records the calls."""

    def __init__(self, mirror: Path):
        self.mirror, self.calls = mirror, []

    def load_dataset(self, repo_id, config=None, *, split=None, revision=None, **kw):
        import datasets

        key = next(k for k, h in HUB_DATASETS.items() if h.repo_id == repo_id)
        assert revision == HUB_DATASETS[key].revision == FAKE_REV, "hub load without its pin"
        assert config == HUB_DATASETS[key].config
        self.calls.append((repo_id, split, revision))
        m = self.mirror
        if key == "wikitext2":
            rows = ["" if r == " \n" else r for r in _lines(m / f"wikitext-2-v1/{split}.txt")]
            return datasets.Dataset.from_dict({"text": rows})
        if key == "ptb":
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
        raise AssertionError(f"stand-in has no dataset {repo_id}")

    def hf_hub_download(self, repo_id, filename, *, repo_type=None, revision=None, **kw):
        assert repo_id == HUB_DATASETS["gpt2-tokenizer"].repo_id and repo_type == "model"
        assert revision == FAKE_REV, "hub download without its pin"
        self.calls.append((repo_id, filename, revision))
        return str(self.mirror / "gpt2-tokenizer" / filename)


@pytest.fixture
def hub_stand_in(shared_data, monkeypatch):
    import datasets
    import huggingface_hub

    for key, hub in HUB_DATASETS.items():
        monkeypatch.setitem(HUB_DATASETS, key, dataclasses.replace(hub, revision=FAKE_REV))
    stand_in = HubStandIn(shared_data)
    monkeypatch.setattr(datasets, "load_dataset", stand_in.load_dataset)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", stand_in.hf_hub_download)
    return stand_in


def test_stand_in_hub_builds_the_mirror_layout_and_checksums(hub_stand_in, shared_data, tmp_path):
    root = mirror_mod.build_mirror(tmp_path / "built")
    sums = files.read_checksums(root)
    built = {r for r, f in MIRROR_FILES.items() if f.check != "skipped"}
    assert set(sums) == built
    for rel, spec in MIRROR_FILES.items():
        if spec.check == "bytes":  # byte-identical to the committed checksums
            assert sums[rel] == spec.sha256 == files.read_checksums(shared_data)[rel], rel
        elif spec.check == "differs":
            assert sums[rel] != spec.sha256, rel  # CIFAR-10: rebuilt, but honestly not the same
    record = json.loads((root / "MIRROR.json").read_text())
    assert record["files"]["wikitext-2-v1/test.txt"]["revision"] == FAKE_REV
    assert record["files"]["mnist/test.parquet"]["same_bytes_as_mirror"] is False
    assert set(record["not_built"]) == {r for r in MIRROR_FILES if r not in built}
    # The built folder is a mirror the local source reads, with the same text as the original.
    texts, _ = load_corpus("wikitext2", "local", str(root), 0.1)
    assert texts == load_corpus("wikitext2", "local", str(shared_data), 0.1)[0]


def test_stand_in_hub_auto_builds_a_missing_mirror_then_reads_it(hub_stand_in, tmp_path):
    where = tmp_path / "nowhere-yet"
    texts, meta = load_corpus("ptb", "auto", str(where), 0.1)
    assert meta["source"] == "local" and (where / "SHA256SUMS").is_file()
    n_calls = len(hub_stand_in.calls)
    load_corpus("ptb", "auto", str(where), 0.1)  # the mirror is there now: no hub call
    assert len(hub_stand_in.calls) == n_calls


def test_stand_in_hub_content_mismatch_stops_the_build(hub_stand_in, monkeypatch, tmp_path):
    spec = MIRROR_FILES["sst2/train.tsv"]
    monkeypatch.setitem(
        MIRROR_FILES, "sst2/train.tsv", dataclasses.replace(spec, content_sha256="0" * 64)
    )
    with pytest.raises(DataError, match=r"sst2/train\.tsv .*content digest"):
        mirror_mod.build_mirror(tmp_path / "built", ["sst2"])


def test_auto_reads_an_existing_mirror_without_the_hub(shared_data, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("hub was called"))
    texts, meta = load_corpus("wikitext2", "auto", str(shared_data), 0.1)
    assert meta["source"] == "local"


def test_unpinned_hub_source_refuses_with_the_pin_command(tmp_path):
    unpinned = [k for k, h in HUB_DATASETS.items() if not h.revision]
    if not unpinned:  # every source pinned: nothing can refuse; the pins are 40-hex commits
        assert all(len(h.revision) == 40 for h in HUB_DATASETS.values())
        return
    with pytest.raises(DataError, match=r"no pinned revision.*HfApi"):
        mirror_mod.build_mirror(tmp_path / "m", [unpinned[0]])


def test_offline_mode_names_data_local_dir(tmp_path):
    """HF_HUB_OFFLINE=1 in a fresh process (the hub library reads it at import), cold cache."""
    code = (
        "import dataclasses\n"
        "from pillm.data import files, sources as s\n"
        "for k, h in list(files.HUB_DATASETS.items()):\n"
        f"    files.HUB_DATASETS[k] = dataclasses.replace(h, revision={FAKE_REV!r})\n"
        f"s.load_corpus('wikitext2', 'auto', {str(tmp_path / 'none')!r}, 0.1)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "DataError" in last and "HF_HUB_OFFLINE is set" in last, proc.stderr[-2000:]
    assert "data.local_dir" in last and "no SHA256SUMS" in last


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


def test_every_pin_is_a_commit_or_absent():
    for key, hub in HUB_DATASETS.items():
        assert hub.revision is None or (
            len(hub.revision) == 40 and all(c in "0123456789abcdef" for c in hub.revision)
        ), f"{key}: a pin is a 40-hex commit, not a branch or tag ({hub.revision!r})"

import hashlib
import json
import shutil
import time

import pytest

from pillm.data.files import DataError
from pillm.data.sources import load_corpus, load_hub, split_tail


def test_split_tail_keeps_every_line():
    text = "".join(f"line {i}\n" for i in range(100))
    head, tail = split_tail(text, 0.1)
    assert head + tail == text
    assert tail.count("\n") == 10


def test_local_wikitext_policy_and_counts(shared_data):
    texts, meta = load_corpus("wikitext2", "local", str(shared_data), 0.1)
    assert "validation split minus 10% tail" in meta["policy"]
    assert meta["lines"]["train"] + meta["lines"]["valid"] == 3760
    assert meta["lines"]["test"] == 4358


def test_corrupted_file_fails_with_checksum_error_naming_it(shared_data, tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "wikitext-2-v1").mkdir(parents=True)
    shutil.copy(shared_data / "SHA256SUMS", mirror)
    for name in ("validation.txt", "test.txt"):
        shutil.copy(shared_data / "wikitext-2-v1" / name, mirror / "wikitext-2-v1")
    with open(mirror / "wikitext-2-v1" / "test.txt", "a") as fh:
        fh.write("tampered\n")
    with pytest.raises(DataError, match=r"checksum mismatch for .*wikitext-2-v1/test\.txt"):
        load_corpus("wikitext2", "local", str(mirror), 0.1)


def test_missing_mirror_names_the_key(tmp_path):
    with pytest.raises(DataError, match="data.local_dir.*PILLM_DATA"):
        load_corpus("wikitext2", "local", str(tmp_path), 0.1)


def test_local_read_records_that_the_offline_mirror_has_no_hub_revision(shared_data):
    _, meta = load_corpus("tinyshakespeare", "local", str(shared_data), 0.1)
    record = meta["revisions"]["tinyshakespeare"]
    assert meta["revision"] is None and record["revision"] is None
    assert record["repo"] == "karpathy/tiny_shakespeare" and "offline mirror" in record["how"]
    # its identity instead: the digest of the SHA256SUMS that pins every file of the mirror
    digest = hashlib.sha256((shared_data / "SHA256SUMS").read_bytes()).hexdigest()
    assert record["sha256sums"] == digest


def test_a_run_record_names_the_commit_or_the_offline_mirror_it_read():
    from pillm.core.records import data_revisions, provenance

    meta = {"revisions": {
        "wikitext2": {"repo": "Salesforce/wikitext", "revision": "b0" * 20, "how": "pinned"},
        "gpt2_tokenizer": {"repo": "openai-community/gpt2", "revision": None, "how": "offline",
                           "sha256sums": "ab" * 32},
    }}  # fmt: skip
    expected = {"gpt2_tokenizer": f"offline mirror, SHA256SUMS sha256:{'ab' * 32}",
                "wikitext2": "b0" * 20}  # fmt: skip
    assert json.loads(data_revisions(meta)) == expected
    assert provenance("cpu", meta)["data_revisions"] == data_revisions(meta)
    assert data_revisions({"policy": "toy tokens"}) == "{}"


def test_an_unpinned_hub_load_offline_fails_fast_naming_the_pin_and_the_mirror(monkeypatch):
    import huggingface_hub
    from huggingface_hub.errors import OfflineModeIsEnabled

    class OfflineApi:
        def dataset_info(self, *a, **k):
            raise OfflineModeIsEnabled("stand-in: the hub library reports offline mode")

    monkeypatch.setattr(huggingface_hub, "HfApi", OfflineApi)
    t0 = time.perf_counter()
    with pytest.raises(DataError, match=r"data\.revisions\.wikitext2.*data\.local_dir"):
        load_hub("wikitext2", {"wikitext2": None})
    assert time.perf_counter() - t0 < 10


def test_hub_offline_error_names_data_local_dir(monkeypatch):
    import datasets
    from huggingface_hub.errors import OfflineModeIsEnabled

    def offline(*a, **k):
        raise OfflineModeIsEnabled("stand-in: the hub library reports offline mode")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="data.local_dir"):
        load_hub("wikitext2")  # pinned: no API call before the load


def test_the_corpus_and_tokenize_jobs_import_no_torch(shared_data, tmp_path):
    """Every LM and SAFFU job waits for these two: they must not pay for importing torch. Both
    commands run as their rules run them, on the smallest corpus of the mirror."""
    import json
    import os
    import subprocess
    import sys

    # no local_dir: the data folder is $PILLM_DATA, as CI sets it
    data = {"corpus": "tinyshakespeare", "source": "local", "heldout_fraction": 0.1}
    tok = {"tokenizer": {"kind": "gpt2", "vocab_size": 8192}, "data": data}
    code = f"""import sys, pillm.cli
assert pillm.cli.main(["prepare-corpus", "--corpus", "tinyshakespeare",
                       "--params", {json.dumps(json.dumps(data))}, "--out-dir", "data"]) == 0
assert pillm.cli.main(["tokenize", "--corpus-dir", "data", "--params",
                       {json.dumps(json.dumps(tok))}, "--out-dir", "tokens"]) == 0
assert "torch" not in sys.modules, "torch was imported"
"""
    env = {**os.environ, "PILLM_DATA": str(shared_data)}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, cwd=tmp_path, env=env)
    assert (tmp_path / "tokens" / "train.npy").is_file()
